package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/looprun/looprun/internal/eventlog"
	"github.com/looprun/looprun/internal/loopfile"
)

// durations are the times a run prints, which change from run to run.
var durations = regexp.MustCompile(`\d+(\.\d+)?s\b|\d+m \d+s`)

// progressGolden compares got with testdata/progress/NAME (go test -update
// rewrites it).
func progressGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "progress", name)
	got = durations.ReplaceAllString(got, "T")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it); got:\n%s", name, got)
	}
}

// What looprun run prints, plain (not a terminal) and on a terminal: a
// retry with its backoff, an agent that cannot start (its stderr shown),
// a sub-loop indented, an output cut at 40 lines, a verdict's reason and
// the end's.
func TestProgressGolden(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []struct{ from, to string }{{"demo.yaml", "demo.yaml"}, {"inner.yaml", ".loops/inner.yaml"}} {
		b, err := os.ReadFile(filepath.Join("testdata", "progress", f.from))
		if err != nil {
			t.Fatal(err)
		}
		write(t, dir, f.to, string(b))
	}
	write(t, dir, "bin/claude", "#!/bin/sh\necho 'claude: command not found' >&2\nexit 127\n")
	if err := os.Chmod(filepath.Join(dir, "bin/claude"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "run", "demo.yaml")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(dir, "bin")+":/usr/bin:/bin")
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err == nil {
		t.Fatal("the run ended well; it ends in error")
	}
	progressGolden(t, "plain.golden", out.String())

	// The same events on a terminal: colour and marks; an action's output
	// from its event, as a sub-loop's is shown.
	events, err := eventlog.Read(filepath.Join(dir, ".loops/.running/demo.events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var tty bytes.Buffer
	lf, err := loopfile.Load(filepath.Join(dir, "demo.yaml"), loopfile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	newProgress(&tty, style{color: true}, false, header{loop: "demo", spec: &lf.Loop.Spec, littleLoops: lf.LittleLoops()}, nil).print(events)
	progressGolden(t, "tty.golden", tty.String())
}
