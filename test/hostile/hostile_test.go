// Package hostile feeds looprun the inputs a careless user or a hostile
// tenant would: broken and oversized loop files, names that climb out of
// their directory, edited state files, forged exports, actions that print
// too much or never stop. Each input gets a clear error or the documented
// behaviour; nothing is written outside its place; memory stays bounded.
package hostile

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/history"
	"github.com/looprun/looprun/internal/localrun"
	"github.com/looprun/looprun/internal/loopfile"
	"github.com/looprun/looprun/internal/runner/local"
	"github.com/looprun/looprun/internal/transfer"
)

const goodLoop = "name: good\ninitial: a\nstates:\n  a:\n    action: echo hi\n    next: done\n  done:\n    terminal: true\n"

// sandbox is a directory for one input, inside a parent that must stay
// empty but for it: whatever the input, nothing is written beside it.
type sandbox struct {
	t      *testing.T
	parent string
	dir    string
}

func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	parent := t.TempDir()
	dir := filepath.Join(parent, "work", "deep")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &sandbox{t: t, parent: parent, dir: dir}
	t.Cleanup(s.checkNothingOutside)
	return s
}

func (s *sandbox) write(name, content string) string {
	s.t.Helper()
	p := filepath.Join(s.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		s.t.Fatal(err)
	}
	return p
}

// checkNothingOutside fails when anything but work/deep exists under parent.
func (s *sandbox) checkNothingOutside() {
	err := filepath.WalkDir(s.parent, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(s.parent, p)
		if rel == "." || rel == "work" || rel == filepath.Join("work", "deep") || strings.HasPrefix(rel, filepath.Join("work", "deep")+string(filepath.Separator)) {
			return nil
		}
		return fmt.Errorf("%s was written outside the working directory", rel)
	})
	if err != nil {
		s.t.Error(err)
	}
}

func (s *sandbox) loopsDir() string { return filepath.Join(s.dir, ".loops") }

// load reads a loop file as looprun run and validate do: the file, then
// the executor's checks.
func load(s *sandbox, path string) (*loopfile.File, error) {
	lf, err := loopfile.Load(path, loopfile.Options{LoopsDir: s.loopsDir()})
	if err != nil {
		return nil, err
	}
	if errs := executor.Validate(&lf.Loop.Spec); len(errs) > 0 {
		return lf, errs.ToAggregate()
	}
	return lf, nil
}

func expect(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("unexpected error: %v", err)
	case want != "" && err == nil:
		t.Errorf("accepted; want an error saying %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("error %q does not say %q", err, want)
	}
}

func states(n int) string {
	var b strings.Builder
	b.WriteString("name: many\ninitial: s0\nstates:\n")
	for i := range n {
		fmt.Fprintf(&b, "  s%d:\n    terminal: true\n", i)
	}
	return b.String()
}

func nested(depth int) string {
	return "name: deep\ninitial: a\nstates:\n  a:\n    terminal: true\nextra: " + strings.Repeat("[", depth) + strings.Repeat("]", depth) + "\n"
}

const aliasBomb = `name: bomb
a: &a ["x","x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]
initial: a
states:
  a:
    terminal: true
`

