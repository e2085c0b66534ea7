package controllers

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func req(ns, name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
}

// One namespace's 300 items due at once do not stand before another
// namespace's one: it is the second taken, not the 301st.
func TestFairQueueTakesNamespacesInTurn(t *testing.T) {
	q := newFairQueue("", workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	for i := range 300 {
		q.Add(req("busy", fmt.Sprint(i)))
	}
	q.Add(req("quiet", "one"))
	q.Add(req("busy", "0")) // queued already: still once
	if q.Len() != 301 {
		t.Fatalf("len %d, want 301", q.Len())
	}
	var order []reconcile.Request
	for q.Len() > 0 {
		item, _ := q.Get()
		order = append(order, item)
		q.Done(item)
	}
	if order[0] != req("busy", "0") || order[1] != req("quiet", "one") {
		t.Fatalf("first two taken: %v", order[:2])
	}
	for i, item := range order[2:] {
		if item != req("busy", fmt.Sprint(i+1)) {
			t.Fatalf("busy's items out of their order at %d: %v", i, item)
		}
	}
}

func TestFairQueueRoundRobin(t *testing.T) {
	q := &fairQueue{}
	for _, r := range []reconcile.Request{req("a", "1"), req("a", "2"), req("a", "3"), req("b", "1"), req("c", "1"), req("b", "2")} {
		q.Push(r)
	}
	var got []string
	for q.Len() > 0 {
		r := q.Pop()
		got = append(got, r.Namespace+r.Name)
	}
	if fmt.Sprint(got) != "[a1 b1 c1 a2 b2 a3]" {
		t.Fatalf("order %v", got)
	}
	q.Push(req("d", "1"))
	if r := q.Pop(); r != req("d", "1") || q.Len() != 0 || len(q.items) != 0 {
		t.Fatalf("after emptying: %v %d %v", r, q.Len(), q.items)
	}
}
