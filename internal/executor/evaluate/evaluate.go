// Package evaluate turns an action's result into a verdict.
//
// The deterministic evaluators (exit_code, output_numeric, output_json,
// output_contains, convergence, classify, harbor_scorer) are pure functions of the output,
// the exit code and the templates they may expand. llm_structured goes through
// a Judge, which the caller injects.
package evaluate

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/agentstream"
)

// ExitTimeout is the exit code of an action that hit its timeout.
const ExitTimeout = 124

// Result is a verdict and what the evaluator found.
type Result struct {
	Verdict string
	Details map[string]any
	// Usage is what an LLM judge's call used; nil for other evaluators.
	Usage *agentstream.Usage `json:",omitempty"`
	// Word is the verdict success or failure when the evaluator said that
	// word itself (mcp_result's success, a classify line, the answer of a
	// judge's own schema), not yes or no: a little-loops file tells them
	// apart, as ll-loop does (on_yes takes yes, not success).
	Word string `json:",omitempty"`
	// Broken says the evaluator could not judge at all, as its
	// configuration cannot be used (output_numeric's target is not a
	// number, nor a template that expands to one): the verdict is error,
	// and a run of a little-loops file ends in error there, as ll-loop's
	// does (BrokenReason words why).
	Broken bool `json:",omitempty"`
}

// Input is what an evaluator judges.
type Input struct {
	// Output is the action's stdout (or the expanded source template).
	Output string
	// ExitCode is the action's exit code.
	ExitCode int
	// Expand expands templates in target, tolerance and previous. Nil expands nothing.
	Expand func(string) (string, error)
	// Streamed, when set, holds what a runner found in the complete output
	// while it streamed by; Output is then only its tail.
	Streamed *Streamed
}

// Streamed is what a runner learns from an action's complete stdout, line by
// line, when it keeps only the tail: whether output_contains' pattern
// occurred, and the last "KEY = NUMBER" of output_numeric.
type Streamed struct {
	PatternMatched bool
	// PatternError says why a search of the pattern gave up ("" if none did).
	PatternError string
	KeyValue     string
	KeyFound     bool
}

func (in Input) expand(s string) (string, error) {
	if in.Expand == nil {
		return s, nil
	}
	return in.Expand(s)
}

func errorResult(format string, args ...any) Result {
	return Result{Verdict: v1alpha1.VerdictError, Details: map[string]any{"error": fmt.Sprintf(format, args...)}}
}

// IsDeterministic reports whether an evaluator type runs without the LLM judge.
func IsDeterministic(t v1alpha1.EvaluatorType) bool {
	switch t {
	case v1alpha1.EvalExitCode, v1alpha1.EvalOutputNumeric, v1alpha1.EvalOutputJSON,
		v1alpha1.EvalOutputContains, v1alpha1.EvalConvergence, v1alpha1.EvalClassify, v1alpha1.EvalHarborScorer,
		v1alpha1.EvalMCPResult:
		return true
	}
	return false
}

// readsOutputOnlyOnSuccess are the evaluators that give error for a non-zero exit
// before looking at the output.
func readsOutputOnlyOnSuccess(t v1alpha1.EvaluatorType) bool {
	return t != v1alpha1.EvalExitCode && t != v1alpha1.EvalLLMStructured && t != v1alpha1.EvalHarborScorer &&
		t != v1alpha1.EvalMCPResult
}

// Precheck applies the rules that hold before any evaluator looks at the
// output: a timed-out action is an error, and so is a non-zero exit for the
// evaluators that read the output. ok is false when the verdict is decided.
func Precheck(t v1alpha1.EvaluatorType, exitCode int) (Result, bool) {
	if exitCode == ExitTimeout && t != v1alpha1.EvalMCPResult {
		return errorResult("action timed out"), false
	}
	if exitCode != 0 && readsOutputOnlyOnSuccess(t) {
		return errorResult("action exited with code %d", exitCode), false
	}
	return Result{}, true
}

