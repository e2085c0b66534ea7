package executor

import (
	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
)

// Search is a pattern search over an action's output (or an evaluator's
// source) that the driver runs apart from its own loop (StepSearch): a
// pattern in Python's re syntax may backtrack for seconds, and nothing a
// Loop controls may hold an operator's worker that long. It holds plain
// values, so it can run in any goroutine.
type Search struct {
	Evaluate v1alpha1.Evaluate
	Output   string
	ExitCode int
}

// Verdict runs the search: the verdict Complete would have given.
func (s *Search) Verdict() evaluate.Result {
	return evaluate.Deterministic(&s.Evaluate, evaluate.Input{Output: s.Output, ExitCode: s.ExitCode})
}

// Searched is res with the verdict of the StepSearch Complete asked for;
// for a state without an action (res nil), a result holding only it.
func Searched(res *ActionResult, verdict evaluate.Result) *ActionResult {
	if res == nil {
		res = &ActionResult{}
	}
	res.Verdict = &verdict
	return res
}

// search is the pattern search the state's verdict needs, when the machine
// runs searches apart (Options.SearchApart); nil when the verdict needs
// none, or was made where the action ran.
func (t *turn) search(st *v1alpha1.State, res *ActionResult) *Search {
	cfg := st.Evaluate
	if !t.m.opts.SearchApart || t.decided != nil || cfg == nil || cfg.Type != v1alpha1.EvalOutputContains ||
		st.Next != "" || res != nil && res.Failure != nil {
		return nil
	}
	in := t.judged(st, res)
	if _, ok := evaluate.Precheck(cfg.Type, in.ExitCode); !ok {
		return nil
	}
	return &Search{Evaluate: *cfg.DeepCopy(), Output: in.Output, ExitCode: in.ExitCode}
}
