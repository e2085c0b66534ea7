package configmaps

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/history"
)

// A Loop's checkpoints live in its event log: each in the segment that was
// being appended to when it was taken, under CheckpointsKey, so taking one
// costs no extra write. status.checkpoints counts the kept ones (the newest
// history.maxCheckpoints) per segment; once a segment holds none of those,
// its checkpoints are removed from it (one write per segment, not per step).

// index records cp (when not nil) in loop.Status.Checkpoints, forgets
// checkpoints past maxCheckpoints or whose segment is gone, and removes the
// checkpoints of segments that hold no kept one.
func (l *Log) index(ctx context.Context, loop *v1alpha1.Loop, st *v1alpha1.EventLogStatus, cp *history.Checkpoint) error {
	ix := loop.Status.Checkpoints
	if ix == nil {
		if cp == nil {
			return nil
		}
		ix = &v1alpha1.CheckpointIndex{}
		loop.Status.Checkpoints = ix
	}
	if cp != nil && (ix.Latest == nil || ix.Latest.Seq < cp.Seq) {
		ref := cp.Ref(st.LastSegment)
		ix.Latest = &ref
		if n := len(ix.Segments); n > 0 && ix.Segments[n-1].Segment == st.LastSegment {
			seg := &ix.Segments[n-1]
			seg.Kept++
			seg.MinIteration, seg.MaxIteration = min(seg.MinIteration, cp.Iteration), max(seg.MaxIteration, cp.Iteration)
		} else {
			ix.Segments = append(ix.Segments, v1alpha1.CheckpointSegment{
				Segment: st.LastSegment, Kept: 1, MinIteration: cp.Iteration, MaxIteration: cp.Iteration,
			})
		}
	}
	for len(ix.Segments) > 0 && ix.Segments[0].Segment < st.FirstSegment {
		ix.Segments = ix.Segments[1:]
	}
	excess := ix.Count() - int32(min(loop.Spec.GetMaxCheckpoints(), math.MaxInt32)) //nolint:gosec // bounded
	for i := 0; excess > 0 && i < len(ix.Segments); i++ {
		d := min(excess, ix.Segments[i].Kept)
		ix.Segments[i].Kept -= d
		excess -= d
	}
	for len(ix.Segments) > 0 && ix.Segments[0].Kept == 0 {
		if err := l.stripCheckpoints(ctx, loop, st, ix.Segments[0].Segment); err != nil {
			return err
		}
		ix.Segments = ix.Segments[1:]
	}
	if len(ix.Segments) == 0 {
		loop.Status.Checkpoints = nil
	}
	return nil
}

// stripCheckpoints removes the checkpoints from segment n.
func (l *Log) stripCheckpoints(ctx context.Context, loop *v1alpha1.Loop, st *v1alpha1.EventLogStatus, n int32) error {
	cm, err := l.get(ctx, loop, n)
	if err != nil || cm == nil {
		return err
	}
	data, ok := cm.Data[CheckpointsKey]
	if !ok {
		return nil
	}
	delete(cm.Data, CheckpointsKey)
	if err := l.Client.Update(ctx, cm); err != nil {
		return fmt.Errorf("drop old checkpoints from %s: %w", cm.Name, err)
	}
	if n == st.LastSegment {
		l.last.put(client.ObjectKeyFromObject(loop), loop.UID, n, cm, -1)
	}
	st.Bytes -= int64(len(data))
	return nil
}

// lastCheckpointSeqIn reads the sequence number of the last checkpoint in a
// segment's checkpoints, 0 when there are none.
func lastCheckpointSeqIn(data string) int64 {
	data = strings.TrimRight(data, "\n")
	if data == "" {
		return 0
	}
	var c struct {
		Seq int64 `json:"seq"`
	}
	if err := json.Unmarshal([]byte(data[strings.LastIndexByte(data, '\n')+1:]), &c); err != nil {
		return 0
	}
	return c.Seq
}

// checkpointSeq reads the sequence number of one checkpoint line.
func checkpointSeq(line []byte) (int64, bool) {
	_, seq, ok := history.Head(line)
	return seq, ok
}

// Kept is one kept checkpoint as read from its segment: Checkpoint, or Err
// when its line is damaged.
type Kept struct {
	Ref        v1alpha1.CheckpointRef
	Checkpoint *history.Checkpoint
	Err        error
}

// Checkpoints reads a Loop's kept checkpoints, oldest first, each checked
// against its checksum. A segment that is gone is history.ErrMissing.
func Checkpoints(ctx context.Context, r client.Reader, loop *v1alpha1.Loop) ([]Kept, error) {
	var out []Kept
	var segs []v1alpha1.CheckpointSegment
	if ix := loop.Status.Checkpoints; ix != nil {
		segs = ix.Segments
	}
	err := eachKept(ctx, r, loop, segs, false, func(seg int32, line []byte) bool {
		cp, _, err := history.Decode(line)
		k := Kept{Checkpoint: cp, Ref: v1alpha1.CheckpointRef{Segment: seg}}
		if cp != nil {
			k.Ref = cp.Ref(seg)
		}
		if err != nil {
			k.Err = fmt.Errorf("ConfigMap %s: %w", SegmentName(loop.Name, seg), err)
		}
		out = append(out, k)
		return true
	})
	return out, err
}

