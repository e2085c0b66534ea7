package gateway_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/looprun/looprun/internal/gateway"
	"github.com/looprun/looprun/internal/gateway/ledger"
)

func TestKeyInjectedCredentialNeverForwarded(t *testing.T) {
	h := newHarness(t, nil)
	resp := h.call(t, context.Background(), "/v1/messages?beta=true", agentToken, jsonBody)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	reqs := h.up.seen()
	if len(reqs) != 1 {
		t.Fatalf("upstream saw %d calls", len(reqs))
	}
	r := reqs[0]
	if r.path != "/v1/messages" || r.query != "beta=true" {
		t.Errorf("upstream got %s?%s", r.path, r.query)
	}
	if got := r.header.Get("X-Api-Key"); got != realKey {
		t.Errorf("upstream x-api-key %q, want the gateway's key", got)
	}
	if a := r.header.Get("Authorization"); a != "" {
		t.Errorf("upstream got Authorization %q", a)
	}
	for k, vs := range r.header {
		for _, v := range vs {
			if strings.Contains(v, agentToken) {
				t.Errorf("the agent's credential reached the upstream in %s", k)
			}
		}
	}
	if r.header.Get("Anthropic-Version") != "2023-06-01" || !strings.Contains(r.header.Get("Anthropic-Beta"), "claude-code-20250219") ||
		r.header.Get("Content-Type") != "application/json" {
		t.Errorf("anthropic headers not kept: %v", r.header)
	}
	if string(r.body) != jsonBody {
		t.Errorf("body changed: %s", r.body)
	}
}

func TestNonStreamingRecordedBeforeTheAgentGetsIt(t *testing.T) {
	h := newHarness(t, nil)
	release := make(chan struct{})
	var finalAt atomic.Int64
	h.ledger.beforeFinal = func(ledger.Call) {
		<-release
		finalAt.Store(time.Now().UnixNano())
	}
	done := make(chan time.Time)
	go func() {
		resp := h.call(t, context.Background(), "/v1/messages", agentToken, jsonBody)
		_, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		done <- time.Now()
	}()
	select {
	case <-done:
		t.Fatal("the agent got the answer before its usage was recorded")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	got := <-done
	if got.UnixNano() < finalAt.Load() {
		t.Error("answer before the record")
	}
	calls := h.ledger.calls(t)
	want := ledger.Call{ID: "msg_json_1", Model: model, InputTokens: 120, OutputTokens: 45, CacheCreationTokens: 300, CacheReadTokens: 2000, Final: true}
	if len(calls) != 1 || calls[0] != want {
		t.Errorf("ledger %+v, want %+v", calls, want)
	}
}

// readEvents reads a stream's events, calling onEvent with each name.
func readEvents(t *testing.T, resp *http.Response, onEvent func(name, data string) bool) []string {
	t.Helper()
	var names []string
	sc := bufio.NewScanner(resp.Body)
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			names = append(names, name)
			if onEvent != nil && !onEvent(name, strings.TrimPrefix(line, "data: ")) {
				return names
			}
		}
	}
	return names
}

func TestStreamingRecordedBeforeMessageDelta(t *testing.T) {
	h := newHarness(t, nil)
	resp := h.call(t, context.Background(), "/v1/messages?beta=true", agentToken, streamBody)
	defer func() { _ = resp.Body.Close() }()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	names := readEvents(t, resp, func(name, _ string) bool {
		w := h.ledger.written()
		switch name {
		case "message_start":
			// The gateway may be further on by now: the first record is the start.
			if len(w) == 0 || w[0].Final || w[0].InputTokens != 25 || w[0].OutputTokens != 1 {
				t.Errorf("at message_start the ledger has %+v, want the start recorded", w)
			}
		case "message_delta", "message_stop":
			if len(w) == 0 || !w[len(w)-1].Final {
				t.Errorf("at %s the final record is not written: %+v", name, w)
			}
		}
		return true
	})
	want := []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("events %v, want %v", names, want)
	}
	calls := h.ledger.calls(t)
	wantCall := ledger.Call{ID: "msg_stream_1", Model: model, InputTokens: 25, OutputTokens: 15, CacheCreationTokens: 400, CacheReadTokens: 3000, Final: true}
	if len(calls) != 1 || calls[0] != wantCall {
		t.Errorf("ledger %+v, want %+v", calls, wantCall)
	}
}

