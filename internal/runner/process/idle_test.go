package process

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/looprun/looprun/internal/executor/evaluate"
)

// A command that goes quiet for longer than its idle timeout is killed
// (exit 124, said on stderr); one that keeps printing runs past it, through
// pipes (stream-json agents, Pods) and through a local run's own files.
func TestIdleTimeout(t *testing.T) {
	open := logFiles(t)
	chatty := "for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.1; done"
	quiet := "echo started; sleep 30"
	for _, mode := range []string{"piped", "own files"} {
		spec := func(script string) Spec {
			s := Spec{Argv: bash(script), IdleTimeout: 300 * time.Millisecond}
			if mode == "own files" {
				s.Stdout, s.Stderr, s.OwnFiles = open(mode+script[:4]+".out"), open(mode+script[:4]+".err"), true
			}
			return s
		}
		start := time.Now()
		r := Run(context.Background(), spec(quiet))
		if r.ExitCode != evaluate.ExitTimeout || !r.IdledOut || !r.TimedOut || !strings.Contains(r.Stderr, "printed nothing for 300ms") || time.Since(start) > 5*time.Second {
			t.Errorf("%s, quiet: exit %d idled %v stderr %q after %v", mode, r.ExitCode, r.IdledOut, r.Stderr, time.Since(start))
		}
		if r.Stdout != "started\n" {
			t.Errorf("%s, quiet: stdout %q", mode, r.Stdout)
		}
		r = Run(context.Background(), spec(chatty))
		if r.ExitCode != 0 || r.IdledOut || !strings.Contains(r.Stdout, "tick 6") {
			t.Errorf("%s, chatty: exit %d idled %v stdout %q", mode, r.ExitCode, r.IdledOut, r.Stdout)
		}
	}
	// A stream-json agent: its raw records count as output.
	r := Run(context.Background(), Spec{Argv: bash(`echo '{"type":"system","subtype":"init"}'; sleep 30`), AgentStream: true, IdleTimeout: 300 * time.Millisecond})
	if !r.IdledOut || r.ExitCode != evaluate.ExitTimeout {
		t.Errorf("agent: exit %d idled %v", r.ExitCode, r.IdledOut)
	}
}
