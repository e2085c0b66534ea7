package ui

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const askLoop = `name: ask
initial: ask
context:
  version: "1.2"
states:
  ask:
    approval:
      message: ship ${context.version}?
    on_approved: done
    on_rejected: stop
  done:
    terminal: true
  stop:
    terminal: true
`

// post sends an answer as the page does (JSON, AnswerHeader) unless
// headers say otherwise, and returns the status and body.
func post(t *testing.T, url string, body string, headers map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(AnswerHeader, "1")
	for k, v := range headers {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	if h := headers["Host"]; h != "" {
		req.Host = h
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// An approval a local run waits for: the page says who may answer and
// shows the buttons; an answer from the page goes where looprun approve
// writes it and the run goes on; a request another site's page could send
// (no header, a form, another host name) answers nothing.
func TestAnswerALocalApprovalOnThePage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ask.yaml")
	if err := os.WriteFile(path, []byte(askLoop), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer((&Server{LoopsDir: filepath.Join(dir, ".loops"), User: "ana"}).Handler())
	defer srv.Close()
	base := srv.URL + "/api/loops/local/ask"

	done := make(chan error, 1)
	go func() { done <- runLoop(dir, path, "ask") }()
	var d Detail
	deadline := time.Now().Add(20 * time.Second)
	for d.Approval == nil && time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("the run ended before its approval: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		d = Detail{}
		get(t, srv, "/api/loops/local/ask", &d)
	}
	if d.Approval == nil {
		t.Fatalf("the run never waited for its approval: %+v", d)
	}
	// The question as asked, its template expanded.
	if a := d.Approval; a.State != "ask" || a.Message != "ship 1.2?" || !a.CanAnswer || !strings.Contains(a.Who, "you (ana)") || !strings.Contains(a.Command, "looprun approve ask") {
		t.Fatalf("approval %+v", a)
	}

	for _, bad := range []struct {
		why     string
		body    string
		headers map[string]string
		code    int
	}{
		{"no answer header", `{"approve": true}`, map[string]string{AnswerHeader: ""}, http.StatusForbidden},
		{"a form, as another site's page posts", "approve=true", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, http.StatusForbidden},
		{"a host name of another site (DNS rebinding)", `{"approve": true}`, map[string]string{"Host": "attacker.example:80"}, http.StatusMisdirectedRequest},
		{"not JSON of an answer", `{"approve": "yes"}`, nil, http.StatusForbidden},
	} {
		if code, body := post(t, base+"/approval", bad.body, bad.headers); code != bad.code {
			t.Errorf("%s: %d %s", bad.why, code, body)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ".loops", ".running", "ask.answer.json")); !os.IsNotExist(err) {
		t.Fatalf("a refused answer was written: %v", err)
	}

	// A stale page's answer (another run's, an earlier iteration's) and
	// one naming no approval are refused.
	a := d.Approval
	for _, stale := range []string{
		fmt.Sprintf(`{"approve": true, "run": "a-killed-run", "state": %q, "iteration": %d}`, a.State, a.Iteration),
		fmt.Sprintf(`{"approve": true, "run": %q, "state": %q, "iteration": %d}`, a.Run, a.State, a.Iteration+1),
	} {
		if code, body := post(t, base+"/approval", stale, nil); code != http.StatusConflict || !strings.Contains(body, "no longer waits for that approval") {
			t.Fatalf("a stale answer %s: %d %s", stale, code, body)
		}
	}
	if code, body := post(t, base+"/approval", `{"approve": true}`, nil); code != http.StatusForbidden {
		t.Fatalf("an answer naming no approval: %d %s", code, body)
	}
	code, body := post(t, base+"/approval", fmt.Sprintf(`{"approve": false, "message": "not today", "run": %q, "state": %q, "iteration": %d}`, a.Run, a.State, a.Iteration), nil)
	var ans Answered
	if code != http.StatusOK || json.Unmarshal([]byte(body), &ans) != nil || ans.State != "ask" || ans.Approved {
		t.Fatalf("the answer: %d %s", code, body)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	d = Detail{}
	get(t, srv, "/api/loops/local/ask", &d)
	if d.State != "stop" || d.Phase != "Completed" || d.Approval != nil || d.States["ask"].Verdict != "rejected" ||
		d.States["ask"].Details["by"] != "ana" || d.States["ask"].Details["message"] != "not today" {
		t.Fatalf("after the answer: %+v", d)
	}
	if code, body := post(t, base+"/approval", fmt.Sprintf(`{"approve": true, "run": %q, "state": %q, "iteration": %d}`, a.Run, a.State, a.Iteration), nil); code != http.StatusConflict {
		t.Fatalf("an answer to a run that waits for nothing: %d %s", code, body)
	}
}

// A page served to another machine (looprun ui --listen 0.0.0.0:PORT)
// shows no buttons there and takes no answer from it.
func TestAnswersComeOnlyFromThisMachine(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "http://10.0.0.5:8080/api/loops/local/ask/approval", nil)
	r.RemoteAddr = "10.0.0.7:40000"
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(AnswerHeader, "1")
	if err := answerableFrom(r); err == nil || !strings.Contains(err.Error(), "only from this machine") {
		t.Fatalf("a peer on the network: %v", err)
	}
	for _, host := range []string{"localhost:8080", "127.0.0.1:8080", "[::1]:8080"} {
		r.RemoteAddr, r.Host = "127.0.0.1:40000", host
		if err := answerableFrom(r); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
}

// An answer whose body comes slowly holds the handler no longer than
// answerReadTimeout: it is refused, not waited for.
func TestSlowAnswerBodyIsCutOff(t *testing.T) {
	defer func(d time.Duration) { answerReadTimeout = d }(answerReadTimeout)
	answerReadTimeout = 200 * time.Millisecond
	srv := httptest.NewServer((&Server{LoopsDir: t.TempDir()}).Handler())
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Headers and the body's first byte; the rest never comes.
	fmt.Fprintf(conn, "POST /api/loops/local/ask/approval HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n%s: 1\r\nContent-Length: 1000\r\n\r\n{", AnswerHeader)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer within 5 s (the handler waits for the body): %v", err)
	}
	if !strings.Contains(line, "403") || time.Since(start) > 3*time.Second {
		t.Fatalf("answered %q after %v", line, time.Since(start))
	}
}
