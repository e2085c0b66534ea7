package eventlog

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
// A stale entry costs a conflict and a read, never a lost event. It holds at
// most segmentCacheBytes, least recently used out first, and a finished
// Loop's entry is dropped, so idle Loops cost nothing here.
type segmentCache struct {
	mu    sync.Mutex
	order *list.List // of *cachedSegment, most recent first
	byUID map[types.UID]*list.Element
	bytes int
}

type cachedSegment struct {
	uid types.UID
	n   int32
	cm  *corev1.ConfigMap
}

func (c *segmentCache) get(uid types.UID, n int32) *corev1.ConfigMap {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byUID[uid]
	if !ok {
		return nil
	}
	s := e.Value.(*cachedSegment)
	if s.n != n {
		return nil
	}
	c.order.MoveToFront(e)
	return s.cm.DeepCopy()
}

func (c *segmentCache) put(uid types.UID, n int32, cm *corev1.ConfigMap) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byUID == nil {
		c.byUID, c.order = map[types.UID]*list.Element{}, list.New()
	}
	c.removeLocked(uid)
	s := &cachedSegment{uid: uid, n: n, cm: cm.DeepCopy()}
	c.byUID[uid] = c.order.PushFront(s)
	c.bytes += size(s.cm)
	for c.bytes > segmentCacheBytes && c.order.Len() > 1 {
		c.removeLocked(c.order.Back().Value.(*cachedSegment).uid)
	}
}

func (c *segmentCache) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(uid)
}

func (c *segmentCache) removeLocked(uid types.UID) {
	if e, ok := c.byUID[uid]; ok {
		c.bytes -= size(e.Value.(*cachedSegment).cm)
		c.order.Remove(e)
		delete(c.byUID, uid)
	}
}

func size(cm *corev1.ConfigMap) int { return len(cm.Data[EventsKey]) }
