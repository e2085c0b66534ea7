package executor

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/pricing"
)

// dollarPrices prices claude-x at a dollar a million input tokens: an
// action reporting a million input tokens costs $1.
func dollarPrices(t *testing.T) *pricing.Table {
	t.Helper()
	p, err := pricing.Parse([]byte("models: {claude-x: {input: 1, output: 1, cacheRead: 1, cacheCreation: 1}}"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// spendingLoop: work (an agent action costing $1 each time) -> check (a
// shell command, free) -> work, up to maxIterations.
func spendingLoop(budget *v1alpha1.Budget) *v1alpha1.LoopSpec {
	return &v1alpha1.LoopSpec{Initial: "work", MaxIterations: ptr.To[int32](40), Budget: budget, States: map[string]v1alpha1.State{
		"work":    {Action: "/work", ActionType: v1alpha1.ActionAgent, Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode}, Next: "check"},
		"check":   {Action: "true", Next: "work"},
		"summary": {Action: "/sum", ActionType: v1alpha1.ActionAgent, Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode}, Next: "done"},
		"done":    {Terminal: true},
	}}
}

// budgetDriver steps a machine the way a driver does until the run
// pauses or ends; every agent action reports a million input tokens.
type budgetDriver struct {
	t      *testing.T
	m      *Machine
	run    *v1alpha1.RunState
	now    time.Time
	events []Event
	ran    []*Action
}

func newBudgetDriver(t *testing.T, spec *v1alpha1.LoopSpec) *budgetDriver {
	d := &budgetDriver{t: t, run: &v1alpha1.RunState{}, now: t0}
	d.respec(spec)
	d.events = d.m.Start(d.run, "test-1", d.now)
	return d
}

// respec is a spec edit: the run goes on under a machine of the new spec.
func (d *budgetDriver) respec(spec *v1alpha1.LoopSpec) {
	m, err := New("test", spec, Options{Prices: dollarPrices(d.t)})
	if err != nil {
		d.t.Fatal(err)
	}
	d.m = m
}

func (d *budgetDriver) drive() Step {
	for range 1000 {
		d.now = d.now.Add(time.Second)
		s, evs := d.m.Plan(d.run, d.now)
		d.events = append(d.events, evs...)
		switch s.Kind {
		case StepDone, StepPaused:
			checkSeqs(d.t, d.events)
			return s
		case StepAction:
			d.ran = append(d.ran, s.Action)
			res := &ActionResult{Duration: time.Millisecond}
			if s.Action.Agent {
				res.Usage = &agentstream.Usage{InputTokens: 1_000_000, Model: "claude-x"}
			}
			_, evs := d.m.Complete(d.run, res, d.now)
			d.events = append(d.events, evs...)
		default:
			d.t.Fatalf("step %s", s.Kind)
		}
	}
	d.t.Fatal("the run did not pause or end")
	return Step{}
}

func (d *budgetDriver) agentRuns() int {
	n := 0
	for _, a := range d.ran {
		if a.Agent {
			n++
		}
	}
	return n
}

func (d *budgetDriver) count(typ string) int {
	n := 0
	for _, e := range d.events {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// A budget pauses the run before the state that would spend, after the
// free state ran; raising it lets the run go on from there, nothing run
// twice; the warning is given once per limit.
func TestBudgetPausesAndGoesOnWhenRaised(t *testing.T) {
	d := newBudgetDriver(t, spendingLoop(&v1alpha1.Budget{MaxCostUSD: "2.50"}))
	s := d.drive()
	if s.Kind != StepPaused || d.run.Phase != v1alpha1.PhasePaused || d.run.CurrentState != "work" {
		t.Fatalf("step %s, phase %s in %s; want paused before work", s.Kind, d.run.Phase, d.run.CurrentState)
	}
	if d.agentRuns() != 3 || d.ran[len(d.ran)-1].Command != "true" {
		t.Fatalf("ran %d agent actions (last %q); want 3, then check", d.agentRuns(), d.ran[len(d.ran)-1].Command)
	}
	if !strings.Contains(s.Paused, "spent $3.00 of its $2.50 budget") || d.run.Budget.Exceeded == "" {
		t.Errorf("paused because %q (status %q)", s.Paused, d.run.Budget.Exceeded)
	}
	if d.count(EventBudgetExceeded) != 1 || d.count(EventBudgetWarning) != 1 {
		t.Errorf("%d budget_exceeded, %d budget_warning; want 1 each", d.count(EventBudgetExceeded), d.count(EventBudgetWarning))
	}
	iteration := d.run.Iteration
	// Planned again while paused (a wake, a restart): nothing happens.
	if s, evs := d.m.Plan(d.run, d.now); s.Kind != StepPaused || len(evs) != 0 || d.run.Iteration != iteration {
		t.Fatalf("a paused run planned again: %s, %d events", s.Kind, len(evs))
	}
	// The budget is raised: the run goes on where it was.
	d.respec(spendingLoop(&v1alpha1.Budget{MaxCostUSD: "5"}))
	s = d.drive()
	if s.Kind != StepPaused || d.agentRuns() != 5 {
		t.Fatalf("after the raise: %s with %d agent actions; want paused again after 5", s.Kind, d.agentRuns())
	}
	if d.count(EventBudgetResumed) != 1 || d.count(EventBudgetWarning) != 2 {
		t.Errorf("%d budget_resumed, %d budget_warning; want 1 and 2", d.count(EventBudgetResumed), d.count(EventBudgetWarning))
	}
	var iterations []int32
	for _, e := range d.events {
		if e.Type == EventStateEnter && e.Data["state"] == "work" {
			iterations = append(iterations, e.Data["iteration"].(int32))
		}
	}
	if !slices.IsSorted(iterations) || len(iterations) != 5 {
		t.Errorf("work entered at iterations %v; want 5, each once", iterations)
	}
	if d.run.Usage.CostMicroUSD != 5_000_000 {
		t.Errorf("spent %d micro-USD", d.run.Usage.CostMicroUSD)
	}
}

func TestBudgetStopAndRoute(t *testing.T) {
	d := newBudgetDriver(t, spendingLoop(&v1alpha1.Budget{MaxCostUSD: "1", OnExceeded: v1alpha1.BudgetStop}))
	if s := d.drive(); s.Kind != StepDone || d.run.Phase != v1alpha1.PhaseFailed || d.run.TerminatedBy != v1alpha1.TerminatedBudgetExceeded {
		t.Fatalf("Stop: %s, phase %s, terminated by %s", s.Kind, d.run.Phase, d.run.TerminatedBy)
	}
	if d.agentRuns() != 1 || !strings.Contains(d.run.Message, "spent $1.00 of its $1.00 budget") {
		t.Errorf("Stop: %d agent actions, message %q", d.agentRuns(), d.run.Message)
	}
	// Route: to summary, which runs although it spends too.
	d = newBudgetDriver(t, spendingLoop(&v1alpha1.Budget{MaxCostUSD: "2", OnExceeded: v1alpha1.BudgetRoute, State: "summary"}))
	if s := d.drive(); s.Kind != StepDone || d.run.Phase != v1alpha1.PhaseCompleted || d.run.CurrentState != "done" {
		t.Fatalf("Route: %s, phase %s in %s", s.Kind, d.run.Phase, d.run.CurrentState)
	}
	if last := d.ran[len(d.ran)-1].Command; last != "/sum" || d.agentRuns() != 3 {
		t.Errorf("Route: last action %q, %d agent actions; want /sum after 2 of work", last, d.agentRuns())
	}
}

// maxTokens counts every kind of token; the run's own ceiling (looprun
// run --max-cost) wins when lower than the spec's.
func TestBudgetTokensAndRunCeiling(t *testing.T) {
	d := newBudgetDriver(t, spendingLoop(&v1alpha1.Budget{MaxTokens: ptr.To[int64](1_500_000)}))
	if s := d.drive(); s.Kind != StepPaused || d.agentRuns() != 2 || !strings.Contains(s.Paused, "used 2000000 of its 1500000 tokens") {
		t.Fatalf("tokens: %s after %d agent actions: %q", s.Kind, d.agentRuns(), s.Paused)
	}
	d = newBudgetDriver(t, spendingLoop(&v1alpha1.Budget{MaxCostUSD: "10"}))
	d.run.Budget = &v1alpha1.BudgetStatus{RunMaxCostMicroUSD: ptr.To[int64](1_000_000)}
	if s := d.drive(); s.Kind != StepPaused || d.agentRuns() != 1 {
		t.Fatalf("run ceiling: %s after %d agent actions", s.Kind, d.agentRuns())
	}
	// No budget in the spec at all: the run's ceiling alone.
	d = newBudgetDriver(t, spendingLoop(nil))
	d.run.Budget = &v1alpha1.BudgetStatus{RunMaxCostMicroUSD: ptr.To[int64](2_000_000)}
	if s := d.drive(); s.Kind != StepPaused || d.agentRuns() != 2 {
		t.Fatalf("run ceiling alone: %s after %d agent actions", s.Kind, d.agentRuns())
	}
}

// The agent CLI (claude) is told what is left, as a backstop; a CLI
// looprun does not know is not.
func TestAgentToldItsBudget(t *testing.T) {
	spec := spendingLoop(&v1alpha1.Budget{MaxCostUSD: "2.50"})
	d := newBudgetDriver(t, spec)
	d.drive()
	var told []string
	for _, a := range d.ran {
		if a.Agent {
			if a.AgentCommand[0] != "claude" || a.AgentCommand[1] != "--max-budget-usd" {
				t.Fatalf("agent command %q", a.AgentCommand)
			}
			told = append(told, a.AgentCommand[2])
		}
	}
	if want := []string{"2.50", "1.50", "0.50"}; !slices.Equal(told, want) {
		t.Errorf("told %v; want %v", told, want)
	}
	spec.Agent = &v1alpha1.AgentSpec{Command: []string{"my-agent", "-p"}}
	d = newBudgetDriver(t, spec)
	d.drive()
	if got := d.ran[0].AgentCommand; !slices.Equal(got, []string{"my-agent", "-p"}) {
		t.Errorf("another CLI got %q", got)
	}
	// A state's cost ceiling below what is left is what the CLI is told.
	st := spec.States["work"]
	st.CostCeiling = &v1alpha1.CostCeiling{MaxCostUSD: "0.25"}
	spec.States["work"] = st
	spec.Agent = nil
	d = newBudgetDriver(t, spec)
	d.drive()
	if got := d.ran[0].AgentCommand[2]; got != "0.25" {
		t.Errorf("with a ceiling the CLI was told %s", got)
	}
}

// A visit over its state's cost ceiling ends with the verdict error (its
// onError route); at its warning, an event.
func TestCostCeiling(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "work", States: map[string]v1alpha1.State{
		"work":     {Action: "/work", ActionType: v1alpha1.ActionAgent, Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode}, OnSuccess: "done", OnError: "too_dear", CostCeiling: &v1alpha1.CostCeiling{MaxCostUSD: "0.50"}},
		"warned":   {Action: "/cheap", ActionType: v1alpha1.ActionAgent, Next: "done", CostCeiling: &v1alpha1.CostCeiling{MaxCostUSD: "2", WarnAtUSD: "0.75"}},
		"too_dear": {Terminal: true, Failure: ptr.To(true)},
		"done":     {Terminal: true},
	}}
	d := newBudgetDriver(t, spec)
	if d.drive(); d.run.CurrentState != "too_dear" || d.count(EventCostCeiling) != 1 {
		t.Fatalf("over the ceiling: ended in %s with %d cost_ceiling events", d.run.CurrentState, d.count(EventCostCeiling))
	}
	for _, e := range d.events {
		if e.Type == EventCostCeiling && (e.Data["exceeded"] != true || e.Data["cost_ceiling_usd"] != 0.5) {
			t.Errorf("cost_ceiling event %v", e.Data)
		}
	}
	spec.Initial = "warned"
	d = newBudgetDriver(t, spec)
	if d.drive(); d.run.CurrentState != "done" || d.count(EventCostCeiling) != 1 {
		t.Fatalf("at the warning: ended in %s with %d cost_ceiling events", d.run.CurrentState, d.count(EventCostCeiling))
	}
}

func TestValidateBudget(t *testing.T) {
	spec := spendingLoop(&v1alpha1.Budget{MaxCostUSD: "1.2345678", OnExceeded: v1alpha1.BudgetRoute, State: "nowhere", WarnAt: ptr.To[int32](0)})
	st := spec.States["work"]
	st.CostCeiling = &v1alpha1.CostCeiling{WarnAtUSD: "-1"}
	spec.States["work"] = st
	got := Validate(spec).ToAggregate().Error()
	for _, want := range []string{"spec.budget.maxCostUSD", "spec.budget.state: Not found", "spec.budget.warnAt", "spec.states[work].costCeiling.warnAtUSD"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q does not say %q", got, want)
		}
	}
	if errs := Validate(spendingLoop(&v1alpha1.Budget{State: "done"})); len(errs) != 2 {
		t.Errorf("a budget without limits, its state without Route: %v", errs)
	}
}

