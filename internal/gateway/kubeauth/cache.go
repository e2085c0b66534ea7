package kubeauth

import (
	"sync"
	"time"
)

// ttlCache is a small map whose entries expire: at most size entries,
// each kept for ttl. When full, expired entries go first, then the one
// that expires soonest. Safe for concurrent use.
type ttlCache[K comparable, V any] struct {
	mu      sync.Mutex
	ttl     time.Duration
	size    int
	now     func() time.Time
	entries map[K]ttlEntry[V]
}

type ttlEntry[V any] struct {
	value   V
	expires time.Time
}

func newTTLCache[K comparable, V any](ttl time.Duration, size int, now func() time.Time) *ttlCache[K, V] {
	return &ttlCache[K, V]{ttl: ttl, size: size, now: now, entries: make(map[K]ttlEntry[V])}
}

// get is the value of k, when it is there and not expired.
func (c *ttlCache[K, V]) get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok || !c.now().Before(e.expires) {
		delete(c.entries, k)
		var zero V
		return zero, false
	}
	return e.value, true
}

// put keeps v as the value of k for the cache's ttl.
func (c *ttlCache[K, V]) put(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if _, ok := c.entries[k]; !ok && len(c.entries) >= c.size {
		c.evict(now)
	}
	c.entries[k] = ttlEntry[V]{value: v, expires: now.Add(c.ttl)}
}

// evict makes room for one entry: it drops the expired ones, or else the
// one that expires soonest (the oldest, all having the same ttl).
func (c *ttlCache[K, V]) evict(now time.Time) {
	var (
		oldest    K
		oldestExp time.Time
		found     bool
	)
	for k, e := range c.entries {
		if !now.Before(e.expires) {
			delete(c.entries, k)
			continue
		}
		if !found || e.expires.Before(oldestExp) {
			oldest, oldestExp, found = k, e.expires, true
		}
	}
	if len(c.entries) >= c.size && found {
		delete(c.entries, oldest)
	}
}
