package executor

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"github.com/looprun/looprun/api/v1alpha1"
)

// Signals are lines an action prints to stop its loop, as in little-loops:
// CONTEXT_HANDOFF: (the agent's context is used up: the run pauses,
// resumable), FATAL_ERROR: (the run ends in error with the text after the
// marker) and LOOP_STOP: (the run routes as usual, then stops, resumable).
// A marker counts anywhere in stdout; the first line after it that is not
// blank is its text. When an output holds several, CONTEXT_HANDOFF: wins,
// then FATAL_ERROR:, then LOOP_STOP:.
const (
	SignalHandoff = "handoff"
	SignalError   = "error"
	SignalStop    = "stop"
)

// MaxSignalBytes bounds a signal's text (the front of it is kept).
const MaxSignalBytes = 1024

// Signal is a signal found in an action's output.
type Signal struct {
	// Kind is SignalHandoff, SignalError or SignalStop.
	Kind string `json:"kind"`
	// Payload is the text after the marker, trimmed.
	Payload string `json:"payload,omitempty"`
}

// signalMarkers in the order they win.
var signalMarkers = [...]struct {
	kind, text string
	// needsText: the marker counts only with some text after it (a
	// blank line will do, but not only line ends).
	needsText bool
}{
	{SignalHandoff, "CONTEXT_HANDOFF:", true},
	{SignalError, "FATAL_ERROR:", true},
	{SignalStop, "LOOP_STOP:", false},
}

// DetectSignal is the signal in output; nil when it has none.
func DetectSignal(output string) *Signal {
	var s SignalScanner
	_, _ = s.Write([]byte(output))
	return s.Signal()
}

// SignalScanner finds the signal in an output written to it piece by
// piece, keeping only a few bytes per marker: the runners scan the complete
// stdout with it, however long.
type SignalScanner struct {
	marks [len(signalMarkers)]markScan
}

// markScan follows one marker through the output. It allocates nothing
// per write: an output of a gigabyte costs no more memory than a line.
type markScan struct {
	phase int // scanSearch, scanBlank, scanText, scanDone
	// carry holds the end of what was searched (a marker may straddle two
	// writes), or the start of a character cut by a write.
	carry  [16]byte
	ncarry int
	// sawBlank: blank characters other than line ends followed the marker.
	sawBlank bool
	text     []byte
	found    bool
}

const (
	scanSearch = iota
	scanBlank
	scanText
	scanDone
)

// Write scans p; it never fails.
func (s *SignalScanner) Write(p []byte) (int, error) {
	for i := range s.marks {
		s.marks[i].scan(p, signalMarkers[i].text)
	}
	return len(p), nil
}

func (m *markScan) scan(p []byte, marker string) {
	if m.phase == scanSearch {
		p = m.search(p, marker)
	}
	if m.ncarry > 0 && len(p) > 0 && m.phase != scanDone {
		// Finish the character the last write cut, from a copy of its
		// bytes and the first few of p.
		var buf [2 * utf8.UTFMax]byte
		n := copy(buf[:], m.carry[:m.ncarry])
		k := copy(buf[n:], p[:min(len(p), utf8.UTFMax)])
		used := m.runes(buf[:n+k])
		if used <= n { // still cut: p is shorter than the character
			m.ncarry = copy(m.carry[:], buf[:n+k])
			return
		}
		m.ncarry = 0
		p = p[used-n:]
	}
	if m.phase != scanSearch && m.phase != scanDone {
		if used := m.runes(p); used < len(p) && m.phase != scanDone {
			m.ncarry = copy(m.carry[:], p[used:])
		}
	}
}

// search looks for the marker in the carried bytes and p; it returns what
// follows the marker (nil while it is not found).
func (m *markScan) search(p []byte, marker string) []byte {
	if m.ncarry > 0 {
		var buf [32]byte
		n := copy(buf[:], m.carry[:m.ncarry])
		k := copy(buf[n:], p[:min(len(p), len(marker)-1)])
		if i := bytes.Index(buf[:n+k], []byte(marker)); i >= 0 {
			m.phase, m.ncarry = scanBlank, 0
			return p[i+len(marker)-n:]
		}
	}
	if i := bytes.Index(p, []byte(marker)); i >= 0 {
		m.phase, m.ncarry = scanBlank, 0
		return p[i+len(marker):]
	}
	// Keep the last len(marker)-1 bytes of carry+p.
	keep := len(marker) - 1
	if len(p) >= keep {
		m.ncarry = copy(m.carry[:], p[len(p)-keep:])
		return nil
	}
	var buf [32]byte
	n := copy(buf[:], m.carry[:m.ncarry])
	n += copy(buf[n:], p)
	from := max(0, n-keep)
	m.ncarry = copy(m.carry[:], buf[from:n])
	return nil
}

