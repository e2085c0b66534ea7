package cloudevents

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
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

// The sink's credentials come from a file of headers, read for each event:
// a rotated Secret is used from the next event on; a file that does not
// read is a failed delivery, not an event sent without them.
func TestSinkHeadersFile(t *testing.T) {
	var got atomic.Value
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Store(r.Header.Clone()) }))
	defer sink.Close()
	file := filepath.Join(t.TempDir(), "headers")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("# the collector's token\nAuthorization: Bearer one\n\nx-tenant:  team-a \n")
	s := NewSink(sink.URL, 1)
	s.HeadersFile, s.Tries, s.Backoff = file, 1, time.Millisecond
	s.deliver(context.Background(), Event{Type: TypeStarted, ID: "1", Data: map[string]any{}})
	h, _ := got.Load().(http.Header)
	if h.Get("Authorization") != "Bearer one" || h.Get("X-Tenant") != "team-a" || h.Get("Ce-Id") != "1" {
		t.Fatalf("headers %v", h)
	}
	write("Authorization: Bearer two\n")
	s.deliver(context.Background(), Event{Type: TypeStarted, ID: "2", Data: map[string]any{}})
	if h, _ := got.Load().(http.Header); h.Get("Authorization") != "Bearer two" || h.Get("X-Tenant") != "" {
		t.Fatalf("after rotation: %v", h)
	}
	write("Authorization Bearer three\n")
	s.deliver(context.Background(), Event{Type: TypeStarted, ID: "3", Data: map[string]any{}})
	if h, _ := got.Load().(http.Header); h.Get("Ce-Id") != "2" {
		t.Fatalf("an event went out with a malformed headers file: %v", h)
	}
	for _, bad := range []string{"", "# only a comment\n", "no colon\n", "Ce-Id: 7\n", "content-type: text/plain\n", "Bad Name: x\n", "X: a\x00b\n"} {
		write(bad)
		if _, err := ReadHeaders(file); err == nil {
			t.Errorf("%q: read as headers", bad)
		} else if strings.Contains(err.Error(), "a\x00b") {
			t.Errorf("the error shows the value (a credential): %v", err)
		}
	}
}
