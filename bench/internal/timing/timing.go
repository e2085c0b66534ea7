// Package timing holds what the operator benchmarks share: a timer of the
// gap between one action's end and the next action's start per Loop, the
// local runner wrapped to feed it, and percentiles.
package timing

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner/local"
)

// Gaps times each Loop's gap from its previous action's end to its next start.
type Gaps struct {
	mu    sync.Mutex
	ended map[string]time.Time
	gaps  []time.Duration
}

// End records when the Loop's action ended.
func (g *Gaps) End(loop string, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ended == nil {
		g.ended = map[string]time.Time{}
	}
	g.ended[loop] = at
}

// Start records that the Loop's next action starts now.
func (g *Gaps) Start(loop string) {
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if e, ok := g.ended[loop]; ok {
		g.gaps = append(g.gaps, now.Sub(e))
		delete(g.ended, loop)
	}
}

// Take returns the gaps measured so far and starts over.
func (g *Gaps) Take() []time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := g.gaps
	g.gaps = nil
	return out
}

// Local wraps the local runner: an action's end is when its process ended,
// its start when the controller starts it.
type Local struct {
	*local.Actions
	Gaps *Gaps
}

// Start implements runner.Runner.
func (t Local) Start(ctx context.Context, loop *v1alpha1.Loop, a executor.Action) (time.Duration, error) {
	t.Gaps.Start(loop.Namespace + "/" + loop.Name)
	return t.Actions.Start(ctx, loop, a)
}

// Release implements runner.Runner; it is called right after the result is
// used.
func (t Local) Release(loop *v1alpha1.Loop, iteration int32) {
	if at := t.EndedAt(loop, iteration); !at.IsZero() {
		t.Gaps.End(loop.Namespace+"/"+loop.Name, at)
	}
	t.Actions.Release(loop, iteration)
}

// Percentile returns the p-th percentile (nearest rank) of d.
func Percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[i]
}
