package controllers

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
)

// An Event's note longer than the API server takes is cut, not lost (an
// approval's long question, a long error).
func TestEventNoteIsCut(t *testing.T) {
	long := strings.Repeat("é", 2000)
	got := eventNote("ship " + long + "?")
	if len(got) > maxEventNote || !utf8.ValidString(got) || !strings.HasSuffix(got, "…(cut)") || !strings.HasPrefix(got, "ship é") {
		t.Fatalf("cut note of %d bytes: %q…", len(got), got[:20])
	}
	if short := "state ask waits"; eventNote(short) != short {
		t.Fatal("a short note changed")
	}
}

// A run annotated with a scheduled time to come (its annotation edited) is
// not taken as the schedule's last run: it would silence it until then.
func TestScheduleIgnoresARunTimeToCome(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 30, 0, time.UTC)
	run := func(name string, at time.Time) *v1alpha1.Loop {
		return &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{AnnotationScheduledTime: at.Format(time.RFC3339)}}}
	}
	sch := &v1alpha1.LoopSchedule{}
	observeRuns(sch, []*v1alpha1.Loop{run("ok", now.Add(-30*time.Second)), run("forged", now.AddDate(1, 0, 0))}, now)
	if got := sch.Status.LastScheduleTime; got == nil || !got.Time.Equal(now.Add(-30*time.Second)) {
		t.Fatalf("last schedule time %v", got)
	}
}