func TestStreamingFinalBlocksTheEnd(t *testing.T) {
	h := newHarness(t, nil)
	release := make(chan struct{})
	h.ledger.beforeFinal = func(ledger.Call) { <-release }
	resp := h.call(t, context.Background(), "/v1/messages", agentToken, streamBody)
	defer func() { _ = resp.Body.Close() }()
	got := make(chan string, 16)
	go func() {
		readEvents(t, resp, func(name, _ string) bool { got <- name; return true })
		close(got)
	}()
	deadline := time.After(300 * time.Millisecond)
wait:
	for {
		select {
		case n := <-got:
			if n == "message_delta" || n == "message_stop" {
				t.Fatalf("the agent got %s before the final record", n)
			}
		case <-deadline:
			break wait
		}
	}
	close(release)
	var rest []string
	for n := range got {
		rest = append(rest, n)
	}
	if strings.Join(rest, ",") != "message_delta,message_stop" {
		t.Errorf("after the record the agent got %v", rest)
	}
}

func TestRecordedTwiceCountsOnce(t *testing.T) {
	h := newHarness(t, nil)
	for range 2 { // the upstream answers the same message id twice
		resp := h.call(t, context.Background(), "/v1/messages", agentToken, streamBody)
		readEvents(t, resp, nil)
		_ = resp.Body.Close()
	}
	if n := len(h.ledger.written()); n < 4 {
		t.Fatalf("only %d records written", n)
	}
	led, err := h.ledger.Read(context.Background(), theStep.PodUID)
	if err != nil {
		t.Fatal(err)
	}
	tot := led.Totals(nil)
	if tot.Calls != 1 || tot.Usage.InputTokens != 25 || tot.Usage.OutputTokens != 15 {
		t.Errorf("totals %+v, want one call of 25 in, 15 out", tot)
	}
}

func TestCheckpointsWhileStreaming(t *testing.T) {
	h := newHarness(t, func(c *gateway.Config) { c.CheckpointEvery = 20 * time.Millisecond })
	h.up.setScript(func(w http.ResponseWriter, _ *http.Request, _ bool) {
		ev := standardStream("msg_long")
		var deltas []sse
		for range 10 {
			deltas = append(deltas, sse{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + strings.Repeat("x", 400) + `"}}`})
		}
		all := append(append(append([]sse{}, ev[:3]...), deltas...), ev[5:]...)
		writeSSE(w, all, 30*time.Millisecond)
	})
	resp := h.call(t, context.Background(), "/v1/messages", agentToken, streamBody)
	readEvents(t, resp, nil)
	_ = resp.Body.Close()
	var checkpoints int
	for _, c := range h.ledger.written() {
		if !c.Final && c.OutputTokens > 1 {
			checkpoints++
		}
	}
	if checkpoints < 3 {
		t.Errorf("%d checkpoints with output while streaming 300ms: %+v", checkpoints, h.ledger.written())
	}
	// The ledger never lowers a count: the estimate of the checkpoints
	// (4000 bytes of content, 1000 tokens) stands over the upstream's 15.
	calls := h.ledger.calls(t)
	if len(calls) != 1 || !calls[0].Final || calls[0].OutputTokens != 1000 {
		t.Errorf("ledger %+v", calls)
	}
}

// cutStream streams the start and a few deltas, then holds the stream
// open until the agent goes (or, with die, breaks the connection).
func cutStream(die bool) func(w http.ResponseWriter, r *http.Request, _ bool) {
	return func(w http.ResponseWriter, r *http.Request, _ bool) {
		ev := standardStream("msg_cut")
		big := sse{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + strings.Repeat("y", 800) + `"}}`}
		writeSSE(w, append(ev[:4:4], big, big), 0)
		if die {
			panic(http.ErrAbortHandler)
		}
		<-r.Context().Done()
	}
}

