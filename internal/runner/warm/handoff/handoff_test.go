package handoff

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/looprun/looprun/internal/runner/entrypoint"
)

// wrapper is the entrypoint binary, built once for the tests.
var wrapper string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "handoff-")
	if err != nil {
		panic(err)
	}
	_ = os.Chmod(dir, 0o755)
	wrapper = filepath.Join(dir, "entrypoint")
	if out, err := exec.Command("go", "build", "-o", wrapper, "../../../../cmd/entrypoint").CombinedOutput(); err != nil {
		panic(string(out))
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer is a log both output streams write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type harness struct {
	srv    *Server
	client *Client
	log    *syncBuffer // stdout; stderr goes to errLog
	errLog *syncBuffer
	done   chan error
	cancel context.CancelFunc
}

func newKey(t *testing.T) []byte {
	t.Helper()
	k, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := hex.DecodeString(k)
	return b
}

// serve runs a server in this process on a free local port.
func serve(t *testing.T, ledger string, idle time.Duration) *harness {
	t.Helper()
	key := newKey(t)
	log, errLog := &syncBuffer{}, &syncBuffer{}
	s := &Server{Key: key, Wrapper: wrapper, Env: []string{"PATH=" + os.Getenv("PATH")}, Ledger: ledger,
		IdleTimeout: idle, Stdout: log, Stderr: errLog}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{srv: s, client: &Client{Addr: l.Addr().String(), Key: key}, log: log, errLog: errLog, done: make(chan error, 1), cancel: cancel}
	go func() { h.done <- s.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-h.done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return h
}

// ends waits up to 5 s for the server to end by itself, and fails with
// why otherwise.
func (h *harness) ends(t *testing.T, why string) {
	t.Helper()
	select {
	case err := <-h.done:
		h.done <- err
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal(why)
	}
}

func shell(cmd string) Step {
	return Step{State: "check", Iteration: 1, Args: []string{"--timeout", "30s", "--", "bash", "-c", cmd}}
}

// run hands a step over and waits for its end.
func (h *harness) run(t *testing.T, id string, s Step) Status {
	t.Helper()
	ctx := context.Background()
	if _, err := h.client.Hand(ctx, id, s); err != nil {
		t.Fatalf("hand %s: %v", id, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st, err := h.client.Wait(ctx, id, 10*time.Second)
		if err != nil {
			t.Fatalf("wait %s: %v", id, err)
		}
		if st.Phase != Running {
			return st
		}
	}
	t.Fatalf("step %s did not end", id)
	return Status{}
}

func result(t *testing.T, st Status) entrypoint.Result {
	t.Helper()
	var r entrypoint.Result
	if err := json.Unmarshal(st.Result, &r); err != nil {
		t.Fatalf("result of %s (%s): %v", st.ID, st.NoResult, err)
	}
	return r
}

func TestAStepRunsAndItsOutputIsFramed(t *testing.T) {
	h := serve(t, "", 0)
	s := shell(`echo hello; echo oops >&2; printf 'no newline'`)
	s.Env = []string{"GREETING=hi"}
	st := h.run(t, "run1.1.0", s)
	r := result(t, st)
	if st.Phase != Done || r.ExitCode != 0 || r.Stdout != "hello\nno newline" || !strings.Contains(r.Stderr, "oops") {
		t.Fatalf("status %+v result %+v", st, r)
	}
	log := h.log.String()
	if !strings.Contains(h.errLog.String(), "oops\n") {
		t.Errorf("stderr went elsewhere: %q", h.errLog.String())
	}
	for _, want := range []string{Marker + ` step run1.1.0 begin state="check" iteration=1 retry=0` + "\n", "hello\n", "no newline\n" + Marker + " step run1.1.0 end exit=0\n"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
}

func TestAStepHandedOverTwiceRunsOnce(t *testing.T) {
	h := serve(t, "", 0)
	count := filepath.Join(t.TempDir(), "count")
	s := shell("echo ran >> " + count + "; echo $(wc -l < " + count + ")")
	first := h.run(t, "run1.2.0", s)
	again := h.run(t, "run1.2.0", s)
	if string(first.Result) != string(again.Result) {
		t.Errorf("the second hand-off answered another result:\n%s\n%s", first.Result, again.Result)
	}
	if b, _ := os.ReadFile(count); strings.Count(string(b), "ran") != 1 {
		t.Fatalf("the step ran %d times", strings.Count(string(b), "ran"))
	}
}

// Hostile: a request not signed with the run's key (another Pod, a step of
// the run itself, someone on the network) runs nothing and learns nothing.
func TestARequestWithoutTheKeyIsRefused(t *testing.T) {
	h := serve(t, "", 0)
	marker := filepath.Join(t.TempDir(), "ran")
	for _, c := range []*Client{
		{Addr: h.client.Addr, Key: newKey(t)},
		{Addr: h.client.Addr, Key: nil},
	} {
		_, err := c.Hand(context.Background(), "run1.1.0", shell("touch "+marker))
		var ae *AnswerError
		if !errorAs(err, &ae) || ae.Code != http.StatusUnauthorized {
			t.Errorf("a request with another key: %v", err)
		}
	}
	// Raw requests: no signature, a signature of another request.
	for _, hdr := range []http.Header{{}, {headerTime: {"1"}, headerSignature: {sign(h.srv.Key, "request", requestFields("GET", "/v1/steps/x", "1"), nil)}}} {
		req, _ := http.NewRequest(http.MethodPut, "http://"+h.client.Addr+"/v1/steps/run1.1.0", strings.NewReader(`{"args":["--","touch","`+marker+`"]}`))
		req.Header = hdr
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("an unsigned request: %d", resp.StatusCode)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a step ran without the key")
	}
}

// Hostile: an answer not signed with the run's key (something else took
// the runner's address) is not believed.
func TestAnAnswerWithoutTheKeyIsNotBelieved(t *testing.T) {
	forger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := json.Marshal(Status{ID: "run1.1.0", Phase: Done, Result: json.RawMessage(`{"exitCode":0,"stdout":"forged"}`)})
		w.Header().Set(headerSignature, sign([]byte("another key"), "answer", answerFields(r.Method, r.URL.RequestURI(), r.Header.Get(headerTime), 200), b))
		_, _ = w.Write(b)
	}))
	defer forger.Close()
	c := &Client{Addr: strings.TrimPrefix(forger.URL, "http://"), Key: newKey(t)}
	if _, err := c.Wait(context.Background(), "run1.1.0", 0); err == nil || !strings.Contains(err.Error(), "not signed") {
		t.Fatalf("a forged answer was believed: %v", err)
	}
}

// Hostile: the answer for one step cannot pass for another's (replayed by
// something between the operator and the runner).
func TestAnAnswerForAnotherStepIsNotBelieved(t *testing.T) {
	key := newKey(t)
	forger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := json.Marshal(Status{ID: "run1.1.0", Phase: Done})
		// Signed with the key, but for another step's request.
		w.Header().Set(headerSignature, sign(key, "answer", answerFields(r.Method, "/v1/steps/run1.1.0?wait=0s", r.Header.Get(headerTime), 200), b))
		_, _ = w.Write(b)
	}))
	defer forger.Close()
	c := &Client{Addr: strings.TrimPrefix(forger.URL, "http://"), Key: key}
	if _, err := c.Wait(context.Background(), "run1.2.0", 0); err == nil {
		t.Fatal("an answer for another step was believed")
	}
}

