package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/localrun"
	"github.com/looprun/looprun/internal/loopfile"
	"github.com/looprun/looprun/internal/runner/local"
)

const countLoop = `name: count
initial: check
states:
  check:
    action: 'n=$(cat n 2>/dev/null || echo 0); echo "n=$n"; test "$n" -ge 5'
    on_yes: done
    on_no: bump
  bump:
    action: 'n=$(cat n 2>/dev/null || echo 0); echo $((n+1)) > n'
    next: check
  gate:
    action: 'until [ -f go ]; do sleep 0.05; done'
    next: done
  done:
    terminal: true
`

// run runs the loop file path (initial state initial) in dir to its end.
func run(t *testing.T, dir, path, initial string) {
	t.Helper()
	if err := runLoop(dir, path, initial); err != nil {
		t.Fatal(err)
	}
}

func runLoop(dir, path, initial string) error {
	lf, err := loopfile.Load(path, loopfile.Options{LoopsDir: filepath.Join(dir, ".loops")})
	if err != nil {
		return err
	}
	lf.Loop.Spec.Initial = initial
	m, err := executor.New(lf.Loop.Name, &lf.Loop.Spec, executor.Options{LittleLoops: true})
	if err != nil {
		return err
	}
	store, err := localrun.NewStore(filepath.Join(dir, ".loops"), lf.Loop.Name)
	if err != nil {
		return err
	}
	d := &localrun.Driver{Machine: m, Runner: &local.Runner{Dir: dir}, Store: store, LoopFile: path}
	_, err = d.Start(context.Background(), "r1")
	return err
}

func get(t *testing.T, srv *httptest.Server, path string, into any) int {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if into != nil && resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode
}

func TestTheRunsAndARunsPage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "count.yaml")
	if err := os.WriteFile(path, []byte(countLoop), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, path, "check")
	srv := httptest.NewServer((&Server{LoopsDir: filepath.Join(dir, ".loops")}).Handler())
	defer srv.Close()

	var res List
	get(t, srv, "/api/loops", &res)
	list := res.Loops
	if len(list) != 1 || list[0].Name != "count" || list[0].Phase != "Completed" || list[0].State != "done" {
		t.Fatalf("list %+v", list)
	}
	var d Detail
	get(t, srv, "/api/loops/local/count", &d)
	if len(d.Nodes) != 4 || d.Nodes[0].Name != "check" || !d.Nodes[0].Initial || d.Nodes[0].Visits != 6 {
		t.Fatalf("nodes %+v", d.Nodes)
	}
	counts := map[string]int32{}
	for _, e := range d.Edges {
		counts[e.From+"->"+e.To] = e.Count
	}
	if counts["check->bump"] != 5 || counts["bump->check"] != 5 || counts["check->done"] != 1 {
		t.Fatalf("edges %+v", d.Edges)
	}
	if last := d.States["check"]; last.Verdict != "success" || last.Iteration != 11 || !strings.Contains(last.Output, "n=5") {
		t.Fatalf("the last of check: %+v", last)
	}
	for _, n := range d.Nodes {
		if n.Name == "done" && !n.Terminal {
			t.Fatalf("done is not terminal: %+v", n)
		}
	}

	// The timeline folds the repeated passes: check, bump (x5), check.
	var p Page
	get(t, srv, "/api/loops/local/count/timeline", &p)
	if p.Total != 3 || len(p.Visits) != 3 {
		t.Fatalf("timeline %+v", p)
	}
	first := p.Visits[2] // oldest last
	if first.State != "check" || p.Visits[1].State != "bump" || p.Visits[1].Repeat != 4 || p.Visits[1].Period != 2 || p.Visits[0].Next != "done" {
		t.Fatalf("timeline %+v", p.Visits)
	}
	var older Page
	get(t, srv, "/api/loops/local/count/timeline?limit=2", &older)
	if len(older.Visits) != 2 || older.Before == 0 {
		t.Fatalf("first page %+v", older)
	}
	var oldest Page
	get(t, srv, "/api/loops/local/count/timeline?limit=2&before="+itoa(older.Before), &oldest)
	if len(oldest.Visits) != 1 || oldest.Visits[0].State != "check" || oldest.Before != 0 {
		t.Fatalf("second page %+v", oldest)
	}

	if code := get(t, srv, "/api/loops/local/..%2fx", nil); code != http.StatusBadRequest && code != http.StatusNotFound {
		t.Fatalf("a bad name: %d", code)
	}
	if code := get(t, srv, "/api/loops/local/nothing", nil); code != http.StatusNotFound {
		t.Fatalf("no such run: %d", code)
	}
}

// The stream tells of every step as the run saves it, from file
// notifications.
func TestStreamFollowsARun(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "count.yaml")
	if err := os.WriteFile(path, []byte(countLoop), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, path, "check") // a first run, so that the stream has a state to start from
	srv := httptest.NewServer((&Server{LoopsDir: filepath.Join(dir, ".loops")}).Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/loops/local/count/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %s", ct)
	}
	updates := updatesOf(resp.Body)
	if first := <-updates; first["phase"] != "completed" {
		t.Fatalf("first update %v", first)
	}
	done := make(chan error, 1)
	go func() { done <- runLoop(dir, path, "gate") }() // a new run, waiting at its gate
	waitFor(t, updates, func(m map[string]any) bool { return m["state"] == "gate" && m["phase"] == "running" })
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, updates, func(m map[string]any) bool { return m["phase"] == "completed" && m["state"] == "done" })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// updatesOf reads a server-sent event stream's updates (its "data:" lines,
// JSON) as they come.
func updatesOf(body io.Reader) <-chan map[string]any {
	updates := make(chan map[string]any, 100)
	go func() {
		sc := bufio.NewScanner(body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var m map[string]any
				_ = json.Unmarshal([]byte(data), &m)
				updates <- m
			}
		}
	}()
	return updates
}

