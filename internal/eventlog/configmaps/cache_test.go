package configmaps

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func key(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }

func TestSegmentCache(t *testing.T) {
	var c segmentCache
	cm := func(n int) *corev1.ConfigMap {
		return &corev1.ConfigMap{Data: map[string]string{EventsKey: strings.Repeat("x", n)}}
	}
	c.put(key("a"), "u1", 1, cm(10), 7)
	if got, seq := c.get(key("a"), "u1", 1); got == nil || len(got.Data[EventsKey]) != 10 || seq != 7 {
		t.Fatalf("get = %v", got)
	}
	if first(c.get(key("a"), "u1", 2)) != nil {
		t.Error("another segment number must miss")
	}
	got := first(c.get(key("a"), "u1", 1))
	got.Data[EventsKey] = "changed"
	if first(c.get(key("a"), "u1", 1)).Data[EventsKey] == "changed" {
		t.Error("the cache handed out its own copy")
	}
	c.put(key("a"), "u2", 1, cm(10), -1)
	if first(c.get(key("a"), "u1", 1)) != nil || c.len() != 1 {
		t.Error("a Loop recreated under the same name saw its predecessor's segment")
	}
	c.forget(key("a"))
	if first(c.get(key("a"), "u1", 1)) != nil || c.bytes != 0 {
		t.Errorf("after forget: %d bytes", c.bytes)
	}
	// The byte bound evicts the least recently used.
	c.put(key("old"), "u1", 1, cm(segmentCacheBytes/2), -1)
	c.put(key("mid"), "u1", 1, cm(segmentCacheBytes/2), -1)
	_ = first(c.get(key("old"), "u1", 1))
	c.put(key("new"), "u1", 1, cm(segmentCacheBytes/2), -1)
	if first(c.get(key("mid"), "u1", 1)) != nil || first(c.get(key("old"), "u1", 1)) == nil || first(c.get(key("new"), "u1", 1)) == nil || c.bytes > segmentCacheBytes {
		t.Errorf("eviction kept the wrong entries (%d bytes)", c.bytes)
	}
}

func first(cm *corev1.ConfigMap, _ int64) *corev1.ConfigMap { return cm }