// A state's agentName, tools and model go to claude as little-loops passes
// them, after the command's own arguments; spec.agent.model is the
// default; effort is recorded in action_complete.
func TestAgentOptionsPerState(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "plan", Agent: &v1alpha1.AgentSpec{Model: "claude-haiku-4-5", Effort: "low"}, States: map[string]v1alpha1.State{
		"plan": {Action: "/plan", ActionType: v1alpha1.ActionAgent, Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode}, Next: "fix"},
		"fix": {Action: "/fix", ActionType: v1alpha1.ActionAgent, Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode}, Next: "done",
			Model: "claude-opus-4-8", Tools: []string{"Read", "Edit"}, AgentName: "fixer", Effort: "high"},
		"done": {Terminal: true},
	}}
	d := newBudgetDriver(t, spec)
	d.drive()
	base := v1alpha1.DefaultAgentCommand
	want := map[string][]string{
		"/plan": append(slices.Clone(base), "--model", "claude-haiku-4-5"),
		"/fix":  append(slices.Clone(base), "--agent", "fixer", "--tools", "Read,Edit", "--model", "claude-opus-4-8"),
	}
	for _, a := range d.ran {
		if !slices.Equal(a.AgentCommand, want[a.Command]) {
			t.Errorf("%s ran %q; want %q", a.Command, a.AgentCommand, want[a.Command])
		}
	}
	var efforts []any
	for _, e := range d.events {
		if e.Type == EventActionComplete {
			efforts = append(efforts, e.Data["effort"])
		}
	}
	if !slices.Equal(efforts, []any{"low", "high"}) {
		t.Errorf("efforts recorded %v", efforts)
	}
}

