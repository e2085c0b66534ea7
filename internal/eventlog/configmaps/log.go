// Package configmaps keeps a Loop's event log and checkpoints in a cluster:
// a chain of ConfigMaps <loop>-events-<n> owned by the Loop, each holding
// JSONL (the format of internal/eventlog and internal/history) under one key
// and capped; an append writes one segment, never the whole log.
package configmaps

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/history"
)

// In a cluster the event log is a chain of ConfigMaps <loop>-events-<n>, each
// holding JSONL under one key and owned by the Loop.
const (
	// EventsKey is the ConfigMap key holding a segment's events.
	EventsKey = "events.jsonl"
	// CheckpointsKey is the ConfigMap key holding the checkpoints taken
	// while the segment was the one appended to, one JSON line each.
	CheckpointsKey = "checkpoints.jsonl"
	// DefaultSegmentBytes caps one segment. Every append rewrites the
	// segment it goes to, so the API server and etcd handle half a
	// segment per transition on average: measured on one long Loop, 512
	// KiB segments took the p50 from one action's end to the next one's
	// start from 15 ms to 24 ms.
	DefaultSegmentBytes = 64 << 10
)

// Log appends events to a Loop's event log in ConfigMaps.
type Log struct {
	// Client writes segments; Reader reads them past any cache.
	Client client.Client
	Reader client.Reader
	Scheme *runtime.Scheme
	// SegmentBytes caps a segment (default 64 KiB).
	SegmentBytes int
	// MaxBytes, when positive, deletes the oldest segments past it.
	MaxBytes int64

	// last remembers the segment each Loop appended to last, so the next
	// append needs no read; see segmentCache.
	last segmentCache
}

// SegmentName is the name of segment n of a Loop's log: LOOP-events-N, the
// Loop's name shortened and suffixed with a hash of it when the whole would
// not be a valid name.
func SegmentName(loop string, n int32) string {
	suffix := fmt.Sprintf("-events-%d", n)
	if len(loop)+len(suffix) <= validation.DNS1123SubdomainMaxLength {
		return loop + suffix
	}
	keep := validation.DNS1123SubdomainMaxLength - len(suffix) - 9
	return strings.TrimRight(loop[:keep], "-.") + "-" + v1alpha1.ShortHash(loop) + suffix
}

// Append adds events to the log of loop, with the checkpoint cp when it is
// not nil, and updates loop.Status.EventLog and loop.Status.Checkpoints.
// The status is the truth: what a segment holds past its saved last
// sequence number belongs to a step whose status was never saved, and is
// replaced, so a step taken again writes exactly the events of the step
// that is saved. An append writes one segment (two when it starts a new
// one), never the whole log.
func (l *Log) Append(ctx context.Context, loop *v1alpha1.Loop, events []executor.Event, cp *history.Checkpoint) error {
	if len(events) == 0 && cp == nil {
		return nil
	}
	st := loop.Status.EventLog
	// A log the status has never mentioned has no segment to read: the
	// first segment is created without a read. Should it exist (a first
	// step taken again, or someone else's ConfigMap), creating it fails
	// and the retry reads it.
	fresh := st == nil
	if st == nil {
		st = &v1alpha1.EventLogStatus{FirstSegment: 1, LastSegment: 1}
		loop.Status.EventLog = st
	}
	for attempt := 0; attempt < 3; attempt++ {
		done, err := l.appendOnce(ctx, loop, st, events, cp, fresh && attempt == 0)
		if err != nil {
			return err
		}
		if done {
			if err := l.trim(ctx, loop, st); err != nil {
				return err
			}
			return l.index(ctx, loop, st, cp)
		}
	}
	return fmt.Errorf("event log of %s: segment %d keeps changing", loop.Name, st.LastSegment)
}

// appendOnce tries to append to the current segment; done is false when it
// must be retried (a segment appeared under it).
func (l *Log) appendOnce(ctx context.Context, loop *v1alpha1.Loop, st *v1alpha1.EventLogStatus, events []executor.Event, cp *history.Checkpoint, fresh bool) (bool, error) {
	cm, data, cpData, err := l.saved(ctx, loop, st, fresh)
	if err != nil {
		return false, err
	}
	lines, last, n, err := eventlog.Encode(events, st.LastSeq)
	if err != nil {
		return false, err
	}
	cpLine, err := checkpointLine(cp, cpData)
	if err != nil {
		return false, err
	}
	if n == 0 && cpLine == nil && unchanged(cm, data, cpData) {
		return true, nil
	}
	if cm != nil && (data != "" || cpData != "") && len(data)+len(cpData)+len(lines)+len(cpLine) > l.segmentBytes() {
		// This segment is full: the next one takes the events.
		if done, err := l.close(ctx, loop, st, cm, data, cpData); !done || err != nil {
			return false, err
		}
		cm, data, cpData = nil, "", ""
	}
	written := st.LastSeq
	if n > 0 {
		written = last
	}
	if done, err := l.write(ctx, loop, st.LastSegment, cm, data+lines, cpData+string(cpLine), written); !done || err != nil {
		return false, err
	}
	if st.LastSeq == 0 {
		st.Count = 0
	}
	st.Count += int64(n)
	st.Bytes += int64(len(lines) + len(cpLine))
	if n > 0 {
		st.LastSeq = last
	}
	return true, nil
}

