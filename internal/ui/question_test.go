package ui

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog"
	"github.com/looprun/looprun/internal/executor"
)

// hostile is an action's output that would run in a page that took it for
// markup.
const hostile = `<script>window.pwned=1</script><img src=x onerror="window.pwned=1">`

const hostileLoop = `name: hostile
initial: build
states:
  build:
    action: printf '%s' '` + hostile + `'
    capture: x
    next: ask
  ask:
    approval:
      message: "ship ${captured.x.output}?"
    on_approved: done
    on_rejected: stop
  done:
    terminal: true
  stop:
    terminal: true
`

// The question a local run waits on is the one the CLI prints (the
// approval_requested event's, its templates expanded over what an action
// printed), not the state's template; markup in it reaches the page as
// JSON text, never as markup.
func TestTheApprovalIsAskedAsTheCLIAsksIt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hostile.yaml")
	if err := os.WriteFile(path, []byte(hostileLoop), 0o644); err != nil {
		t.Fatal(err)
	}
	loops := filepath.Join(dir, ".loops")
	srv := httptest.NewServer((&Server{LoopsDir: loops}).Handler())
	defer srv.Close()
	done := make(chan error, 1)
	go func() { done <- runLoop(dir, path, "build") }()
	var d Detail
	for deadline := time.Now().Add(20 * time.Second); d.Approval == nil && time.Now().Before(deadline); {
		select {
		case err := <-done:
			t.Fatalf("the run ended before its approval: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		d = Detail{}
		get(t, srv, "/api/loops/local/hostile", &d)
	}
	if d.Approval == nil {
		t.Fatal("the run never waited for its approval")
	}
	events, err := eventlog.Read(filepath.Join(loops, ".running", "hostile.events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	cli := ""
	for _, e := range events {
		if e.Type == executor.EventApprovalRequested {
			cli = executor.ApprovalRequestedOf(e).Message // what the CLI prints
		}
	}
	if want := "ship " + hostile + "?"; cli != want || d.Approval.Message != want {
		t.Fatalf("the question %q, the CLI's %q, want %q", d.Approval.Message, cli, want)
	}
	if d.States["ask"].Question != d.Approval.Message {
		t.Errorf("the state's panel asks %q", d.States["ask"].Question)
	}
	resp, err := http.Get(srv.URL + "/api/loops/local/hostile")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("served as %q, %q", ct, resp.Header.Get("X-Content-Type-Options"))
	}
	if s := string(raw); strings.Contains(s, "<script") || strings.Contains(s, "<img") || strings.Contains(s, "${") {
		t.Errorf("the page's data holds markup or a template: %s", s)
	}

	a := d.Approval
	code, body := post(t, srv.URL+"/api/loops/local/hostile/approval",
		fmt.Sprintf(`{"approve": false, "run": %q, "state": %q, "iteration": %d}`, a.Run, a.State, a.Iteration), nil)
	if code != http.StatusOK {
		t.Fatalf("the answer: %d %s", code, body)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A run whose state does not record the question (a state file written
// without it) is asked what its approval_requested event says, or nothing:
// never the state's template.
func TestAnApprovalWithoutItsRecordIsAskedFromItsEvent(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "ask", States: map[string]v1alpha1.State{
		"ask":  {Approval: &v1alpha1.Approval{Message: "ship ${captured.x.output}?"}, OnSuccess: "done", OnFailure: "done"},
		"done": {Terminal: true}}}
	run := &v1alpha1.RunState{RunID: "r1", Phase: v1alpha1.PhaseRunning, CurrentState: "ask", Iteration: 2,
		Action: &v1alpha1.ActionStatus{State: "ask", Iteration: 2}}
	now := time.Now()
	dg := newDigester()
	for i, e := range []executor.Event{
		{Type: executor.EventStateEnter, Data: map[string]any{"state": "ask", "iteration": 1}},
		{Type: executor.EventApprovalRequested, Data: map[string]any{"state": "ask", "message": "ship v1?"}},
		{Type: executor.EventApprovalAnswered, Data: map[string]any{"state": "ask", "verdict": "rejected"}},
		{Type: executor.EventRoute, Data: map[string]any{"from": "ask", "to": "ask"}},
		{Type: executor.EventStateEnter, Data: map[string]any{"state": "ask", "iteration": 2}},
	} {
		e.Seq, e.Time = int64(i+1), now
		dg.add(e)
	}
	s := &Server{}
	// The question of iteration 1 is not the one of iteration 2: none yet.
	if d := s.describeRun(spec, run, Summary{}, dg.digested()); d.Approval == nil || d.Approval.Message != "" {
		t.Fatalf("before its event: %+v", d.Approval)
	}
	dg.add(executor.Event{Seq: 6, Time: now, Type: executor.EventApprovalRequested, Data: map[string]any{"state": "ask", "message": "ship " + hostile + "?"}})
	if d := s.describeRun(spec, run, Summary{}, dg.digested()); d.Approval == nil || d.Approval.Message != "ship "+hostile+"?" {
		t.Fatalf("from its event: %+v", d.Approval)
	}
	// The run's record, when there is one, is the question.
	run.Action.Approval = &v1alpha1.ApprovalWait{Message: "ship v2?"}
	d := s.describeRun(spec, run, Summary{}, dg.digested())
	if d.Approval == nil || d.Approval.Message != "ship v2?" {
		t.Fatalf("from the record: %+v", d.Approval)
	}
	b, _ := json.Marshal(d)
	if strings.Contains(string(b), "${captured") {
		t.Errorf("a template on the page: %s", b)
	}
}
