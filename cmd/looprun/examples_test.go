package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

func examplesDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestExamplesValidate(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(examplesDir(t), "*", "loop.yaml"))
	if len(files) < 4 {
		t.Fatalf("only %d examples", len(files))
	}
	for _, f := range files {
		// The project's own examples are what a loop should be: valid,
		// and nothing to warn of.
		if r := looprun(t, t.TempDir(), "validate", f); r.code != 0 || strings.Contains(r.stderr, "warning") {
			t.Errorf("%s: %s%s", f, r.stdout, r.stderr)
		}
	}
}

func TestExamplesRun(t *testing.T) {
	ex := examplesDir(t)
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"fix-until-clean", nil, 0, "check -> done (success)"},
		{"drive-a-metric", nil, 0, "measure -> done (target)"},
		{"maintain-an-invariant", []string{"-n", "5", "--context", "file=" + filepath.Join(t.TempDir(), "inv.conf")}, 1, "[3] healthy -> check (maintain)\n[4] check -> healthy (success)\n[5] healthy -> check (maintain)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"run", filepath.Join(ex, tt.name, "loop.yaml")}, tt.args...)
			r := looprun(t, t.TempDir(), args...)
			if r.code != tt.code || !strings.Contains(steps(r.stdout), tt.want) {
				t.Errorf("exit %d, want %d; output:\n%s%s", r.code, tt.code, r.stdout, r.stderr)
			}
		})
	}
}

// The agent example end to end: a stub claude CLI on PATH fixes the
// "tests", and a local server answering as the Messages API judges it.
func TestAgentExampleWithStubs(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	write(t, bin, "claude", "#!/bin/sh\n# stub agent: the prompt is the last argument\ntouch fixed\necho \"created the missing file 'fixed'\"\n")
	if err := os.Chmod(filepath.Join(bin, "claude"), 0o755); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	judge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Path != "/v1/messages" || r.Header.Get("X-Api-Key") != "test-key" {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-5-5", "stop_reason": "tool_use",
			"content": []any{map[string]any{"type": "tool_use", "id": "t1", "name": "record_verdict",
				"input": map[string]any{"verdict": "yes", "confidence": 0.95, "reason": "the file was created", "evidence": "created the missing file 'fixed'"}}},
			"usage": map[string]any{"input_tokens": 10, "output_tokens": 10},
		})
	}))
	defer judge.Close()

	cmd := exec.Command(binary, "run", filepath.Join(examplesDir(t), "agent-fix", "loop.yaml"), "--context", "test_cmd=test -f fixed")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"ANTHROPIC_API_KEY=test-key", "ANTHROPIC_BASE_URL="+judge.URL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"[1] where -> test (success)", "[2] test -> fix (failure)", "[3] fix -> test (success)", "[4] test -> done (success)"} {
		if !strings.Contains(steps(string(out)), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if calls.Load() != 1 {
		t.Errorf("judge called %d times", calls.Load())
	}
	events := readFile(dir, ".loops/.running/agent-fix.events.jsonl")
	if !strings.Contains(events, `"type":"llm_structured"`) || !strings.Contains(events, `"reason":"the file was created"`) || !strings.Contains(events, `"is_prompt":true`) {
		t.Errorf("events do not show the judge's verdict:\n%s", events)
	}
}

// The agent example never points the agent at looprun's own source: run
// from this repository, as the other examples are, it stops before its
// tests or its agent run.
func TestAgentExampleRefusesLooprunsOwnRepository(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "go.mod", "module github.com/looprun/looprun\n\ngo 1.26\n")
	bin := filepath.Join(dir, "bin")
	write(t, bin, "claude", "#!/bin/sh\ntouch agent-ran\n")
	if err := os.Chmod(filepath.Join(bin, "claude"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "run", filepath.Join(examplesDir(t), "agent-fix", "loop.yaml"), "--context", "test_cmd=touch tests-ran")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(steps(string(out)), "[1] where -> wrong_place") || !strings.Contains(string(out), "looprun's own repository") {
		t.Fatalf("ran (%v):\n%s", err, out)
	}
	for _, f := range []string{"agent-ran", "tests-ran"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s: it ran in looprun's repository", f)
		}
	}
}