// close ends a full segment: what it held past the saved state goes, and
// the next segment becomes the one appended to. Should the next one exist
// already (a step that was not kept), creating it fails, and the retry
// reads it.
func (l *Log) close(ctx context.Context, loop *v1alpha1.Loop, st *v1alpha1.EventLogStatus, cm *corev1.ConfigMap, data, cpData string) (bool, error) {
	if !unchanged(cm, data, cpData) {
		if done, err := l.write(ctx, loop, st.LastSegment, cm, data, cpData, st.LastSeq); !done || err != nil {
			return false, err
		}
	}
	st.LastSegment++
	return true, nil
}

// unchanged reports whether a segment (nil: none) holds these events and checkpoints.
func unchanged(cm *corev1.ConfigMap, data, cpData string) bool {
	return cm == nil || data == cm.Data[EventsKey] && cpData == cm.Data[CheckpointsKey]
}

// saved reads the segment appended to last, and what of its events and
// checkpoints the saved status knows (what lies past it belongs to a step
// that was not kept). cm is nil when the segment does not exist.
func (l *Log) saved(ctx context.Context, loop *v1alpha1.Loop, st *v1alpha1.EventLogStatus, fresh bool) (cm *corev1.ConfigMap, data, cpData string, err error) {
	if fresh {
		return nil, "", "", nil
	}
	cm, lastSeq, err := l.current(ctx, loop, st.LastSegment)
	if err != nil || cm == nil {
		return cm, "", "", err
	}
	if lastSeq == st.LastSeq {
		// This process wrote the segment, and the status saved all of it:
		// nothing to look for past the saved state.
		return cm, cm.Data[EventsKey], cm.Data[CheckpointsKey], nil
	}
	data, _ = eventlog.KeepThrough(cm.Data[EventsKey], st.LastSeq, eventlog.EventSeq)
	cpData, _ = eventlog.KeepThrough(cm.Data[CheckpointsKey], st.LastSeq, checkpointSeq)
	return cm, data, cpData, nil
}

// checkpointLine renders cp, unless it is nil or the segment's checkpoints
// (cpData) hold it already.
func checkpointLine(cp *history.Checkpoint, cpData string) ([]byte, error) {
	if cp == nil || lastCheckpointSeqIn(cpData) >= cp.Seq {
		return nil, nil
	}
	return cp.Line()
}

// write stores segment n with these events and checkpoints: cm is the
// segment as read (nil: create it). done is false when someone else wrote
// it first (read it and try again).
func (l *Log) write(ctx context.Context, loop *v1alpha1.Loop, n int32, cm *corev1.ConfigMap, events, checkpoints string, lastSeq int64) (bool, error) {
	if cm == nil {
		cm, err := l.newSegment(loop, n, events, checkpoints)
		if err != nil {
			return false, err
		}
		if err := l.Client.Create(ctx, cm); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return false, nil
			}
			return false, fmt.Errorf("create %s: %w", cm.Name, err)
		}
		l.last.put(client.ObjectKeyFromObject(loop), loop.UID, n, cm, lastSeq)
		return true, nil
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[EventsKey] = events
	if checkpoints != "" {
		cm.Data[CheckpointsKey] = checkpoints
	} else {
		delete(cm.Data, CheckpointsKey)
	}
	if err := l.Client.Update(ctx, cm); err != nil {
		l.last.forget(client.ObjectKeyFromObject(loop))
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return false, fmt.Errorf("append to %s: %w", cm.Name, err)
	}
	l.last.put(client.ObjectKeyFromObject(loop), loop.UID, n, cm, lastSeq)
	return true, nil
}

// current returns segment n of a Loop's log: the one remembered from the last
// append when it is that segment, else read from the API server. nil when
// it does not exist.
// lastSeq is the number of the last event in it when this process wrote
// it last (-1: not known).
func (l *Log) current(ctx context.Context, loop *v1alpha1.Loop, n int32) (cm *corev1.ConfigMap, lastSeq int64, err error) {
	if cm, lastSeq := l.last.get(client.ObjectKeyFromObject(loop), loop.UID, n); cm != nil {
		return cm, lastSeq, nil
	}
	cm, err = l.get(ctx, loop, n)
	return cm, -1, err
}

// Forget drops what is remembered of a Loop's log (it finished or went away).
func (l *Log) Forget(key types.NamespacedName) { l.last.forget(key) }

