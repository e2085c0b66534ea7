package controllers

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
)

// booksLoop is a Loop of namespace ns as the informer would hand it over.
func booksLoop(ns, name string, created int, phase v1alpha1.Phase) *v1alpha1.Loop {
	l := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name),
		CreationTimestamp: metav1.NewTime(time.Unix(int64(1000+created), 0))}}
	l.Status.Phase = phase
	if phase == v1alpha1.PhaseRunning {
		l.Status.StartedAt = ptr.To(metav1.Now())
	}
	return l
}

// testQueue is a queue whose wake-ups are recorded.
func testQueue(limit int) (*queue, *[]string) {
	var woken []string
	q := &queue{limit: limit, after: func(time.Duration, func()) {}}
	q.wake = func(k types.NamespacedName) { woken = append(woken, k.Name) }
	return q, &woken
}

func (q *queue) seeForTest(l *v1alpha1.Loop) {
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.books(l.Namespace)
	b.see(l)
	q.wakeFree(l.Namespace, b)
}

func TestQueueAdmitsInCreationOrderAndWakesOnAFreedSlot(t *testing.T) {
	q, woken := testQueue(1)
	now := time.Now()
	a := booksLoop("t", "a", 1, v1alpha1.PhaseRunning)
	q.seeForTest(a)
	var waiting []*v1alpha1.Loop
	for i := range 5 {
		l := booksLoop("t", fmt.Sprintf("w%d", i), 10-i, "") // w4 is the oldest
		waiting = append(waiting, l)
		q.seeForTest(l)
	}
	if len(*woken) != 0 {
		t.Fatalf("woken with no slot free: %v", *woken)
	}
	ok, why := q.admit(waiting[0], now)
	if ok || why != "queued: 1 of the namespace's 1 running Loops are running; 4 queued before it" {
		t.Fatalf("w0 admitted %v: %q", ok, why)
	}
	// Another namespace is not held.
	if ok, _ := q.admit(booksLoop("other", "x", 0, ""), now); !ok {
		t.Fatal("another namespace's Loop was held")
	}
	// a ends: only the first in line is woken, and only it is admitted.
	done := a.DeepCopy()
	done.Status.Phase = v1alpha1.PhaseCompleted
	q.seeForTest(done)
	if fmt.Sprint(*woken) != "[w4]" {
		t.Fatalf("woken %v, want [w4]", *woken)
	}
	if ok, _ := q.admit(waiting[3], now); ok {
		t.Fatal("w3 jumped the line")
	}
	if ok, _ := q.admit(waiting[4], now); !ok {
		t.Fatal("w4, first in line, was not admitted")
	}
	// Its start is not in the cache yet: it still holds the slot.
	q.seeForTest(waiting[4])
	if ok, _ := q.admit(waiting[3], now); ok {
		t.Fatal("w3 started while w4's start is not seen yet")
	}
	// Deleted while it ran: the next is woken.
	*woken = nil
	q.mu.Lock()
	q.books("t").gone("w4")
	q.wakeFree("t", q.books("t"))
	q.mu.Unlock()
	if fmt.Sprint(*woken) != "[w3]" {
		t.Fatalf("woken %v after a delete, want [w3]", *woken)
	}
}

func TestQueueAdmittedStartExpires(t *testing.T) {
	q, woken := testQueue(1)
	var later []func()
	q.after = func(_ time.Duration, f func()) { later = append(later, f) }
	now := time.Now()
	a, b := booksLoop("t", "a", 1, ""), booksLoop("t", "b", 2, "")
	q.seeForTest(a)
	q.seeForTest(b)
	if ok, _ := q.admit(a, now); !ok {
		t.Fatal("a was not admitted")
	}
	if ok, _ := q.admit(b, now); ok {
		t.Fatal("b was admitted past the cap")
	}
	// a never shows its start: past admittedFor its slot is free again.
	if ok, _ := q.admit(b, now.Add(admittedFor+time.Second)); ok {
		t.Fatal("b went before a, which is first in line again")
	}
	if ok, _ := q.admit(a, now.Add(admittedFor+time.Second)); !ok {
		t.Fatal("a was not admitted again")
	}
	if len(later) == 0 {
		t.Fatal("no look was planned for the expiry")
	}
	*woken = nil
	q.mu.Lock()
	for e := range q.books("t").admitted {
		e.admittedAt = now.Add(-2 * admittedFor)
	}
	q.mu.Unlock()
	later[len(later)-1]()
	if fmt.Sprint(*woken) != "[a]" {
		t.Fatalf("the expiry woke %v, want [a]", *woken)
	}
}

