package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "entrypoint")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return bin
}

type message struct {
	ExitCode int    `json:"exitCode"`
	Stdout   string `json:"stdout"`
	TimedOut bool   `json:"timedOut"`
	Verdict  *struct {
		Verdict string `json:"verdict"`
	} `json:"verdict"`
}

func TestWrapper(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	term := filepath.Join(dir, "termination-log")
	read := func() message {
		b, err := os.ReadFile(term)
		if err != nil {
			t.Fatal(err)
		}
		var m message
		if err := json.Unmarshal(b, &m); err != nil || len(b) > 4096 {
			t.Fatalf("termination message %q: %v", b, err)
		}
		return m
	}
	run := func(args ...string) (int, string) {
		cmd := exec.Command(bin, append([]string{"--termination-log", term}, args...)...)
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}

	code, out := run("--evaluate", `{"type":"output_contains","pattern":"ready"}`, "--", "bash", "-c", "echo ready; exit 3")
	if m := read(); code != 3 || out != "ready\n" || m.ExitCode != 3 || m.Stdout != "ready\n" || m.Verdict == nil || m.Verdict.Verdict != "error" {
		t.Errorf("exit %d, log %q, message %+v", code, out, m)
	}
	code, _ = run("--timeout", "200ms", "--", "bash", "-c", "sleep 30")
	if m := read(); code != 124 || !m.TimedOut {
		t.Errorf("timeout: exit %d, message %+v", code, m)
	}
	code, _ = run("--", "bash", "-c", "kill -KILL $$")
	if m := read(); code != 128+9 || m.ExitCode != -9 {
		t.Errorf("signal: exit %d, message %+v", code, m)
	}
	if code, _ := run("--evaluate", "{not json", "--", "true"); code != 2 {
		t.Errorf("bad --evaluate: exit %d", code)
	}

	// A SIGTERM to the wrapper reaches the action.
	cmd := exec.Command(bin, "--termination-log", term, "--", "bash", "-c", "trap 'echo stopping; exit 5' TERM; sleep 30 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	if m := read(); cmd.ProcessState.ExitCode() != 5 || !strings.Contains(m.Stdout, "stopping") {
		t.Errorf("forwarded SIGTERM: exit %d, message %+v", cmd.ProcessState.ExitCode(), m)
	}

	// Killed outright, the wrapper takes the action with it.
	late := filepath.Join(dir, "late")
	cmd = exec.Command(bin, "--termination-log", term, "--", "bash", "-c", "sleep 1; touch "+late)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	time.Sleep(1500 * time.Millisecond)
	if _, err := os.Stat(late); err == nil {
		t.Error("the action outlived its killed wrapper")
	}

	// The init container's copy.
	dst := filepath.Join(dir, "copied")
	if code, out := run("--copy-to", dst); code != 0 {
		t.Fatalf("copy: %d %s", code, out)
	}
	if out, err := exec.Command(dst, "--termination-log", term, "--", "echo", "from the copy").CombinedOutput(); err != nil || string(out) != "from the copy\n" {
		t.Errorf("copied binary: %v %q", err, out)
	}
}
