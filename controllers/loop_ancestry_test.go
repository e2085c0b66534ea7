package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// A chain of sub-loops that comes back to a LoopTemplate already running
// above is refused, also when the templates' names are longer than a label
// value (63 characters) and their labels are shortened.
func TestSubLoopCycleOfLongTemplateNames(t *testing.T) {
	ping := "ping-" + strings.Repeat("p", 65) // 70 characters
	pong := "pong-" + strings.Repeat("q", 65)
	runs := func(next string) v1alpha1.LoopSpec {
		return v1alpha1.LoopSpec{Initial: "go", States: map[string]v1alpha1.State{
			"go": {Loop: next, OnSuccess: "done"}, "done": {Terminal: true},
		}}
	}
	const ns = "team-a"
	templates := []*v1alpha1.LoopTemplate{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ping}, Spec: v1alpha1.LoopTemplateSpec{LoopSpec: runs(pong)}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pong}, Spec: v1alpha1.LoopTemplateSpec{LoopSpec: runs(ping)}},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(templates[0], templates[1]).Build()
	r := &LoopReconciler{Client: c, APIReader: c, Scheme: scheme}

	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "root", UID: "u0"}, Spec: runs(ping)}
	var chain []string
	for i, tpl := range []string{ping, pong, ping} {
		sub := &executor.SubLoop{State: "go", Iteration: 1, Loop: tpl, Child: executor.ChildName(loop.Name, "run", "go", 1)}
		child, failure, err := r.newChild(context.Background(), loop, sub)
		if err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			if failure != nil {
				t.Fatalf("child %d (%s): %s", i, tpl, failure.Message)
			}
			chain = append(chain, tpl)
			child.UID = types.UID(fmt.Sprintf("u%d", i+1))
			loop = child
			continue
		}
		if failure == nil || failure.Reason != "SubLoopCycle" {
			t.Fatalf("%s runs below %s: the cycle was not found (%+v)", ping, strings.Join(chain, " -> "), failure)
		}
		if !strings.Contains(failure.Message, "LoopTemplate "+ping+" is already running above this Loop") {
			t.Errorf("message %q", failure.Message)
		}
	}
}
