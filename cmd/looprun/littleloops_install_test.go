package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A loop bundled with little-loops is found by name, and its lib/ by
// import: and from:, in the little_loops package python3 imports (here
// through PYTHONPATH), as ll-loop finds its own; with none installed the
// error says what to set.
func TestBundledLoopsOfAnInstalledLittleLoops(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 to import little_loops")
	}
	t.Setenv("LOOPRUN_LIBRARY_PATH", "")
	site := t.TempDir()
	pkg := filepath.Join(site, "little_loops")
	write(t, pkg, "__init__.py", "")
	write(t, pkg, "loops/lib/greet.yaml", "fragments:\n  greet:\n    action: echo hello from lib >> greeted.txt\n")
	write(t, pkg, "loops/bundled-hello.yaml", "name: bundled-hello\ninitial: a\nimport: [lib/greet.yaml]\nstates:\n  a:\n    fragment: greet\n    next: done\n  done:\n    terminal: true\n")
	dir := t.TempDir()
	// A project's own loop inherits a bundled one.
	write(t, dir, "mine.yaml", "from: bundled-hello\nname: mine\n")

	t.Setenv("PYTHONPATH", "")
	if _, err := exec.Command("python3", "-c", "import little_loops").CombinedOutput(); err == nil {
		t.Skip("this machine's python3 imports a little_loops of its own")
	}
	for _, args := range [][]string{{"run", "-q", "bundled-hello"}, {"run", "-q", "mine.yaml"}} {
		r := looprun(t, dir, args...)
		if r.code != 1 || !strings.Contains(r.stderr, "no installed little-loops was found") ||
			!strings.Contains(r.stderr, "--library-path DIR") || !strings.Contains(r.stderr, "LOOPRUN_LIBRARY_PATH=DIR") {
			t.Errorf("looprun %v with no little-loops: exit %d, %q", args, r.code, r.stderr)
		}
	}

	t.Setenv("PYTHONPATH", site)
	for _, args := range [][]string{{"run", "-q", "bundled-hello"}, {"run", "-q", "mine.yaml"}, {"validate", "bundled-hello"}} {
		if r := looprun(t, dir, args...); r.code != 0 || strings.Contains(r.stderr, "error") {
			t.Errorf("looprun %v with little_loops on PYTHONPATH: exit %d, %q", args, r.code, r.stderr)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "greeted.txt")); string(b) != "hello from lib\nhello from lib\n" {
		t.Errorf("greeted.txt: %q", b)
	}
	// A pip --user install under ~/.local is found without python3's help.
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("PYTHONPATH", "")
	userSite := filepath.Join(home, ".local/lib/python3.99/site-packages")
	if err := os.MkdirAll(userSite, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(pkg, filepath.Join(userSite, "little_loops")); err != nil {
		t.Fatal(err)
	}
	if r := looprun(t, dir, "validate", "bundled-hello"); r.code != 0 {
		t.Errorf("validate with a pip --user install: exit %d, %q", r.code, r.stderr)
	}
}

// simulate takes ll-loop's caps: -n/--max-steps on steps, --max-iterations
// on the passes of a maintain loop (which lifts the walk's cap of 20),
// ending as ll-loop simulate ends.
func TestSimulateCaps(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "s.yaml", "name: s\ninitial: work\nstates:\n  work:\n    action: \"true\"\n    next: work\n  done:\n    terminal: true\n")
	write(t, dir, "m.yaml", "name: m\ninitial: work\nmaintain: true\nmax_steps: 100\nstates:\n  work:\n    action: \"true\"\n    next: done\n  done:\n    terminal: true\n")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"s.yaml", "-n", "3"}, "Iterations: 3\nWould have executed 3 commands\nTerminated by: max_steps\n"},
		{[]string{"m.yaml", "--max-iterations", "2"}, "Iterations: 4\nWould have executed 2 commands\nTerminated by: max_iterations_reached\n"},
		{[]string{"m.yaml", "--max-steps", "30"}, "Iterations: 20\nWould have executed 10 commands\nTerminated by: max_steps\n"},
	} {
		r := looprun(t, dir, append([]string{"simulate", "--scenario", "all-pass"}, tt.args...)...)
		if r.code != 1 || !strings.Contains(r.stdout, tt.want) {
			t.Errorf("simulate %v: exit %d, want %q in\n%s%s", tt.args, r.code, tt.want, r.stdout, r.stderr)
		}
	}
}
