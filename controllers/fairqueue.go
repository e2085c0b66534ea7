package controllers

import (
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// fairQueue is the order in which a controller's workers take their work:
// namespaces take turns, one item each, and within a namespace items go
// in the order they came. A tenant with a thousand objects due at once has
// a thousand turns of its own; another namespace's one object waits behind
// at most one item of each namespace ahead of it, never behind the
// thousand. It is the storage of a client-go work queue, which keeps the
// rest of its contract (an item queued once however often it is added, and
// never to two workers at once).
type fairQueue struct {
	items map[string][]reconcile.Request
	// turns are the namespaces with items, in the order they take them.
	turns []string
	n     int
}

var _ workqueue.Queue[reconcile.Request] = &fairQueue{}

func (q *fairQueue) Touch(reconcile.Request) {}

func (q *fairQueue) Push(item reconcile.Request) {
	if q.items == nil {
		q.items = map[string][]reconcile.Request{}
	}
	ns := item.Namespace
	if len(q.items[ns]) == 0 {
		q.turns = append(q.turns, ns)
	}
	q.items[ns] = append(q.items[ns], item)
	q.n++
}

func (q *fairQueue) Len() int { return q.n }

func (q *fairQueue) Pop() reconcile.Request {
	ns := q.turns[0]
	q.turns[0] = ""
	q.turns = q.turns[1:]
	line := q.items[ns]
	item := line[0]
	line[0] = reconcile.Request{}
	if line = line[1:]; len(line) > 0 {
		q.items[ns] = line
		q.turns = append(q.turns, ns)
	} else {
		delete(q.items, ns)
	}
	q.n--
	return item
}

// newFairQueue is a controller's rate-limited, delaying work queue over a
// fairQueue (controller.Options.NewQueue).
func newFairQueue(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	base := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[reconcile.Request]{Name: name, Queue: &fairQueue{}})
	delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[reconcile.Request]{Name: name, Queue: base})
	return workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Name: name, DelayingQueue: delaying})
}
