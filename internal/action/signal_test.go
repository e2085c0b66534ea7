package action

import "testing"

// The signal in an output is found as little-loops' patterns find it
// (CONTEXT_HANDOFF:\s*(.+), FATAL_ERROR:\s*(.+), LOOP_STOP:\s*(.*) over the
// whole stdout), however the output is cut into writes.
func TestDetectSignal(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      *Signal
	}{
		{"none", "all is well\n", nil},
		{"fatal", "x\nFATAL_ERROR:   disk full  \nafter\n", &Signal{SignalError, "disk full"}},
		{"mid-line", "note: FATAL_ERROR: bad\n", &Signal{SignalError, "bad"}},
		{"text on a later line", "FATAL_ERROR:\n\n   the reason\n", &Signal{SignalError, "the reason"}},
		{"only line ends after", "FATAL_ERROR:\n\n", nil},
		{"a blank after", "FATAL_ERROR: \n", &Signal{SignalError, ""}},
		{"handoff wins", "FATAL_ERROR: a\nCONTEXT_HANDOFF: go on\n", &Signal{SignalHandoff, "go on"}},
		{"error before stop", "LOOP_STOP: x\nFATAL_ERROR: y", &Signal{SignalError, "y"}},
		{"stop without text", "LOOP_STOP:", &Signal{SignalStop, ""}},
		{"first of a kind", "FATAL_ERROR: one\nFATAL_ERROR: two\n", &Signal{SignalError, "one"}},
		{"unicode blanks", "FATAL_ERROR:\u00a0\u3000why\u2003\n", &Signal{SignalError, "why"}},
		{"cut marker", "FATAL_ERRO", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := func(how string, got *Signal) {
				t.Helper()
				if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
					t.Errorf("%s: %+v, want %+v", how, got, tc.want)
				}
			}
			check("whole", DetectSignal(tc.out))
			var s SignalScanner
			for i := range len(tc.out) {
				_, _ = s.Write([]byte{tc.out[i]})
			}
			check("byte by byte", s.Signal())
		})
	}
}

func TestTailKeepsCharacters(t *testing.T) {
	if got := Tail("aé", 1); got != "" {
		t.Errorf("Tail cut a character: %q", got)
	}
	if got := Tail("aéb", 2); got != "b" {
		t.Errorf("Tail = %q", got)
	}
	if got := Tail("abc", 10); got != "abc" {
		t.Errorf("Tail = %q", got)
	}
}
