package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
)

// queueRecheck is how often a Loop queued behind the namespace's cap
// looks for a free slot (a requeue, not a waiting worker).
const queueRecheck = 2 * time.Second

// admittedFor is how long a start this process admitted counts as a
// running Loop while the cache does not show it yet (a new run's first
// status write may wait for its first action).
const admittedFor = 5 * time.Minute

// queue holds back the start of Loops past MaxRunningPerNamespace: a
// namespace runs at most that many at once (a sub-loop's child is part
// of its parent's run and is not counted), the others wait as Pending and
// start in creation order when a slot frees.
type queue struct {
	limit int
	mu    sync.Mutex
	// admitted are the starts admitted and not yet seen as started.
	admitted map[types.NamespacedName]time.Time
}

// admit says whether loop may start now; when not, why it waits.
func (q *queue) admit(ctx context.Context, c client.Reader, loop *v1alpha1.Loop, now time.Time) (bool, string, error) {
	if q == nil || q.limit <= 0 || loop.Labels[v1alpha1.LabelParent] != "" {
		return true, "", nil
	}
	var list v1alpha1.LoopList
	if err := c.List(ctx, &list, client.InNamespace(loop.Namespace)); err != nil {
		return false, "", err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.admitted == nil {
		q.admitted = map[types.NamespacedName]time.Time{}
	}
	self := client.ObjectKeyFromObject(loop)
	if _, ok := q.admitted[self]; ok {
		return true, "", nil // admitted before; its start is not saved yet
	}
	running, waiting := q.count(list.Items, loop.Namespace, now)
	slices.SortFunc(waiting, func(a, b *v1alpha1.Loop) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	ahead := slices.IndexFunc(waiting, func(l *v1alpha1.Loop) bool { return l.Name == loop.Name })
	if ahead < 0 {
		ahead = len(waiting) // not in the cache yet: behind every other
	}
	if running+ahead < q.limit {
		q.admitted[self] = now
		return true, "", nil
	}
	return false, fmt.Sprintf("queued: %d of the namespace's %d running Loops are running; %d queued before it", running, q.limit, ahead), nil
}

// count is how many Loops of the namespace run (those admitted by this
// process and not yet in the cache too), and which wait to start. It
// forgets the admissions the cache now shows, or that expired.
func (q *queue) count(loops []v1alpha1.Loop, ns string, now time.Time) (running int, waiting []*v1alpha1.Loop) {
	present := map[types.NamespacedName]bool{}
	for i := range loops {
		l := &loops[i]
		key := client.ObjectKeyFromObject(l)
		present[key] = true
		if l.Labels[v1alpha1.LabelParent] != "" {
			continue
		}
		switch st := l.Status; {
		case st.Phase == v1alpha1.PhaseRunning || st.Phase == v1alpha1.PhasePaused || st.Phase == v1alpha1.PhaseSuspended && st.StartedAt != nil:
			running++
			delete(q.admitted, key)
		case st.Phase.IsFinished():
			delete(q.admitted, key)
		case st.Phase == "" || st.Phase == v1alpha1.PhasePending:
			if _, ok := q.admitted[key]; !ok && l.DeletionTimestamp.IsZero() {
				waiting = append(waiting, l)
			}
		}
	}
	for key, at := range q.admitted {
		if key.Namespace != ns {
			continue
		}
		if !present[key] || now.Sub(at) > admittedFor {
			delete(q.admitted, key)
			continue
		}
		running++
	}
	return running, waiting
}
