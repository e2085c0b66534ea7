package evaluate

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/looprun/looprun/api/v1alpha1"
)

func js(v any) *apiextensionsv1.JSON {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return &apiextensionsv1.JSON{Raw: b}
}

func expandFrom(m map[string]string) func(string) (string, error) {
	return func(s string) (string, error) {
		if v, ok := m[s]; ok {
			return v, nil
		}
		if strings.Contains(s, "${") {
			return "", fmt.Errorf("%s: not defined", s)
		}
		return s, nil
	}
}

func TestExitCode(t *testing.T) {
	for code, want := range map[int]string{0: "success", 1: "failure", 2: "error", 124: "error", -9: "error", 127: "error"} {
		if got := ExitCode(code).Verdict; got != want {
			t.Errorf("ExitCode(%d) = %s, want %s", code, got, want)
		}
	}
}

func TestDeterministic(t *testing.T) {
	line := func(v intstr.IntOrString) *intstr.IntOrString { return &v }
	vars := map[string]string{"${context.goal}": "10", "${context.tol}": "0.5", "${prev.output}": "12", "${context.bad}": "abc"}
	tests := []struct {
		name    string
		cfg     v1alpha1.Evaluate
		output  string
		exit    int
		verdict string
		detail  string // key=value expected in details, optional
	}{
		{"exit_code success", v1alpha1.Evaluate{Type: "exit_code"}, "", 0, "success", ""},
		{"exit_code timeout", v1alpha1.Evaluate{Type: "exit_code"}, "", 124, "error", "error=action timed out"},

		{"numeric eq default", v1alpha1.Evaluate{Type: "output_numeric", Target: js(0)}, "0\n", 0, "success", "operator=eq"},
		{"numeric lt", v1alpha1.Evaluate{Type: "output_numeric", Operator: "lt", Target: js(5)}, " 3 ", 0, "success", "value=3"},
		{"numeric ge fails", v1alpha1.Evaluate{Type: "output_numeric", Operator: "ge", Target: js(5)}, "4.5", 0, "failure", ""},
		{"numeric ne", v1alpha1.Evaluate{Type: "output_numeric", Operator: "ne", Target: js(5)}, "5", 0, "failure", ""},
		{"numeric le gt", v1alpha1.Evaluate{Type: "output_numeric", Operator: "gt", Target: js(-1)}, "0", 0, "success", ""},
		{"numeric template target", v1alpha1.Evaluate{Type: "output_numeric", Operator: "le", Target: js("${context.goal}")}, "10", 0, "success", "target=10"},
		{"numeric unresolved target", v1alpha1.Evaluate{Type: "output_numeric", Target: js("${context.nope}")}, "10", 0, "error", ""},
		{"numeric not a number", v1alpha1.Evaluate{Type: "output_numeric", Target: js(1)}, "many", 0, "error", ""},
		{"numeric NaN equals nothing", v1alpha1.Evaluate{Type: "output_numeric", Operator: "ge", Target: js(1)}, "NaN", 0, "failure", ""},
		{"numeric NaN differs from all", v1alpha1.Evaluate{Type: "output_numeric", Operator: "ne", Target: js("nan")}, "nan", 0, "success", ""},
		{"numeric infinity", v1alpha1.Evaluate{Type: "output_numeric", Operator: "gt", Target: js(1e308)}, "1e400", 0, "success", ""},
		{"numeric hex refused", v1alpha1.Evaluate{Type: "output_numeric", Target: js(8)}, "0x1p3", 0, "error", ""},
		{"numeric key signed", v1alpha1.Evaluate{Type: "output_numeric", Key: "score", Target: js(0.5)}, "score=+5 score\u00a0=\u00a0.5", 0, "success", ""},
		{"numeric non-zero exit", v1alpha1.Evaluate{Type: "output_numeric", Target: js(1)}, "1", 1, "error", "error=action exited with code 1"},
		{"numeric timeout", v1alpha1.Evaluate{Type: "output_numeric", Target: js(1)}, "1", 124, "error", "error=action timed out"},
		{"numeric key last match", v1alpha1.Evaluate{Type: "output_numeric", Key: "errors", Target: js(0)}, "errors = 3\nerrors=0\n", 0, "success", ""},
		{"numeric key missing", v1alpha1.Evaluate{Type: "output_numeric", Key: "errors", Target: js(0)}, "none", 0, "error", ""},

		{"json path number", v1alpha1.Evaluate{Type: "output_json", Path: "summary.failed", Operator: "eq", Target: js(0)}, `{"summary":{"failed":0}}`, 0, "success", ""},
		{"json leading dot and index", v1alpha1.Evaluate{Type: "output_json", Path: ".items.1.name", Target: js("b")}, `{"items":[{"name":"a"},{"name":"b"}]}`, 0, "success", ""},
		{"json string vs number differ", v1alpha1.Evaluate{Type: "output_json", Path: "n", Target: js(0)}, `{"n":"0"}`, 0, "failure", ""},
		{"json ne", v1alpha1.Evaluate{Type: "output_json", Path: "s", Operator: "ne", Target: js("x")}, `{"s":"y"}`, 0, "success", ""},
		{"json big integers differ", v1alpha1.Evaluate{Type: "output_json", Path: "n", Target: &apiextensionsv1.JSON{Raw: []byte("9007199254740992")}}, `{"n":9007199254740993}`, 0, "failure", ""},
		{"json big integers equal", v1alpha1.Evaluate{Type: "output_json", Path: "n", Target: &apiextensionsv1.JSON{Raw: []byte("123456789012345678901234567890")}}, `{"n":123456789012345678901234567890}`, 0, "success", ""},
		{"json big integer above", v1alpha1.Evaluate{Type: "output_json", Path: "n", Operator: "gt", Target: &apiextensionsv1.JSON{Raw: []byte("9007199254740992")}}, `{"n":9007199254740993}`, 0, "success", ""},
		{"json int vs float exactly", v1alpha1.Evaluate{Type: "output_json", Path: "n", Target: &apiextensionsv1.JSON{Raw: []byte("1.0")}}, `{"n":1}`, 0, "success", ""},
		{"json float past its range", v1alpha1.Evaluate{Type: "output_json", Path: "n", Operator: "gt", Target: &apiextensionsv1.JSON{Raw: []byte("1e308")}}, `{"n":1e400}`, 0, "success", ""},
		{"json big int in a list", v1alpha1.Evaluate{Type: "output_json", Path: "l", Target: &apiextensionsv1.JSON{Raw: []byte("[9007199254740992]")}}, `{"l":[9007199254740993]}`, 0, "failure", ""},
		{"json gt numbers", v1alpha1.Evaluate{Type: "output_json", Path: "n", Operator: "gt", Target: js(2)}, `{"n":3}`, 0, "success", ""},
		{"json lt on strings", v1alpha1.Evaluate{Type: "output_json", Path: "s", Operator: "lt", Target: js("x")}, `{"s":"y"}`, 0, "error", ""},
		{"json bool", v1alpha1.Evaluate{Type: "output_json", Path: "ok", Target: js(true)}, `{"ok":true}`, 0, "success", ""},
		{"json true is 1", v1alpha1.Evaluate{Type: "output_json", Path: "ok", Target: js(1)}, `{"ok":true}`, 0, "success", ""},
		{"json false below true", v1alpha1.Evaluate{Type: "output_json", Path: "ok", Operator: "lt", Target: js(true)}, `{"ok":false}`, 0, "success", ""},
		{"json lists equal by value", v1alpha1.Evaluate{Type: "output_json", Path: "l", Target: js([]any{1.0, "a", map[string]any{"x": true}})}, `{"l":[1,"a",{"x":1}]}`, 0, "success", ""},
		{"json objects differ", v1alpha1.Evaluate{Type: "output_json", Path: "o", Target: js(map[string]any{"x": 1})}, `{"o":{"x":1,"y":2}}`, 0, "failure", ""},
		{"json null", v1alpha1.Evaluate{Type: "output_json", Path: "n", Target: js(nil)}, `{"n":null}`, 0, "success", ""},
		{"json path missing", v1alpha1.Evaluate{Type: "output_json", Path: "a.b", Target: js(1)}, `{"a":{}}`, 0, "error", ""},
		{"json negative index", v1alpha1.Evaluate{Type: "output_json", Path: "l.-1", Target: js(1)}, `{"l":[1]}`, 0, "error", ""},
		{"json NaN is below nothing", v1alpha1.Evaluate{Type: "output_json", Path: "n", Operator: "ge", Target: js(0)}, `{"n": NaN}`, 0, "failure", ""},
		{"json NaN differs", v1alpha1.Evaluate{Type: "output_json", Path: "n.0", Operator: "ne", Target: js(0)}, `{"n": [NaN]}`, 0, "success", ""},
		{"json NaN in a list equals nothing", v1alpha1.Evaluate{Type: "output_json", Path: "n", Target: &apiextensionsv1.JSON{Raw: []byte(`[0]`)}}, `{"n": [NaN]}`, 0, "failure", ""},
		{"json Infinity", v1alpha1.Evaluate{Type: "output_json", Path: "n", Operator: "gt", Target: js(1e308)}, `{"n": Infinity, "s": "NaN -Infinity"}`, 0, "success", "value=inf"},
		{"json -Infinity", v1alpha1.Evaluate{Type: "output_json", Path: "1", Operator: "lt", Target: js(-1e308)}, `[1,-Infinity]`, 0, "success", ""},
		{"json words in strings stay", v1alpha1.Evaluate{Type: "output_json", Path: "s", Target: js("NaN \"Infinity")}, `{"s": "NaN \"Infinity"}`, 0, "success", ""},
		{"json lower-case nan refused", v1alpha1.Evaluate{Type: "output_json", Path: "n", Operator: "ne", Target: js(0)}, `{"n": nan}`, 0, "error", ""},
		{"json invalid", v1alpha1.Evaluate{Type: "output_json", Path: "a", Target: js(1)}, `{"a":`, 0, "error", ""},

		{"contains regex", v1alpha1.Evaluate{Type: "output_contains", Pattern: `\d+ passed`}, "12 passed", 0, "success", "matched=true"},
		{"contains missing", v1alpha1.Evaluate{Type: "output_contains", Pattern: "PASS"}, "FAIL", 0, "failure", ""},
		{"contains negate", v1alpha1.Evaluate{Type: "output_contains", Pattern: "ERROR", Negate: true}, "all good", 0, "success", ""},
		{"contains negate matched", v1alpha1.Evaluate{Type: "output_contains", Pattern: "ERROR", Negate: true}, "ERROR x", 0, "failure", ""},
		{"contains bad regex is literal", v1alpha1.Evaluate{Type: "output_contains", Pattern: "a(b"}, "xa(by", 0, "success", ""},
		{"contains lookahead", v1alpha1.Evaluate{Type: "output_contains", Pattern: `error(?! 0)`}, "error 0\nwarning 2", 0, "failure", ""},
		{"contains lookahead matches", v1alpha1.Evaluate{Type: "output_contains", Pattern: `error(?! 0)`}, "error 3", 0, "success", ""},
		{"contains lookbehind", v1alpha1.Evaluate{Type: "output_contains", Pattern: `(?<=status: )ok`}, "status: ok", 0, "success", ""},
		{"contains backreference", v1alpha1.Evaluate{Type: "output_contains", Pattern: `(\w+) \1`}, "it is is done", 0, "success", ""},
		{"contains python named group", v1alpha1.Evaluate{Type: "output_contains", Pattern: `(?P<w>\w+)-(?P=w)`}, "ab-ab", 0, "success", ""},
		{"contains error pattern", v1alpha1.Evaluate{Type: "output_contains", Pattern: "PASS", ErrorPatterns: []string{"Traceback"}}, "Traceback (most recent", 0, "error", "error_pattern=Traceback"},
		{"contains non-zero exit", v1alpha1.Evaluate{Type: "output_contains", Pattern: "x"}, "x", 3, "error", ""},

		{"convergence on target", v1alpha1.Evaluate{Type: "convergence", Target: js(10), Tolerance: js(0.5)}, "10.4", 0, "target", "delta=0"},
		{"convergence no previous", v1alpha1.Evaluate{Type: "convergence", Target: js(10)}, "15", 0, "progress", ""},
		{"convergence minimize progress", v1alpha1.Evaluate{Type: "convergence", Target: js(0), Previous: "${prev.output}"}, "11", 0, "progress", "delta=-1"},
		{"convergence minimize stall", v1alpha1.Evaluate{Type: "convergence", Target: js(0), Previous: "${prev.output}"}, "12", 0, "stall", ""},
		{"convergence maximize progress", v1alpha1.Evaluate{Type: "convergence", Target: js(100), Direction: "maximize", Previous: "${prev.output}"}, "13", 0, "progress", ""},
		{"convergence maximize stall", v1alpha1.Evaluate{Type: "convergence", Target: js(100), Direction: "maximize", Previous: "${prev.output}"}, "11", 0, "stall", ""},
		{"convergence template target and tolerance", v1alpha1.Evaluate{Type: "convergence", Target: js("${context.goal}"), Tolerance: js("${context.tol}")}, "9.6", 0, "target", ""},
		{"convergence unresolved target", v1alpha1.Evaluate{Type: "convergence", Target: js("${context.nope}")}, "1", 0, "error", ""},
		{"convergence unreadable previous ignored", v1alpha1.Evaluate{Type: "convergence", Target: js(0), Previous: "${context.bad}"}, "5", 0, "progress", ""},
		{"convergence non-number", v1alpha1.Evaluate{Type: "convergence", Target: js(0)}, "n/a", 0, "error", ""},

		{"classify last line", v1alpha1.Evaluate{Type: "classify"}, "thinking...\nretry\n\n", 0, "retry", ""},

		{"harbor score", v1alpha1.Evaluate{Type: "harbor_scorer"}, "0.75\n", 0, "success", "score=0.75"},
		{"harbor score python syntax", v1alpha1.Evaluate{Type: "harbor_scorer"}, " .5 ", 0, "success", "score=0.5"},
		{"harbor failed run", v1alpha1.Evaluate{Type: "harbor_scorer"}, "Traceback", 3, "failure", "exit_code=3"},
		{"harbor no number", v1alpha1.Evaluate{Type: "harbor_scorer"}, "score: high", 0, "error", ""},
		{"harbor timeout", v1alpha1.Evaluate{Type: "harbor_scorer"}, "", 124, "error", "error=action timed out"},
		{"mcp success", v1alpha1.Evaluate{Type: "mcp_result"}, `{"content": [{"type": "text", "text": "ok"}], "isError": false}` + "\n", 0, "success", "exit_code=0"},
		{"mcp tool error", v1alpha1.Evaluate{Type: "mcp_result"}, `{"isError": true}`, 0, "tool_error", ""},
		{"mcp isError wins over the exit code", v1alpha1.Evaluate{Type: "mcp_result"}, `{"isError": false}`, 1, "success", ""},
		{"mcp no isError, non-zero exit", v1alpha1.Evaluate{Type: "mcp_result"}, `{"content": []}`, 1, "tool_error", ""},
		{"mcp truthy isError", v1alpha1.Evaluate{Type: "mcp_result"}, `{"isError": "yes"}`, 0, "tool_error", ""},
		{"mcp falsy isError", v1alpha1.Evaluate{Type: "mcp_result"}, `{"isError": 0}`, 0, "success", ""},
		{"mcp empty output", v1alpha1.Evaluate{Type: "mcp_result"}, "  \n", 0, "success", ""},
		{"mcp empty output, failed", v1alpha1.Evaluate{Type: "mcp_result"}, "", 2, "tool_error", ""},
		{"mcp not JSON", v1alpha1.Evaluate{Type: "mcp_result"}, "Traceback (most recent call last)", 0, "tool_error", ""},
		{"mcp not an object", v1alpha1.Evaluate{Type: "mcp_result"}, "[1, 2]", 0, "tool_error", ""},
		{"mcp not found", v1alpha1.Evaluate{Type: "mcp_result"}, "", 127, "not_found", "exit_code=127"},
		{"mcp timeout is its own verdict", v1alpha1.Evaluate{Type: "mcp_result"}, "", 124, "timeout", "exit_code=124"},
		{"classify first", v1alpha1.Evaluate{Type: "classify", Line: line(intstr.FromString("first"))}, "\n  alpha \nbeta", 0, "alpha", ""},
		{"classify index", v1alpha1.Evaluate{Type: "classify", Line: line(intstr.FromInt32(1))}, "a\nb\nc", 0, "b", ""},
		{"classify negative index", v1alpha1.Evaluate{Type: "classify", Line: line(intstr.FromInt32(-2))}, "a\nb\nc", 0, "b", ""},
		{"classify out of range", v1alpha1.Evaluate{Type: "classify", Line: line(intstr.FromInt32(7))}, "a", 0, "", ""},
		{"classify empty", v1alpha1.Evaluate{Type: "classify"}, "", 0, "", ""},
		{"classify yes is success", v1alpha1.Evaluate{Type: "classify"}, "yes", 0, "success", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Deterministic(&tt.cfg, Input{Output: tt.output, ExitCode: tt.exit, Expand: expandFrom(vars)})
			if r.Verdict != tt.verdict {
				t.Fatalf("verdict = %q, want %q (details %v)", r.Verdict, tt.verdict, r.Details)
			}
			if tt.detail != "" {
				k, v, _ := strings.Cut(tt.detail, "=")
				if got := fmt.Sprint(r.Details[k]); got != v {
					t.Errorf("details[%s] = %q, want %q (details %v)", k, got, v, r.Details)
				}
			}
		})
	}
}

