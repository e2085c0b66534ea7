package controllers

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
)

// The status patch is the patch controller-runtime's optimistic merge
// patch makes for a change of the status alone.
func TestStatusPatchMatchesMergeFrom(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	before := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l", ResourceVersion: "42", Generation: 2,
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{"a": {Action: "true", Next: "done"}, "done": {Terminal: true}}}}
	before.Status.Phase = v1alpha1.PhaseRunning
	before.Status.Action = &v1alpha1.ActionStatus{State: "a", Iteration: 1}
	before.Status.Captured = map[string]v1alpha1.CapturedResult{"x": {Output: "1"}}
	changes := map[string]func(l *v1alpha1.Loop){
		"transition": func(l *v1alpha1.Loop) {
			l.Status.Action = &v1alpha1.ActionStatus{State: "a", Iteration: 2}
			l.Status.Iteration, l.Status.LastSeq, l.Status.UpdatedAt = 2, 7, &now
		},
		"finished": func(l *v1alpha1.Loop) {
			l.Status.Phase, l.Status.Action, l.Status.Captured = v1alpha1.PhaseCompleted, nil, nil
			setConditions(l, health{})
		},
		"nothing": func(*v1alpha1.Loop) {},
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			after := before.DeepCopy()
			change(after)
			want, err := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}).Data(after)
			if err != nil {
				t.Fatal(err)
			}
			got, err := statusPatch{before: before, after: after}.Data(nil)
			if err != nil {
				t.Fatal(err)
			}
			var w, g map[string]any
			if err := json.Unmarshal(want, &w); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatal(err)
			}
			if _, ok := w["status"]; !ok {
				w["status"] = map[string]any{} // an unchanged status: an empty object says the same
			}
			if !reflect.DeepEqual(w, g) {
				t.Errorf("patch\n%s\nwant\n%s", got, want)
			}
		})
	}
	if _, err := (statusPatch{before: &v1alpha1.Loop{}, after: before}).Data(nil); err == nil {
		t.Error("a patch against no resourceVersion must fail")
	}
}
