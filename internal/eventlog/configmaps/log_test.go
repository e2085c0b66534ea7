package configmaps

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

func newLog(t *testing.T, objs ...client.Object) (*Log, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	return &Log{Client: c, Reader: c, Scheme: scheme, SegmentBytes: 600}, c
}

func events(from, to int64, typ string) []executor.Event {
	var out []executor.Event
	for s := from; s <= to; s++ {
		out = append(out, executor.Event{Seq: s, Type: typ, Time: time.Unix(s, 0).UTC()})
	}
	return out
}

func newLoop(name string) *v1alpha1.Loop {
	return &v1alpha1.Loop{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Loop"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: "u1"}}
}

// A step whose status was never saved (a conflict, a crash) is taken again,
// with other events under the same numbers: the log holds exactly the
// events of the step that is saved, across segments too.
func TestAppendReplacesWhatWasNotSaved(t *testing.T) {
	log, c := newLog(t)
	loop := newLoop("count")
	if err := log.Append(t.Context(), loop, events(1, 3, "saved"), nil); err != nil {
		t.Fatal(err)
	}
	saved := loop.Status.DeepCopy()
	for attempt := range 3 { // three unsaved tries, each filling more than a segment
		if err := log.Append(t.Context(), loop, events(4, 4+int64(attempt)*4, fmt.Sprintf("lost-%d", attempt)), nil); err != nil {
			t.Fatal(err)
		}
		loop.Status = *saved.DeepCopy()
	}
	if err := log.Append(t.Context(), loop, events(4, 12, "kept"), nil); err != nil {
		t.Fatal(err)
	}
	got, err := Read(t.Context(), c, loop)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 12 {
		t.Fatalf("%d events, want 12", len(got))
	}
	for i, e := range got {
		want := "kept"
		if i < 3 {
			want = "saved"
		}
		if e.Seq != int64(i+1) || e.Type != want {
			t.Errorf("event %d: seq %d type %s, want %s", i, e.Seq, e.Type, want)
		}
	}
	if st := loop.Status.EventLog; st.LastSeq != 12 || st.Count != 12 {
		t.Errorf("status %+v", st)
	}
}

// Events past the saved last sequence number are not read back.
func TestReadStopsAtTheSavedSeq(t *testing.T) {
	log, c := newLog(t)
	loop := newLoop("count")
	if err := log.Append(t.Context(), loop, events(1, 2, "saved"), nil); err != nil {
		t.Fatal(err)
	}
	saved := loop.Status.DeepCopy()
	if err := log.Append(t.Context(), loop, events(3, 4, "lost"), nil); err != nil {
		t.Fatal(err)
	}
	loop.Status = *saved
	got, err := Read(t.Context(), c, loop)
	if err != nil || len(got) != 2 {
		t.Fatalf("read %d events: %v", len(got), err)
	}
}

// A ConfigMap under a segment's name that the Loop does not control is
// neither written nor read; one left by a deleted Loop of the same name goes.
func TestSegmentsBelongToTheirLoop(t *testing.T) {
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "victim-events-1", Namespace: "ns"},
		Data: map[string]string{EventsKey: `{"event":"forged","seq":1000}` + "\n"}}
	old := newLoop("reborn")
	old.UID = "old-uid"
	leftover := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "reborn-events-1", Namespace: "ns",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(old, v1alpha1.GroupVersion.WithKind("Loop"))}},
		Data: map[string]string{EventsKey: `{"event":"old-run","seq":1}` + "\n"}}
	log, c := newLog(t, foreign, leftover)

	victim := newLoop("victim")
	err := log.Append(t.Context(), victim, events(1, 2, "mine"), nil)
	var fe *ForeignError
	if !errors.As(err, &fe) || fe.Name != "victim-events-1" {
		t.Fatalf("append over a foreign ConfigMap: %v", err)
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(foreign), cm); err != nil || !strings.Contains(cm.Data[EventsKey], "forged") || strings.Contains(cm.Data[EventsKey], "mine") {
		t.Errorf("the foreign ConfigMap changed: %v %q", err, cm.Data[EventsKey])
	}
	victim.Status.EventLog = &v1alpha1.EventLogStatus{FirstSegment: 1, LastSegment: 1, LastSeq: 1000}
	if _, err := Read(t.Context(), c, victim); !errors.As(err, &fe) {
		t.Errorf("read of a foreign segment: %v", err)
	}

	reborn := newLoop("reborn")
	if err := log.Append(t.Context(), reborn, events(1, 2, "new-run"), nil); err != nil {
		t.Fatal(err)
	}
	got, err := Read(t.Context(), c, reborn)
	if err != nil || len(got) != 2 || got[0].Type != "new-run" {
		t.Errorf("a recreated Loop's log: %+v %v", got, err)
	}
}

// Segment names and labels are valid whatever the Loop's name.
func TestLongLoopNames(t *testing.T) {
	log, c := newLog(t)
	for _, name := range []string{strings.Repeat("a", 63) + "b", strings.Repeat("x.", 120) + "y"} {
		loop := newLoop(name)
		if err := log.Append(t.Context(), loop, events(1, 2, "e"), nil); err != nil {
			t.Fatalf("%d characters: %v", len(name), err)
		}
		seg := SegmentName(name, 1)
		if errs := validation.IsDNS1123Subdomain(seg); len(errs) > 0 {
			t.Errorf("segment name %q: %v", seg, errs)
		}
		cm := &corev1.ConfigMap{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: seg}, cm); err != nil {
			t.Fatal(err)
		}
		if errs := validation.IsValidLabelValue(cm.Labels[v1alpha1.LabelLoop]); len(errs) > 0 {
			t.Errorf("label %q: %v", cm.Labels[v1alpha1.LabelLoop], errs)
		}
	}
	if SegmentName(strings.Repeat("a", 250)+"1", 1) == SegmentName(strings.Repeat("a", 250)+"2", 1) {
		t.Error("two long names share a segment")
	}
}

// The first append of a Loop creates its first segment without reading it;
// a first step taken again (its status never saved) finds the segment there
// and replaces what it held.
func TestFirstAppendReadsNothing(t *testing.T) {
	log, c := newLog(t)
	var gets int
	log.Reader = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			gets++
			return cl.Get(ctx, key, obj, opts...)
		},
	})
	loop := newLoop("count")
	if err := log.Append(t.Context(), loop, events(1, 2, "lost"), nil); err != nil {
		t.Fatal(err)
	}
	if gets != 0 {
		t.Errorf("the first append read %d times", gets)
	}
	loop.Status = v1alpha1.LoopStatus{}
	if err := log.Append(t.Context(), loop, events(1, 3, "kept"), nil); err != nil {
		t.Fatal(err)
	}
	got, err := Read(t.Context(), c, loop)
	if err != nil || len(got) != 3 || got[0].Type != "kept" {
		t.Fatalf("read %+v: %v", got, err)
	}
}