// A child is not counted because its controlling Loop names it, never
// because of the looprun.io/parent label its author can write.
func TestQueueChildIsWhatItsParentSays(t *testing.T) {
	q, woken := testQueue(1)
	now := time.Now()
	parent := booksLoop("t", "p", 1, v1alpha1.PhaseRunning)
	q.seeForTest(parent)
	owned := func(name string, created int, owner *v1alpha1.Loop) *v1alpha1.Loop {
		l := booksLoop("t", name, created, "")
		l.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Loop", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}
		return l
	}

	// A tenant's Loop labelled as a child: counted like any other.
	forged := booksLoop("t", "forged", 2, "")
	forged.Labels = map[string]string{v1alpha1.LabelParent: "p"}
	q.seeForTest(forged)
	if ok, _ := q.admit(forged, now); ok {
		t.Fatal("a Loop labelled looprun.io/parent passed the cap")
	}
	// Owned by the parent, which does not name it: counted too.
	squatter := owned("squatter", 3, parent)
	q.seeForTest(squatter)
	if ok, _ := q.admit(squatter, now); ok {
		t.Fatal("a Loop owned by a running Loop that does not name it passed the cap")
	}
	// The real child, before the parent's status names it: it waits;
	// once the parent's status names it, it is woken and admitted.
	child := owned("p-child", 4, parent)
	q.seeForTest(child)
	if ok, _ := q.admit(child, now); ok {
		t.Fatal("a child the parent does not name yet passed the cap")
	}
	*woken = nil
	named := parent.DeepCopy()
	named.Status.Action = &v1alpha1.ActionStatus{Child: "p-child"}
	q.seeForTest(named)
	if fmt.Sprint(*woken) != "[p-child]" {
		t.Fatalf("woken %v once the parent named its child, want [p-child]", *woken)
	}
	if ok, _ := q.admit(child, now); !ok {
		t.Fatal("the child its parent names was held by the cap")
	}
	// The name of the child in a parent it does not belong to counts
	// for nothing: a Loop owned by another Loop.
	other := booksLoop("t", "q", 9, v1alpha1.PhaseRunning)
	q.seeForTest(other)
	stranger := owned("p-child-2", 10, other)
	q.seeForTest(stranger)
	named2 := named.DeepCopy()
	named2.Status.Action.Child = "p-child-2"
	q.seeForTest(named2)
	if ok, _ := q.admit(stranger, now); ok {
		t.Fatal("a Loop another Loop owns passed the cap as p's child")
	}
}

// Admitting a Loop does not look at every queued Loop: with many queued,
// an admission and a wake-up cost about what they cost with few.
func BenchmarkQueueAdmit(b *testing.B) {
	for _, n := range []int{10, 1500, 15000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			q, _ := testQueue(1)
			q.seeForTest(booksLoop("t", "running", 0, v1alpha1.PhaseRunning))
			var ls []*v1alpha1.Loop
			for i := range n {
				l := booksLoop("t", fmt.Sprintf("w%d", i), i+1, "")
				ls = append(ls, l)
				q.seeForTest(l)
			}
			now := time.Now()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				q.admit(ls[i%n], now)
			}
		})
	}
}

// A Loop an admission put back in the books after its delete event (the
// reconcile read it just before it went) is dropped when the reconciler
// finds it gone, and frees its place in line.
func TestQueueForgetsALoopFoundGone(t *testing.T) {
	q, woken := testQueue(1)
	now := time.Now()
	q.seeForTest(booksLoop("t", "running", 0, v1alpha1.PhaseRunning))
	ghost, next := booksLoop("t", "ghost", 1, ""), booksLoop("t", "next", 2, "")
	q.seeForTest(next)
	// ghost's delete event came first; then an admission saw it.
	q.admit(ghost, now)
	running := booksLoop("t", "running", 0, v1alpha1.PhaseCompleted)
	q.seeForTest(running)
	if fmt.Sprint(*woken) != "[ghost]" {
		t.Fatalf("woken %v", *woken)
	}
	*woken = nil
	q.forget(types.NamespacedName{Namespace: "t", Name: "ghost"})
	if fmt.Sprint(*woken) != "[next]" {
		t.Fatalf("after the ghost was forgotten, woken %v", *woken)
	}
	if ok, _ := q.admit(next, now); !ok {
		t.Fatal("the next in line was held by a Loop that is gone")
	}
	// A late delete of an old copy does not drop a Loop made again.
	again := booksLoop("t", "next", 3, "")
	again.UID = "new"
	q.seeForTest(again)
	q.mu.Lock()
	e := q.books("t").loops["next"]
	q.mu.Unlock()
	if e == nil || e.uid != "new" {
		t.Fatalf("entry %+v", e)
	}
}