// Loop files: each broken one is refused, naming what is wrong.
func TestLoopFiles(t *testing.T) {
	tests := []struct {
		name, content, want string
		setup               func(s *sandbox)
	}{
		{"empty file", "", "empty", nil},
		{"not YAML", "states: [unclosed", "not valid YAML", nil},
		{"a list, not a mapping", "- a\n- b\n", "mapping", nil},
		{"a second document", goodLoop + "---\nname: other\n", "second YAML document", nil},
		{"a key twice", "name: x\ninitial: a\ninitial: b\nstates:\n  a:\n    terminal: true\n", "appears twice", nil},
		{"a state twice", "name: x\ninitial: a\nstates:\n  a:\n    terminal: true\n  a:\n    terminal: true\n", "appears twice", nil},
		{"import of a system file", "name: x\nimport: [/etc/passwd]\ninitial: a\nstates:\n  a:\n    terminal: true\n", "/etc/passwd", nil},
		{"import of a device", "name: x\nimport: [/dev/zero]\ninitial: a\nstates:\n  a:\n    terminal: true\n", "not a regular file", nil},
		{"import of a missing file", "name: x\nimport: [nope]\ninitial: a\nstates:\n  a:\n    terminal: true\n", "not found", nil},
		{"import without fragments", "name: x\nimport: [lib.yaml]\ninitial: a\nstates:\n  a:\n    terminal: true\n", "defines no fragments",
			func(s *sandbox) { s.write("lib.yaml", "name: lib\n") }},
		{"from a device", "name: x\nfrom: /dev/zero\n", "not a regular file", nil},
		{"from a cycle", "name: x\nfrom: b.yaml\n", "cycle",
			func(s *sandbox) { s.write("b.yaml", "name: b\nfrom: loop.yaml\n") }},
		{"from a huge file", "name: x\nfrom: big.yaml\n", "larger than",
			func(s *sandbox) { s.write("big.yaml", "name: big\nx: \""+strings.Repeat("a", 5<<20)+"\"\n") }},
		{"more states than a Loop may have", states(129), "129", nil},
		{"initial names no state", "name: x\ninitial: nowhere\nstates:\n  a:\n    terminal: true\n", "initial", nil},
		{"a route to no state", "name: x\ninitial: a\nstates:\n  a:\n    action: \"true\"\n    route:\n      success: nowhere\n  done:\n    terminal: true\n", "nowhere", nil},
		{"no terminal state", "name: x\ninitial: a\nstates:\n  a:\n    action: \"true\"\n    next: a\n", "terminal", nil},
		{"bash-style default", "name: x\ninitial: a\nstates:\n  a:\n    action: echo ${context.x:-y}\n    next: done\n  done:\n    terminal: true\n", "bash-style default", nil},
		{"an unknown namespace", "name: x\ninitial: a\nstates:\n  a:\n    action: echo ${secrets.db}\n    next: done\n  done:\n    terminal: true\n", "unknown namespace", nil},
		{"a pattern that is no regexp", "name: x\ninitial: a\nstates:\n  a:\n    action: \"true\"\n    evaluate:\n      type: output_numeric\n      operator: lt\n      target: not-a-number\n    on_yes: done\n    on_no: done\n  done:\n    terminal: true\n", "target", nil},
		{"a negative step limit", "name: x\nmax_steps: -3\ninitial: a\nstates:\n  a:\n    terminal: true\n", "line 2: max_steps: must be at least 1, not -3", nil},
		{"an alias bomb", aliasBomb, "", nil},
		{"deep nesting", nested(5000), "", nil},
		{"bytes that are not UTF-8", "name: x\ninitial: a\nstates:\n  a:\n    action: \"echo \xff\xfe\"\n    next: done\n  done:\n    terminal: true\n", "UTF-8", nil},
		{"an unquoted yes: key", "name: x\ninitial: a\nstates:\n  a:\n    action: \"true\"\n    route:\n      yes: done\n      no: a\n  done:\n    terminal: true\n", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSandbox(t)
			if tt.setup != nil {
				tt.setup(s)
			}
			path := s.write("loop.yaml", tt.content)
			done := make(chan struct{})
			var err error
			var lf *loopfile.File
			go func() { defer close(done); lf, err = load(s, path) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("loading did not end")
			}
			switch tt.name {
			case "an alias bomb", "deep nesting":
				if err == nil && tt.name == "an alias bomb" {
					t.Error("an alias bomb was read")
				}
				return // refused or read, but bounded in time (above)
			case "an unquoted yes: key":
				expect(t, err, "")
				if lf == nil || lf.Loop.Spec.States["a"].Route["yes"] != "done" || len(lf.Warnings) != 2 {
					t.Errorf("routes %v, warnings %v", lf.Loop.Spec.States["a"].Route, lf.Warnings)
				}
				return
			}
			expect(t, err, tt.want)
		})
	}
}

