package history

import (
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
)

// A checkpoint line of any bytes: the header parse and the decode never
// panic, and a line that decodes passes its checksum.
func FuzzCheckpointLine(f *testing.F) {
	cp, err := Take("l", &v1alpha1.RunState{CurrentState: "a", Iteration: 3, LastSeq: 9, Phase: v1alpha1.PhaseRunning}, time.Unix(0, 0))
	if err != nil {
		f.Fatal(err)
	}
	line, err := cp.Line()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(line)
	f.Add([]byte(`{"iteration":-1,"seq":"x"}`))
	f.Add([]byte(`{"iteration":99999999999,"seq":1}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		it, _, ok := Head(line)
		if ok && it < 0 {
			t.Fatalf("negative iteration %d accepted", it)
		}
		c, run, err := Decode(line)
		if err == nil {
			if c == nil || run == nil || c.Verify() != nil {
				t.Fatalf("decoded %+v without a good checksum", c)
			}
		}
		_, _ = Parse(line)
	})
}