// Deterministic runs a deterministic evaluator. It never panics: whatever goes
// wrong is an error verdict with the reason in details.
func Deterministic(cfg *v1alpha1.Evaluate, in Input) Result {
	if r, ok := Precheck(cfg.Type, in.ExitCode); !ok {
		return r
	}
	switch cfg.Type {
	case v1alpha1.EvalExitCode:
		return ExitCode(in.ExitCode)
	case v1alpha1.EvalOutputNumeric:
		return outputNumeric(cfg, in)
	case v1alpha1.EvalOutputJSON:
		return outputJSON(cfg, in)
	case v1alpha1.EvalOutputContains:
		return outputContains(cfg, in)
	case v1alpha1.EvalConvergence:
		return convergence(cfg, in)
	case v1alpha1.EvalClassify:
		return classify(cfg, in)
	case v1alpha1.EvalHarborScorer:
		return harborScorer(in)
	case v1alpha1.EvalMCPResult:
		return MCPResult(in.Output, in.ExitCode)
	}
	return errorResult("evaluator %q is not deterministic", cfg.Type)
}

// ExitCode maps 0 to success, 1 to failure and anything else to error.
func ExitCode(code int) Result {
	d := map[string]any{"exit_code": code}
	switch code {
	case 0:
		return Result{Verdict: v1alpha1.VerdictSuccess, Details: d}
	case 1:
		return Result{Verdict: v1alpha1.VerdictFailure, Details: d}
	}
	return Result{Verdict: v1alpha1.VerdictError, Details: d}
}

// harborScorer judges a scoring command: a non-zero exit is failure; a
// number on stdout with exit code 0 is success, the number the score; any
// other output is an error.
func harborScorer(in Input) Result {
	if in.ExitCode != 0 {
		return Result{Verdict: v1alpha1.VerdictFailure, Details: map[string]any{"exit_code": in.ExitCode}}
	}
	score, err := parseNumber(in.Output)
	if err != nil {
		return errorResult("score is not a number: %q", truncate(strings.TrimSpace(in.Output), 80))
	}
	return Result{Verdict: v1alpha1.VerdictSuccess, Details: map[string]any{"score": detailNumber(score)}}
}

func boolVerdict(ok bool) string {
	if ok {
		return v1alpha1.VerdictSuccess
	}
	return v1alpha1.VerdictFailure
}

// ExitNotFound is the exit code of a command that is not there, and of
// mcp-call for a server or tool it does not know.
const ExitNotFound = 127

// MCPResult judges an MCP tool call from the exit code and the result
// envelope the call printed: 127 is not_found, 124 timeout; otherwise the
// envelope's isError (a non-zero exit when it has none) is tool_error, and
// so is output that is not JSON; the rest is success.
func MCPResult(output string, exitCode int) Result {
	d := map[string]any{"exit_code": exitCode}
	switch exitCode {
	case ExitNotFound:
		d["error"] = "MCP server or tool not found"
		return Result{Verdict: v1alpha1.VerdictNotFound, Details: d}
	case ExitTimeout:
		d["error"] = "MCP tool call timed out"
		return Result{Verdict: v1alpha1.VerdictTimeout, Details: d}
	}
	envelope := map[string]any{}
	if text := strings.TrimSpace(output); text != "" {
		if err := json.Unmarshal([]byte(text), &envelope); err != nil {
			d["error"] = "the MCP call printed no JSON result envelope: " + headOf(text, 200)
			return Result{Verdict: v1alpha1.VerdictToolError, Details: d}
		}
	}
	d["envelope"] = envelope
	isError, ok := envelope["isError"]
	if !ok {
		isError = exitCode != 0
	}
	if Truthy(isError) {
		return Result{Verdict: v1alpha1.VerdictToolError, Details: d}
	}
	return Result{Verdict: v1alpha1.VerdictSuccess, Details: d, Word: v1alpha1.VerdictSuccess}
}

// Truthy is a decoded JSON or YAML value's truth as Python has it: false,
// null, 0, "", [] and {} are false.
func Truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case float64:
		return x != 0
	case json.Number:
		f, err := x.Float64()
		return err != nil || f != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

// headOf is the first n bytes of s, cut on a rune boundary.
func headOf(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