func checkCut(t *testing.T, h *harness) {
	t.Helper()
	var calls []ledger.Call
	waitFor(t, "the cut-off call recorded with its output", func() bool {
		calls = h.ledger.calls(t)
		return len(calls) == 1 && calls[0].OutputTokens >= 400
	})
	c := calls[0]
	if c.Final || c.ID != "msg_cut" || c.InputTokens != 25 || c.CacheReadTokens != 3000 || c.CacheCreationTokens != 400 {
		t.Errorf("cut-off call %+v", c)
	}
	// 5 + 1600 bytes of content: 401 tokens estimated.
	if c.OutputTokens != (5+1600)/4 {
		t.Errorf("output %d, want the estimate %d", c.OutputTokens, (5+1600)/4)
	}
}

func TestAgentCancelsMidStream(t *testing.T) {
	h := newHarness(t, nil)
	h.up.setScript(cutStream(false))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := h.call(t, ctx, "/v1/messages", agentToken, streamBody)
	deltas := 0
	readEvents(t, resp, func(name, _ string) bool {
		if name == "content_block_delta" {
			deltas++
		}
		return deltas < 3
	})
	cancel()
	_ = resp.Body.Close()
	checkCut(t, h)
}

func TestUpstreamDiesMidStream(t *testing.T) {
	h := newHarness(t, nil)
	h.up.setScript(cutStream(true))
	resp := h.call(t, context.Background(), "/v1/messages", agentToken, streamBody)
	names := readEvents(t, resp, nil)
	_ = resp.Body.Close()
	for _, n := range names {
		if n == "message_stop" {
			t.Error("a broken stream ended with message_stop")
		}
	}
	checkCut(t, h)
}

func TestHostileUsage(t *testing.T) {
	for name, usage := range map[string]string{
		"negative":  `{"input_tokens":-5,"output_tokens":10}`,
		"overflow":  `{"input_tokens":100000000000000000000000000000,"output_tokens":10}`,
		"absurd":    `{"input_tokens":10,"output_tokens":9000000000000000}`,
		"fraction":  `{"input_tokens":1.5,"output_tokens":10}`,
		"string":    `{"input_tokens":"10","output_tokens":10}`,
		"no usage":  `null`,
		"cache neg": `{"input_tokens":1,"output_tokens":1,"cache_read_input_tokens":-1000000}`,
	} {
		t.Run("json "+name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.up.setScript(func(w http.ResponseWriter, _ *http.Request, _ bool) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, messageJSON("msg_bad", usage))
			})
			resp := h.call(t, context.Background(), "/v1/messages", agentToken, jsonBody)
			if resp.StatusCode != http.StatusBadGateway {
				t.Errorf("status %d, want 502", resp.StatusCode)
			}
			if typ, _ := errorShape(t, resp); typ != "api_error" {
				t.Errorf("error type %s", typ)
			}
			if c := h.ledger.calls(t); len(c) != 0 {
				t.Errorf("bad usage billed: %+v", c)
			}
		})
		if name == "no usage" {
			continue
		}
		t.Run("stream "+name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.up.setScript(func(w http.ResponseWriter, _ *http.Request, _ bool) {
				ev := standardStream("msg_bad")
				ev[6].data = `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":` + usage + `}`
				writeSSE(w, ev, 0)
			})
			resp := h.call(t, context.Background(), "/v1/messages", agentToken, streamBody)
			var sawError bool
			names := readEvents(t, resp, func(name, data string) bool {
				if name == "error" && strings.Contains(data, "looprun gateway") {
					sawError = true
				}
				return true
			})
			_ = resp.Body.Close()
			if !sawError || strings.Contains(strings.Join(names, ","), "message_delta") {
				t.Errorf("events %v: want the stream ended with an error before message_delta", names)
			}
			calls := h.ledger.calls(t)
			if len(calls) != 1 || calls[0].Final || calls[0].InputTokens != 25 || calls[0].OutputTokens < 1 {
				t.Errorf("ledger %+v: want the start as seen, not final", calls)
			}
		})
	}
}