// FindCheckpoint reads and checks the kept checkpoint of iteration (the
// newest of them when rewinds left several), or the newest checkpoint when
// iteration is nil. One that is not kept is history.ErrMissing; one that
// fails its checksum is a *history.CorruptError.
func FindCheckpoint(ctx context.Context, r client.Reader, loop *v1alpha1.Loop, iteration *int32) (*history.Checkpoint, *v1alpha1.RunState, error) {
	ix := loop.Status.Checkpoints
	if ix == nil || ix.Latest == nil {
		return nil, nil, fmt.Errorf("%w: the run has no checkpoints", history.ErrMissing)
	}
	// The newest line of the latest checkpoint's iteration is the latest.
	want := ix.Latest.Iteration
	if iteration != nil {
		want = *iteration
	}
	// Newest first, only the segments that can hold it.
	var segs []v1alpha1.CheckpointSegment
	for _, s := range slices.Backward(ix.Segments) {
		if s.MinIteration <= want && want <= s.MaxIteration {
			segs = append(segs, s)
		}
	}
	var found []byte
	var seg int32
	bad := 0
	err := eachKept(ctx, r, loop, segs, true, func(s int32, line []byte) bool {
		it, _, ok := history.Head(line)
		switch {
		case !ok:
			bad++
		case it == want:
			found, seg = line, s
			return false
		}
		return true
	})
	if err != nil {
		return nil, nil, err
	}
	if found == nil {
		if bad > 0 {
			return nil, nil, &history.CorruptError{Iteration: want, Seq: -1, Reason: fmt.Sprintf("%d damaged checkpoint line(s) where it could be", bad)}
		}
		lo, hi := ix.Latest.Iteration, ix.Latest.Iteration
		for _, s := range ix.Segments {
			lo, hi = min(lo, s.MinIteration), max(hi, s.MaxIteration)
		}
		return nil, nil, fmt.Errorf("%w: no checkpoint of iteration %d is kept (%d kept, of iterations %d to %d)", history.ErrMissing, want, ix.Count(), lo, hi)
	}
	cp, run, err := history.Decode(found)
	if err != nil {
		return cp, nil, fmt.Errorf("ConfigMap %s, iteration %d: %w", SegmentName(loop.Name, seg), want, err)
	}
	return cp, run, nil
}

// eachKept calls fn with each kept checkpoint line of the segments segs of
// a Loop, in their order, the lines of each oldest first (newest first when
// backward), until fn returns false.
func eachKept(ctx context.Context, r client.Reader, loop *v1alpha1.Loop, segs []v1alpha1.CheckpointSegment, backward bool, fn func(segment int32, line []byte) bool) error {
	for _, s := range segs {
		cm := &corev1.ConfigMap{}
		name := SegmentName(loop.Name, s.Segment)
		if err := r.Get(ctx, client.ObjectKey{Namespace: loop.Namespace, Name: name}, cm); err != nil {
			if client.IgnoreNotFound(err) == nil {
				return fmt.Errorf("%w: ConfigMap %s is gone", history.ErrMissing, name)
			}
			return err
		}
		if !metav1.IsControlledBy(cm, loop) {
			return &ForeignError{Name: name}
		}
		lines := keptLines(cm.Data[CheckpointsKey], int(s.Kept))
		if backward {
			slices.Reverse(lines)
		}
		for _, line := range lines {
			if !fn(s.Segment, []byte(line)) {
				return nil
			}
		}
	}
	return nil
}

// keptLines returns the last n non-empty lines of a segment's checkpoints.
func keptLines(data string, n int) []string {
	var lines []string
	for _, line := range strings.Split(data, "\n") {
		if strings.TrimSpace(line) != "" {
			lines = append(lines, line)
		}
	}
	return lines[max(0, len(lines)-n):]
}

// Rebuild writes a fresh event log for loop (whose status has none yet):
// the events in segments, each checkpoint in the segment being written when
// its turn comes, and the checkpoint index; as a live run would have.
func (l *Log) Rebuild(ctx context.Context, loop *v1alpha1.Loop, events []executor.Event, cps []history.Checkpoint) error {
	loop.Status.EventLog = nil
	loop.Status.Checkpoints = nil
	i := 0
	for c := range cps {
		j := i
		for j < len(events) && events[j].Seq <= cps[c].Seq {
			j++
		}
		if err := l.Append(ctx, loop, events[i:j], &cps[c]); err != nil {
			return err
		}
		i = j
	}
	return l.Append(ctx, loop, events[i:], nil)
}
