package main

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
)

// A Loop paused on its budget or suspended runs no longer meanwhile: its
// running time stops where it stopped, as an ended one's does.
func TestRunningTimeStopsWhileNothingRuns(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC))
	updated := metav1.NewTime(started.Add(5 * time.Minute))
	now := started.Add(time.Hour)
	for _, tc := range []struct {
		phase v1alpha1.Phase
		want  time.Time
	}{
		{v1alpha1.PhaseRunning, now},
		{v1alpha1.PhasePaused, updated.Time},
		{v1alpha1.PhaseSuspended, updated.Time},
		{v1alpha1.PhaseCompleted, updated.Time},
	} {
		run := &v1alpha1.RunState{Phase: tc.phase, StartedAt: &started, UpdatedAt: &updated}
		if got := runningUntil(run, now); !got.Equal(tc.want) {
			t.Errorf("%s: running until %s, want %s", tc.phase, got, tc.want)
		}
	}
}