// Hostile: a step cannot end its frame early or open another step's in
// the runner's log.
func TestAStepCannotForgeFrames(t *testing.T) {
	h := serve(t, "", 0)
	h.run(t, "run1.1.0", shell(`echo "`+Marker+` step run1.1.0 end exit=0"; printf '`+Marker[:4]+`'; printf '`+Marker[4:]+` step run1.9.0 begin\n'; echo done`))
	log := h.log.String()
	if strings.Count(log, "\n"+Marker+" step run1.1.0 end") != 1 || strings.Count(log, "\\"+Marker) != 2 {
		t.Fatalf("a step's marker lines were not escaped:\n%s", log)
	}
}

// Hostile: a ledger line the runner did not sign (written by a step, which
// shares the Pod's files) is dropped: it cannot make a step look done.
func TestAForgedLedgerLineIsDropped(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger.jsonl")
	forged, _ := json.Marshal(ledgerLine{Status: Status{ID: "run1.3.0", Phase: Done, Result: json.RawMessage(`{"exitCode":0,"stdout":"forged"}`)}, Sig: "00"})
	if err := os.WriteFile(ledger, append(forged, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	h := serve(t, ledger, 0)
	r := result(t, h.run(t, "run1.3.0", shell("echo real")))
	if r.Stdout != "real\n" {
		t.Fatalf("the forged ledger line was believed: %+v", r)
	}
	if !strings.Contains(h.errLog.String(), "ledger line 1 is not the runner's own") {
		t.Errorf("the dropped line was not said:\n%s", h.errLog.String())
	}
}

// A restarted server knows the steps it ran (answered, not run again) and
// that the one running when it died is lost.
func TestTheLedgerOutlivesTheServer(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger.jsonl")
	count := filepath.Join(t.TempDir(), "count")
	h := serve(t, ledger, 0)
	h.run(t, "run1.1.0", shell("echo ran >> "+count))
	if _, err := h.client.Hand(context.Background(), "run1.2.0", shell("sleep 30")); err != nil {
		t.Fatal(err)
	}
	// Kill the server the way a crash would: its ledger as it is.
	key := h.srv.Key
	h.srv.mu.Lock()
	b, _ := os.ReadFile(ledger)
	h.srv.mu.Unlock()
	h.cancel()
	h.done <- <-h.done
	if err := os.WriteFile(ledger, b, 0o600); err != nil {
		t.Fatal(err)
	}

	s := &Server{Key: key, Wrapper: wrapper, Ledger: ledger, Stdout: &syncBuffer{}, Stderr: &syncBuffer{}}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	c := &Client{Addr: l.Addr().String(), Key: key}
	st, err := c.Hand(context.Background(), "run1.1.0", shell("echo ran >> "+count))
	if err != nil || st.Phase != Done {
		t.Fatalf("a step the ledger has: %+v %v", st, err)
	}
	if b, _ := os.ReadFile(count); strings.Count(string(b), "ran") != 1 {
		t.Fatal("a step the ledger has ran again")
	}
	if st, err := c.Wait(context.Background(), "run1.2.0", 0); err != nil || st.Phase != Lost {
		t.Fatalf("the step running at the crash: %+v %v", st, err)
	}
}

func TestACancelledStepEnds(t *testing.T) {
	h := serve(t, "", 0)
	if _, err := h.client.Hand(context.Background(), "run1.1.0", shell("sleep 60")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := h.client.Cancel(context.Background(), "run1.1.0"); err != nil {
		t.Fatal(err)
	}
	st, err := h.client.Wait(context.Background(), "run1.1.0", 20*time.Second)
	if err != nil || st.Phase != Done || st.ExitCode == 0 {
		t.Fatalf("%+v %v", st, err)
	}
}

func TestAtMostMaxRunningSteps(t *testing.T) {
	h := serve(t, "", 0)
	for i := range MaxRunning {
		if _, err := h.client.Hand(context.Background(), "run1."+strconv.Itoa(i)+".0", shell("sleep 30")); err != nil {
			t.Fatal(err)
		}
	}
	_, err := h.client.Hand(context.Background(), "run1.99.0", shell("true"))
	var ae *AnswerError
	if !errorAs(err, &ae) || ae.Code != http.StatusTooManyRequests {
		t.Fatalf("one more step: %v", err)
	}
}

func TestTheServerIdlesOutOnlyWithNothingToKeep(t *testing.T) {
	h := serve(t, "", 1500*time.Millisecond)
	st := h.run(t, "run1.1.0", shell("true"))
	if st.Phase != Done {
		t.Fatal(st)
	}
	select {
	case err := <-h.done:
		h.done <- nil
		t.Fatalf("the server idled out holding a result nobody collected (%v)", err)
	case <-time.After(3 * time.Second):
	}
	if err := h.client.Collected(context.Background(), "run1.1.0"); err != nil {
		t.Fatal(err)
	}
	h.ends(t, "the server did not idle out")
}

// Hostile: no process of a step can read the runner key: not from its
// environment, not from the server's /proc entries (run as the Pod's
// non-root user).
func TestAStepCannotReadTheKey(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the runner as another user")
	}
	key, _ := NewKey()
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	_ = l.Close()
	cmd := exec.Command(wrapper, "serve", "--listen", addr, "--ledger", filepath.Join(os.TempDir(), "handoff-key-test-"+strconv.Itoa(os.Getpid()), "ledger.jsonl"))
	cmd.Env = []string{KeyEnv + "=" + key, "PATH=" + os.Getenv("PATH")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	_ = os.MkdirAll(filepath.Join(os.TempDir(), "handoff-key-test-"+strconv.Itoa(os.Getpid())), 0o777)
	_ = os.Chmod(filepath.Join(os.TempDir(), "handoff-key-test-"+strconv.Itoa(os.Getpid())), 0o777)
	defer os.RemoveAll(filepath.Join(os.TempDir(), "handoff-key-test-"+strconv.Itoa(os.Getpid())))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	k, _ := ParseKey(key)
	h := &harness{client: &Client{Addr: addr, Key: k}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := h.client.Wait(context.Background(), "none", 0); err == nil || !errorIs(err, ErrUnreachable) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	s := shell(`env; cat /proc/$SERVER/environ; cat /proc/$PPID/environ; cat /proc/$SERVER/mem | head -c 1000000 | tr -d '\0'; exit 0`)
	s.Env = []string{"SERVER=" + strconv.Itoa(cmd.Process.Pid)}
	r := result(t, h.run(t, "run1.1.0", s))
	if strings.Contains(r.Stdout+r.Stderr, key) || strings.Contains(r.Stdout, KeyEnv) {
		t.Fatalf("a step read the key:\n%s", r.Stdout)
	}
	if !strings.Contains(r.Stderr, "ermission denied") {
		t.Errorf("the server's /proc entries were readable: %s", r.Stderr)
	}
	if !strings.Contains(r.Stdout, "SERVER=") {
		t.Errorf("the step's own variables are missing: %s", r.Stdout)
	}

	// Nor can it write the step's result: the pipe is not inherited, and
	// the wrapper's /proc entries that would reopen it are not the step's.
	forge := `{"exitCode":0,"stdout":"forged"}`
	s = shell(`for fd in /proc/$PPID/fd/* /proc/self/fd/3; do echo '` + forge + `' > $fd && echo "wrote $fd"; done; exit 7`)
	r = result(t, h.run(t, "run1.2.0", s))
	if r.ExitCode != 7 || strings.Contains(r.Stdout, "wrote") || strings.Contains(r.Stdout, "forged") {
		t.Fatalf("a step reached its result pipe: %+v", r)
	}
}

func errorAs(err error, target **AnswerError) bool { return errors.As(err, target) }

func errorIs(err, target error) bool { return errors.Is(err, target) }

// A step cut off by the runner's own end (its Pod deleted) is lost, not
// ended: the operator runs it again rather than take its cut-off result.
func TestAStepCutOffByTheRunnersEndIsLost(t *testing.T) {
	h := serve(t, "", 0)
	if _, err := h.client.Hand(context.Background(), "run1.1.0", shell("sleep 30")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	h.cancel()
	h.done <- <-h.done
	h.srv.mu.Lock()
	st := h.srv.steps["run1.1.0"].status
	h.srv.mu.Unlock()
	if st.Phase != Lost {
		t.Fatalf("a step cut off by the runner's end: %+v", st)
	}
}

// What a runner's log holds comes back per step: looprun logs, watch and
// the web view read it so.
func TestTheLogSplitsIntoSteps(t *testing.T) {
	h := serve(t, "", 0)
	h.run(t, "run1.1.0", shell(`echo one; echo "`+Marker+` step run1.2.0 begin state=\"x\""`))
	s := shell("echo two")
	s.State, s.Iteration, s.Retry = "fix it", 2, 1
	h.run(t, "run1.2.1", s)
	steps := ParseLog(strings.NewReader("runner starting\n" + h.log.String()))
	if len(steps) != 2 {
		t.Fatalf("%d steps: %+v", len(steps), steps)
	}
	if steps[0].ID != "run1.1.0" || steps[0].Output != "one\n"+Marker+` step run1.2.0 begin state="x"`+"\n" || !steps[0].Ended || steps[0].End != "exit=0" {
		t.Errorf("first step %+v", steps[0])
	}
	if steps[1].State != "fix it" || steps[1].Iteration != 2 || steps[1].Retry != 1 || steps[1].Output != "two\n" {
		t.Errorf("second step %+v", steps[1])
	}
	var got strings.Builder
	f := &StepFilter{ID: "run1.2.1", Emit: func(s string) { got.WriteString(s) }}
	log := h.log.String()
	for i := 0; i < len(log); i += 7 { // as a followed stream comes: in pieces
		_, _ = f.Write([]byte(log[i:min(i+7, len(log))]))
	}
	if got.String() != "two\n" || !f.Done() {
		t.Errorf("followed: %q done %v", got.String(), f.Done())
	}
}

// At the run's end the operator asks the runner to end: its Pod stays,
// ended, with its log (looprun logs reads it).
func TestTheRunnerEndsWhenAsked(t *testing.T) {
	h := serve(t, "", 0)
	h.run(t, "run1.1.0", shell("true"))
	if err := h.client.Exit(context.Background(), "run1.1.0"); err != nil {
		t.Fatal(err)
	}
	h.ends(t, "the runner did not end")
}

// A long run's results do not pile up in its runner: a collected step's
// result is dropped (the step is still answered, not run again) and the
// ledger is written again, one line a step, once it grows past its bound.
func TestCollectedResultsAreNotKept(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger.jsonl")
	h := serve(t, ledger, 0)
	count := filepath.Join(t.TempDir(), "count")
	big := shell("head -c 3000 /dev/zero | tr '\\0' x; echo ran >> " + count)
	for i := range 400 {
		id := "run1." + strconv.Itoa(i) + ".0"
		h.run(t, id, big)
		if err := h.client.Collected(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	h.srv.mu.Lock()
	for id, st := range h.srv.steps {
		if len(st.status.Result) > 0 || st.status.Phase != Done {
			t.Errorf("step %s kept after it was collected: %s", id, st.status.Phase)
		}
	}
	h.srv.mu.Unlock()
	if fi, err := os.Stat(ledger); err != nil || fi.Size() > ledgerCompactBytes {
		t.Fatalf("the ledger: %v, %d bytes", err, fi.Size())
	}
	// Handed over again, a collected step is answered, not run.
	if st, err := h.client.Hand(context.Background(), "run1.7.0", big); err != nil || st.Phase != Done {
		t.Fatalf("a collected step handed over again: %+v %v", st, err)
	}
	if b, _ := os.ReadFile(count); strings.Count(string(b), "ran") != 400 {
		t.Fatalf("%d runs for 400 steps", strings.Count(string(b), "ran"))
	}
	// A restarted runner reads the compacted ledger: every step known.
	s := &Server{Key: h.srv.Key, Ledger: ledger, Stdout: &syncBuffer{}, Stderr: &syncBuffer{}}
	h.srv.mu.Lock()
	err := s.Open()
	h.srv.mu.Unlock()
	if err != nil || len(s.steps) != 400 {
		t.Fatalf("reopened: %d steps, %v", len(s.steps), err)
	}
	_ = s.ledgerF.Close()
}
