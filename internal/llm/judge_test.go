package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/executor/evaluate"
)

// messagesServer speaks enough of the Messages API for the judge.
type messagesServer struct {
	mu       sync.Mutex
	requests []map[string]any
	headers  []http.Header
	reply    func(w http.ResponseWriter)
}

func (s *messagesServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req map[string]any
	_ = json.Unmarshal(body, &req)
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.headers = append(s.headers, r.Header.Clone())
	s.mu.Unlock()
	if r.URL.Path != "/v1/messages" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	s.reply(w)
}

func toolAnswer(input map[string]any) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-5-5",
			"content":     []any{map[string]any{"type": "tool_use", "id": "toolu_1", "name": toolName, "input": input}},
			"stop_reason": "tool_use", "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": 12, "output_tokens": 7, "cache_read_input_tokens": 3, "cache_creation_input_tokens": 2},
		})
	}
}

func newTestJudge(t *testing.T, s *messagesServer, timeout time.Duration) *Judge {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	zero := 0
	return New(Config{APIKey: "test-key", BaseURL: srv.URL, Timeout: timeout, MaxRetries: &zero})
}

func TestJudgeVerdict(t *testing.T) {
	s := &messagesServer{reply: toolAnswer(map[string]any{"verdict": "yes", "confidence": 0.9, "reason": "all passed", "evidence": "12 passed"})}
	j := newTestJudge(t, s, 5*time.Second)
	r := j.Judge(context.Background(), evaluate.JudgeRequest{Prompt: "Did the tests pass?", Output: "12 passed", MinConfidence: 0.5})
	if r.Verdict != "success" || r.Details["reason"] != "all passed" || r.Details["confident"] != true {
		t.Fatalf("result %+v", r)
	}
	req := s.requests[0]
	if req["model"] != "claude-sonnet-5-5" {
		t.Errorf("model %v", req["model"])
	}
	if tc, _ := req["tool_choice"].(map[string]any); tc["type"] != "tool" || tc["name"] != toolName {
		t.Errorf("tool_choice %v", req["tool_choice"])
	}
	msgs, _ := req["messages"].([]any)
	content, _ := msgs[0].(map[string]any)["content"].([]any)
	text, _ := content[0].(map[string]any)["text"].(string)
	if !strings.Contains(text, "Did the tests pass?") || !strings.Contains(text, "<action_output>\n12 passed\n</action_output>") {
		t.Errorf("prompt %q", text)
	}
	tools, _ := req["tools"].([]any)
	schema, _ := json.Marshal(tools[0].(map[string]any)["input_schema"])
	if !strings.Contains(string(schema), `"cannot_judge"`) {
		t.Errorf("default schema not sent: %s", schema)
	}
	if got := s.headers[0].Get("X-Api-Key"); got != "test-key" {
		t.Errorf("api key header %q", got)
	}
	if u := r.Usage; u == nil || *u != (agentstream.Usage{InputTokens: 12, OutputTokens: 7, CacheReadTokens: 3, CacheCreationTokens: 2, Model: "claude-sonnet-5-5"}) {
		t.Errorf("the call's usage %+v", u)
	}
}

func TestJudgeCustomSchemaAndModel(t *testing.T) {
	s := &messagesServer{reply: toolAnswer(map[string]any{"verdict": "needs_docs"})}
	j := newTestJudge(t, s, 5*time.Second)
	schema := json.RawMessage(`{"type":"object","properties":{"verdict":{"type":"string","enum":["ship","needs_docs"]}},"required":["verdict"]}`)
	r := j.Judge(context.Background(), evaluate.JudgeRequest{Schema: schema, Model: "claude-haiku-5-5"})
	if r.Verdict != "needs_docs" {
		t.Fatalf("verdict %q", r.Verdict)
	}
	if s.requests[0]["model"] != "claude-haiku-5-5" {
		t.Errorf("model %v", s.requests[0]["model"])
	}
}

func TestJudgeFailuresAreErrorVerdicts(t *testing.T) {
	tests := []struct {
		name    string
		reply   func(w http.ResponseWriter)
		timeout time.Duration
		want    string
	}{
		{"server error", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"type":"error","error":{"type":"api_error","message":"boom"}}`)
		}, 5 * time.Second, "judge call failed"},
		{"malformed body", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"content": [ this is not json`)
		}, 5 * time.Second, "judge call failed"},
		{"no tool call", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"m","type":"message","role":"assistant","model":"x","content":[{"type":"text","text":"I think yes"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`)
		}, 5 * time.Second, "without a verdict"},
		{"answer outside the schema", toolAnswer(map[string]any{"verdict": "probably", "evidence": "x"}), 5 * time.Second, "invalid verdict"},
		{"timeout", func(w http.ResponseWriter) {
			time.Sleep(500 * time.Millisecond)
			toolAnswer(map[string]any{"verdict": "yes", "evidence": "x"})(w)
		}, 100 * time.Millisecond, "timed out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := newTestJudge(t, &messagesServer{reply: tt.reply}, tt.timeout)
			r := j.Judge(context.Background(), evaluate.JudgeRequest{Output: "x"})
			if r.Verdict != "error" {
				t.Fatalf("verdict %q, want error (details %v)", r.Verdict, r.Details)
			}
			if msg, _ := r.Details["error"].(string); !strings.Contains(msg, tt.want) {
				t.Errorf("error %q, want %q", msg, tt.want)
			}
			for _, body := range []string{"boom", "not json", "I think"} {
				if strings.Contains(fmt.Sprint(r.Details), body) {
					t.Errorf("the endpoint's answer %q reached the verdict: %v", body, r.Details)
				}
			}
			if tt.name == "timeout" && r.Details["timeout"] != true {
				t.Errorf("timeout not flagged: %v", r.Details)
			}
		})
	}
}

func TestJudgeUnreachable(t *testing.T) {
	zero := 0
	j := New(Config{APIKey: "k", BaseURL: "http://127.0.0.1:1", Timeout: time.Second, MaxRetries: &zero})
	if r := j.Judge(context.Background(), evaluate.JudgeRequest{}); r.Verdict != "error" {
		t.Errorf("verdict %q", r.Verdict)
	}
}
