package configmaps

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/history"
)

// TestCheckpointIndex appends a checkpoint per step across several
// segments and checks the small index in the status against what the
// segments hold.
func TestCheckpointIndex(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	ctx := t.Context()
	three := int32(3)
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Name: "count", Namespace: "ns", UID: "u1"},
		Spec: v1alpha1.LoopSpec{History: &v1alpha1.HistorySpec{MaxCheckpoints: &three}}}
	log := &Log{Client: c, Reader: c, Scheme: scheme, SegmentBytes: 1500}
	var seq int64
	step := func(iteration int32) {
		t.Helper()
		var events []executor.Event
		for range 3 {
			seq++
			events = append(events, executor.Event{Seq: seq, Type: "state_enter", Time: time.Now()})
		}
		run := &v1alpha1.RunState{RunID: "r", CurrentState: "inc", Iteration: iteration, Phase: v1alpha1.PhaseRunning, LastSeq: seq}
		cp, err := history.Take(loop.Name, run, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := log.Append(ctx, loop, events, cp); err != nil {
			t.Fatal(err)
		}
	}
	for it := int32(1); it <= 8; it++ {
		step(it)
	}
	// A rewind to iteration 7 runs it again: its newest checkpoint wins.
	step(7)

	ix := loop.Status.Checkpoints
	if ix == nil || ix.Count() != 3 || ix.Latest == nil || ix.Latest.Iteration != 7 || ix.Latest.Seq != seq {
		t.Fatalf("index: %+v", ix)
	}
	if ix.Latest.Segment != loop.Status.EventLog.LastSegment || loop.Status.EventLog.LastSegment < 3 {
		t.Fatalf("the 1500-byte segments should have moved on: %+v, log %+v", ix, loop.Status.EventLog)
	}
	kept, err := Checkpoints(ctx, c, loop)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range kept {
		if k.Err != nil {
			t.Fatal(k.Err)
		}
		got = append(got, fmt.Sprintf("%d@%d", k.Ref.Iteration, k.Ref.Segment))
	}
	if len(got) != 3 || kept[0].Ref.Iteration != 7 || kept[1].Ref.Iteration != 8 || kept[2].Ref.Iteration != 7 {
		t.Fatalf("kept: %v", got)
	}
	// Segments holding no kept checkpoint lost theirs.
	for n := int32(1); n < ix.Segments[0].Segment; n++ {
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: SegmentName("count", n)}, cm); err != nil {
			t.Fatal(err)
		}
		if _, ok := cm.Data[CheckpointsKey]; ok {
			t.Errorf("segment %d still holds checkpoints", n)
		}
	}

	seven, eight, two := int32(7), int32(8), int32(2)
	if cp, _, err := FindCheckpoint(ctx, c, loop, &seven); err != nil || cp.Seq != seq {
		t.Errorf("iteration 7 should be the rewound one (seq %d): %+v %v", seq, cp, err)
	}
	if cp, run, err := FindCheckpoint(ctx, c, loop, &eight); err != nil || run.Iteration != 8 || cp.Iteration != 8 {
		t.Errorf("iteration 8: %+v %v", cp, err)
	}
	if cp, _, err := FindCheckpoint(ctx, c, loop, nil); err != nil || cp.Seq != seq {
		t.Errorf("newest: %+v %v", cp, err)
	}
	if _, _, err := FindCheckpoint(ctx, c, loop, &two); !errors.Is(err, history.ErrMissing) {
		t.Errorf("iteration 2 is no longer kept: %v", err)
	}
}

// TestCheckpointIndexStaysSmall: the index in the status does not grow with
// the checkpoints kept (every status write costs the API server in
// proportion to the status).
func TestCheckpointIndexStaysSmall(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Name: "long", Namespace: "ns", UID: "u2"}}
	log := &Log{Client: c, Reader: c, Scheme: scheme}
	for it := int32(1); it <= 150; it++ {
		run := &v1alpha1.RunState{CurrentState: "inc", Iteration: it, Phase: v1alpha1.PhaseRunning, LastSeq: int64(it)}
		cp, err := history.Take(loop.Name, run, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		ev := []executor.Event{{Seq: int64(it), Type: "route", Time: time.Now()}}
		if err := log.Append(t.Context(), loop, ev, cp); err != nil {
			t.Fatal(err)
		}
	}
	b, err := json.Marshal(loop.Status.Checkpoints)
	if err != nil {
		t.Fatal(err)
	}
	if ix := loop.Status.Checkpoints; ix.Count() != 100 || len(b) > 300 {
		t.Errorf("index of %d checkpoints takes %d bytes of status: %s", ix.Count(), len(b), b)
	}
}
