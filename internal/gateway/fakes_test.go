package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/looprun/looprun/internal/gateway"
	"github.com/looprun/looprun/internal/gateway/ledger"
	"github.com/looprun/looprun/internal/pricing"
)

const (
	realKey    = "sk-ant-real-key"
	agentToken = "pod-token-abc"
	opToken    = "operator-token"
	model      = "claude-sonnet-4-6"
)

var theStep = ledger.Step{Namespace: "team", Loop: "fixer", LoopUID: "loop-uid", Pod: "fixer-1-pod",
	PodUID: "pod-uid-1", Run: "r1", Iteration: 1, State: "fix"}

// fakeAuth knows one agent token, the operator's, and one of a Pod that
// runs no step.
type fakeAuth struct{}

func (fakeAuth) Authenticate(_ context.Context, cred, loopHeader string) (*gateway.Caller, error) {
	switch cred {
	case agentToken:
		return &gateway.Caller{Step: theStep}, nil
	case opToken:
		st := theStep
		st.Pod, st.PodUID = "", ""
		if loopHeader != "team/fixer" {
			return nil, fmt.Errorf("%w: no Loop %q", gateway.ErrForbidden, loopHeader)
		}
		return &gateway.Caller{Step: st, Operator: true}, nil
	case "pod-done":
		return nil, fmt.Errorf("%w: Pod team/old runs no step of a Loop now", gateway.ErrForbidden)
	}
	return nil, fmt.Errorf("%w: the token is not one of this gateway's audience", gateway.ErrUnauthenticated)
}

// fakeBudget refuses once the step spent limit micro-USD (0: never).
type fakeBudget struct {
	mu     sync.Mutex
	limit  int64
	checks []ledger.Totals
}

func (b *fakeBudget) Check(_ context.Context, st ledger.Step, spent ledger.Totals) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.checks = append(b.checks, spent)
	if b.limit > 0 && spent.CostMicroUSD >= b.limit {
		return fmt.Errorf("%w: Loop %s/%s spent $%s of its $%s", gateway.ErrBudgetSpent, st.Namespace, st.Loop,
			pricing.FormatUSD(spent.CostMicroUSD), pricing.FormatUSD(b.limit))
	}
	return nil
}

// recLedger is the real ledger.Store on a fake client, with a log of the
// records written and hooks.
type recLedger struct {
	store *ledger.Store

	mu      sync.Mutex
	records []ledger.Call
	// fail fails every write.
	fail error
	// beforeFinal runs before a final record is written.
	beforeFinal func(ledger.Call)
}

func newRecLedger(t *testing.T) *recLedger {
	t.Helper()
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return &recLedger{store: &ledger.Store{Client: fake.NewClientBuilder().WithScheme(s).Build(), Namespace: "looprun-system"}}
}

func (l *recLedger) Record(ctx context.Context, st ledger.Step, c ledger.Call) error {
	l.mu.Lock()
	fail, hook := l.fail, l.beforeFinal
	l.mu.Unlock()
	if fail != nil {
		return fail
	}
	if c.Final && hook != nil {
		hook(c)
	}
	if err := l.store.Record(ctx, st, c); err != nil {
		return err
	}
	l.mu.Lock()
	l.records = append(l.records, c)
	l.mu.Unlock()
	return nil
}

func (l *recLedger) Read(ctx context.Context, podUID types.UID) (*ledger.Ledger, error) {
	return l.store.Read(ctx, podUID)
}

func (l *recLedger) written() []ledger.Call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]ledger.Call(nil), l.records...)
}

// calls is the step's ledger as stored.
func (l *recLedger) calls(t *testing.T) []ledger.Call {
	t.Helper()
	led, err := l.store.Read(context.Background(), theStep.PodUID)
	if err != nil {
		t.Fatal(err)
	}
	if led == nil {
		return nil
	}
	return led.Calls
}

// upstream is a fake Messages API. Its script answers /v1/messages; it
// keeps what each call sent.
type upstream struct {
	*httptest.Server

	mu       sync.Mutex
	requests []seen
	// script answers /v1/messages (default: msgJSON or msgSSE).
	script func(w http.ResponseWriter, r *http.Request, stream bool)
}

