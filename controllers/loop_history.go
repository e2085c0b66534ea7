package controllers

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/history"
)

// checkpointProblem is a checkpoint a request needed that could not be used.
type checkpointProblem struct {
	reason, message string
}

// takeCheckpoint snapshots the run after a completed state when one is due
// (spec.history.checkpointEvery / checkpointInterval) and the run goes on.
// It is stored with the step's events.
func (s *step) takeCheckpoint(ctx context.Context) {
	if s.r.EventLog == nil {
		return
	}
	sched := history.Schedule{Spec: &s.loop.Spec, Loop: s.loop.Name}
	if ix := s.loop.Status.Checkpoints; ix != nil && ix.Latest != nil && ix.Latest.Time != nil {
		sched.Last = &ix.Latest.Time.Time
	}
	cp, err := sched.Take(&s.loop.Status.RunState, s.now)
	if err != nil {
		log.FromContext(ctx).Error(err, "Taking a checkpoint failed")
		return
	}
	s.cp = cp
}

// fork starts a Loop with spec.resumeFrom from the source Loop's
// checkpoint. ok is false when the checkpoint cannot be used; the Loop then
// stays Pending, says why, and looks again later.
func (s *step) fork(ctx context.Context) bool {
	from := s.loop.Spec.ResumeFrom
	src := &v1alpha1.Loop{}
	var cpRun *v1alpha1.RunState
	err := s.r.APIReader.Get(ctx, client.ObjectKey{Namespace: s.loop.Namespace, Name: from.Loop}, src)
	if err == nil {
		_, cpRun, err = configmaps.FindCheckpoint(ctx, s.r.APIReader, src, from.Iteration)
	} else if client.IgnoreNotFound(err) == nil {
		err = fmt.Errorf("%w: Loop %s does not exist", history.ErrMissing, from.Loop)
	}
	if err != nil {
		s.checkpointFailed(fmt.Errorf("cannot fork %s: %w", from.Loop, err))
		s.out.health.forkBlocked = true
		return false
	}
	run := &s.loop.Status.RunState
	s.add(s.m.Start(run, runID(s.loop), s.now))
	s.add(s.m.Restore(run, cpRun, s.now, executor.EventLoopFork, executor.LoopForkEvent{Source: from.Loop}.Data()))
	s.out.health.checkpointOK = true
	s.r.event(s.loop, corev1.EventTypeNormal, v1alpha1.EventReasonForked, "Fork", "started from the checkpoint of %s at iteration %d (state %s)", from.Loop, cpRun.Iteration, cpRun.CurrentState)
	return true
}

// checkpointFailed reports a checkpoint that could not be used: a condition
// on the Loop and a Warning Event.
func (s *step) checkpointFailed(err error) {
	reason := v1alpha1.ReasonCheckpointMissing
	if errors.Is(err, history.ErrCorrupt) {
		reason = v1alpha1.ReasonCheckpointCorrupt
	}
	s.out.health.checkpoint = &checkpointProblem{reason: reason, message: err.Error()}
	if c := findCondition(s.loop, v1alpha1.CheckpointErrorCondition); c == nil || c.Message != err.Error() {
		s.r.event(s.loop, corev1.EventTypeWarning, reason, "Checkpoint", "%s", err.Error())
	}
}

// pendingRequest returns the looprun.io/request the Loop has not carried out yet.
func pendingRequest(loop *v1alpha1.Loop) string {
	req := loop.Annotations[v1alpha1.RequestAnnotation]
	if req == "" || req == loop.Status.LastRequest {
		return ""
	}
	return req
}

// request carries out a looprun.io/request annotation once: stop ends the
// run at once; rewind:N goes back to the checkpoint of iteration N (the
// latest without N).
func (s *step) request(ctx context.Context, req string) {
	s.loop.Status.LastRequest = req
	verb, iteration, err := v1alpha1.ParseRequest(req)
	if err != nil {
		s.requestWarning(v1alpha1.EventReasonInvalidRequest, "%s", err.Error())
		return
	}
	switch verb {
	case v1alpha1.RequestStop:
		s.stop(ctx)
	case v1alpha1.RequestRewind:
		s.rewind(ctx, iteration)
	case v1alpha1.RequestApprove, v1alpha1.RequestReject:
		s.answerApproval(verb, req)
	}
}

// stop ends a running Loop at once: its action is stopped and it ends
// Interrupted, terminatedBy stopped. The action stays in the status (its Pod
// is gone), as a local run's does: a run continued elsewhere (export and
// import) runs it again as the same iteration.
func (s *step) stop(ctx context.Context) {
	run := &s.loop.Status.RunState
	if run.Phase.IsFinished() {
		return
	}
	s.cancelAction(ctx)
	s.add(s.m.Interrupt(run, s.now, "stopped by request"))
	if run.Action != nil {
		run.Action.Pod, run.Action.PodUID = "", ""
	}
}

// rewind puts the Loop back to one of its checkpoints and runs it from there.
func (s *step) rewind(ctx context.Context, iteration *int32) {
	_, cpRun, err := configmaps.FindCheckpoint(ctx, s.r.APIReader, s.loop, iteration)
	if err != nil {
		s.checkpointFailed(fmt.Errorf("cannot rewind: %w", err))
		return
	}
	run := &s.loop.Status.RunState
	s.cancelAction(ctx)
	s.add(s.m.Restore(run, cpRun, s.now, executor.EventLoopRewind, nil))
	run.RunID = executor.RewoundRunID(run.RunID)
	s.out.health.checkpointOK = true
	s.r.event(s.loop, corev1.EventTypeNormal, v1alpha1.EventReasonRewound, "Rewind", "back to the checkpoint of iteration %d (state %s)", cpRun.Iteration, cpRun.CurrentState)
}

// cancelAction stops the action in flight, if any, and the judge's calls;
// their results are not wanted.
func (s *step) cancelAction(ctx context.Context) {
	if j := s.r.Judges; j != nil && j.Runner != nil {
		j.Runner.Forget(client.ObjectKeyFromObject(s.loop))
	}
	a := s.loop.Status.Action
	if a != nil && a.Child != "" {
		if err := s.r.stopChild(ctx, s.loop); err != nil {
			log.FromContext(ctx).Error(err, "Stopping the child Loop in flight failed", "child", a.Child)
		}
		return
	}
	if a == nil {
		child, err := s.unrecordedChild(ctx)
		if child != nil {
			err = s.r.stopLoop(ctx, s.loop, child)
		}
		if err != nil {
			log.FromContext(ctx).Error(err, "Stopping the child Loop of the step taken again failed")
		}
		return
	}
	if s.r.Actions == nil || !a.IsAction() { // an approval waits for no runner
		return
	}
	if err := s.r.Actions.Cancel(ctx, s.loop); err != nil {
		log.FromContext(ctx).Error(err, "Stopping the action in flight failed", "actionState", a.State)
	}
	s.r.Actions.Release(s.loop, a.Iteration)
}