func TestBudgetSpentRefused(t *testing.T) {
	h := newHarness(t, nil)
	// One call so far: 120 in + 45 out + cache: a few thousand micro-USD.
	resp := h.call(t, context.Background(), "/v1/messages", agentToken, jsonBody)
	_ = resp.Body.Close()
	h.budget.limit = 1
	resp = h.call(t, context.Background(), "/v1/messages?beta=true", agentToken, streamBody)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("status %d, want 400", resp.StatusCode)
	}
	if resp.Header.Get("X-Should-Retry") != "false" {
		t.Errorf("x-should-retry %q", resp.Header.Get("X-Should-Retry"))
	}
	typ, msg := errorShape(t, resp)
	if typ != "invalid_request_error" || !strings.Contains(msg, "team/fixer") || !strings.Contains(msg, "spent $") {
		t.Errorf("refusal %s %q", typ, msg)
	}
	if n := len(h.up.seen()); n != 1 {
		t.Errorf("the upstream saw %d calls, want the refused one not forwarded", n)
	}
	last := h.budget.checks[len(h.budget.checks)-1]
	if last.Calls != 1 || last.CostMicroUSD <= 0 {
		t.Errorf("the budget was asked with %+v", last)
	}
}

func TestAuthRefusals(t *testing.T) {
	h := newHarness(t, nil)
	for _, c := range []struct {
		token, typ string
		status     int
	}{
		{"", "authentication_error", 401},
		{"stolen", "authentication_error", 401},
		{"pod-done", "permission_error", 403},
	} {
		resp := h.call(t, context.Background(), "/v1/messages", c.token, jsonBody)
		if resp.StatusCode != c.status {
			t.Errorf("%q: status %d, want %d", c.token, resp.StatusCode, c.status)
		}
		if resp.Header.Get("X-Should-Retry") != "false" {
			t.Errorf("%q: x-should-retry %q", c.token, resp.Header.Get("X-Should-Retry"))
		}
		if typ, _ := errorShape(t, resp); typ != c.typ {
			t.Errorf("%q: type %s, want %s", c.token, typ, c.typ)
		}
	}
	// count_tokens is authenticated too.
	resp := h.call(t, context.Background(), "/v1/messages/count_tokens", "stolen", jsonBody)
	if resp.StatusCode != 401 {
		t.Errorf("count_tokens unauthenticated: %d", resp.StatusCode)
	}
	_ = resp.Body.Close()
	if n := len(h.up.seen()); n != 0 {
		t.Errorf("the upstream saw %d refused calls", n)
	}
}

func TestOperatorCallsCheckedNotRecorded(t *testing.T) {
	h := newHarness(t, nil)
	req, _ := http.NewRequest(http.MethodPost, h.gw.URL+"/v1/messages", strings.NewReader(jsonBody))
	req.Header.Set("Authorization", "Bearer "+opToken)
	req.Header.Set("X-Looprun-Loop", "team/fixer")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if len(h.budget.checks) != 1 {
		t.Errorf("%d budget checks", len(h.budget.checks))
	}
	if w := h.ledger.written(); len(w) != 0 {
		t.Errorf("operator call recorded: %+v", w)
	}
	if r := h.up.seen()[0]; r.header.Get("X-Looprun-Loop") != "" || r.header.Get("X-Api-Key") != realKey {
		t.Errorf("upstream headers %v", r.header)
	}
}

func TestUnknownPaths(t *testing.T) {
	h := newHarness(t, nil)
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/models"}, {"POST", "/v1/complete"}, {"HEAD", "/"}, {"POST", "/v1/messages/batches"}, {"GET", "/v1/messages"},
	} {
		req, _ := http.NewRequest(c.method, h.gw.URL+c.path, strings.NewReader("{}"))
		req.Header.Set("X-Api-Key", agentToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		want := http.StatusNotFound
		if c.path == "/v1/messages" {
			want = http.StatusMethodNotAllowed
		}
		if resp.StatusCode != want {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, want)
		}
		if c.method != "HEAD" {
			errorShape(t, resp)
		} else {
			_ = resp.Body.Close()
		}
	}
	if n := len(h.up.seen()); n != 0 {
		t.Errorf("the upstream saw %d calls", n)
	}
}