// runes follows the characters of data after the marker; it returns how
// many bytes it used (fewer than len(data) when the last character is
// cut, or once the signal's text is complete).
func (m *markScan) runes(data []byte) int {
	used := 0
	for used < len(data) && m.phase != scanDone {
		r, size := utf8.DecodeRune(data[used:])
		if r == utf8.RuneError && size <= 1 && !utf8.FullRune(data[used:]) {
			return used // a character cut in two
		}
		switch {
		case m.phase == scanBlank && isPythonSpace(r):
			m.sawBlank = m.sawBlank || r != '\n'
		case r == '\n':
			m.phase, m.found = scanDone, true
		default:
			m.phase = scanText
			if len(m.text)+size > MaxSignalBytes {
				m.phase, m.found = scanDone, true
				break
			}
			m.text = append(m.text, data[used:used+size]...)
		}
		used += size
	}
	return used
}

// Signal is the signal found in what was written so far; nil when none.
func (s *SignalScanner) Signal() *Signal {
	for i, mk := range signalMarkers {
		m := s.marks[i]
		switch {
		case m.found, m.phase == scanText:
		case m.phase == scanBlank && (!mk.needsText || m.sawBlank):
			// The marker, then only blanks to the end: it counts, with no
			// text, when a blank other than a line end follows it.
		default:
			continue
		}
		return &Signal{Kind: mk.kind, Payload: strings.TrimRightFunc(string(m.text), isPythonSpace)}
	}
	return nil
}

// isPythonSpace is Python's idea of white space (str.isspace, and \s in
// its patterns): Unicode's, plus the ASCII separators \x1c to \x1f.
func isPythonSpace(r rune) bool {
	switch {
	case r == ' ' || r >= '\t' && r <= '\r' || r >= 0x1c && r <= 0x1f:
		return true
	case r < 0x80:
		return false
	}
	switch r {
	case 0x85, 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// noteSignal looks for the signal the state's action printed: the runner
// scanned the complete stdout, or else the machine scans what it was given.
// An agent that ran out of its time has no signal: little-loops keeps no
// output of an agent it killed, so it sees none (a shell action's output
// until then counts, as there).
func (t *turn) noteSignal(st *v1alpha1.State, res *ActionResult) {
	switch {
	case t.m.opts.IgnoreSignals || res == nil:
	case res.TimedOut && (st.IsAgent() || st.Learning != nil):
	case res.SignalScanned:
		t.signal = res.Signal
	default:
		t.signal = DetectSignal(res.Output)
	}
}

// signalEnds ends the run for a FATAL_ERROR: or CONTEXT_HANDOFF: the
// state's action printed, once its verdict is recorded and before it
// routes, as little-loops does. It reports whether it did.
func (t *turn) signalEnds() bool {
	switch {
	case t.signal == nil || t.run.Phase.IsFinished():
		return false
	case t.signal.Kind == SignalError:
		t.finish(v1alpha1.TerminatedError, t.signal.Payload)
	case t.signal.Kind == SignalHandoff:
		t.handoff(t.signal.Payload)
	default:
		return false
	}
	return true
}

// signalEndsTry ends the run for a FATAL_ERROR: or CONTEXT_HANDOFF: that a
// try retryPolicy would run again printed, its result kept as the
// state's: little-loops heeds the signal of every action it runs, a try it
// runs again in place included. It reports whether it did.
func (t *turn) signalEndsTry(st *v1alpha1.State, res *ActionResult) bool {
	if t.signal == nil || t.signal.Kind == SignalStop {
		return false
	}
	if _, transient := transientReason(st.RetryPolicy, res); !transient {
		return false
	}
	t.capture(st, res, "")
	t.setPrev(st, res)
	return t.signalEnds()
}

// stopping reports whether the state's action printed LOOP_STOP:.
func (t *turn) stopping() bool { return t.signal != nil && t.signal.Kind == SignalStop }

// stopAfterRoute ends the run where its route took it when the state's
// action printed LOOP_STOP:.
func (t *turn) stopAfterRoute() {
	if t.stopping() && !t.run.Phase.IsFinished() {
		t.finish(v1alpha1.TerminatedInterrupted, "")
	}
}

// handoff pauses the run for a CONTEXT_HANDOFF:: the run is Interrupted in
// the state whose action printed it (a resume runs that state again), and
// as in little-loops the log says handoff_detected, not loop_complete.
func (t *turn) handoff(continuation string) {
	run := t.run
	t.emit(EventHandoffDetected, HandoffDetectedEvent{State: run.CurrentState, Iteration: run.Iteration, Continuation: continuation}.Data())
	run.Phase = v1alpha1.PhaseInterrupted
	run.TerminatedBy = v1alpha1.TerminatedHandoff
	run.Message = continuation
	run.Action = nil
	run.NextStepAt = nil
}