func waitFor(t *testing.T, updates <-chan map[string]any, ok func(map[string]any) bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case m := <-updates:
			if ok(m) {
				return
			}
		case <-deadline:
			t.Fatal("no such update")
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// The view follows a bounded number of runs: one shown long ago is
// forgotten (and read again if shown again), not kept for the life of the
// process.
func TestFollowersAreBounded(t *testing.T) {
	s := &Server{}
	for i := range 3 * maxFollowers {
		if _, fresh := s.followerOf(itoa(int64(i))); !fresh {
			t.Fatalf("run %d was not new", i)
		}
	}
	if n := len(s.runs); n > maxFollowers {
		t.Fatalf("%d followers kept", n)
	}
	last := itoa(3*maxFollowers - 1)
	if _, fresh := s.followerOf(last); fresh {
		t.Fatal("the run just followed was forgotten")
	}
}

// Every request names a host the view answers to (localhost, an IP
// address, or one allowed): a page of another site whose DNS name points
// at this machine (DNS rebinding) reads nothing, answers or not.
func TestEveryRequestChecksItsHost(t *testing.T) {
	_, _, srv := servedCountRun(t, &Server{AllowedHosts: []string{"looprun.example.org"}})
	status := func(path, host string) int {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, p := range []string{"/api/loops", "/api/loops/local/count", "/api/loops/local/count/timeline", "/api/loops/local/count/stream", "/", "/assets/x.js"} {
		for _, host := range []string{"attacker.example", "attacker.example:8080", "localhost.attacker.example", "127.0.0.1.nip.example:80"} {
			if code := status(p, host); code != http.StatusMisdirectedRequest {
				t.Errorf("GET %s as %s: %d", p, host, code)
			}
		}
	}
	for _, host := range []string{"localhost:1", "LOCALHOST", "app.localhost", "127.0.0.1:9", "[::1]:9", "10.1.2.3:8080", "looprun.example.org", "looprun.example.org.:443"} {
		if code := status("/api/loops", host); code != http.StatusOK {
			t.Errorf("GET /api/loops as %s: %d", host, code)
		}
	}
}

// The local streams share one file watcher (one inotify instance, not one
// per open tab), and the streams open at once are bounded.
func TestStreamsShareOneWatcherAndAreBounded(t *testing.T) {
	s := &Server{}
	dir, path, srv := servedCountRun(t, s)
	before := inotifyInstances(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var codes []int
	var bodies []io.Closer
	for range MaxStreams + 3 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/loops/local/count/stream", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.StatusCode)
		bodies = append(bodies, resp.Body)
	}
	defer func() {
		for _, b := range bodies {
			b.Close()
		}
	}()
	for i, c := range codes {
		want := http.StatusOK
		if i >= MaxStreams {
			want = http.StatusServiceUnavailable
		}
		if c != want {
			t.Fatalf("stream %d: %d, want %d", i, c, want)
		}
	}
	if n := inotifyInstances(t) - before; n > 1 {
		t.Fatalf("%d open streams hold %d inotify instances", MaxStreams, n)
	}
	// Each stream still follows its run.
	first := updatesOf(bodies[0].(io.Reader))
	if m := <-first; m["phase"] != "completed" {
		t.Fatalf("first update %v", m)
	}
	done := make(chan error, 1)
	go func() { done <- runLoop(dir, path, "gate") }()
	waitFor(t, first, func(m map[string]any) bool { return m["state"] == "gate" && m["phase"] == "running" })
	last := updatesOf(bodies[MaxStreams-1].(io.Reader))
	waitFor(t, last, func(m map[string]any) bool { return m["state"] == "gate" })
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Closed streams free their places.
	for _, b := range bodies[:MaxStreams] {
		b.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/loops/local/count/stream", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the streams closed: %d", resp.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// inotifyInstances counts this process's inotify instances.
func inotifyInstances(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && target == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// When the runs' directory goes, the streams on it end (the page
// reconnects) and a new stream watches it afresh.
func TestStreamsEndWhenTheirDirectoryGoes(t *testing.T) {
	s := &Server{}
	dir, path, srv := servedCountRun(t, s)
	open := func() *http.Response {
		resp, err := http.Get(srv.URL + "/api/loops/local/count/stream")
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	first := open()
	defer first.Body.Close()
	<-updatesOf(first.Body)
	if err := os.RemoveAll(filepath.Join(dir, ".loops", ".running")); err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, first.Body); close(ended) }()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream went on after its directory went")
	}
	// The run starts again: a new stream follows it.
	run(t, dir, path, "check")
	second := open()
	defer second.Body.Close()
	updates := updatesOf(second.Body)
	<-updates
	done := make(chan error, 1)
	go func() { done <- runLoop(dir, path, "gate") }()
	waitFor(t, updates, func(m map[string]any) bool { return m["state"] == "gate" })
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// servedCountRun runs countLoop once in a new directory and serves its
// runs with s (its LoopsDir set); the server is closed at the test's end.
func servedCountRun(t *testing.T, s *Server) (dir, path string, srv *httptest.Server) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "count.yaml")
	if err := os.WriteFile(path, []byte(countLoop), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, path, "check")
	s.LoopsDir = filepath.Join(dir, ".loops")
	srv = httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		srv.Close()
		s.watch.close()
	})
	return dir, path, srv
}
