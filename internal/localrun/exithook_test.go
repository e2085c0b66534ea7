package localrun

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/looprun/looprun/api/v1alpha1"
)

// The exit hook runs once the run ended, whatever the end, reads how it
// ended, and what it did is kept in the state file; a paused run runs none.
func TestExitHook(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fail     bool
		hook     string
		want     v1alpha1.ExitHookPhase
		wantCode int32
		file     string
	}{
		{"completed", false, `echo "${loop.phase} ${loop.final_state} ${loop.terminated_by} ${loop.iterations}" > hook.out`, v1alpha1.ExitHookSucceeded, 0,
			"Completed done terminal 3\n"},
		{"failed", true, `echo "${loop.phase} ${loop.final_state}" > hook.out; echo no >&2; exit 5`, v1alpha1.ExitHookFailed, 5, "Failed broken\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := spec(fixStates())
			s.OnExit = &v1alpha1.ExitHook{Action: tc.hook}
			if tc.fail {
				s.States = map[string]v1alpha1.State{"check": {Action: "false", OnSuccess: "done", OnFailure: "broken"},
					"done": {Terminal: true}, "broken": {Terminal: true, Failure: new(true)}}
			}
			d := newDriver(t, dir, s)
			var seen []v1alpha1.ExitHookPhase
			d.OnExitHook = func(h *v1alpha1.ExitHookStatus) { seen = append(seen, h.Phase) }
			run, err := d.Start(context.Background(), "r1")
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(dir, "hook.out"))
			if err != nil || string(got) != tc.file {
				t.Fatalf("hook wrote %q (%v), want %q", got, err, tc.file)
			}
			if len(seen) != 2 || seen[0] != v1alpha1.ExitHookRunning || seen[1] != tc.want {
				t.Errorf("OnExitHook saw %v", seen)
			}
			f, err := d.Store.Load()
			if err != nil {
				t.Fatal(err)
			}
			h := f.ExitHook
			if h == nil || h.Phase != string(tc.want) || h.ExitCode == nil || *h.ExitCode != tc.wantCode || h.Iteration != run.Iteration {
				t.Fatalf("state file exit_hook %+v", h)
			}
			if tc.fail && h.Message != "no" {
				t.Errorf("message %q", h.Message)
			}
			back, err := f.RunState()
			if err != nil || back.ExitHook == nil || back.ExitHook.Phase != tc.want {
				t.Fatalf("read back: %+v %v", back, err)
			}
		})
	}
}

// A hook whose templates cannot expand (a capture the run never reached)
// fails with why, without running.
func TestExitHookThatCannotExpand(t *testing.T) {
	dir := t.TempDir()
	s := spec(map[string]v1alpha1.State{
		"check": {Action: "true", OnSuccess: "done", OnFailure: "fix"},
		"fix":   {Action: "echo x", Capture: "x", Next: "done"},
		"done":  {Terminal: true},
	})
	s.OnExit = &v1alpha1.ExitHook{Action: "touch ran; echo ${captured.x.output}"}
	d := newDriver(t, dir, s)
	run, err := d.Start(context.Background(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	h := run.ExitHook
	if h == nil || h.Phase != v1alpha1.ExitHookFailed || !strings.HasPrefix(h.Message, "spec.onExit.action: ") {
		t.Fatalf("exit hook %+v", h)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Error("the hook ran")
	}
}
