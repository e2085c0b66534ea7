package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/looprun/looprun/api/v1alpha1"
)

// queueBackstop is how long a Loop queued behind the namespace's cap waits
// before it looks again by itself. It is woken as soon as a slot frees
// (see queue), so this only bounds the wait if a wake-up were missed.
const queueBackstop = 10 * time.Minute

// admittedFor is how long a start this process admitted counts as a
// running Loop while the cache does not show it yet (a new run's first
// status write may wait for its first action).
const admittedFor = 5 * time.Minute

// queue holds back the start of Loops past MaxRunningPerNamespace: a
// namespace runs at most that many at once (a sub-loop's child is part
// of its parent's run and is not counted), the others wait as Pending and
// start in creation order when a slot frees.
//
// It keeps, per namespace, which Loops run and which wait, in creation
// order, from every event of the Loop informer (its own watch, status
// changes included). So admitting a Loop lists nothing, and a queued Loop
// does not poll: when a Loop ends, is deleted or a start admitted here
// expires, the Loops first in line for the freed slots are woken. Neither
// grows with what one tenant queues: a wake-up costs the slots that freed,
// a look at the queue its logarithm.
//
// A child is a child because its parent says so: it is controlled by a
// Loop of the namespace whose status names it as the child of the step in
// flight. The looprun.io/parent label, which anyone who writes the Loop
// can set, counts for nothing here.
type queue struct {
	limit int
	mu    sync.Mutex
	// spaces are the namespaces' books.
	spaces map[string]*books
	// wake adds a Loop to the controller's work queue; nil until the
	// informer's first event hands the work queue over.
	wake func(types.NamespacedName)
	// after runs f after d (time.AfterFunc; a test may replace it).
	after func(d time.Duration, f func())
}

// slot is where a Loop stands with respect to the cap.
type slot int

const (
	// slotNone: not counted, not waiting (ended, going, suspended before
	// its start, or a child).
	slotNone slot = iota
	// slotRunning: counted, seen running.
	slotRunning
	// slotAdmitted: counted, admitted here and not yet seen running.
	slotAdmitted
	// slotWaiting: waits for a slot, in creation order.
	slotWaiting
)

// books are one namespace's Loops as the queue sees them.
type books struct {
	loops map[string]*entry
	byUID map[types.UID]*entry
	// counted is how many are in slotRunning or slotAdmitted.
	counted int
	// admitted are those in slotAdmitted (no more than the cap).
	admitted map[*entry]struct{}
	// released are queued Loops found to be children since the last
	// wake-up: they are woken to go.
	released []string
	// waiting are the names in slotWaiting, by creation then name.
	waiting []*entry
}

// entry is what the queue knows of one Loop.
type entry struct {
	name    string
	uid     types.UID
	created time.Time
	// phase, started, deleting: the Loop's status as last seen.
	phase    v1alpha1.Phase
	started  bool
	deleting bool
	// owner is the uid of the Loop that controls it ("" for none).
	owner types.UID
	// child is the child its status says the step in flight runs.
	child string
	// admittedAt is when this process admitted its start (zero: not).
	admittedAt time.Time
	slot       slot
}

func before(a, b *entry) int {
	if c := a.created.Compare(b.created); c != 0 {
		return c
	}
	return strings.Compare(a.name, b.name)
}

// handler keeps the books from the Loop informer's events. The controller
// starts its workers only once the handler has seen every Loop the
// informer listed, so the books are whole before the first admission.
func (q *queue) handler() handler.TypedEventHandler[client.Object, reconcile.Request] {
	type workQueue = workqueue.TypedRateLimitingInterface[reconcile.Request]
	seen := func(o client.Object, wq workQueue, deleted bool) {
		l, ok := o.(*v1alpha1.Loop)
		if !ok {
			return
		}
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.wake == nil {
			q.wake = func(key types.NamespacedName) { wq.Add(reconcile.Request{NamespacedName: key}) }
		}
		b := q.books(l.Namespace)
		if deleted {
			if e := b.loops[l.Name]; e != nil && e.uid == l.UID {
				b.gone(l.Name) // not a Loop made again under its name
			}
		} else {
			b.see(l)
		}
		q.wakeFree(l.Namespace, b)
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[client.Object], wq workQueue) {
			seen(e.Object, wq, false)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[client.Object], wq workQueue) {
			seen(e.ObjectNew, wq, false)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[client.Object], wq workQueue) {
			seen(e.Object, wq, true)
		},
	}
}

func (q *queue) books(ns string) *books {
	if q.spaces == nil {
		q.spaces = map[string]*books{}
	}
	b := q.spaces[ns]
	if b == nil {
		b = &books{loops: map[string]*entry{}, byUID: map[types.UID]*entry{}, admitted: map[*entry]struct{}{}}
		q.spaces[ns] = b
	}
	return b
}

// see records what l's object says, and places it and the child it names.
func (b *books) see(l *v1alpha1.Loop) {
	e := b.loops[l.Name]
	if e != nil && e.uid != l.UID {
		b.gone(l.Name) // made again under its name
		e = nil
	}
	if e == nil {
		e = &entry{name: l.Name, uid: l.UID}
		b.loops[l.Name] = e
		b.byUID[l.UID] = e
	}
	oldChild := e.child
	e.created = l.CreationTimestamp.Time
	e.phase, e.started, e.deleting = l.Status.Phase, l.Status.StartedAt != nil, !l.DeletionTimestamp.IsZero()
	e.owner = ""
	if ref := metav1.GetControllerOf(l); ref != nil && ref.Kind == "Loop" && strings.HasPrefix(ref.APIVersion, v1alpha1.GroupVersion.Group+"/") {
		e.owner = ref.UID
	}
	e.child = ""
	if a := l.Status.Action; a != nil {
		e.child = a.Child
	}
	b.place(e)
	for _, name := range []string{oldChild, e.child} {
		if c := b.loops[name]; name != "" && c != nil {
			b.place(c)
		}
	}
}

