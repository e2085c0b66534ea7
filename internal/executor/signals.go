package executor

import "github.com/looprun/looprun/api/v1alpha1"

// noteSignal looks for the signal the state's action printed: the runner
// scanned the complete stdout, or else the machine scans what it was given.
// An agent that ran out of its time has no signal: little-loops keeps no
// output of an agent it killed, so it sees none (a shell action's output
// until then counts, as there).
func (t *turn) noteSignal(st *v1alpha1.State, res *ActionResult) {
	switch {
	case t.m.opts.IgnoreSignals || res == nil:
	case res.TimedOut && (st.IsAgent() || st.Learning != nil):
	case res.SignalScanned:
		t.signal = res.Signal
	default:
		t.signal = DetectSignal(res.Output)
	}
}

// signalEnds ends the run for a FATAL_ERROR: or CONTEXT_HANDOFF: the
// state's action printed, once its verdict is recorded and before it
// routes, as little-loops does. It reports whether it did.
func (t *turn) signalEnds() bool {
	switch {
	case t.signal == nil || t.run.Phase.IsFinished():
		return false
	case t.signal.Kind == SignalError:
		t.finish(v1alpha1.TerminatedError, t.signal.Payload)
	case t.signal.Kind == SignalHandoff:
		t.handoff(t.signal.Payload)
	default:
		return false
	}
	return true
}

// signalEndsTry ends the run for a FATAL_ERROR: or CONTEXT_HANDOFF: that a
// try retryPolicy would run again printed, its result kept as the
// state's: little-loops heeds the signal of every action it runs, a try it
// runs again in place included. It reports whether it did.
func (t *turn) signalEndsTry(st *v1alpha1.State, res *ActionResult) bool {
	if t.signal == nil || t.signal.Kind == SignalStop {
		return false
	}
	if _, transient := transientReason(st.RetryPolicy, res); !transient {
		return false
	}
	t.capture(st, res, "")
	t.setPrev(st, res)
	return t.signalEnds()
}

// stopping reports whether the state's action printed LOOP_STOP:.
func (t *turn) stopping() bool { return t.signal != nil && t.signal.Kind == SignalStop }

// stopAfterRoute ends the run where its route took it when the state's
// action printed LOOP_STOP:.
func (t *turn) stopAfterRoute() {
	if t.stopping() && !t.run.Phase.IsFinished() {
		t.finish(v1alpha1.TerminatedInterrupted, "")
	}
}

// handoff pauses the run for a CONTEXT_HANDOFF:: the run is Interrupted in
// the state whose action printed it (a resume runs that state again), and
// as in little-loops the log says handoff_detected, not loop_complete.
func (t *turn) handoff(continuation string) {
	run := t.run
	t.emit(EventHandoffDetected, HandoffDetectedEvent{State: run.CurrentState, Iteration: run.Iteration, Continuation: continuation}.Data())
	run.Phase = v1alpha1.PhaseInterrupted
	run.TerminatedBy = v1alpha1.TerminatedHandoff
	run.Message = continuation
	run.Action = nil
	run.NextStepAt = nil
}