// As little-loops reads a number field with Python's float(): a boolean
// is 1 or 0; a target output_numeric cannot read makes the result Broken
// (ll-loop's run ends there), read before the output; convergence's text
// target is an error verdict, its list target or tolerance Broken.
func TestBrokenNumberFields(t *testing.T) {
	vars := map[string]string{"${context.goal}": "ten"}
	tests := []struct {
		name    string
		cfg     v1alpha1.Evaluate
		output  string
		verdict string
		broken  string // BrokenReason when Broken, "" when not
	}{
		{"numeric true is 1", v1alpha1.Evaluate{Type: "output_numeric", Operator: "eq", Target: js(true)}, "1", "success", ""},
		{"numeric false is 0", v1alpha1.Evaluate{Type: "output_numeric", Operator: "eq", Target: js(false)}, "0", "success", ""},
		{"numeric text target", v1alpha1.Evaluate{Type: "output_numeric", Operator: "ge", Target: js("abc")}, "7", "error",
			"output_numeric target must be numeric, got: 'abc'"},
		{"numeric template to text, output no number", v1alpha1.Evaluate{Type: "output_numeric", Operator: "ge", Target: js("${context.goal}")}, "n/a", "error",
			"output_numeric target must be numeric, got: '${context.goal}'"},
		{"numeric undefined template", v1alpha1.Evaluate{Type: "output_numeric", Target: js("${context.nope}")}, "7", "error",
			"output_numeric target must be numeric, got: '${context.nope}'"},
		{"numeric list target", v1alpha1.Evaluate{Type: "output_numeric", Operator: "ge", Target: js([]any{1, 2})}, "7", "error",
			"float() argument must be a string or a real number, not 'list'"},
		{"convergence text target", v1alpha1.Evaluate{Type: "convergence", Target: js("abc")}, "3", "error", ""},
		{"convergence text tolerance is 0", v1alpha1.Evaluate{Type: "convergence", Target: js(3), Tolerance: js("wide")}, "3", "target", ""},
		{"convergence mapping target", v1alpha1.Evaluate{Type: "convergence", Target: js(map[string]any{"a": 1})}, "3", "error",
			"float() argument must be a string or a real number, not 'dict'"},
		{"convergence list tolerance", v1alpha1.Evaluate{Type: "convergence", Target: js(3), Tolerance: js([]any{1})}, "3", "error",
			"float() argument must be a string or a real number, not 'list'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Deterministic(&tt.cfg, Input{Output: tt.output, Expand: expandFrom(vars)})
			if r.Verdict != tt.verdict || r.Broken != (tt.broken != "") {
				t.Fatalf("verdict %q broken %v, want %q %v (details %v)", r.Verdict, r.Broken, tt.verdict, tt.broken != "", r.Details)
			}
			if tt.broken != "" {
				if got := BrokenReason(&tt.cfg); got != tt.broken {
					t.Errorf("BrokenReason = %q, want %q", got, tt.broken)
				}
			}
		})
	}
}

