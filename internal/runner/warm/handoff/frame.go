package handoff

import (
	"bytes"
	"io"
	"sync"
)

// Marker begins the runner's own lines in its log: each step's output is
// framed by "::looprun:: step ID begin state=... iteration=N retry=N" and
// "::looprun:: step ID end ...". A line of a step's output that begins with
// the marker is written with a backslash before it, so no step can end its
// own frame early or open another step's.
const Marker = "::looprun::"

// lineWriter copies a step's output to the log, escaping lines that begin
// with the marker. The start of a line that could still be the marker is
// held until it is known.
type lineWriter struct {
	w       io.Writer
	mu      *sync.Mutex
	atStart bool
	held    []byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	var out bytes.Buffer
	for len(p) > 0 {
		if !l.atStart {
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				out.Write(p)
				break
			}
			out.Write(p[:i+1])
			p, l.atStart = p[i+1:], true
			continue
		}
		b := p[0]
		p = p[1:]
		l.held = append(l.held, b)
		switch {
		case !bytes.HasPrefix([]byte(Marker), l.held):
			out.Write(l.held)
			l.held, l.atStart = l.held[:0], b == '\n'
		case len(l.held) == len(Marker):
			out.WriteByte('\\')
			out.Write(l.held)
			l.held, l.atStart = l.held[:0], false
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(out.Bytes()); err != nil {
		return 0, err
	}
	return n, nil
}

// Flush writes what is held.
func (l *lineWriter) Flush() {
	if len(l.held) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(l.held)
	l.held, l.atStart = l.held[:0], false
}

// EndLine ends a last line the step left open, so that the frame's end is
// a line of its own in the log (the step's result keeps its output as it
// was).
func (l *lineWriter) EndLine() {
	if l.atStart {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write([]byte{'\n'})
	l.atStart = true
}
