package process

import (
	"sync/atomic"
	"time"
)

// idleWatch says when a command has printed nothing for its idle timeout:
// every byte it prints passes through Write, or (a local run's own output
// files) the files' sizes are looked at.
type idleWatch struct {
	timeout time.Duration
	last    atomic.Int64 // unix nanoseconds of the last output seen
	// sizes, when set, is how much the command has written so far.
	sizes    func() int64
	lastSize int64
}

func newIdleWatch(timeout time.Duration) *idleWatch {
	w := &idleWatch{timeout: timeout}
	w.last.Store(time.Now().UnixNano())
	return w
}

// Write notes output; it never fails.
func (w *idleWatch) Write(p []byte) (int, error) {
	if len(p) > 0 {
		w.last.Store(time.Now().UnixNano())
	}
	return len(p), nil
}

// tick is how often expired is asked.
func (w *idleWatch) tick() time.Duration {
	return min(max(w.timeout/4, 10*time.Millisecond), time.Second)
}

// expired reports whether the command printed nothing for the timeout.
func (w *idleWatch) expired() bool {
	if w.sizes != nil {
		if n := w.sizes(); n != w.lastSize {
			w.lastSize = n
			w.last.Store(time.Now().UnixNano())
		}
	}
	return time.Since(time.Unix(0, w.last.Load())) >= w.timeout
}