// The words success and failure said as such are kept beside the verdict
// (Result.Word); yes and no are not.
func TestVerdictWord(t *testing.T) {
	for _, c := range []struct {
		output, verdict, word string
	}{{"success", "success", "success"}, {"failure", "failure", "failure"}, {"yes", "success", ""}, {"no", "failure", ""}, {"retry", "retry", ""}} {
		r := Deterministic(&v1alpha1.Evaluate{Type: "classify"}, Input{Output: c.output})
		if r.Verdict != c.verdict || r.Word != c.word {
			t.Errorf("classify %q: verdict %q word %q, want %q %q", c.output, r.Verdict, r.Word, c.verdict, c.word)
		}
	}
	if r := MCPResult(`{"isError": false}`, 0); r.Verdict != "success" || r.Word != "success" {
		t.Errorf("mcp_result: verdict %q word %q", r.Verdict, r.Word)
	}
	schema := JudgeRequest{Schema: json.RawMessage(`{"type":"object","properties":{"verdict":{"type":"string"}}}`)}
	if r := Interpret(schema, map[string]any{"verdict": "success", "confidence": 0.9}); r.Verdict != "success" || r.Word != "success" {
		t.Errorf("judge's own schema: verdict %q word %q", r.Verdict, r.Word)
	}
	if r := Interpret(JudgeRequest{}, map[string]any{"verdict": "yes", "confidence": 0.9, "evidence": "ok"}); r.Verdict != "success" || r.Word != "" {
		t.Errorf("judge's yes: verdict %q word %q", r.Verdict, r.Word)
	}
}