// A budget of zero is a limit, not none: nothing may be spent, so no state
// that spends is entered. spec.budget.maxCostUSD "0", maxTokens 0, the
// run's own --max-cost 0, and the share a child gets of a spent parent.
func TestZeroBudgetSpendsNothing(t *testing.T) {
	for name, setup := range map[string]func() (*v1alpha1.LoopSpec, *v1alpha1.BudgetStatus){
		"maxCostUSD 0": func() (*v1alpha1.LoopSpec, *v1alpha1.BudgetStatus) {
			return spendingLoop(&v1alpha1.Budget{MaxCostUSD: "0"}), nil
		},
		"maxCostUSD 0.00": func() (*v1alpha1.LoopSpec, *v1alpha1.BudgetStatus) {
			return spendingLoop(&v1alpha1.Budget{MaxCostUSD: "0.00"}), nil
		},
		"maxTokens 0": func() (*v1alpha1.LoopSpec, *v1alpha1.BudgetStatus) {
			return spendingLoop(&v1alpha1.Budget{MaxTokens: ptr.To[int64](0)}), nil
		},
		"--max-cost 0": func() (*v1alpha1.LoopSpec, *v1alpha1.BudgetStatus) {
			return spendingLoop(nil), &v1alpha1.BudgetStatus{RunMaxCostMicroUSD: ptr.To[int64](0)}
		},
		"a child of a spent parent": func() (*v1alpha1.LoopSpec, *v1alpha1.BudgetStatus) {
			spec := spendingLoop(&v1alpha1.Budget{MaxCostUSD: "10"})
			ClampBudget(spec, &v1alpha1.Budget{MaxCostUSD: pricing.FormatUSD(0), MaxTokens: ptr.To[int64](0), OnExceeded: v1alpha1.BudgetStop})
			return spec, nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			spec, status := setup()
			if errs := Validate(spec); len(errs) > 0 {
				t.Fatalf("a zero budget is refused: %v", errs)
			}
			d := newBudgetDriver(t, spec)
			d.run.Budget = status
			s := d.drive()
			if d.agentRuns() != 0 || d.count(EventBudgetExceeded) != 1 {
				t.Fatalf("%s: %d agent runs, %d budget_exceeded events", s.Kind, d.agentRuns(), d.count(EventBudgetExceeded))
			}
		})
	}
	// The share a spent parent gives its child is zero, not none.
	spec := spendingLoop(&v1alpha1.Budget{MaxCostUSD: "1", OnExceeded: v1alpha1.BudgetRoute, State: "sub"})
	spec.States["sub"] = v1alpha1.State{Loop: "inner", OnSuccess: "done"}
	m, err := New("parent", spec, Options{Prices: dollarPrices(t)})
	if err != nil {
		t.Fatal(err)
	}
	run := &v1alpha1.RunState{}
	m.Start(run, "p", t0)
	run.Usage = &v1alpha1.UsageStatus{UsageTotals: v1alpha1.UsageTotals{CostMicroUSD: 2_000_000}}
	step, _ := m.Plan(run, t0)
	if step.Kind != StepLoop || step.Loop.Budget == nil {
		t.Fatalf("step %v in %s: %+v", step.Kind, run.CurrentState, step.Loop)
	}
	if c, err := pricing.ParseUSD(step.Loop.Budget.MaxCostUSD); err != nil || c != 0 {
		t.Fatalf("the child's share %q", step.Loop.Budget.MaxCostUSD)
	}
	child := spendingLoop(nil)
	ClampBudget(child, step.Loop.Budget)
	d := newBudgetDriver(t, child)
	if d.drive(); d.agentRuns() != 0 {
		t.Fatalf("the child of a spent parent ran %d agent actions", d.agentRuns())
	}
}

// A budget's warning neither overflows nor misfires near the largest
// counts (maxTokens × warnAt past int64).
func TestBudgetWarningNearTheLargestCounts(t *testing.T) {
	const huge = int64(1) << 62
	if !reached(huge, huge, 80) || reached(huge/2, huge, 80) || !reached(huge/10*9, huge, 80) {
		t.Fatal("warning at the largest limits")
	}
	if reached(1, huge, 80) {
		t.Fatal("one token of a huge limit warned")
	}
	if !reached(81, 100, 80) || reached(79, 100, 80) {
		t.Fatal("the ordinary case")
	}
}
