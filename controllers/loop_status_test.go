package controllers

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/looprun/looprun/api/v1alpha1"
)

func TestSetConditions(t *testing.T) {
	run := func(phase v1alpha1.Phase, by v1alpha1.TerminationReason, state string) v1alpha1.RunState {
		return v1alpha1.RunState{Phase: phase, TerminatedBy: by, CurrentState: state}
	}
	failure := true
	tests := []struct {
		name                 string
		run                  v1alpha1.RunState
		h                    health
		ready                metav1.ConditionStatus
		reason               string
		reconciling, stalled bool
	}{
		{"running", run(v1alpha1.PhaseRunning, "", "check"), health{}, metav1.ConditionUnknown, v1alpha1.ReasonProgressing, true, false},
		{"action running", v1alpha1.RunState{Phase: v1alpha1.PhaseRunning, Action: &v1alpha1.ActionStatus{State: "check", Iteration: 1}}, health{},
			metav1.ConditionUnknown, v1alpha1.ReasonActionRunning, true, false},
		{"backoff", v1alpha1.RunState{Phase: v1alpha1.PhaseRunning, NextStepAt: &metav1.Time{}}, health{}, metav1.ConditionUnknown, v1alpha1.ReasonBackoff, true, false},
		{"suspended", run(v1alpha1.PhaseSuspended, "", "check"), health{}, metav1.ConditionFalse, v1alpha1.ReasonSuspended, false, false},
		{"completed", run(v1alpha1.PhaseCompleted, v1alpha1.TerminatedTerminal, "done"), health{}, metav1.ConditionTrue, v1alpha1.ReasonCompleted, false, false},
		{"failure state", run(v1alpha1.PhaseFailed, v1alpha1.TerminatedTerminal, "failed"), health{}, metav1.ConditionFalse, v1alpha1.ReasonFailureState, false, true},
		{"max iterations", run(v1alpha1.PhaseInterrupted, v1alpha1.TerminatedMaxIterations, "a"), health{}, metav1.ConditionFalse, v1alpha1.ReasonMaxIterations, false, true},
		{"timeout", run(v1alpha1.PhaseFailed, v1alpha1.TerminatedTimeout, "a"), health{}, metav1.ConditionFalse, v1alpha1.ReasonTimeout, false, true},
		{"cycle", run(v1alpha1.PhaseFailed, v1alpha1.TerminatedCycleDetected, "a"), health{}, metav1.ConditionFalse, v1alpha1.ReasonCycleDetected, false, true},
		{"error", run(v1alpha1.PhaseFailed, v1alpha1.TerminatedError, "a"), health{}, metav1.ConditionFalse, v1alpha1.ReasonError, false, true},
		{"invalid", run("", "", ""), health{invalid: "spec.initial: Not found"}, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec, false, true},
		{"no runner", run(v1alpha1.PhaseRunning, "", "check"), health{noRunner: true}, metav1.ConditionFalse, v1alpha1.ReasonNoRunner, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loop := &v1alpha1.Loop{Spec: v1alpha1.LoopSpec{States: map[string]v1alpha1.State{"failed": {Terminal: true, Failure: &failure}}}}
			loop.Status.RunState = tt.run
			// Start from the opposite so stale conditions must be removed.
			set(loop, v1alpha1.ReconcilingCondition, metav1.ConditionTrue, "Old", "old")
			set(loop, v1alpha1.StalledCondition, metav1.ConditionTrue, "Old", "old")
			setConditions(loop, tt.h)
			ready := condition(loop, v1alpha1.ReadyCondition)
			if ready == nil || ready.Status != tt.ready || ready.Reason != tt.reason {
				t.Fatalf("Ready = %+v, want %s/%s", ready, tt.ready, tt.reason)
			}
			if got := condition(loop, v1alpha1.ReconcilingCondition) != nil; got != tt.reconciling {
				t.Errorf("Reconciling present = %v", got)
			}
			if got := condition(loop, v1alpha1.StalledCondition) != nil; got != tt.stalled {
				t.Errorf("Stalled present = %v", got)
			}
		})
	}
}

// Without an action runner a Loop starts, then waits and says why.
func TestNoRunnerWaits(t *testing.T) {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l", UID: "0123456789"}, Spec: v1alpha1.LoopSpec{
		Initial: "a", States: map[string]v1alpha1.State{"a": {Action: "true", Next: "done"}, "done": {Terminal: true}},
	}}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(loop).WithStatusSubresource(loop).Build()
	r := &LoopReconciler{Client: c, APIReader: c, Scheme: s}
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(loop)})
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("Reconcile = %+v, %v", res, err)
	}
	got := &v1alpha1.Loop{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(loop), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1alpha1.PhaseRunning || got.Status.Iteration != 0 || got.Status.Action != nil {
		t.Errorf("status %+v", got.Status.RunState)
	}
	if c := condition(got, v1alpha1.StalledCondition); c == nil || c.Reason != v1alpha1.ReasonNoRunner {
		t.Errorf("conditions %+v", got.Status.Conditions)
	}
}
