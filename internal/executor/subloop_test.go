package executor

import (
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/looprun/looprun/api/v1alpha1"
)

// parentSpec has one sub-loop state with every way out.
func parentSpec(mod func(st *v1alpha1.State)) *v1alpha1.LoopSpec {
	st := v1alpha1.State{Loop: "${context.child}", OnSuccess: "done", OnFailure: "no", OnError: "err",
		Route: map[string]v1alpha1.StateName{VerdictTimeout: "late"}}
	if mod != nil {
		mod(&st)
	}
	return &v1alpha1.LoopSpec{Initial: "run", Context: map[string]apiextensionsJSON{"child": jsonValue("inner"), "goal": jsonValue("ship")},
		States: map[string]v1alpha1.State{
			"run": st, "done": {Terminal: true}, "no": {Terminal: true}, "err": {Terminal: true}, "late": {Terminal: true},
		}}
}

// startSubLoop starts a run of spec and plans its first state.
func startSubLoop(t *testing.T, spec *v1alpha1.LoopSpec) (*Machine, *v1alpha1.RunState, Step) {
	t.Helper()
	m, err := New("parent", spec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	run := &v1alpha1.RunState{}
	m.Start(run, "parent-1", t0)
	step, evs := m.Plan(run, t0)
	if step.Kind != StepLoop {
		t.Fatalf("step %v, want Loop", step.Kind)
	}
	if evs[len(evs)-1].Type != EventSubLoopStart {
		t.Fatalf("last event %s, want %s", evs[len(evs)-1].Type, EventSubLoopStart)
	}
	return m, run, step
}

func TestSubLoopRoutesOnHowTheChildEnded(t *testing.T) {
	cases := []struct {
		name  string
		child ChildResult
		want  string
	}{
		{"terminal", ChildResult{TerminatedBy: v1alpha1.TerminatedTerminal}, "done"},
		{"failure terminal", ChildResult{TerminatedBy: v1alpha1.TerminatedTerminal, FailureTerminal: true}, "no"},
		{"error", ChildResult{TerminatedBy: v1alpha1.TerminatedError, Error: "boom"}, "err"},
		{"timeout", ChildResult{TerminatedBy: v1alpha1.TerminatedTimeout}, "late"},
		{"step cap", ChildResult{TerminatedBy: v1alpha1.TerminatedMaxIterations}, "late"},
		{"cycle", ChildResult{TerminatedBy: v1alpha1.TerminatedCycleDetected}, "no"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, run, _ := startSubLoop(t, parentSpec(nil))
			m.Complete(run, &ActionResult{Child: &c.child}, t0.Add(time.Second))
			if run.CurrentState != c.want {
				t.Fatalf("went to %s, want %s", run.CurrentState, c.want)
			}
			got := run.Captured["run"].Loop
			if got == nil || got.TerminatedBy != string(c.child.TerminatedBy) || got.Error != c.child.Error {
				t.Fatalf("captured[run].loop = %+v", got)
			}
		})
	}
}

func TestSubLoopFallsBackToOnFailure(t *testing.T) {
	m, run, _ := startSubLoop(t, parentSpec(func(st *v1alpha1.State) { st.OnError, st.Route = "", nil }))
	m.Complete(run, &ActionResult{Child: &ChildResult{TerminatedBy: v1alpha1.TerminatedError}}, t0)
	if run.CurrentState != "no" {
		t.Fatalf("an error without onError went to %s, want onFailure's no", run.CurrentState)
	}
	m, run, _ = startSubLoop(t, parentSpec(func(st *v1alpha1.State) { st.Route = nil }))
	m.Complete(run, &ActionResult{Child: &ChildResult{TerminatedBy: v1alpha1.TerminatedTimeout}}, t0)
	if run.CurrentState != "no" {
		t.Fatalf("a timeout without its route went to %s, want no", run.CurrentState)
	}
}