// Names climb out of nothing: every store refuses them.
func TestNames(t *testing.T) {
	for _, name := range []string{"../../x", "..", "a/b", "", "new\nline", ".hidden", "nul\x00byte", "con trol\t", strings.Repeat("x", 300), "/etc/cron.d/x"} {
		t.Run(fmt.Sprintf("%q", name), func(t *testing.T) {
			s := newSandbox(t)
			if _, err := localrun.NewStore(s.loopsDir(), name); err == nil {
				t.Errorf("store for %q accepted", name)
			}
			// A loop file naming itself so is refused before anything is written.
			s.write("loop.yaml", strings.Replace(goodLoop, "name: good", "name: "+strings.ReplaceAll(fmt.Sprintf("%q", name), "\\x00", ""), 1))
			if _, err := localrun.Open(s.loopsDir(), name); err == nil {
				t.Error("Open accepted it")
			}
		})
	}
}

// saveRun runs the good loop to its end and returns its store.
func saveRun(t *testing.T, s *sandbox) *localrun.Store {
	t.Helper()
	path := s.write("good.yaml", goodLoop)
	lf, err := load(s, path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := executor.New("good", &lf.Loop.Spec, executor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := localrun.NewStore(s.loopsDir(), "good")
	if err != nil {
		t.Fatal(err)
	}
	d := &localrun.Driver{Machine: m, Runner: &local.Runner{Dir: s.dir}, Store: store, LoopFile: path}
	if _, err := d.Start(context.Background(), "r"); err != nil {
		t.Fatal(err)
	}
	return store
}

// State files edited by hand, cut, replaced or forged are refused on
// resume, saying why.
func TestStateFiles(t *testing.T) {
	tests := []struct {
		name string
		edit func(t *testing.T, s *sandbox, path string)
		want string
	}{
		{"not JSON", func(t *testing.T, s *sandbox, p string) { rewrite(t, p, "{not json") }, "not a readable state file"},
		{"cut short", func(t *testing.T, s *sandbox, p string) { cut(t, p) }, ""},
		{"a FIFO", func(t *testing.T, s *sandbox, p string) { fifo(t, p) }, "not a regular file"},
		{"too large", func(t *testing.T, s *sandbox, p string) { rewrite(t, p, strings.Repeat(" ", 17<<20)) }, "larger than"},
		{"a negative iteration", func(t *testing.T, s *sandbox, p string) { setField(t, p, "iteration", -2147483648) }, "negative"},
		{"a negative step count", func(t *testing.T, s *sandbox, p string) { setField(t, p, "iteration_count", -1) }, "negative"},
		{"an unknown state", func(t *testing.T, s *sandbox, p string) { setField(t, p, "current_state", "nowhere") }, "nowhere"},
		{"a newer format", func(t *testing.T, s *sandbox, p string) { setField(t, p, "format_version", 99) }, "newer looprun"},
		{"an unknown status", func(t *testing.T, s *sandbox, p string) { setField(t, p, "status", "hacked") }, "unknown status"},
		{"a missing loop file", func(t *testing.T, s *sandbox, p string) { setField(t, p, "loop_file", "/nonexistent/loop.yaml") }, "no such file"},
		{"a loop file that is a device", func(t *testing.T, s *sandbox, p string) { setField(t, p, "loop_file", "/dev/zero") }, "not a regular file"},
		{"an action of no state", func(t *testing.T, s *sandbox, p string) {
			setField(t, p, "active_action", map[string]any{"state": "ghost", "iteration": 1, "command": "rm -rf /"})
		}, "ghost"},
		{"a bad time", func(t *testing.T, s *sandbox, p string) { setField(t, p, "started_at", "yesterday") }, "time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSandbox(t)
			store := saveRun(t, s)
			tt.edit(t, s, store.StatePath())
			_, err := localrun.Open(s.loopsDir(), "good")
			if tt.want == "" {
				if err == nil {
					t.Error("a cut state file was read")
				}
				return
			}
			expect(t, err, tt.want)
		})
	}
}

func rewrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func cut(t *testing.T, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	rewrite(t, p, string(b[:len(b)/2]))
}

func fifo(t *testing.T, p string) {
	t.Helper()
	_ = os.Remove(p)
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
}

func setField(t *testing.T, p, key string, v any) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m[key] = v
	out, _ := json.Marshal(m)
	rewrite(t, p, string(out))
}

