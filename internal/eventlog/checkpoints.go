package eventlog

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/history"
)

// A Loop's checkpoints live in its event log: each in the segment that was
// being appended to when it was taken, under CheckpointsKey, so taking one
// costs no extra write. status.checkpoints indexes the newest
// history.maxCheckpoints; once a segment holds none of those, its
// checkpoints are removed from it (one write per segment, not per step).

// index records cp (when not nil) in loop.Status.Checkpoints, drops entries
// past maxCheckpoints or whose segment is gone, and removes checkpoints no
// longer indexed from the segments that hold only those.
func (l *ConfigMaps) index(ctx context.Context, loop *v1alpha1.Loop, st *v1alpha1.EventLogStatus, cp *history.Checkpoint) error {
	refs := loop.Status.Checkpoints
	if cp != nil && (len(refs) == 0 || refs[len(refs)-1].Seq < cp.Seq) {
		refs = append(refs, cp.Ref(st.LastSegment))
		if st.CheckpointSegment == 0 {
			st.CheckpointSegment = st.LastSegment
		}
	}
	for len(refs) > 0 && refs[0].Segment < st.FirstSegment {
		refs = refs[1:]
	}
	if max := loop.Spec.GetMaxCheckpoints(); len(refs) > max {
		refs = refs[len(refs)-max:]
	}
	loop.Status.Checkpoints = append([]v1alpha1.CheckpointRef(nil), refs...)
	if st.CheckpointSegment < st.FirstSegment && st.CheckpointSegment != 0 {
		st.CheckpointSegment = st.FirstSegment
	}
	if len(refs) == 0 {
		return nil
	}
	for st.CheckpointSegment != 0 && st.CheckpointSegment < refs[0].Segment {
		if err := l.stripCheckpoints(ctx, loop, st, st.CheckpointSegment); err != nil {
			return err
		}
		st.CheckpointSegment++
	}
	return nil
}

// stripCheckpoints removes the checkpoints from segment n.
func (l *ConfigMaps) stripCheckpoints(ctx context.Context, loop *v1alpha1.Loop, st *v1alpha1.EventLogStatus, n int32) error {
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
		l.last.put(loop.UID, n, cm)
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

// ReadCheckpoint reads and checks the checkpoint ref names. A segment that
// is gone or a checkpoint not in it is history.ErrMissing; one that fails
// its checksum is a *history.CorruptError.
func ReadCheckpoint(ctx context.Context, r client.Reader, loop *v1alpha1.Loop, ref v1alpha1.CheckpointRef) (*history.Checkpoint, *v1alpha1.RunState, error) {
	cm := &corev1.ConfigMap{}
	name := SegmentName(loop.Name, ref.Segment)
	if err := r.Get(ctx, client.ObjectKey{Namespace: loop.Namespace, Name: name}, cm); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, nil, fmt.Errorf("%w: checkpoint of iteration %d: ConfigMap %s is gone", history.ErrMissing, ref.Iteration, name)
		}
		return nil, nil, err
	}
	cp, run, err := history.Find([]byte(cm.Data[CheckpointsKey]), ref.Seq)
	if err != nil {
		return cp, nil, fmt.Errorf("ConfigMap %s, iteration %d: %w", name, ref.Iteration, err)
	}
	return cp, run, nil
}

// Rebuild writes a fresh event log for loop (whose status has none yet):
// the events in segments, each checkpoint in the segment being written when
// its turn comes, and the checkpoint index; as a live run would have.
func (l *ConfigMaps) Rebuild(ctx context.Context, loop *v1alpha1.Loop, events []executor.Event, cps []history.Checkpoint) error {
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