func TestSubLoopThatCannotRunGoesToOnError(t *testing.T) {
	m, run, _ := startSubLoop(t, parentSpec(nil))
	m.Complete(run, &ActionResult{Failure: &ActionFailure{Reason: "LoopNotFound", Message: "no loop inner"}}, t0)
	if run.CurrentState != "err" {
		t.Fatalf("went to %s, want err", run.CurrentState)
	}
	m, run, _ = startSubLoop(t, parentSpec(func(st *v1alpha1.State) { st.OnError = "" }))
	m.Complete(run, &ActionResult{Failure: &ActionFailure{Reason: "LoopNotFound", Message: "no loop inner"}}, t0)
	if run.Phase != v1alpha1.PhaseFailed || !strings.Contains(run.Message, "no loop inner") {
		t.Fatalf("without onError: phase %s, message %q", run.Phase, run.Message)
	}
}

func TestSubLoopStepIsStableWhileInFlight(t *testing.T) {
	m, run, first := startSubLoop(t, parentSpec(nil))
	if first.Loop.Loop != "inner" || run.Action == nil || run.Action.Child != first.Loop.Child {
		t.Fatalf("step %+v, action %+v", first.Loop, run.Action)
	}
	again, evs := m.Plan(run, t0.Add(time.Minute))
	if again.Kind != StepLoop || len(evs) != 0 || again.Loop.Child != first.Loop.Child {
		t.Fatalf("planned again: %v %+v, %d events", again.Kind, again.Loop, len(evs))
	}
	// A resume keeps the child: no action_restarted for a sub-loop.
	m.Interrupt(run, t0, "stopped")
	evs, ok := m.Resume(run, t0.Add(time.Hour))
	if !ok || len(evs) != 1 || evs[0].Type != EventLoopResume {
		t.Fatalf("resume: %v %v", ok, evs)
	}
	resumed, _ := m.Plan(run, t0.Add(time.Hour))
	if resumed.Kind != StepLoop || resumed.Loop.Child != first.Loop.Child {
		t.Fatalf("after resume: %+v", resumed.Loop)
	}
}

func TestChildNameIsDeterministicAndValid(t *testing.T) {
	a := ChildName("My_Parent.loop", "run-1", "Fix Tests", 3)
	if a != ChildName("My_Parent.loop", "run-1", "Fix Tests", 3) {
		t.Fatal("not deterministic")
	}
	for _, other := range []string{ChildName("My_Parent.loop", "run-1", "Fix Tests", 4), ChildName("My_Parent.loop", "run-2", "Fix Tests", 3)} {
		if other == a {
			t.Fatalf("iteration and run must change the name: %s", a)
		}
	}
	long := ChildName(strings.Repeat("p", 300), "r", strings.Repeat("s", 300), 1)
	for _, n := range []string{a, long} {
		if len(n) > 63 || strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || n[0] == '-' || n[len(n)-1] == '-' {
			t.Fatalf("%q is not a DNS label", n)
		}
	}
}