// gone forgets a deleted Loop; its child, if any, is placed again.
func (b *books) gone(name string) {
	e := b.loops[name]
	if e == nil {
		return
	}
	b.move(e, slotNone)
	delete(b.loops, name)
	delete(b.byUID, e.uid)
	if c := b.loops[e.child]; e.child != "" && c != nil {
		b.place(c)
	}
}

// isChild says whether e's controlling Loop names e as its child.
func (b *books) isChild(e *entry) bool {
	if e.owner == "" {
		return false
	}
	p := b.byUID[e.owner]
	return p != nil && p.child == e.name
}

// place puts e where its status, its admission and its parent say.
func (b *books) place(e *entry) {
	s := slotNone
	switch {
	case e.deleting || e.phase.IsFinished():
	case b.isChild(e):
		if e.slot == slotWaiting {
			// Its parent's status named it after it was queued: it
			// goes now, uncounted.
			b.released = append(b.released, e.name)
		}
	case e.phase == v1alpha1.PhaseRunning || e.phase == v1alpha1.PhasePaused || e.phase == v1alpha1.PhaseSuspended && e.started:
		s = slotRunning
	case e.phase == "" || e.phase == v1alpha1.PhasePending:
		s = slotWaiting
		if !e.admittedAt.IsZero() {
			s = slotAdmitted
		}
	}
	if s != slotAdmitted {
		e.admittedAt = time.Time{}
	}
	b.move(e, s)
}

// move changes e's slot, keeping the count and the line.
func (b *books) move(e *entry, to slot) {
	from := e.slot
	if from == to {
		return
	}
	if from == slotRunning || from == slotAdmitted {
		b.counted--
	}
	delete(b.admitted, e)
	if from == slotWaiting {
		if i, ok := slices.BinarySearchFunc(b.waiting, e, before); ok {
			b.waiting = slices.Delete(b.waiting, i, i+1)
		}
	}
	e.slot = to
	if to == slotRunning || to == slotAdmitted {
		b.counted++
	}
	if to == slotAdmitted {
		b.admitted[e] = struct{}{}
	}
	if to == slotWaiting {
		i, _ := slices.BinarySearchFunc(b.waiting, e, before)
		b.waiting = slices.Insert(b.waiting, i, e)
	}
}

// expire returns to the line the starts admitted longer ago than
// admittedFor that the cache still does not show.
func (b *books) expire(now time.Time) {
	for e := range b.admitted {
		if now.Sub(e.admittedAt) > admittedFor {
			e.admittedAt = time.Time{}
			b.place(e)
		}
	}
}

// wakeFree wakes the Loops first in line for the namespace's free slots.
func (q *queue) wakeFree(ns string, b *books) {
	if q.wake == nil || q.limit <= 0 {
		b.released = nil
		return
	}
	for _, name := range b.released {
		q.wake(types.NamespacedName{Namespace: ns, Name: name})
	}
	b.released = nil
	free := q.limit - b.counted
	for i := 0; i < free && i < len(b.waiting); i++ {
		q.wake(types.NamespacedName{Namespace: ns, Name: b.waiting[i].name})
	}
}

// admit says whether loop may start now; when not, why it waits.
func (q *queue) admit(loop *v1alpha1.Loop, now time.Time) (bool, string) {
	if q == nil || q.limit <= 0 {
		return true, ""
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.books(loop.Namespace)
	e := b.loops[loop.Name]
	if e == nil || e.uid != loop.UID {
		b.see(loop) // its event has not reached the books yet
		e = b.loops[loop.Name]
	}
	b.expire(now)
	if e.slot != slotWaiting {
		return true, "" // running, admitted before, or not counted (a child)
	}
	ahead, _ := slices.BinarySearchFunc(b.waiting, e, before)
	if b.counted+ahead < q.limit {
		e.admittedAt = now
		b.move(e, slotAdmitted)
		q.later(loop.Namespace, admittedFor+time.Second)
		return true, ""
	}
	return false, fmt.Sprintf("queued: %d of the namespace's %d running Loops are running; %d queued before it", b.counted, q.limit, ahead)
}

// later looks at the namespace's line again after d: an admitted start
// that the cache still does not show then frees its slot.
func (q *queue) later(ns string, d time.Duration) {
	after := q.after
	if after == nil {
		after = func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	}
	after(d, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		b := q.books(ns)
		b.expire(time.Now())
		q.wakeFree(ns, b)
	})
}

// forget drops a Loop the reconciler found gone: an admission may have put
// it in the books after its delete event was handled (it read the Loop
// just before it went), and no event would remove it then.
func (q *queue) forget(key types.NamespacedName) {
	if q == nil || q.limit <= 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.books(key.Namespace)
	if b.loops[key.Name] == nil {
		return
	}
	b.gone(key.Name)
	q.wakeFree(key.Namespace, b)
}
