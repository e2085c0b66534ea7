package interpolate

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
)

func testVars() *Vars {
	return &Vars{
		Context: map[string]any{
			"dir":    "src/",
			"n":      json.Number("5"),
			"ratio":  json.Number("0.8"),
			"flag":   true,
			"nested": map[string]any{"a": map[string]any{"b": "deep"}},
			"list":   []any{"x", "y"},
			"quote":  "it's here",
			"empty":  "",
		},
		Captured: map[string]v1alpha1.CapturedResult{
			"count":  {Output: "42", Stderr: "warn", ExitCode: 1, DurationMs: 250, Verdict: "failure"},
			"events": {Output: `{"event":"loop_start"}`, Verdict: "yes", EventStream: true},
			"child":  {Loop: &v1alpha1.SubLoopResult{TerminatedBy: "terminal"}},
			"merged": {Verdict: "yes", Loop: &v1alpha1.SubLoopResult{TerminatedBy: "terminal", Captured: map[string]v1alpha1.ChildCapture{"said": {Output: "hi"}}}},
		},
		Prev:      &v1alpha1.PrevResult{Output: "prev out", ExitCode: 2, State: "check"},
		Result:    &Result{Verdict: "success", Details: map[string]any{"reason": "ok"}},
		StateName: "fix",
		Iteration: 3,
		LoopName:  "demo",
		StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Elapsed:   135 * time.Second,
		Env: func(k string) (string, bool) {
			if k == "HOME" {
				return "/home/me", true
			}
			return "", false
		},
	}
}

// Values that are not text print as Python's str() prints them, which is
// what little-loops puts into a command.
func TestRenderAsPython(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{true, "True"}, {false, "False"}, {nil, ""}, {"it's", "it's"},
		{json.Number("2.0"), "2.0"}, {json.Number("3"), "3"}, {2.0, "2.0"}, {0.5, "0.5"}, {1e20, "1e+20"}, {1.5e-7, "1.5e-07"},
		{[]any{json.Number("1"), "a", nil, true}, "[1, 'a', None, True]"},
		{map[string]any{"b": []any{"it's"}, "a": 1.0}, `{'a': 1.0, 'b': ["it's"]}`},
		{[]any{"x\ny\\", `"q'`}, `['x\ny\\', '"q\'']`},
	} {
		if got := Render(c.v); got != c.want {
			t.Errorf("Render(%#v) = %s, want %s", c.v, got, c.want)
		}
	}
}

func TestExpand(t *testing.T) {
	tests := []struct {
		name, tmpl, want string
	}{
		{"no template", "echo hi", "echo hi"},
		{"context", "mypy ${context.dir}", "mypy src/"},
		{"number as written", "${context.n} ${context.ratio}", "5 0.8"},
		{"bool as Python prints it", "${context.flag}", "True"},
		{"nested path", "${context.nested.a.b}", "deep"},
		{"list index", "${context.list.1}", "y"},
		{"list as Python prints it", "${context.list}", `['x', 'y']`},
		{"captured output", "${captured.count.output}", "42"},
		{"captured snake and camel", "${captured.count.exit_code}/${captured.count.exitCode}", "1/1"},
		{"captured duration and verdict", "${captured.count.duration_ms} ${captured.count.verdict}", "250 failure"},
		{"prev", "${prev.output} ${prev.exit_code} ${prev.state}", "prev out 2 check"},
		{"an event stream has a null exit code, no stderr", "[${captured.events.exit_code}] [${captured.events.stderr:default=none}] [${captured.events.verdict}]", "[] [none] [yes]"},
		{"a sub-loop state's entry has no output of its own", "[${captured.child.terminated_by}] [${captured.child.output:default=none}] [${captured.child.exit_code:default=none}] [${captured.child.verdict:default=none}]", "[terminal] [none] [none] [none]"},
		{"the child's captures over the event stream", "[${captured.merged.said.output}] [${captured.merged.verdict}] [${captured.merged.output:default=gone}]", "[hi] [yes] [gone]"},
		{"no timeout reads as nothing", "[${prev.timeout_kind}] [${captured.count.timeout_kind:shell}] [${captured.count.failure_type}]", "[] [] []"},
		{"result", "${result.verdict} ${result.details.reason}", "success ok"},
		{"state", "${state.name}#${state.iteration}", "fix#3"},
		{"loop", "${loop.name} ${loop.started_at} ${loop.elapsed_ms} ${loop.elapsed}", "demo 2026-01-02T03:04:05Z 135000 2m 15s"},
		{"env", "${env.HOME}", "/home/me"},
		{"default used", "${context.missing:default=fallback}", "fallback"},
		{"default not used", "${context.dir:default=x}", "src/"},
		{"default keeps ? and :shell literally", "${context.missing:default=a?b:shell}", "a?b:shell"},
		{"optional missing", "[${context.missing?}]", "[]"},
		{"optional present", "[${context.dir?}]", "[src/]"},
		{"default for unknown env", "${env.NOPE:default=none}", "none"},
		{"shell quote", "echo ${context.quote:shell}", `echo 'it'"'"'s here'`},
		{"shell quote safe word", "echo ${context.dir:shell}", "echo src/"},
		{"shell quote empty", "echo ${context.empty:shell}", "echo ''"},
		{"escape", "echo $${HOME:-x} ${context.dir}", "echo ${HOME:-x} src/"},
		{"escape array", "echo $${ARR[@]}", "echo ${ARR[@]}"},
		{"bare $$ stays", "echo $$", "echo $$"},
		{"unclosed brace stays", "echo ${context.dir", "echo ${context.dir"},
		{"empty braces stay", "echo ${}", "echo ${}"},
		{"two references", "${context.dir}${context.dir}", "src/src/"},
		{"unicode around", "é ${context.dir} ü", "é src/ ü"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Expand(tt.tmpl, testVars())
			if err != nil {
				t.Fatalf("Expand(%q): %v", tt.tmpl, err)
			}
			if got != tt.want {
				t.Errorf("Expand(%q) = %q, want %q", tt.tmpl, got, tt.want)
			}
		})
	}
}

