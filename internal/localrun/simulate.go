package localrun

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/history"
)

// Scenarios are the scripted verdicts Simulate knows, as ll-loop simulate
// has them: every action passes, every one fails, every one errs, the
// first fails and the rest pass, or they alternate starting with a
// failure.
var Scenarios = []string{"all-pass", "all-fail", "all-error", "first-fail", "alternating"}

// Simulation walks a loop with scripted verdicts: no action runs, nothing is
// saved, and the clock jumps over waits.
type Simulation struct {
	Machine  *executor.Machine
	Scenario string
	// WouldRun, when set, is shown each action instead of running it.
	WouldRun func(*executor.Action)
	// Observers see every event as it happens.
	Observers []executor.Observer
}

// Run walks the loop to its end and returns the final run state.
func (s *Simulation) Run(ctx context.Context) (*v1alpha1.RunState, error) {
	if !slices.Contains(Scenarios, s.Scenario) {
		return nil, fmt.Errorf("scenario %q: want one of %v", s.Scenario, Scenarios)
	}
	script := &scripted{scenario: s.Scenario, spec: s.Machine.Spec(), show: s.WouldRun}
	clock := &jumpClock{now: time.Unix(0, 0).UTC()}
	d := &Driver{Machine: s.Machine.Simulated(), Runner: script, Clock: clock, Decide: script.decide, ScriptSubLoop: script.subLoop,
		Approver: script, Observers: s.Observers}
	run := &v1alpha1.RunState{}
	events := s.Machine.Start(run, "simulate", clock.Now())
	err := d.drive(ctx, discard{}, d.schedule(nil), run, events)
	return run, err
}

// scripted answers every action as ll-loop simulate does: with the output
// "[simulated output for: ACTION]" and the scenario's exit code (0 passes,
// 1 fails, 2 errs), which the state's evaluator then judges. What only the
// LLM judge could judge gets the scenario's verdict instead.
type scripted struct {
	scenario string
	spec     *v1alpha1.LoopSpec
	show     func(*executor.Action)
	n        int
}

// code is the exit code of the next action.
func (s *scripted) code() int {
	defer func() { s.n++ }()
	switch s.scenario {
	case "all-fail":
		return 1
	case "all-error":
		return 2
	case "first-fail":
		if s.n == 0 {
			return 1
		}
	case "alternating":
		if s.n%2 == 0 {
			return 1
		}
	}
	return 0
}

// RunWhenReady implements ActionRunner: nothing runs.
func (s *scripted) RunWhenReady(_ context.Context, a *executor.Action, ready func(int) error) executor.ActionResult {
	if err := ready(0); err != nil {
		return executor.ActionResult{ExitCode: 127, Stderr: err.Error()}
	}
	if a.Learning != nil {
		return s.learning(a)
	}
	s.would(a)
	res := executor.ActionResult{Output: "[simulated output for: " + a.Command + "]", ExitCode: s.code()}
	if st := s.spec.States[a.State]; judged(&st) {
		res.Verdict = scriptedVerdict(res.ExitCode)
	}
	return res
}

func (s *scripted) would(a *executor.Action) {
	if s.show != nil {
		s.show(a)
	}
}

// subLoop is a sub-loop state's result, as ll-loop simulate gives it: the
// child does not run; the scenario's next result stands for its ending (a
// pass: it completed; a failure: it ended in a failure state; an error:
// it ended in error), and the state routes on it. The child captures
// nothing: a template that reads its capture or its captures fails as
// one naming a capture never made.
func (s *scripted) subLoop(sub *executor.SubLoop) executor.ActionResult {
	s.would(&executor.Action{State: sub.State, Iteration: sub.Iteration, Command: "[sub-loop: " + sub.Loop + "]"})
	child := &executor.ChildResult{TerminatedBy: v1alpha1.TerminatedTerminal, Scripted: true}
	switch s.code() {
	case 1:
		child.FailureTerminal = true
	case 2:
		child.TerminatedBy = v1alpha1.TerminatedError
	}
	return executor.ActionResult{Child: child}
}

