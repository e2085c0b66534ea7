package configmaps

import (
	"container/list"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// segmentCacheBytes bounds what the cache holds in all.
const segmentCacheBytes = 32 << 20

// segmentCache remembers, per Loop, the segment it appended to last, with
// its resourceVersion: the next append updates it without reading it first.
// Entries are keyed by namespace and name, and hold the Loop's UID: a Loop
// recreated under the same name never sees its predecessor's segment.
// A stale entry costs a conflict and a read, never a lost event. It holds at
// most segmentCacheBytes, least recently used out first, and a finished
// Loop's entry is dropped, so idle Loops cost nothing here.
type segmentCache struct {
	mu    sync.Mutex
	order *list.List // of *cachedSegment, most recent first
	byKey map[types.NamespacedName]*list.Element
	bytes int
}

type cachedSegment struct {
	key types.NamespacedName
	uid types.UID
	n   int32
	cm  *corev1.ConfigMap
	// lastSeq is the number of the last event this process wrote in the
	// segment (its events and checkpoints end there); -1 when not known.
	lastSeq int64
}

// get returns the Loop's segment n if it is the one remembered, and the
// number of the last event in it (-1: not known).
func (c *segmentCache) get(key types.NamespacedName, uid types.UID, n int32) (*corev1.ConfigMap, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[key]
	if !ok {
		return nil, -1
	}
	s := e.Value.(*cachedSegment)
	if s.n != n || s.uid != uid {
		return nil, -1
	}
	c.order.MoveToFront(e)
	return s.cm.DeepCopy(), s.lastSeq
}

func (c *segmentCache) put(key types.NamespacedName, uid types.UID, n int32, cm *corev1.ConfigMap, lastSeq int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byKey == nil {
		c.byKey, c.order = map[types.NamespacedName]*list.Element{}, list.New()
	}
	c.removeLocked(key)
	s := &cachedSegment{key: key, uid: uid, n: n, cm: cm.DeepCopy(), lastSeq: lastSeq}
	c.byKey[key] = c.order.PushFront(s)
	c.bytes += size(s.cm)
	for c.bytes > segmentCacheBytes && c.order.Len() > 1 {
		c.removeLocked(c.order.Back().Value.(*cachedSegment).key)
	}
}

func (c *segmentCache) forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(key)
}

// len is how many Loops have an entry.
func (c *segmentCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byKey)
}

func (c *segmentCache) removeLocked(key types.NamespacedName) {
	if e, ok := c.byKey[key]; ok {
		c.bytes -= size(e.Value.(*cachedSegment).cm)
		c.order.Remove(e)
		delete(c.byKey, key)
	}
}

func size(cm *corev1.ConfigMap) int { return len(cm.Data[EventsKey]) }