func TestSubLoopContext(t *testing.T) {
	spec := parentSpec(func(st *v1alpha1.State) { st.ContextPassthrough = true })
	spec.States["first"] = v1alpha1.State{Action: "echo ENH-1", Capture: "issue", Next: "run"}
	spec.Initial = "first"
	m, err := New("parent", spec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	run := &v1alpha1.RunState{}
	m.Start(run, "p-1", t0)
	m.Plan(run, t0)
	m.Complete(run, &ActionResult{Output: "ENH-1\n"}, t0)
	step, _ := m.Plan(run, t0)
	got, err := ChildContext(step.Loop, map[string]any{"goal": "child's own"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got["issue"] != "ENH-1" || got["goal"] != "child's own" || got["child"] != "inner" {
		t.Fatalf("passthrough context %v", got)
	}

	with := parentSpec(func(st *v1alpha1.State) {
		st.With = map[string]apiextensionsv1.JSON{"target": jsonValue("${context.goal}!"), "n": jsonValue(3)}
	})
	with.Context["run_dir"] = jsonValue("/runs/p")
	_, _, step = startSubLoop(t, with)
	params := map[string]v1alpha1.Parameter{
		"target": {Required: true}, "n": {Type: "integer"}, "mode": {Type: "enum", Values: []string{"a", "b"}, Default: jsp("b")},
	}
	got, err = ChildContext(step.Loop, map[string]any{"target": "x", "own": 1}, params)
	if err != nil {
		t.Fatal(err)
	}
	if got["target"] != "ship!" || got["mode"] != "b" || got["own"] != 1 || got["run_dir"] != "/runs/p" || got["goal"] != nil {
		t.Fatalf("with context %v", got)
	}
	params["missing"] = v1alpha1.Parameter{Required: true}
	if _, err := ChildContext(step.Loop, nil, params); err == nil || !strings.Contains(err.Error(), `"missing"`) {
		t.Fatalf("an unbound required parameter: %v", err)
	}
}

func TestSubLoopCapturesComeBack(t *testing.T) {
	spec := parentSpec(func(st *v1alpha1.State) { st.ContextPassthrough, st.Capture = true, "trace" })
	spec.States["done"] = v1alpha1.State{Action: "echo ${captured.run.fix.output} ${captured.run.terminated_by}", Next: "late"}
	m, run, _ := startSubLoop(t, spec)
	child := &ChildResult{TerminatedBy: v1alpha1.TerminatedTerminal, Events: `{"event":"loop_start"}`,
		Captured: map[string]v1alpha1.CapturedResult{"fix": {Output: "patched", ExitCode: 0, Verdict: "success"}}}
	m.Complete(run, &ActionResult{Child: child}, t0)
	step, _ := m.Plan(run, t0)
	if step.Kind != StepAction || step.Action.Command != "echo patched terminal" {
		t.Fatalf("next action %+v", step.Action)
	}
	if c := run.Captured["trace"]; c.Output != `{"event":"loop_start"}` || c.Verdict != v1alpha1.VerdictSuccess {
		t.Fatalf("the capture of the event stream: %+v", c)
	}
}

func TestSubLoopTimeoutIsClamped(t *testing.T) {
	spec := parentSpec(func(st *v1alpha1.State) { st.Timeout = dur(10 * time.Minute) })
	spec.Timeout = dur(time.Hour)
	m, err := New("parent", spec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	run := &v1alpha1.RunState{}
	m.Start(run, "p-1", t0)
	step, _ := m.Plan(run, t0.Add(55*time.Minute))
	if step.Loop.Timeout != 5*time.Minute {
		t.Fatalf("cap %s, want the 5m left", step.Loop.Timeout)
	}
	child := &v1alpha1.LoopSpec{Timeout: dur(time.Hour)}
	ClampTimeout(child, step.Loop.Timeout)
	if child.Timeout.Duration != 5*time.Minute {
		t.Fatalf("child timeout %s", child.Timeout.Duration)
	}
}

func TestValidateSubLoopStates(t *testing.T) {
	spec := parentSpec(func(st *v1alpha1.State) {
		st.Action = "echo"
		st.ContextPassthrough = true
		st.With = map[string]apiextensionsv1.JSON{"a": jsonValue("${captured.nothing.output}")}
	})
	spec.States["orphan"] = v1alpha1.State{With: map[string]apiextensionsv1.JSON{"a": jsonValue(1)}, Next: "done"}
	errs := Validate(spec).ToAggregate().Error()
	for _, want := range []string{"spec.states[run].loop", "an action or a loop", "cannot both be set", "spec.states[orphan].loop"} {
		if !strings.Contains(errs, want) {
			t.Errorf("errors %q lack %q", errs, want)
		}
	}
	ok := parentSpec(nil)
	ok.States["after"] = v1alpha1.State{Action: "echo ${captured.run.terminated_by} ${captured.made_by_the_child.output}", Next: "done"}
	if errs := Validate(ok); len(errs) > 0 {
		t.Fatalf("a sub-loop state's name, and any capture a child may bring back, are valid: %v", errs)
	}
}

// A sub-loop in flight whose name no longer expands (the spec changed)
// goes to onError and the run goes on from there.
func TestSubLoopInFlightThatNoLongerExpandsHops(t *testing.T) {
	_, run, _ := startSubLoop(t, parentSpec(nil))
	changed := parentSpec(nil)
	delete(changed.Context, "child")
	changed.States["err"] = v1alpha1.State{Action: "echo recovering", Next: "done"}
	m, err := New("parent", changed, Options{})
	if err != nil {
		t.Fatal(err)
	}
	step, _ := m.Plan(run, t0)
	if step.Kind != StepAction || step.Action.State != "err" || run.Action == nil || run.Action.State != "err" {
		t.Fatalf("step %v %+v, in flight %+v", step.Kind, step.Action, run.Action)
	}
}

func TestFragmentParams(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "a", Context: map[string]apiextensionsJSON{"dir": jsonValue("/runs")},
		States: map[string]v1alpha1.State{
			"a": {Action: "echo ${param.file} ${param.n}", Next: "done",
				FragmentParams: map[string]apiextensionsv1.JSON{"file": jsonValue("${context.dir}/out"), "n": jsonValue(2)}},
			"done": {Terminal: true},
		}}
	m, run := startRun(t, "l", spec, Options{})
	step, _ := m.Plan(run, t0)
	if step.Action == nil || step.Action.Command != "echo /runs/out 2" {
		t.Fatalf("step %+v", step.Action)
	}
	bad := spec.DeepCopy()
	bad.States["a"] = v1alpha1.State{Action: "echo ${param.missing}", Next: "done"}
	if errs := Validate(bad).ToAggregate(); errs == nil || !strings.Contains(errs.Error(), `spec.states[a].action`) || !strings.Contains(errs.Error(), `"missing"`) {
		t.Fatalf("errors %v", errs)
	}
}

// At the step cap, a state a sub-loop state has just routed to has its
// action flushed once before the summary state runs (little-loops'
// BUG-158: the action is not lost); after a route from a state with an
// action, the summary state runs at once.
func TestStepCapFlushesAfterASubLoop(t *testing.T) {
	spec := parentSpec(func(st *v1alpha1.State) { st.OnError = "after" })
	spec.MaxIterations, spec.OnMaxIterations = ptrTo(int32(1)), "report"
	spec.States["after"] = v1alpha1.State{Action: "echo after", Next: "done"}
	spec.States["report"] = v1alpha1.State{Action: "echo report", Next: "done"}
	m, run, _ := startSubLoop(t, spec)
	_, evs := m.Complete(run, &ActionResult{Child: &ChildResult{TerminatedBy: v1alpha1.TerminatedError, Error: "boom"}}, t0.Add(time.Second))
	if run.CurrentState != "after" || !run.RoutedFromLoop {
		t.Fatalf("in %s, routedFromLoop %v", run.CurrentState, run.RoutedFromLoop)
	}
	var types []string
	ran := []string{}
	now := t0.Add(2 * time.Second)
	for range 4 {
		step, planned := m.Plan(run, now)
		for _, e := range append(evs, planned...) {
			s := e.Type
			if e.Type == EventStateEnter {
				s += ":" + e.Data["state"].(string)
				if e.Data["flushed"] == true {
					s += "(flushed)"
				}
			}
			types = append(types, s)
		}
		if step.Kind != StepAction {
			break
		}
		ran = append(ran, step.Action.Command)
		_, evs = m.Complete(run, &ActionResult{ExitCode: 0, Output: "ok"}, now)
	}
	if got := strings.Join(ran, ","); got != "echo after,echo report" {
		t.Errorf("ran %s, want the flushed state's action, then the summary's", got)
	}
	want := "state_enter:after(flushed)"
	if got := strings.Join(types, " "); !strings.Contains(got, want+" action_start action_complete max_steps_summary state_enter:report") {
		t.Errorf("events %s", got)
	}
	if run.TerminatedBy != v1alpha1.TerminatedMaxIterations || run.Iteration != 3 {
		t.Errorf("ended %s at iteration %d", run.TerminatedBy, run.Iteration)
	}

	// Routed from a state with an action: no flush.
	spec = parentSpec(nil)
	spec.Initial, spec.MaxIterations, spec.OnMaxIterations = "first", ptrTo(int32(1)), "report"
	spec.States["first"] = v1alpha1.State{Action: "echo first", Next: "after"}
	spec.States["after"] = v1alpha1.State{Action: "echo after", Next: "done"}
	spec.States["report"] = v1alpha1.State{Action: "echo report", Next: "done"}
	m, err := New("plain", spec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	run = &v1alpha1.RunState{}
	m.Start(run, "plain-1", t0)
	m.Plan(run, t0)
	m.Complete(run, &ActionResult{ExitCode: 0}, t0)
	if step, _ := m.Plan(run, t0); step.Kind != StepAction || step.Action.Command != "echo report" {
		t.Fatalf("after a plain route at the cap: %+v", step)
	}
}
