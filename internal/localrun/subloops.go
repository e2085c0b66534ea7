package localrun

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/history"
	"github.com/looprun/looprun/internal/loopfile"
)

// SubLoops runs the sub-loops of a local run inside the same process: each
// child has its own state and event files (named by executor.ChildName),
// so a run killed while a child runs resumes the child where it was, at
// any depth. The child's saved events are also written, with their depth,
// into the parent's event log.
type SubLoops struct {
	// Files says where loop names are looked up (loops dir, library path).
	Files loopfile.Options
	// NewMachine builds the machine of a child loop.
	NewMachine func(lf *loopfile.File) (*executor.Machine, error)
	// InDir gives a runner like r that runs its actions in dir (a
	// sub-loop's worktree); nil: worktrees cannot be used.
	InDir func(r ActionRunner, dir string) ActionRunner
	// NewJudge gives a child loop its LLM judge (its own spec.llm); nil:
	// the child asks its parent's.
	NewJudge func(lf *loopfile.File) evaluate.Judge
	// Model and Effort are the run's own model and reasoning effort
	// (looprun run --model, --effort): as ll-loop hands its run's to every
	// child, a sub-loop's agent actions whose state names none use them,
	// over the child loop's spec.agent, at any depth.
	Model, Effort string
}

// runAgent gives a child loop's spec the run's own model and effort.
func (s *SubLoops) runAgent(spec *v1alpha1.LoopSpec) {
	if s.Model == "" && s.Effort == "" {
		return
	}
	if spec.Agent == nil {
		spec.Agent = &v1alpha1.AgentSpec{}
	}
	if s.Model != "" {
		spec.Agent.Model = s.Model
	}
	if s.Effort != "" {
		spec.Agent.Effort = s.Effort
	}
}

// judge is the LLM judge of the child loop lf.
func (s *SubLoops) judge(lf *loopfile.File, parent evaluate.Judge) evaluate.Judge {
	if s.NewJudge == nil {
		return parent
	}
	return s.NewJudge(lf)
}

// maxCapturedEvents bounds the child's event stream a parent keeps for a
// state that captures it (the machine keeps less).
const maxCapturedEvents = 64 << 10

// sibling is the store of another run in the same directory.
func (s *Store) sibling(name string) (*Store, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	return &Store{loops: s.loops, dir: s.dir, name: name}, nil
}

// runSubLoop runs the child of a sub-loop state to its end (or until ctx
// ends) and says how it ended. A child that cannot run (not found,
// invalid, too deep, a cycle) is a Failure result; err is for the
// parent's own files.
func (d *Driver) runSubLoop(ctx context.Context, w recorder, run *v1alpha1.RunState, sub *executor.SubLoop) (executor.ActionResult, error) {
	if d.SubLoops == nil {
		return d.scriptedSubLoop(sub), nil
	}
	child, unlock, err := d.childDriver(sub)
	if err != nil {
		return executor.ActionResult{Failure: &executor.ActionFailure{Reason: "SubLoopFailed", Message: err.Error()}}, nil
	}
	defer unlock()
	var events tail
	var forwardErr error
	child.forward = func(evs []executor.Event) {
		events.add(evs)
		if forwardErr != nil {
			return
		}
		fwd := d.Machine.Forward(run, evs, d.Depth+1)
		d.notify(run, fwd)
		forwardErr = w.save(run, fwd, nil)
	}
	var childRun *v1alpha1.RunState
	saved, err := child.Store.Load()
	if err == nil && saved.RunID == sub.Child {
		if childRun, err = saved.RunState(); err != nil {
			return executor.ActionResult{}, fmt.Errorf("sub-loop %s: %s: %w", sub.Loop, child.Store.StatePath(), err)
		}
	}
	var detach func() error
	if sub.Worktree != "" {
		var failure *executor.ActionResult
		finished := childRun != nil && childRun.Phase.IsFinished()
		if detach, failure, err = d.inWorktree(ctx, w, run, sub, child, finished); err != nil {
			return executor.ActionResult{}, err
		}
		if failure != nil {
			return *failure, nil
		}
	}
	switch {
	case childRun != nil && childRun.Phase.IsFinished():
		// It ended before this process died: take its result.
		if evs, err := eventlog.Read(child.Store.EventsPath()); err == nil {
			events.add(evs)
		}
	case childRun != nil:
		err = child.Resume(ctx, childRun)
	default:
		childRun, err = child.Start(ctx, sub.Child)
	}
	if err != nil {
		return executor.ActionResult{}, fmt.Errorf("sub-loop %s: %w", sub.Loop, err)
	}
	if detach != nil && childRun.Phase.IsFinished() {
		// A child stopped before its end keeps its worktree to resume in.
		if err := detach(); err != nil {
			return executor.ActionResult{}, fmt.Errorf("sub-loop %s: %w", sub.Loop, err)
		}
	}
	if forwardErr != nil {
		return executor.ActionResult{}, forwardErr
	}
	return childResult(sub, childRun, &events)
}

