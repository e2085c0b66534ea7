package controllers

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// A Loop's requests (looprun.io/request) are written by whoever may edit
// it: each refused one says why in a Warning Event, but no more than
// requestEventBurst at once and one per requestEventEvery after that, so
// that a stream of bad requests cannot fill the namespace with Events. The
// rest go to the operator's log.
const (
	requestEventBurst = 5
	requestEventEvery = 30 * time.Second
)

// requestEvents holds a limiter per Loop.
type requestEvents struct {
	mu    sync.Mutex
	loops map[types.NamespacedName]*rate.Limiter
}

func (r *requestEvents) allow(key types.NamespacedName) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.loops == nil {
		r.loops = map[types.NamespacedName]*rate.Limiter{}
	}
	l := r.loops[key]
	if l == nil {
		l = rate.NewLimiter(rate.Every(requestEventEvery), requestEventBurst)
		r.loops[key] = l
	}
	return l.Allow()
}

func (r *requestEvents) drop(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.loops, key)
}

// requestWarning emits the Warning Event of a refused request, within the
// Loop's bound; past it, the operator's log says it.
func (s *step) requestWarning(reason, note string, args ...any) {
	if s.r.requests.allow(client.ObjectKeyFromObject(s.loop)) {
		s.r.event(s.loop, corev1.EventTypeWarning, reason, "Request", note, args...)
		return
	}
	log.Log.WithValues("Loop", client.ObjectKeyFromObject(s.loop)).Info("Request refused (its Event skipped: too many)", "reason", reason)
}