func TestInterpret(t *testing.T) {
	tests := []struct {
		name    string
		req     JudgeRequest
		answer  map[string]any
		verdict string
	}{
		{"yes with evidence", JudgeRequest{MinConfidence: 0.5}, map[string]any{"verdict": "yes", "confidence": 0.9, "reason": "r", "evidence": "ok"}, "success"},
		{"no", JudgeRequest{}, map[string]any{"verdict": "no", "evidence": "e"}, "failure"},
		{"partial stays", JudgeRequest{}, map[string]any{"verdict": "partial", "evidence": "e"}, "partial"},
		{"yes without evidence is no", JudgeRequest{}, map[string]any{"verdict": "yes", "evidence": ""}, "failure"},
		{"cannot_judge needs no evidence", JudgeRequest{}, map[string]any{"verdict": "cannot_judge"}, "cannot_judge"},
		{"invalid verdict", JudgeRequest{}, map[string]any{"verdict": "maybe", "evidence": "e"}, "error"},
		{"missing verdict", JudgeRequest{}, map[string]any{"confidence": 1.0}, "error"},
		{"uncertain suffix", JudgeRequest{MinConfidence: 0.8, UncertainSuffix: true}, map[string]any{"verdict": "partial", "confidence": 0.3, "evidence": "e"}, "partial_uncertain"},
		{"custom schema any verdict", JudgeRequest{Schema: json.RawMessage(`{}`)}, map[string]any{"verdict": "needs_tests"}, "needs_tests"},
		{"white space is no evidence", JudgeRequest{}, map[string]any{"verdict": "yes", "evidence": " \n\t\u3000"}, "failure"},
		{"confidence as a string", JudgeRequest{MinConfidence: 0.5, UncertainSuffix: true}, map[string]any{"verdict": "yes", "confidence": " 0.25 ", "evidence": "e"}, "yes_uncertain"},
		{"confidence true", JudgeRequest{MinConfidence: 0.5, UncertainSuffix: true}, map[string]any{"verdict": "yes", "confidence": true, "evidence": "e"}, "success"},
		{"confidence not a number", JudgeRequest{}, map[string]any{"verdict": "yes", "confidence": "high", "evidence": "e"}, "error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Interpret(tt.req, tt.answer).Verdict; got != tt.verdict {
				t.Errorf("verdict = %q, want %q", got, tt.verdict)
			}
		})
	}
}