func TestExpandErrors(t *testing.T) {
	tests := []struct {
		name, tmpl, wantVar, wantIn string
	}{
		{"missing context", "run ${context.target}", "context.target", "not defined"},
		{"missing nested", "${context.nested.a.zz}", "context.nested.a.zz", "not defined"},
		{"nothing captured", "${captured.other.output}", "captured.other.output", "nothing captured"},
		{"unknown namespace", "${foo.bar}", "foo.bar", "unknown namespace"},
		{"no dot", "${nodot}", "nodot", "namespace and a path"},
		{"bash default", "${context.x:-y}", "context.x:-y", "bash-style default"},
		{"ambiguous", "${context.x?:default=y}", "context.x?:default=y", "ambiguous"},
		{"ambiguous shell", "${context.x:shell:default=y}", "context.x:shell:default=y", "ambiguous"},
		{"env unset", "${env.NOPE}", "env.NOPE", "not set"},
		{"index out of range", "${context.list.5}", "context.list.5", "not defined"},
		{"shell has no fallback", "${context.missing:shell}", "context.missing:shell", "not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Expand(tt.tmpl, testVars())
			var ie *Error
			if !errors.As(err, &ie) {
				t.Fatalf("Expand(%q) error = %v, want *Error", tt.tmpl, err)
			}
			if ie.Var != tt.wantVar || !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("error = %q (var %q), want var %q and %q", err, ie.Var, tt.wantVar, tt.wantIn)
			}
		})
	}
}

func TestNoPrevNoResult(t *testing.T) {
	v := &Vars{}
	for _, tmpl := range []string{"${prev.output}", "${result.verdict}"} {
		if _, err := Expand(tmpl, v); err == nil {
			t.Errorf("Expand(%q) with nothing set: want an error", tmpl)
		}
	}
	if got, _ := Expand("${prev.output:default=none}", v); got != "none" {
		t.Errorf("default for missing prev = %q", got)
	}
}

func TestCheckAndReferences(t *testing.T) {
	if err := Check("echo ${context.a} $${B}"); err != nil {
		t.Errorf("Check valid: %v", err)
	}
	if err := Check("echo ${context.a:-b}"); err == nil {
		t.Error("Check bash default: want error")
	}
	refs := References("${captured.x.output} ${context.y?} ${prev.output:default=0}")
	if len(refs) != 3 || refs[0].Namespace != "captured" || refs[0].Path[0] != "x" || refs[0].Guarded || !refs[1].Guarded || !refs[2].Guarded {
		t.Errorf("References = %+v", refs)
	}
}

func TestFormatElapsed(t *testing.T) {
	for d, want := range map[time.Duration]string{
		500 * time.Millisecond: "500ms", 30 * time.Second: "30s", 2 * time.Minute: "2m",
		135 * time.Second: "2m 15s", time.Hour: "1h", 65 * time.Minute: "1h 5m",
	} {
		if got := FormatElapsed(d); got != want {
			t.Errorf("FormatElapsed(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestShellQuoteRoundTrip(t *testing.T) {
	for _, s := range []string{"", "a b", "it's", `"$HOME"`, "a\nb", "; rm -rf /"} {
		q := ShellQuote(s)
		if strings.ContainsAny(s, " ;'\"$\n") && !strings.HasPrefix(q, "'") {
			t.Errorf("ShellQuote(%q) = %q is not quoted", s, q)
		}
	}
}

func FuzzExpand(f *testing.F) {
	for _, s := range []string{"echo ${context.dir}", "$${x}", "${a.b:default=c}", "${context.x?}", "${", "}${}", "${context.quote:shell}", "${prev.output:-x}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tmpl string) {
		out, err := Expand(tmpl, testVars())
		if err != nil {
			var ie *Error
			if !errors.As(err, &ie) {
				t.Fatalf("Expand(%q) returned a non-*Error: %v", tmpl, err)
			}
			return
		}
		if !strings.Contains(tmpl, "${") && out != tmpl {
			t.Fatalf("Expand(%q) changed a template without references: %q", tmpl, out)
		}
		if Check(tmpl) != nil {
			t.Fatalf("Check(%q) fails although Expand succeeded", tmpl)
		}
	})
}
