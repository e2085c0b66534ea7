package evaluate

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/pycompat"
)

// JudgeRequest is one question to the LLM judge.
type JudgeRequest struct {
	// Prompt is the expanded question; empty asks whether the action succeeded.
	Prompt string
	// Output is the text judged; the judge reads at most its last
	// OutputLimit characters (see JudgedTail).
	Output string
	// Schema is the JSON schema of the answer; nil means DefaultSchema.
	Schema json.RawMessage
	// Model overrides the judge's model when set.
	Model         string
	MinConfidence float64
	// UncertainSuffix appends _uncertain to a verdict below MinConfidence.
	UncertainSuffix bool
}

// Judge answers a JudgeRequest. Implementations never fail: every problem is
// an error verdict with the reason in the details.
type Judge interface {
	Judge(ctx context.Context, req JudgeRequest) Result
}

// OutputLimit is how many characters of the output, from the end, the
// judge reads.
const OutputLimit = 4000

// JudgedTail is the part of output the judge reads: its last OutputLimit
// characters (Unicode code points, as little-loops counts them; a byte
// that is not UTF-8 counts as one).
func JudgedTail(output string) string {
	if len(output) <= OutputLimit {
		return output
	}
	i, n := len(output), 0
	for i > 0 && n < OutputLimit {
		_, size := utf8.DecodeLastRuneInString(output[:i])
		i -= size
		n++
	}
	return output[i:]
}

// DefaultPrompt is asked when an llm_structured evaluator has no prompt.
const DefaultPrompt = "Evaluate whether this action succeeded based on its output."

// DefaultSchema is the answer the judge gives unless a state names another.
var DefaultSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"verdict":{"type":"string","enum":["yes","no","blocked","partial","cannot_judge"],"description":"yes if the action achieved its goal, no if it did not, blocked if it cannot proceed without help, partial if it got part of the way, cannot_judge if the output does not say"},` +
	`"confidence":{"type":"number","minimum":0,"maximum":1,"description":"how sure you are, 0 to 1"},` +
	`"reason":{"type":"string","description":"one or two sentences explaining the verdict"},` +
	`"evidence":{"type":"string","description":"the lines of the output the verdict rests on, quoted"}},` +
	`"required":["verdict","confidence","reason","evidence"]}`)

// DefaultVerdicts are the answers DefaultSchema allows, in its order.
var DefaultVerdicts = []string{"yes", "no", "blocked", "partial", "cannot_judge"}

// Interpret turns the judge's structured answer into a result: with the default
// schema an unknown verdict is an error and a verdict without evidence counts as
// no; a confidence under the minimum may add the _uncertain suffix. yes and no
// become success and failure.
func Interpret(req JudgeRequest, answer map[string]any) Result {
	verdict, _ := answer["verdict"].(string)
	details := map[string]any{}
	for k, v := range answer {
		if k != "verdict" {
			details[k] = v
		}
	}
	if verdict == "" {
		details["error"] = "the judge's answer has no verdict"
		return Result{Verdict: v1alpha1.VerdictError, Details: details}
	}
	confidence, err := answerConfidence(answer)
	if err != nil {
		details["error"] = err.Error()
		return Result{Verdict: v1alpha1.VerdictError, Details: details}
	}
	confident := confidence >= req.MinConfidence
	details["confidence"] = confidence
	details["confident"] = confident
	if req.Schema == nil {
		if !slices.Contains(DefaultVerdicts, verdict) {
			details["error"] = fmt.Sprintf("invalid verdict %q", verdict)
			return Result{Verdict: v1alpha1.VerdictError, Details: details}
		}
		if ev, _ := answer["evidence"].(string); pycompat.Strip(ev) == "" && verdict != "cannot_judge" {
			verdict = "no"
			details["evidence_coerced"] = true
		}
	}
	if req.UncertainSuffix && !confident {
		verdict += "_uncertain"
	}
	return Result{Verdict: v1alpha1.CanonicalVerdict(verdict), Details: details, Word: literalWord(verdict)}
}

// answerConfidence is the answer's confidence as a number, read as
// little-loops reads it (Python's float()): a number, a string holding
// one, true or false; 1 when there is none. Anything else is an error.
func answerConfidence(answer map[string]any) (float64, error) {
	c, ok := answer["confidence"]
	if !ok {
		return 1, nil
	}
	switch c := c.(type) {
	case float64:
		return c, nil
	case bool:
		if c {
			return 1, nil
		}
		return 0, nil
	case string:
		if f, ok := pycompat.ParseFloat(c); ok {
			return f, nil
		}
		return 0, fmt.Errorf("the judge's confidence %s is not a number", pycompat.Repr(c))
	}
	return 0, fmt.Errorf("the judge's confidence %s is not a number", pycompat.Repr(c))
}