// childResult is how the child ended, or that it paused on its budget.
func childResult(sub *executor.SubLoop, childRun *v1alpha1.RunState, events *tail) (executor.ActionResult, error) {
	if childRun.Phase == v1alpha1.PhasePaused {
		return executor.ActionResult{}, &childPausedError{child: sub.Child, why: executor.PausedWhy(childRun)}
	}
	res := executor.ChildResultOf(childRun)
	res.Events = events.String()
	return executor.ActionResult{Child: res}, nil
}

// childPausedError: the child of the sub-loop in flight paused on its
// budget; the parent pauses with it, and resume goes on with the child.
type childPausedError struct{ child, why string }

func (e *childPausedError) Error() string {
	return fmt.Sprintf("sub-loop %s paused: %s", e.child, e.why)
}

// childDriver prepares the driver of a sub-loop's child: its loop file
// found and read, its context bound, its timeout clamped, its run locked.
func (d *Driver) childDriver(sub *executor.SubLoop) (*Driver, func(), error) {
	if d.Depth+1 > executor.MaxSubLoopDepth {
		return nil, nil, fmt.Errorf("sub-loop %s: sub-loops nest deeper than %d", sub.Loop, executor.MaxSubLoopDepth)
	}
	chain := append(slices.Clone(d.Ancestors), d.LoopFile)
	lf, abs, err := loopfile.LoadSubLoop(sub.Loop, chain, d.SubLoops.Files)
	if err != nil {
		return nil, nil, err
	}
	if slices.Contains(chain, abs) {
		return nil, nil, fmt.Errorf("sub-loop %s runs a loop that is already running above it: %s -> %s", sub.Loop, strings.Join(chain, " -> "), abs)
	}
	own, err := executor.DecodeContext(lf.Loop.Spec.Context)
	if err != nil {
		return nil, nil, err
	}
	cctx, err := executor.ChildContext(sub, own, lf.Parameters)
	if err != nil {
		return nil, nil, err
	}
	lf.Loop.Spec.Context = nil
	for k, v := range cctx {
		lf.Loop.Spec.SetContext(k, v)
	}
	if lf.LittleLoops() {
		loopfile.SeedThresholds(&lf.Loop.Spec)
	}
	executor.ClampTimeout(&lf.Loop.Spec, sub.Timeout)
	executor.ClampBudget(&lf.Loop.Spec, sub.Budget)
	d.SubLoops.runAgent(&lf.Loop.Spec)
	m, err := d.SubLoops.NewMachine(lf)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: invalid loop: %w", abs, err)
	}
	m = m.AsChild().WithUsageTo(&sub.UsageTo)
	store, err := d.Store.sibling(sub.Child)
	if err != nil {
		return nil, nil, err
	}
	unlock, err := store.Lock()
	if err != nil {
		return nil, nil, err
	}
	return &Driver{
		Machine: m, Runner: d.Runner, Store: store, LoopFile: abs, Context: cctx, Clock: d.Clock, Decide: d.Decide, Judge: d.SubLoops.judge(lf, d.Judge), Approver: d.Approver, Terminal: d.Terminal,
		SubLoops: d.SubLoops, Depth: d.Depth + 1, Ancestors: chain,
	}, unlock, nil
}

// scriptedSubLoop is a simulation's sub-loop: ScriptSubLoop's result
// stands for the child's ending; without one, the child completed.
func (d *Driver) scriptedSubLoop(sub *executor.SubLoop) executor.ActionResult {
	if d.ScriptSubLoop != nil {
		return d.ScriptSubLoop(sub)
	}
	return executor.ActionResult{Child: &executor.ChildResult{TerminatedBy: v1alpha1.TerminatedTerminal}}
}

// tail keeps the last maxCapturedEvents bytes of an event stream as JSON
// lines.
type tail struct {
	b strings.Builder
}

func (t *tail) add(evs []executor.Event) {
	if len(evs) == 0 {
		return
	}
	s := t.b.String()
	if s != "" {
		s += "\n"
	}
	s += executor.EventLines(evs)
	if len(s) > maxCapturedEvents {
		s = s[len(s)-maxCapturedEvents:]
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	t.b.Reset()
	t.b.WriteString(s)
}

func (t *tail) String() string { return t.b.String() }

// forwarder is a child's recorder: once a save of the child is on disk, its
// events go to the parent's log.
type forwarder struct {
	recorder
	forward func([]executor.Event)
	pending []executor.Event
}

func (f *forwarder) save(run *v1alpha1.RunState, events []executor.Event, cp *history.Snapshot) error {
	if err := f.recorder.save(run, events, cp); err != nil {
		return err
	}
	f.forward(events)
	return nil
}

func (f *forwarder) saveAsync(run *v1alpha1.RunState, events []executor.Event, cp *history.Snapshot) error {
	f.pending = events
	return f.recorder.saveAsync(run, events, cp)
}

func (f *forwarder) wait() error {
	err := f.recorder.wait()
	if err == nil && f.pending != nil {
		f.forward(f.pending)
	}
	f.pending = nil
	return err
}