func TestCountTokensNotBilled(t *testing.T) {
	h := newHarness(t, nil)
	h.budget.limit = 1 // spent: count_tokens costs nothing, it still goes
	resp := h.call(t, context.Background(), "/v1/messages/count_tokens?beta=true", agentToken, jsonBody)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != `{"input_tokens":42}` {
		t.Errorf("count_tokens: %d %s", resp.StatusCode, b)
	}
	if r := h.up.seen(); len(r) != 1 || r[0].path != "/v1/messages/count_tokens" || r[0].header.Get("X-Api-Key") != realKey {
		t.Errorf("upstream saw %+v", r)
	}
	if w := h.ledger.written(); len(w) != 0 {
		t.Errorf("count_tokens recorded: %+v", w)
	}
}

func TestRequestTooLarge(t *testing.T) {
	h := newHarness(t, func(c *gateway.Config) { c.MaxRequestBytes = 1024 })
	resp := h.call(t, context.Background(), "/v1/messages", agentToken, `{"messages":"`+strings.Repeat("a", 2048)+`"}`)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("status %d", resp.StatusCode)
	}
	if typ, _ := errorShape(t, resp); typ != "request_too_large" {
		t.Errorf("type %s", typ)
	}
	if n := len(h.up.seen()); n != 0 {
		t.Errorf("upstream saw %d", n)
	}
}

func TestResponseTooLargeFails(t *testing.T) {
	h := newHarness(t, func(c *gateway.Config) { c.MaxResponseBytes = 100 })
	resp := h.call(t, context.Background(), "/v1/messages", agentToken, jsonBody)
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status %d", resp.StatusCode)
	}
	_ = resp.Body.Close()
}

func TestLedgerWriteFailureFailsTheCall(t *testing.T) {
	h := newHarness(t, nil)
	h.ledger.fail = errors.New("the API server is away")
	resp := h.call(t, context.Background(), "/v1/messages", agentToken, jsonBody)
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("json: status %d", resp.StatusCode)
	}
	if typ, _ := errorShape(t, resp); typ != "api_error" {
		t.Errorf("type %s", typ)
	}
	resp = h.call(t, context.Background(), "/v1/messages", agentToken, streamBody)
	names := readEvents(t, resp, nil)
	_ = resp.Body.Close()
	if strings.Join(names, ",") != "error" {
		t.Errorf("stream: events %v, want only an error", names)
	}
}

func TestUpstreamErrorsPassThroughUnbilled(t *testing.T) {
	h := newHarness(t, nil)
	h.up.setScript(func(w http.ResponseWriter, _ *http.Request, _ bool) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(529)
		_, _ = io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
	})
	resp := h.call(t, context.Background(), "/v1/messages", agentToken, streamBody)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 529 || !strings.Contains(string(b), "overloaded_error") {
		t.Errorf("%d %s", resp.StatusCode, b)
	}
	if w := h.ledger.written(); len(w) != 0 {
		t.Errorf("recorded %+v", w)
	}
}

func TestStreamWithoutIDGetsOne(t *testing.T) {
	h := newHarness(t, nil)
	h.up.setScript(func(w http.ResponseWriter, _ *http.Request, _ bool) {
		ev := standardStream("")
		writeSSE(w, ev, 0)
	})
	for range 2 {
		resp := h.call(t, context.Background(), "/v1/messages", agentToken, streamBody)
		readEvents(t, resp, nil)
		_ = resp.Body.Close()
	}
	calls := h.ledger.calls(t)
	if len(calls) != 2 || calls[0].ID == calls[1].ID || !strings.HasPrefix(calls[0].ID, "looprun_") {
		t.Errorf("calls %+v: want two, each with its own id", calls)
	}
}

func TestKeyFileRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	if err := os.WriteFile(path, []byte("sk-first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(c *gateway.Config) { c.Key = gateway.FileKey(path) })
	call := func() {
		resp := h.call(t, context.Background(), "/v1/messages", agentToken, jsonBody)
		_ = resp.Body.Close()
	}
	call()
	if err := os.WriteFile(path, []byte("sk-second\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	call()
	r := h.up.seen()
	if got := fmt.Sprint(r[0].header.Get("X-Api-Key"), " ", r[1].header.Get("X-Api-Key")); got != "sk-first sk-second" {
		t.Errorf("keys used %s", got)
	}
	// The key gone: not ready, and calls fail without reaching the upstream.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(h.gw.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("readyz %d without a key", resp.StatusCode)
	}
}

func TestHealth(t *testing.T) {
	h := newHarness(t, nil)
	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(h.gw.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", p, resp.StatusCode)
		}
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, func(c *gateway.Config) { c.Registry = reg })
	resp := h.call(t, context.Background(), "/v1/messages", agentToken, jsonBody)
	_ = resp.Body.Close()
	resp = h.call(t, context.Background(), "/v1/messages", agentToken, streamBody)
	readEvents(t, resp, nil)
	_ = resp.Body.Close()
	h.budget.limit = 1
	resp = h.call(t, context.Background(), "/v1/messages", agentToken, jsonBody)
	_ = resp.Body.Close()
	resp = h.call(t, context.Background(), "/v1/messages", "stolen", jsonBody)
	_ = resp.Body.Close()
	want := `
# HELP looprun_gateway_calls_total Calls through the model gateway, by route and outcome.
# TYPE looprun_gateway_calls_total counter
looprun_gateway_calls_total{outcome="ok",route="/v1/messages"} 2
looprun_gateway_calls_total{outcome="refused",route="/v1/messages"} 2
# HELP looprun_gateway_refusals_total Calls the gateway refused, by reason.
# TYPE looprun_gateway_refusals_total counter
looprun_gateway_refusals_total{reason="budget_spent"} 1
looprun_gateway_refusals_total{reason="unauthenticated"} 1
# HELP looprun_gateway_tokens_total Tokens counted from the upstream's responses, by kind (input, output, cache_read, cache_creation).
# TYPE looprun_gateway_tokens_total counter
looprun_gateway_tokens_total{kind="cache_creation"} 700
looprun_gateway_tokens_total{kind="cache_read"} 5000
looprun_gateway_tokens_total{kind="input"} 145
looprun_gateway_tokens_total{kind="output"} 60
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func TestHopByHopAndLooprunHeadersDropped(t *testing.T) {
	h := newHarness(t, nil)
	req, _ := http.NewRequest(http.MethodPost, h.gw.URL+"/v1/messages", strings.NewReader(jsonBody))
	req.Header.Set("X-Api-Key", agentToken)
	req.Header.Set("Connection", "X-Secret-Hop")
	req.Header.Set("X-Secret-Hop", "1")
	req.Header.Set("Proxy-Authorization", "Basic eA==")
	req.Header.Set("Cookie", "session=1")
	req.Header.Set("X-Looprun-Loop", "team/other")
	req.Header.Set("X-Forwarded-For", "10.0.0.1")
	req.Header.Set("User-Agent", "claude-cli/2.1.197 (external, sdk-cli)")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	got := h.up.seen()[0].header
	for _, k := range []string{"X-Secret-Hop", "Proxy-Authorization", "Cookie", "X-Looprun-Loop", "X-Forwarded-For"} {
		if v := got.Get(k); v != "" {
			t.Errorf("%s forwarded: %q", k, v)
		}
	}
	if got.Get("User-Agent") != "claude-cli/2.1.197 (external, sdk-cli)" {
		t.Errorf("user agent %q", got.Get("User-Agent"))
	}
}

func TestGzipAnswerMetered(t *testing.T) {
	h := newHarness(t, nil)
	h.up.setScript(func(w http.ResponseWriter, r *http.Request, _ bool) {
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			t.Errorf("the gateway asked for %q", r.Header.Get("Accept-Encoding"))
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		_, _ = io.WriteString(zw, messageJSON("msg_gz", `{"input_tokens":7,"output_tokens":3}`))
		_ = zw.Close()
	})
	req, _ := http.NewRequest(http.MethodPost, h.gw.URL+"/v1/messages", strings.NewReader(jsonBody))
	req.Header.Set("X-Api-Key", agentToken)
	req.Header.Set("Accept-Encoding", "br")
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "" || !strings.Contains(string(b), "msg_gz") {
		t.Errorf("%d %v %s", resp.StatusCode, resp.Header, b)
	}
	if c := h.ledger.calls(t); len(c) != 1 || c[0].InputTokens != 7 || c[0].OutputTokens != 3 {
		t.Errorf("ledger %+v", c)
	}
}

func TestStreamShapes(t *testing.T) {
	big := strings.Repeat("z", 20<<10) // longer than the gateway's read buffer
	for name, c := range map[string]struct {
		write      func(w http.ResponseWriter)
		wantOutput int64
		wantFinal  bool
		wantError  bool
	}{
		"unnamed events, CRLF": {write: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
			for _, e := range standardStream("msg_shape") {
				_, _ = fmt.Fprintf(w, "data: %s\r\n\r\n", e.data)
			}
		}, wantOutput: 15, wantFinal: true},
		"a delta larger than the read buffer": {write: func(w http.ResponseWriter) {
			ev := standardStream("msg_shape")
			ev[3].data = `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + big + `"}}`
			ev[6].data = `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{}}`
			writeSSE(w, ev, 0)
		}, wantOutput: int64(len(big)+len(" there, friend.")) / 4, wantFinal: true},
		"an event over the bound": {write: func(w http.ResponseWriter) {
			ev := standardStream("msg_shape")
			ev[3].data = `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + strings.Repeat(big, 10) + `"}}`
			writeSSE(w, ev, 0)
		}, wantOutput: 1, wantError: true},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, func(c *gateway.Config) { c.MaxEventBytes = 64 << 10 })
			h.up.setScript(func(w http.ResponseWriter, _ *http.Request, _ bool) { c.write(w) })
			resp := h.call(t, context.Background(), "/v1/messages", agentToken, streamBody)
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if got := strings.Contains(string(b), "event: error"); got != c.wantError {
				t.Errorf("error event %v, want %v", got, c.wantError)
			}
			if !c.wantError && !strings.Contains(string(b), "message_stop") {
				t.Errorf("the stream did not reach its end")
			}
			calls := h.ledger.calls(t)
			if len(calls) != 1 || calls[0].OutputTokens != c.wantOutput || calls[0].Final != c.wantFinal || calls[0].InputTokens != 25 {
				t.Errorf("ledger %+v, want output %d final %v", calls, c.wantOutput, c.wantFinal)
			}
		})
	}
}

