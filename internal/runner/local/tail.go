package local

import "sync"

// tailBuffer keeps the last max bytes written to it in a ring, so an action
// that prints without end costs a fixed amount of memory and time per byte.
type tailBuffer struct {
	mu    sync.Mutex
	ring  []byte
	max   int
	pos   int // next write position once the ring is full
	full  bool
	total int64
}

func newTailBuffer(max int) *tailBuffer {
	return &tailBuffer{max: max}
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	t.total += int64(n)
	if !t.full {
		room := t.max - len(t.ring)
		if len(p) <= room {
			t.ring = append(t.ring, p...)
			return n, nil
		}
		t.ring = append(t.ring, p[:room]...)
		p = p[room:]
		t.full = true
		t.pos = 0
	}
	if len(p) >= t.max {
		copy(t.ring, p[len(p)-t.max:])
		t.pos = 0
		return n, nil
	}
	c := copy(t.ring[t.pos:], p)
	if c < len(p) {
		copy(t.ring, p[c:])
	}
	t.pos = (t.pos + len(p)) % t.max
	return n, nil
}

// String returns what is kept, oldest byte first.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.full {
		return string(t.ring)
	}
	return string(t.ring[t.pos:]) + string(t.ring[:t.pos])
}

// Truncated reports whether bytes were dropped.
func (t *tailBuffer) Truncated() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total > int64(len(t.ring))
}