func (l *Log) segmentBytes() int {
	if l.SegmentBytes > 0 {
		return l.SegmentBytes
	}
	return DefaultSegmentBytes
}

func (l *Log) get(ctx context.Context, loop *v1alpha1.Loop, n int32) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	err := l.Reader.Get(ctx, client.ObjectKey{Namespace: loop.Namespace, Name: SegmentName(loop.Name, n)}, cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read event log segment %d: %w", n, err)
	}
	switch owner := metav1.GetControllerOf(cm); {
	case owner != nil && owner.UID == loop.UID:
		return cm, nil
	case owner != nil && owner.Kind == "Loop" && owner.Name == loop.Name:
		// Left by a deleted Loop of the same name, before the garbage
		// collector got to it: it goes now, never read as this Loop's.
		if err := l.Client.Delete(ctx, cm, client.Preconditions{UID: &cm.UID}); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("delete %s, left by a deleted Loop of the same name: %w", cm.Name, err)
		}
		return nil, nil
	}
	return nil, &ForeignError{Name: cm.Name}
}

// ForeignError is a ConfigMap under a segment's name that this Loop does
// not control: it is neither read nor written.
type ForeignError struct{ Name string }

func (e *ForeignError) Error() string {
	return fmt.Sprintf("ConfigMap %s exists and does not belong to this Loop: its event log cannot be written there (delete or rename it)", e.Name)
}

func (l *Log) newSegment(loop *v1alpha1.Loop, n int32, data, checkpoints string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      SegmentName(loop.Name, n),
			Namespace: loop.Namespace,
			Labels:    eventLogLabels(loop),
		},
		Data: map[string]string{EventsKey: data},
	}
	if checkpoints != "" {
		cm.Data[CheckpointsKey] = checkpoints
	}
	if err := controllerutil.SetControllerReference(loop, cm, l.Scheme); err != nil {
		return nil, err
	}
	return cm, nil
}

// trim deletes the oldest segments while the log is larger than
// history.maxEventBytes (or MaxBytes). The segment being appended to is
// always kept.
func (l *Log) trim(ctx context.Context, loop *v1alpha1.Loop, st *v1alpha1.EventLogStatus) error {
	limit := l.MaxBytes
	if h := loop.Spec.History; h != nil && h.MaxEventBytes != nil {
		limit = *h.MaxEventBytes
	}
	for limit > 0 && st.Bytes > limit && st.FirstSegment < st.LastSegment {
		cm, err := l.get(ctx, loop, st.FirstSegment)
		if err != nil {
			return err
		}
		if cm != nil {
			data := cm.Data[EventsKey]
			if err := l.Client.Delete(ctx, cm); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("delete %s: %w", cm.Name, err)
			}
			st.Bytes -= int64(len(data) + len(cm.Data[CheckpointsKey]))
			st.Count -= int64(strings.Count(data, "\n"))
		}
		st.FirstSegment++
	}
	return nil
}

// Read returns the events of the kept segments of a Loop's log, oldest first.
func Read(ctx context.Context, r client.Reader, loop *v1alpha1.Loop) ([]executor.Event, error) {
	st := loop.Status.EventLog
	if st == nil {
		return nil, nil
	}
	evs, _, err := ReadSince(ctx, r, loop, st.FirstSegment, 0)
	return evs, err
}

// ReadSince returns the events numbered after afterSeq in the kept segments
// from segment from on (a reader following the log reads the segment it
// read last, and any after it, not the whole log), and the last segment
// read.
func ReadSince(ctx context.Context, r client.Reader, loop *v1alpha1.Loop, from int32, afterSeq int64) ([]executor.Event, int32, error) {
	st := loop.Status.EventLog
	if st == nil {
		return nil, from, nil
	}
	var out []executor.Event
	for n := max(from, st.FirstSegment); n <= st.LastSegment; n++ {
		cm := &corev1.ConfigMap{}
		err := r.Get(ctx, client.ObjectKey{Namespace: loop.Namespace, Name: SegmentName(loop.Name, n)}, cm)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, from, err
		}
		if !metav1.IsControlledBy(cm, loop) {
			return nil, from, &ForeignError{Name: cm.Name}
		}
		// Past the saved last sequence number: a step that was not kept.
		data, _ := eventlog.KeepThrough(cm.Data[EventsKey], st.LastSeq, eventlog.EventSeq)
		evs, err := eventlog.Decode(data)
		if err != nil {
			return nil, from, fmt.Errorf("%s: %w", cm.Name, err)
		}
		for _, e := range evs {
			if e.Seq > afterSeq {
				out = append(out, e)
			}
		}
	}
	return out, max(from, st.LastSegment), nil
}

func eventLogLabels(loop *v1alpha1.Loop) map[string]string {
	l := v1alpha1.ChildLabels(loop)
	l[v1alpha1.LabelEventLog] = "true"
	return l
}
