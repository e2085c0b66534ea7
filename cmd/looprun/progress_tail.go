package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"time"
)

// tailer shows what an action writes to the run's stdout log while it
// runs: the log is read from where it ended when the action started.
type tailer struct {
	f      *os.File
	offset int64
	buf    []byte
	lines  *lineCap
	done   chan struct{}
	ended  chan struct{}
}

// tailEvery is how often the log is looked at while an action runs.
const tailEvery = 100 * time.Millisecond

func startTail(f *os.File, pad string, maxLines int, println func(string)) *tailer {
	st, err := f.Stat()
	if err != nil {
		return nil
	}
	t := &tailer{f: f, offset: st.Size(), buf: make([]byte, 64<<10), lines: newLineCap(pad, maxLines, println), done: make(chan struct{}), ended: make(chan struct{})}
	go t.run()
	return t
}

func (t *tailer) run() {
	defer close(t.ended)
	tick := time.NewTicker(tailEvery)
	defer tick.Stop()
	for {
		t.read()
		select {
		case <-t.done:
			t.read()
			return
		case <-tick.C:
		}
	}
}

// read passes on what was written since the last read, 64 KiB at a time.
func (t *tailer) read() {
	for {
		n, err := t.f.ReadAt(t.buf, t.offset)
		if n > 0 {
			t.offset += int64(n)
			t.lines.write(string(t.buf[:n]))
		}
		if err != nil || n < len(t.buf) {
			return
		}
	}
}

// stop reads the rest and ends the output's last line.
func (t *tailer) stop() bool {
	close(t.done)
	<-t.ended
	t.lines.close()
	return true
}

// lineCap prints text line by line, indented, up to max lines (0: all),
// then says how many more there were.
type lineCap struct {
	pad     string
	max     int
	shown   int
	skipped int
	partial bytes.Buffer
	println func(string)
}

func newLineCap(pad string, maxLines int, println func(string)) *lineCap {
	return &lineCap{pad: pad, max: maxLines, println: println}
}

func (c *lineCap) write(s string) {
	for {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			// A line longer than 64 KiB is shown in pieces rather than kept.
			c.partial.WriteString(s)
			if c.partial.Len() > 64<<10 {
				c.line(c.partial.String())
				c.partial.Reset()
			}
			return
		}
		c.partial.WriteString(s[:i])
		c.line(c.partial.String())
		c.partial.Reset()
		s = s[i+1:]
	}
}

func (c *lineCap) line(l string) {
	l = strings.TrimRight(l, "\r")
	if strings.TrimSpace(l) == "" {
		return
	}
	if c.max > 0 && c.shown >= c.max {
		c.skipped++
		return
	}
	c.shown++
	c.println(c.pad + printable(clip(l, 400)))
}

// close prints the last line and what was left out.
func (c *lineCap) close() {
	if c.partial.Len() > 0 {
		c.line(c.partial.String())
		c.partial.Reset()
	}
	if c.skipped > 0 {
		c.println(fmt.Sprintf("%s… %d more lines (looprun logs shows them all)", c.pad, c.skipped))
	}
}