// burstThenHold streams the start and two deltas at once, then nothing
// until the agent goes.
func burstThenHold(w http.ResponseWriter, r *http.Request, _ bool) {
	ev := standardStream("msg_quiet")
	big := sse{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + strings.Repeat("q", 2000) + `"}}`}
	writeSSE(w, append(ev[:3:3], big, big), 0)
	<-r.Context().Done()
}

// TestCheckpointWhenTheUpstreamGoesQuiet: output that came before the
// upstream went quiet is checkpointed within CheckpointEvery, while the
// stream is still open (a gateway killed then loses none of it).
func TestCheckpointWhenTheUpstreamGoesQuiet(t *testing.T) {
	h := newHarness(t, func(c *gateway.Config) { c.CheckpointEvery = 50 * time.Millisecond })
	h.up.setScript(burstThenHold)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := h.call(t, ctx, "/v1/messages", agentToken, streamBody)
	defer func() { _ = resp.Body.Close() }()
	waitFor(t, "a checkpoint of the burst", func() bool {
		for _, c := range h.ledger.written() {
			if !c.Final && c.OutputTokens == 1000 {
				return true
			}
		}
		return false
	})
	time.Sleep(200 * time.Millisecond)
	if n := len(h.ledger.written()); n != 2 {
		t.Errorf("%d records while quiet, want the start and one checkpoint", n)
	}
}

func TestCheckpointWriteFailureStopsTheStream(t *testing.T) {
	h := newHarness(t, func(c *gateway.Config) { c.CheckpointEvery = 50 * time.Millisecond })
	h.up.setScript(burstThenHold)
	var deltas atomic.Int32
	resp := h.call(t, context.Background(), "/v1/messages", agentToken, streamBody)
	done := make(chan []string)
	go func() {
		done <- readEvents(t, resp, func(name, _ string) bool {
			// The start is written; the checkpoints after it fail.
			if name == "content_block_delta" && deltas.Add(1) == 1 {
				h.ledger.mu.Lock()
				h.ledger.fail = errors.New("the API server is away")
				h.ledger.mu.Unlock()
			}
			return true
		})
	}()
	select {
	case names := <-done:
		if names[len(names)-1] != "error" {
			t.Errorf("events %v, want the stream ended with an error", names)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream went on after its checkpoint could not be written")
	}
	_ = resp.Body.Close()
}
