// Package fleet holds the Loops the operator benchmarks create and wait
// for: their specs, their creation, the wait for their end, and the
// manager's live heap.
package fleet

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
)

// Spin is a Loop of `transitions` self-transitions of `true`, ended by
// its iteration cap.
func Spin(transitions int) v1alpha1.LoopSpec {
	max := int32(transitions)           //nolint:gosec // a flag of a few thousand
	revisits := int32(transitions + 10) //nolint:gosec // a flag of a few thousand
	return v1alpha1.LoopSpec{Initial: "spin", MaxIterations: &max, MaxEdgeRevisits: &revisits, States: map[string]v1alpha1.State{
		"spin": {Action: "true", OnSuccess: "$current"},
		"done": {Terminal: true},
	}}
}

// Idle is a small suspended machine: a Loop that costs the manager its
// cached object only.
func Idle() v1alpha1.LoopSpec {
	return v1alpha1.LoopSpec{Initial: "check", Suspend: true, States: map[string]v1alpha1.State{
		"check": {Action: "make test", OnSuccess: "done", OnFailure: "fix"},
		"fix":   {Action: "/fix the failing tests", Next: "check"},
		"done":  {Terminal: true},
	}}
}

// Create creates n Loops of spec, PREFIX-0 to PREFIX-(n-1), in a new
// namespace, from as many goroutines as workers, and returns the namespace.
func Create(ctx context.Context, c client.Client, prefix string, n int, spec v1alpha1.LoopSpec, workers int) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := c.Create(ctx, ns); err != nil {
		return "", err
	}
	var next atomic.Int64
	errs := make([]error, max(workers, 1))
	var wg sync.WaitGroup
	for w := range errs {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: fmt.Sprintf("%s-%d", prefix, i)}, Spec: spec}
				if err := c.Create(ctx, loop); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return ns.Name, errors.Join(errs...)
}

// WaitFor waits until n Loops of the namespace satisfy cond, reading
// through r (the manager's cache: polling the API server would load what
// is measured); cond's error ends the wait. cond must not change the Loop:
// it reads the cache's own objects, since copying a thousand Loops every
// look would load the manager being measured, and looks often, so that the
// time measured ends soon after the last Loop did.
func WaitFor(ctx context.Context, r client.Reader, ns string, n int, timeout time.Duration, cond func(*v1alpha1.Loop) (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		var list v1alpha1.LoopList
		if err := r.List(ctx, &list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
		ok := 0
		for i := range list.Items {
			done, err := cond(&list.Items[i])
			if err != nil {
				return err
			}
			if done {
				ok++
			}
		}
		if ok == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: only %d of %d Loops got there in %v", ns, ok, n, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitFinished waits until the n Spin Loops of the namespace ended, each
// by its cap after its transitions.
func WaitFinished(ctx context.Context, r client.Reader, ns string, n, transitions int, timeout time.Duration) error {
	return WaitFor(ctx, r, ns, n, timeout, func(l *v1alpha1.Loop) (bool, error) {
		if !l.Status.Phase.IsFinished() {
			return false, nil
		}
		if l.Status.TerminatedBy != v1alpha1.TerminatedMaxIterations || int(l.Status.Iteration) != transitions {
			return false, fmt.Errorf("%s ended %s at %d", l.Name, l.Status.TerminatedBy, l.Status.Iteration)
		}
		return true, nil
	})
}

// Delete deletes the Loops of namespace ns and their event logs (the test
// API server runs no garbage collector), so that a run that follows finds
// the API server as the one before it did. It waits a moment for the
// deletions to reach the watchers.
func Delete(ctx context.Context, c client.Client, ns string) error {
	if err := c.DeleteAllOf(ctx, &v1alpha1.Loop{}, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("delete the Loops of %s: %w", ns, err)
	}
	if err := c.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelEventLog: "true"}); err != nil {
		return fmt.Errorf("delete the event logs of %s: %w", ns, err)
	}
	time.Sleep(2 * time.Second)
	return nil
}

// Suspended says a Loop was reconciled into its suspension.
func Suspended(l *v1alpha1.Loop) (bool, error) { return l.Status.Phase == v1alpha1.PhaseSuspended, nil }

// LiveHeap is this process's live heap after collection.
func LiveHeap() uint64 {
	var m goruntime.MemStats
	for range 3 {
		goruntime.GC()
	}
	goruntime.ReadMemStats(&m)
	return m.HeapAlloc
}
