package entrypoint

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
)

func bash(script string) []string { return []string{"bash", "-c", script} }

type counter struct{ n atomic.Int64 }

func (c *counter) Write(p []byte) (int, error) { c.n.Add(int64(len(p))); return len(p), nil }

func TestExitCodes(t *testing.T) {
	tests := []struct {
		script string
		code   int
	}{
		{"true", 0}, {"exit 1", 1}, {"exit 3", 3}, {"kill -9 $$", -9}, {"kill -TERM $$", -15},
	}
	for _, tt := range tests {
		if r := Run(context.Background(), Options{Command: bash(tt.script)}); r.ExitCode != tt.code {
			t.Errorf("%q: exit %d, want %d", tt.script, r.ExitCode, tt.code)
		}
	}
	if r := Run(context.Background(), Options{Command: []string{"/no/such/command"}}); r.ExitCode != 127 || !strings.Contains(r.Stderr, "cannot start") {
		t.Errorf("missing command: %+v", r)
	}
}

func TestTimeoutKillsTheGroup(t *testing.T) {
	start := time.Now()
	r := Run(context.Background(), Options{Command: bash("sleep 30 & sleep 30"), Timeout: 300 * time.Millisecond})
	if r.ExitCode != ExitTimeout || !r.TimedOut || time.Since(start) > 5*time.Second {
		t.Errorf("exit %d timedOut %v after %v", r.ExitCode, r.TimedOut, time.Since(start))
	}
}

// A signal to the wrapper reaches the command, which decides how to end.
func TestSignalForwarding(t *testing.T) {
	signals := make(chan os.Signal, 1)
	var log strings.Builder
	go func() {
		time.Sleep(300 * time.Millisecond)
		signals <- syscall.SIGTERM
	}()
	r := Run(context.Background(), Options{
		Command: bash("trap 'echo got TERM; exit 7' TERM; sleep 30 & wait"),
		Stdout:  &log, Signals: signals, Timeout: 20 * time.Second,
	})
	if r.ExitCode != 7 || !strings.Contains(r.Stdout, "got TERM") || !strings.Contains(log.String(), "got TERM") {
		t.Errorf("exit %d stdout %q", r.ExitCode, r.Stdout)
	}
}

func js(v any) *apiextensionsv1.JSON {
	b, _ := json.Marshal(v)
	return &apiextensionsv1.JSON{Raw: b}
}

// 50 MiB of output: the verdict is over all of it, memory holds the tail,
// the container log gets every byte.
func TestVerdictOverTheCompleteOutput(t *testing.T) {
	// NEEDLE and "errors = 0" sit before 50 MiB of filler, far out of the tail.
	script := "echo 'errors = 4'; echo NEEDLE; echo 'errors = 0'; head -c 52428800 /dev/zero | tr '\\0' '.'; echo; echo done"
	tests := []struct {
		name string
		eval v1alpha1.Evaluate
		want string
	}{
		{"contains", v1alpha1.Evaluate{Type: "output_contains", Pattern: "NEE+DLE"}, "success"},
		{"contains literal", v1alpha1.Evaluate{Type: "output_contains", Pattern: "NEEDLE("}, "failure"},
		{"negated", v1alpha1.Evaluate{Type: "output_contains", Pattern: "NEEDLE", Negate: true}, "failure"},
		{"numeric key, last value", v1alpha1.Evaluate{Type: "output_numeric", Key: "errors", Operator: "eq", Target: js(0)}, "success"},
		{"exit code", v1alpha1.Evaluate{Type: "exit_code"}, "success"},
		{"classify the last line", v1alpha1.Evaluate{Type: "classify"}, "done"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := &counter{}
			r := Run(context.Background(), Options{Command: bash(script), Evaluate: &tt.eval, Stdout: log, Timeout: time.Minute})
			if r.Verdict == nil || r.Verdict.Verdict != tt.want {
				t.Fatalf("verdict %+v, want %s", r.Verdict, tt.want)
			}
			if log.n.Load() < 50<<20 || len(r.Stdout) != EvalWindow || !r.StdoutTruncated {
				t.Errorf("log got %d bytes; kept %d bytes", log.n.Load(), len(r.Stdout))
			}
			if b := r.Encode(); len(b) > MaxMessageBytes {
				t.Errorf("result of %d bytes", len(b))
			}
		})
	}
}

func TestNoVerdictWithoutDeterministicEvaluator(t *testing.T) {
	r := Run(context.Background(), Options{Command: bash("echo hi"), Evaluate: &v1alpha1.Evaluate{Type: "llm_structured"}})
	if r.Verdict != nil {
		t.Errorf("verdict %+v for an LLM evaluator", r.Verdict)
	}
}

// Whatever the output, the result fits the termination message and reads back.
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

func TestTailRing(t *testing.T) {
	tl := newTail(8)
	for _, s := range []string{"abc", "defgh", "ij", "klmnopqrstu", "v"} {
		_, _ = io.WriteString(tl, s)
	}
	if tl.String() != "opqrstuv" || !tl.truncated() {
		t.Errorf("tail %q", tl.String())
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