// The judge reads the last OutputLimit characters, not bytes.
func TestJudgedTail(t *testing.T) {
	long := "MARK" + strings.Repeat("é", OutputLimit-4)
	if got := JudgedTail(long); got != long {
		t.Errorf("%d characters cut to %d", OutputLimit, len([]rune(got)))
	}
	if got := JudgedTail("x" + long); got != long {
		t.Errorf("one more character: kept %d characters", len([]rune(got)))
	}
	if got := JudgedTail("short"); got != "short" {
		t.Errorf("short: %q", got)
	}
}

func FuzzDeterministic(f *testing.F) {
	f.Add("output_numeric", "eq", "5", "5", 0)
	f.Add("output_json", "gt", `{"a":[1,2]}`, "a.1", 0)
	f.Add("output_contains", "", "hello", "h.llo(", 1)
	f.Add("convergence", "", "3.5", "${prev.output}", 0)
	f.Add("classify", "", "a\nb\n", "", 124)
	f.Fuzz(func(t *testing.T, typ, op, output, arg string, exit int) {
		cfg := &v1alpha1.Evaluate{Type: v1alpha1.EvaluatorType(typ), Operator: op, Pattern: arg, Path: arg, Previous: arg, Target: js(arg)}
		r := Deterministic(cfg, Input{Output: output, ExitCode: exit, Expand: expandFrom(nil)})
		if r.Verdict == "error" && r.Details == nil {
			t.Fatalf("error verdict without details for %+v", cfg)
		}
		if exit == ExitTimeout && r.Verdict != "error" {
			t.Fatalf("a timed-out action gave %q", r.Verdict)
		}
	})
}

// A pattern that backtracks without end gives an error verdict, not a hang.
func TestPatternTimeout(t *testing.T) {
	p := CompilePattern(`^(a+)+$`)
	p.re.MatchTimeout = 50 * time.Millisecond
	if _, err := p.Match(strings.Repeat("a", 64) + "b"); err == nil {
		t.Fatal("a catastrophic pattern finished")
	}
}
