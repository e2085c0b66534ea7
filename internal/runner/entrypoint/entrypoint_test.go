package entrypoint

import (
	"strings"
	"testing"
	"time"

	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/runner/process"
)

// The wrapper's result is the process's, field for field.
func TestNewResult(t *testing.T) {
	p := process.Result{ExitCode: 124, Duration: 1500 * time.Millisecond, Stdout: "o", Stderr: "e",
		StdoutTruncated: true, TimedOut: true, Verdict: &evaluate.Result{Verdict: "error"}}
	r := NewResult(p)
	back, err := Decode(string(r.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	if r.DurationMs != 1500 || !r.TimedOut || back.ExitCode != 124 || back.Output != "o" || back.Stderr != "e" ||
		!back.OutputTruncated || back.Verdict.Verdict != "error" || back.Duration != 1500*time.Millisecond || !back.TimedOut {
		t.Errorf("result %+v, read back %+v", r, back)
	}
}

// A command that could not start in the Pod (no bash in the image, say)
// reaches the Loop's status as a failure that says so.
func TestCannotStartIsAFailure(t *testing.T) {
	p := process.Run(t.Context(), process.Spec{Argv: []string{"no-such-shell-here", "-c", "true"}})
	back, err := Decode(string(NewResult(p).Encode()))
	if err != nil {
		t.Fatal(err)
	}
	if back.ExitCode != process.ExitCannotStart || back.Failure == nil || back.Failure.Reason != ReasonCannotStart ||
		!strings.Contains(back.Failure.Message, `cannot start no-such-shell-here: exec: "no-such-shell-here": executable file not found`) {
		t.Errorf("read back %+v, failure %+v", back, back.Failure)
	}
}

func TestResultAlwaysFits(t *testing.T) {
	ugly := strings.Repeat("\"\\\x01é", 5000) // characters that JSON escapes grow
	tests := []Result{
		{ExitCode: 1, Stdout: ugly, Stderr: ugly},
		{ExitCode: 0, Stdout: strings.Repeat("x", 1<<20)},
		{ExitCode: 2, Stdout: "ok", Verdict: &evaluateResult{Verdict: "error", Details: map[string]any{"error": ugly, "value": ugly}}},
		{ExitCode: 3, Verdict: &evaluateResult{Verdict: strings.Repeat("v", 10000)}},
		{},
	}
	for i, r := range tests {
		b := r.Encode()
		if len(b) > MaxMessageBytes {
			t.Errorf("%d: %d bytes", i, len(b))
		}
		back, err := Decode(string(b))
		if err != nil {
			t.Errorf("%d: %v", i, err)
			continue
		}
		if back.ExitCode != r.ExitCode {
			t.Errorf("%d: exit code %d", i, back.ExitCode)
		}
		if r.Stdout != "" && (!strings.HasSuffix(r.Stdout, back.Output) || back.Output == "") {
			t.Errorf("%d: stdout tail %q is not the end of the output", i, back.Output[:min(20, len(back.Output))])
		}
	}
	if _, err := Decode("not json"); err == nil {
		t.Error("Decode accepted garbage")
	}
}

type evaluateResult = evaluate.Result

func FuzzEncode(f *testing.F) {
	f.Add("out", "err", "verdict", "detail", 0)
	f.Add(strings.Repeat("\x00\"é", 3000), strings.Repeat("\\", 9000), "v", strings.Repeat("\x7f", 2000), -9)
	f.Fuzz(func(t *testing.T, out, errs, verdict, detail string, code int) {
		r := Result{ExitCode: code, Stdout: out, Stderr: errs, Verdict: &evaluateResult{Verdict: verdict, Details: map[string]any{"d": detail}}}
		b := r.Encode()
		if len(b) > MaxMessageBytes {
			t.Fatalf("%d bytes", len(b))
		}
		if _, err := Decode(string(b)); err != nil {
			t.Fatalf("does not decode: %v", err)
		}
	})
}