// exported returns a good export of the good loop's run.
func exported(t *testing.T, s *sandbox) *history.Run {
	t.Helper()
	saveRun(t, s)
	run, err := transfer.ExportLocal(s.loopsDir(), "good", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// Exports that are forged, cut or inconsistent are refused before anything
// is imported.
func TestImports(t *testing.T) {
	tests := []struct {
		name   string
		forge  func(r *history.Run)
		doc    func(b []byte) []byte
		asName string
		want   string
	}{
		{name: "not JSON", doc: func([]byte) []byte { return []byte("garbage") }, want: "not a looprun export"},
		{name: "another format", doc: func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"looprun.io/run-export"`), []byte(`"other"`), 1)
		}, want: "format"},
		{name: "a checksum that does not match", doc: func(b []byte) []byte { return bytes.Replace(b, []byte(`"good"`), []byte(`"evil"`), 1) }, want: "SHA-256"},
		{name: "cut short", doc: func(b []byte) []byte { return b[:len(b)/2] }, want: "not a looprun export"},
		{name: "too large", doc: func(b []byte) []byte { return append(b, bytes.Repeat([]byte(" "), 2<<20)...) }, want: "larger than"},
		{name: "events out of order", forge: func(r *history.Run) { r.Events[0].Seq, r.Events[1].Seq = r.Events[1].Seq, r.Events[0].Seq }, want: "sequence numbers"},
		{name: "an event numbered 0", forge: func(r *history.Run) { r.Events[0].Seq = 0 }, want: "sequence numbers"},
		{name: "a negative iteration", forge: func(r *history.Run) { r.Loop.Status.Iteration = -2147483648 }, want: "negative"},
		{name: "an unknown current state", forge: func(r *history.Run) { r.Loop.Status.CurrentState = "nowhere" }, want: "nowhere"},
		{name: "an invalid loop", forge: func(r *history.Run) { r.Loop.Spec.Initial = "nowhere" }, want: "invalid"},
		{name: "a forged checkpoint", forge: func(r *history.Run) { r.Checkpoints[0].SHA256 = strings.Repeat("0", 64) }, want: "checkpoint"},
		{name: "a name climbing out", asName: "../../escape", want: "loop name"},
		{name: "an empty name", asName: "", want: "empty"},
		{name: "a name with a newline", asName: "a\nb", want: "not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSandbox(t)
			run := exported(t, s)
			if tt.forge != nil {
				tt.forge(run)
			}
			var buf bytes.Buffer
			if err := history.WriteExport(&buf, run); err != nil {
				t.Fatal(err)
			}
			doc := buf.Bytes()
			if tt.doc != nil {
				doc = tt.doc(doc)
			}
			back, err := history.ReadExportWithin(bytes.NewReader(doc), 1<<20)
			if err == nil {
				name := "imported"
				if tt.forge == nil && tt.doc == nil {
					name = tt.asName
				}
				_, err = transfer.ImportLocal(s.loopsDir(), back, name, false, time.Now())
			}
			expect(t, err, tt.want)
		})
	}
}

// What actions do at run time stays within bounds: output, verdicts,
// commands, captures, time.
func TestRunTime(t *testing.T) {
	run := func(t *testing.T, s *sandbox, loop string) (*v1alpha1.RunState, error) {
		t.Helper()
		path := s.write("loop.yaml", loop)
		lf, err := load(s, path)
		if err != nil {
			return nil, err
		}
		m, err := executor.New(lf.Loop.Name, &lf.Loop.Spec, executor.Options{})
		if err != nil {
			return nil, err
		}
		store, err := localrun.NewStore(s.loopsDir(), lf.Loop.Name)
		if err != nil {
			return nil, err
		}
		out, errLog, err := store.OpenOutputs(true)
		if err != nil {
			return nil, err
		}
		defer out.Close()
		defer errLog.Close()
		d := &localrun.Driver{Machine: m, Runner: &local.Runner{Dir: s.dir, Stdout: out, Stderr: errLog}, Store: store, LoopFile: path}
		return d.Start(context.Background(), "r")
	}
	one := func(action, extra string) string {
		return "name: rt\ninitial: a\nstates:\n  a:\n    action: " + action + "\n" + extra + "    on_yes: done\n    on_no: done\n    on_error: failed\n  done:\n    terminal: true\n  failed:\n    terminal: true\n"
	}
	tests := []struct {
		name  string
		loop  string
		check func(t *testing.T, run *v1alpha1.RunState)
	}{
		{"100 MB of output", one("head -c 100000000 /dev/zero | tr '\\\\0' x", ""), func(t *testing.T, run *v1alpha1.RunState) {
			if len(run.PrevResult.Output) > executor.DefaultMaxCaptureBytes {
				t.Errorf("kept %d bytes", len(run.PrevResult.Output))
			}
		}},
		{"a megabyte verdict", one("head -c 1000000 /dev/zero | tr '\\\\0' v", "    evaluate:\n      type: classify\n"), func(t *testing.T, run *v1alpha1.RunState) {
			if run.CurrentState != "failed" || run.LastResult.Verdict != "error" {
				t.Errorf("state %s verdict %.20q", run.CurrentState, run.LastResult.Verdict)
			}
		}},
		{"an action that never stops", one("sleep 60", "    timeout: 300ms\n"), func(t *testing.T, run *v1alpha1.RunState) {
			if run.PrevResult.ExitCode != 124 {
				t.Errorf("exit %d", run.PrevResult.ExitCode)
			}
		}},
		{"an action that leaves a daemon", one("(sleep 60 &) ; echo ok", ""), func(t *testing.T, run *v1alpha1.RunState) {
			if run.Phase != v1alpha1.PhaseCompleted {
				t.Errorf("phase %s", run.Phase)
			}
		}},
		{"an agent that is not installed", "name: rt\ninitial: a\nagent:\n  command: [/nonexistent/agent]\nstates:\n  a:\n    action: /fix it\n    action_type: prompt\n    next: done\n    on_error: failed\n  done:\n    terminal: true\n  failed:\n    terminal: true\n", func(t *testing.T, run *v1alpha1.RunState) {
			if run.PrevResult == nil || run.PrevResult.ExitCode != 127 {
				t.Errorf("prev %+v", run.PrevResult)
			}
		}},
		{"a missing environment variable", one("echo ${env.LOOPRUN_HOSTILE_UNSET}", ""), func(t *testing.T, run *v1alpha1.RunState) {
			if run.Phase.IsFinished() && run.CurrentState != "failed" && run.TerminatedBy != v1alpha1.TerminatedError {
				t.Errorf("state %s, terminated by %s", run.CurrentState, run.TerminatedBy)
			}
		}},
		{"bytes that are not UTF-8", one("printf '\\\\377\\\\376'", "    capture: raw\n"), func(t *testing.T, run *v1alpha1.RunState) {
			if _, err := json.Marshal(run); err != nil {
				t.Error(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSandbox(t)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			r, err := run(t, s, tt.loop)
			runtime.ReadMemStats(&after)
			if err != nil && r == nil {
				t.Fatal(err)
			}
			if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 64<<20 {
				t.Errorf("the heap grew by %d MiB", grown>>20)
			}
			tt.check(t, r)
		})
	}
}
