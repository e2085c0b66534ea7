package loopfile

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// BundledDir is the directory, inside an installed little_loops Python
// package, of the loops little-loops ships (with their lib/ of fragment
// libraries): ll-loop looks there for a loop name, an import: or a from:
// that its project does not have.
const BundledDir = "loops"

// findPackage is the Python program that prints where little_loops is
// installed.
const findPackage = "import os, little_loops; print(os.path.dirname(os.path.abspath(little_loops.__file__)))"

// FindBundled finds the bundled loops of an installed little-loops, as
// ll-loop has them: the loops directory of the little_loops package that
// the Python of the ll-loop on PATH imports (pip, pipx and uv tool
// installs alike), else the one python3 imports (PYTHONPATH and pip
// --user installs count), else one under ~/.local. "" when there is none.
func FindBundled() string {
	for _, py := range pythons() {
		if dir := askPython(py); dir != "" {
			return dir
		}
	}
	home := os.Getenv("HOME")
	if home == "" {
		return ""
	}
	for _, pattern := range []string{
		".local/lib/python3*/site-packages",
		".local/share/pipx/venvs/little-loops/lib/python3*/site-packages",
		".local/pipx/venvs/little-loops/lib/python3*/site-packages",
		".local/share/uv/tools/little-loops/lib/python3*/site-packages",
	} {
		sites, _ := filepath.Glob(filepath.Join(home, pattern))
		for _, site := range sites {
			if dir := filepath.Join(site, "little_loops", BundledDir); isDir(dir) {
				return dir
			}
		}
	}
	return ""
}

// pythons are the commands (argv prefixes) that may import little_loops:
// the interpreter of the ll-loop script on PATH, then python3.
func pythons() [][]string {
	var out [][]string
	if script, err := exec.LookPath("ll-loop"); err == nil {
		if argv := shebang(script); argv != nil {
			out = append(out, argv)
		}
	}
	if py, err := exec.LookPath("python3"); err == nil {
		out = append(out, []string{py})
	}
	return out
}

// shebang is the interpreter line of a script as argv, nil when it has
// none or it is no Python.
func shebang(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && line == "" {
		return nil
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "#!")
	if !ok {
		return nil
	}
	argv := strings.Fields(rest)
	for _, w := range argv {
		if strings.HasPrefix(filepath.Base(w), "python") {
			return argv
		}
	}
	return nil
}

// askPython asks the Python argv where little_loops is, and returns its
// bundled loops directory; "" when it cannot import it. It runs in the
// root directory, so that no little_loops of the current one is imported
// (a relative PYTHONPATH entry still counts, made absolute).
func askPython(argv []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], "-c", findPackage)...)
	cmd.Dir = string(filepath.Separator)
	cmd.Env = pythonEnv()
	var out bytes.Buffer
	cmd.Stdout = &out
	if cmd.Run() != nil {
		return ""
	}
	dir := filepath.Join(strings.TrimSpace(out.String()), BundledDir)
	if !filepath.IsAbs(dir) || !isDir(dir) {
		return ""
	}
	return dir
}

// pythonEnv is the environment with PYTHONPATH's entries made absolute.
func pythonEnv() []string {
	env := os.Environ()
	pp := os.Getenv("PYTHONPATH")
	if pp == "" {
		return env
	}
	parts := filepath.SplitList(pp)
	for i, p := range parts {
		if abs, err := filepath.Abs(p); err == nil && p != "" {
			parts[i] = abs
		}
	}
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "PYTHONPATH=") {
			out = append(out, kv)
		}
	}
	return append(out, "PYTHONPATH="+strings.Join(parts, string(filepath.ListSeparator)))
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