type seen struct {
	method, path, query string
	header              http.Header
	body                []byte
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.requests = append(u.requests, seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body})
		script := u.script
		u.mu.Unlock()
		switch r.URL.Path {
		case "/v1/messages":
			var req struct {
				Stream bool `json:"stream"`
			}
			_ = json.Unmarshal(body, &req)
			if script != nil {
				script(w, r, req.Stream)
				return
			}
			if req.Stream {
				writeSSE(w, standardStream("msg_stream_1"), 0)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, messageJSON("msg_json_1", `{"input_tokens":120,"output_tokens":45,"cache_creation_input_tokens":300,"cache_read_input_tokens":2000}`))
		case "/v1/messages/count_tokens":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"input_tokens":42}`)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) seen() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seen(nil), u.requests...)
}

func (u *upstream) setScript(f func(w http.ResponseWriter, r *http.Request, stream bool)) {
	u.mu.Lock()
	u.script = f
	u.mu.Unlock()
}

func messageJSON(id, usage string) string {
	return fmt.Sprintf(`{"id":%q,"type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":"Hello."}],"stop_reason":"end_turn","stop_sequence":null,"usage":%s}`, id, model, usage)
}

type sse struct{ name, data string }

// standardStream is a whole answer as the Messages API streams it.
func standardStream(id string) []sse {
	return []sse{
		{"message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":%q,"type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":400,"cache_read_input_tokens":3000,"output_tokens":1}}}`, id, model)},
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
		{"ping", `{"type": "ping"}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" there, friend."}}`},
		{"content_block_stop", `{"type":"content_block_stop","index":0}`},
		{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}`},
		{"message_stop", `{"type":"message_stop"}`},
	}
}

func writeSSE(w http.ResponseWriter, events []sse, pause time.Duration) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	f := w.(http.Flusher)
	for _, e := range events {
		_, _ = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.name, e.data)
		f.Flush()
		if pause > 0 {
			time.Sleep(pause)
		}
	}
}

// harness is a gateway in front of a fake upstream.
type harness struct {
	up     *upstream
	ledger *recLedger
	budget *fakeBudget
	gw     *httptest.Server
}

func newHarness(t *testing.T, tweak func(*gateway.Config)) *harness {
	t.Helper()
	h := &harness{up: newUpstream(t), ledger: newRecLedger(t), budget: &fakeBudget{}}
	u, _ := url.Parse(h.up.URL)
	cfg := gateway.Config{Upstream: u, Key: gateway.StaticKey(realKey), Auth: fakeAuth{}, Budget: h.budget,
		Ledger: h.ledger, Prices: pricing.Default(), CheckpointEvery: time.Hour}
	if tweak != nil {
		tweak(&cfg)
	}
	handler, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.gw = httptest.NewServer(handler)
	t.Cleanup(h.gw.Close)
	return h
}

// call makes a call through the gateway the way the claude CLI does.
func (h *harness) call(t *testing.T, ctx context.Context, path, token string, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.gw.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Anthropic-Beta", "claude-code-20250219,interleaved-thinking-2025-05-14")
	if token != "" {
		req.Header.Set("X-Api-Key", token)
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil
		}
		t.Fatal(err)
	}
	return resp
}

const (
	streamBody = `{"model":"claude-sonnet-4-6","max_tokens":64000,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	jsonBody   = `{"model":"claude-sonnet-4-6","max_tokens":1024,"messages":[{"role":"user","content":"hi"}]}`
)

// errorShape reads an Anthropic-shaped error body.
func errorShape(t *testing.T, resp *http.Response) (errType, msg string) {
	t.Helper()
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Type != "error" {
		t.Fatalf("not an Anthropic error (%v): %s", err, b)
	}
	if !strings.HasPrefix(e.Error.Message, "looprun gateway: ") {
		t.Errorf("message %q does not say it is the gateway's", e.Error.Message)
	}
	return e.Error.Type, e.Error.Message
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
