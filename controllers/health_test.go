package controllers

import (
	"os"
	"testing"

	lua "github.com/yuin/gopher-lua"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/looprun/looprun/api/v1alpha1"
)

// kstatus computes the object's status with kstatus itself
// (sigs.k8s.io/cli-utils/pkg/kstatus), as Flux and kubectl-style tooling do.
func kstatus(t *testing.T, obj map[string]any) string {
	t.Helper()
	res, err := status.Compute(&unstructured.Unstructured{Object: obj})
	if err != nil {
		t.Fatal(err)
	}
	return res.Status.String()
}

// argoHealth runs docs/argocd/health.lua as Argo CD does: obj is the object.
func argoHealth(t *testing.T, obj map[string]any) (string, string) {
	t.Helper()
	script, err := os.ReadFile("../docs/argocd/health.lua")
	if err != nil {
		t.Fatal(err)
	}
	L := lua.NewState()
	defer L.Close()
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(string(script)); err != nil {
		t.Fatalf("health.lua: %v", err)
	}
	hs, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("health.lua returned %v", L.Get(-1))
	}
	return hs.RawGetString("status").String(), hs.RawGetString("message").String()
}

func toLua(L *lua.LState, v any) lua.LValue {
	switch x := v.(type) {
	case map[string]any:
		t := L.NewTable()
		for k, e := range x {
			t.RawSetString(k, toLua(L, e))
		}
		return t
	case []any:
		t := L.NewTable()
		for _, e := range x {
			t.Append(toLua(L, e))
		}
		return t
	case string:
		return lua.LString(x)
	case bool:
		return lua.LBool(x)
	case int64:
		return lua.LNumber(x)
	case float64:
		return lua.LNumber(x)
	}
	return lua.LNil
}

// Every phase of a Loop reads as GitOps tools expect, through kstatus and
// through the Argo CD health check.
func TestGitOpsHealth(t *testing.T) {
	tests := []struct {
		name     string
		run      v1alpha1.RunState
		h        health
		stale    bool
		noStatus bool
		kstatus  string
		argo     string
	}{
		// As the API server serves a Loop the operator has not seen yet:
		// status.observedGeneration defaults to 0.
		{name: "new", noStatus: true, kstatus: "InProgress", argo: "Progressing"},
		{name: "spec not yet seen", run: v1alpha1.RunState{Phase: v1alpha1.PhaseCompleted, TerminatedBy: v1alpha1.TerminatedTerminal}, stale: true, kstatus: "InProgress", argo: "Progressing"},
		{name: "running", run: v1alpha1.RunState{Phase: v1alpha1.PhaseRunning, Action: &v1alpha1.ActionStatus{State: "check", Iteration: 2}}, kstatus: "InProgress", argo: "Progressing"},
		{name: "backoff", run: v1alpha1.RunState{Phase: v1alpha1.PhaseRunning, NextStepAt: &metav1.Time{}}, kstatus: "InProgress", argo: "Progressing"},
		// Paused, not done: kstatus reads Ready=False as in progress (a
		// health check waits for it, or times out), Argo CD as Suspended.
		{name: "suspended", run: v1alpha1.RunState{Phase: v1alpha1.PhaseSuspended}, kstatus: "InProgress", argo: "Suspended"},
		// Paused on its budget: read as a suspended Loop, waiting for a person.
		{name: "paused on its budget", run: v1alpha1.RunState{Phase: v1alpha1.PhasePaused, Budget: &v1alpha1.BudgetStatus{Exceeded: "the run spent $5.00 of its $5.00 budget before state fix"}}, kstatus: "InProgress", argo: "Suspended"},
		{name: "stopped on its budget", run: v1alpha1.RunState{Phase: v1alpha1.PhaseFailed, TerminatedBy: v1alpha1.TerminatedBudgetExceeded}, kstatus: "Failed", argo: "Degraded"},
		{name: "judging", run: v1alpha1.RunState{Phase: v1alpha1.PhaseRunning}, h: health{judging: true}, kstatus: "InProgress", argo: "Progressing"},
		{name: "event log failing", run: v1alpha1.RunState{Phase: v1alpha1.PhaseRunning}, h: health{eventLog: "forbidden"}, kstatus: "InProgress", argo: "Progressing"},
		{name: "stopped", run: v1alpha1.RunState{Phase: v1alpha1.PhaseInterrupted, TerminatedBy: v1alpha1.TerminatedStopped}, kstatus: "Failed", argo: "Degraded"},
		{name: "completed", run: v1alpha1.RunState{Phase: v1alpha1.PhaseCompleted, TerminatedBy: v1alpha1.TerminatedTerminal, CurrentState: "done"}, kstatus: "Current", argo: "Healthy"},
		{name: "failure state", run: v1alpha1.RunState{Phase: v1alpha1.PhaseFailed, TerminatedBy: v1alpha1.TerminatedTerminal, CurrentState: "failed"}, kstatus: "Failed", argo: "Degraded"},
		{name: "max iterations", run: v1alpha1.RunState{Phase: v1alpha1.PhaseInterrupted, TerminatedBy: v1alpha1.TerminatedMaxIterations}, kstatus: "Failed", argo: "Degraded"},
		{name: "timeout", run: v1alpha1.RunState{Phase: v1alpha1.PhaseFailed, TerminatedBy: v1alpha1.TerminatedTimeout}, kstatus: "Failed", argo: "Degraded"},
		{name: "invalid", h: health{invalid: "spec.states[a].next: state \"b\" does not exist"}, kstatus: "Failed", argo: "Degraded"},
		{name: "no runner", run: v1alpha1.RunState{Phase: v1alpha1.PhaseRunning}, h: health{noRunner: true}, kstatus: "Failed", argo: "Degraded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Name: "fix", Generation: 2}}
			if !tc.noStatus {
				loop.Status.RunState = tc.run
				loop.Status.ObservedGeneration = 2
				setConditions(loop, tc.h)
				if tc.stale {
					loop.Generation = 3
				}
			}
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(loop)
			if err != nil {
				t.Fatal(err)
			}
			if tc.noStatus {
				obj["status"] = map[string]any{"observedGeneration": int64(0)}
			}
			if got := kstatus(t, obj); got != tc.kstatus {
				t.Errorf("kstatus %s, want %s", got, tc.kstatus)
			}
			status, msg := argoHealth(t, obj)
			if status != tc.argo {
				t.Errorf("Argo CD health %s (%s), want %s", status, msg, tc.argo)
			}
			if tc.argo == "Degraded" && msg == "" {
				t.Error("a degraded Loop must say why")
			}
		})
	}
}
