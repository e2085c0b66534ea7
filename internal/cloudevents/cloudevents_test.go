package cloudevents

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// A sink that redirects is a sink that refused: its events never go where
// the redirect points.
func TestCloudEventsSinkDoesNotFollowRedirects(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL, http.StatusTemporaryRedirect)
	}))
	defer sink.Close()
	s := NewSink(sink.URL, 1)
	s.Tries, s.Backoff = 2, time.Millisecond
	s.deliver(context.Background(), Event{Type: TypeStarted, ID: "1", Data: map[string]any{}})
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the redirect was followed %d times", n)
	}
}

// A Loop's milestones are CloudEvents, with the Loop's name, run and
// state; its other events are not, nor a spent budget that does not pause
// the run.
func TestOfMilestones(t *testing.T) {
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Name: "fix", Namespace: "team", UID: "u-1"}}
	loop.Status.RunState = v1alpha1.RunState{RunID: "r1", Phase: v1alpha1.PhaseRunning, CurrentState: "ask", Iteration: 3}
	asked := executor.Event{Seq: 7, Type: executor.EventApprovalRequested, Time: at,
		Data: executor.ApprovalRequestedEvent{State: "ask", Message: "ship?"}.Data()}
	ce, ok := Of(loop, asked)
	if !ok || ce.Type != TypeApproval || ce.ID != "u-1-7" || ce.Subject != "fix" || !ce.Time.Equal(at) ||
		ce.Source != "/apis/looprun.io/v1alpha1/namespaces/team/loops/fix" {
		t.Fatalf("approval requested: %+v %v", ce, ok)
	}
	if ce.Data["message"] != "ship?" || ce.Data["runID"] != "r1" || ce.Data["state"] != "ask" || ce.Data["iteration"] != int32(3) {
		t.Errorf("data %v", ce.Data)
	}
	spent := executor.Event{Type: executor.EventBudgetExceeded, Data: executor.BudgetExceededEvent{State: "ask", Action: "stop"}.Data()}
	if _, ok := Of(loop, spent); ok {
		t.Error("a spent budget that does not pause the run is a milestone")
	}
	loop.Status.Phase = v1alpha1.PhasePaused
	if ce, ok := Of(loop, spent); !ok || ce.Type != TypePaused {
		t.Errorf("a run paused on its budget: %+v %v", ce, ok)
	}
	if _, ok := Of(loop, executor.Event{Type: executor.EventRoute, Data: executor.RouteEvent{From: "a", To: "b"}.Data()}); ok {
		t.Error("a route is a milestone")
	}
}