// learning plays a learning state's gate, as ll-loop simulate does: the
// targets' records are read from the workspace (.ll/learning-tests), and
// each exploration of a missing or stale one is an action that would run,
// with the scenario's next result, which changes no record. The gate's
// marks are its probe's output, which the state's verdict reads.
func (s *scripted) learning(a *executor.Action) executor.ActionResult {
	marks := executor.PlayLearningGate(a.Learning, learningRecordStatus, func(target string, _ int) {
		s.would(&executor.Action{State: a.State, Iteration: a.Iteration, Agent: true, Command: "/ll:explore-api " + target})
		s.code()
	})
	return executor.ActionResult{Output: marks, Probe: &executor.ProbeResult{Output: marks}}
}

// learningRecordStatus is the status of the learning-tests record of a
// target (by its slug) as the gate reads it: missing without a file that
// opens with front matter, the front matter's status, proven when it has
// none.
func learningRecordStatus(slug string) string {
	b, err := os.ReadFile(filepath.Join(".ll", "learning-tests", slug+".md"))
	if err != nil {
		return "missing"
	}
	lines := strings.Split(string(b), "\n")
	if lines[0] != "---" || !slices.Contains(lines[1:], "---") {
		return "missing"
	}
	end := len(lines)
	if i := slices.Index(lines[2:], "---"); i >= 0 {
		end = i + 2
	}
	for _, l := range lines[1:end] {
		if v, ok := strings.CutPrefix(l, "status:"); ok {
			v = strings.TrimRight(strings.TrimLeft(v, " \t\v\f\r"), " \t\v\f\r")
			if v != "" && strings.ContainsRune(`"'`, rune(v[0])) {
				v = v[1:]
			}
			if v != "" && strings.ContainsRune(`"'`, rune(v[len(v)-1])) {
				v = v[:len(v)-1]
			}
			if v == "" {
				break
			}
			return v
		}
	}
	return "proven"
}

// Await implements Approver: a scripted pass approves, anything else
// rejects.
func (s *scripted) Await(context.Context, *executor.ApprovalRequest) (*executor.ApprovalAnswer, error) {
	return &executor.ApprovalAnswer{Approved: s.code() == 0, By: "simulate"}, nil
}

// decide scripts the verdict of a state without an action that only the
// LLM judge could judge; the others judge what they read.
func (s *scripted) decide(run *v1alpha1.RunState) *executor.ActionResult {
	if st := s.spec.States[run.CurrentState]; st.Evaluate != nil && judged(&st) {
		code := s.code()
		return &executor.ActionResult{ExitCode: code, Verdict: scriptedVerdict(code)}
	}
	return nil
}

// judged reports whether the LLM judge weighs the state's result.
func judged(st *v1alpha1.State) bool {
	if st.Evaluate == nil {
		return st.IsAgent()
	}
	return st.Evaluate.Type == v1alpha1.EvalLLMStructured
}

func scriptedVerdict(code int) *evaluate.Result {
	verdict := v1alpha1.VerdictSuccess
	switch code {
	case 1:
		verdict = v1alpha1.VerdictFailure
	case 2:
		verdict = v1alpha1.VerdictError
	}
	return &evaluate.Result{Verdict: verdict, Details: map[string]any{"simulated": true}}
}

// jumpClock is a clock whose waits end at once, at the time waited for.
type jumpClock struct{ now time.Time }

func (c *jumpClock) Now() time.Time { return c.now }

func (c *jumpClock) SleepUntil(_ context.Context, t time.Time) {
	if t.After(c.now) {
		c.now = t
	}
}

// discard keeps nothing.
type discard struct{}

func (discard) recordAction(int)                                                        {}
func (discard) forgetAction()                                                           {}
func (discard) save(*v1alpha1.RunState, []executor.Event, *history.Snapshot) error      { return nil }
func (discard) saveAsync(*v1alpha1.RunState, []executor.Event, *history.Snapshot) error { return nil }
func (discard) close() error                                                            { return nil }
func (discard) wait() error                                                             { return nil }
