// Package image checks the Dockerfile without a Docker engine: its build
// commands, run as written on a copy of only what it copies in, must produce
// the static binaries that its runtime stages copy, at the paths the
// manifests and the Pod builder use.
package image

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/looprun/looprun/internal/runner/pod"
	"github.com/looprun/looprun/test/fixture"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, COPY, RUN, ...
	args string
}

// stage is one FROM and what follows it.
type stage struct {
	name, base string
	body       []instruction
}

func parseDockerfile(t *testing.T, path string) (args map[string]string, stages []*stage) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	args = map[string]string{}
	var line strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(text, `\`); ok {
			line.WriteString(cont + " ")
			continue
		}
		line.WriteString(text)
		cmd, rest, _ := strings.Cut(line.String(), " ")
		line.Reset()
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(rest)}
		switch {
		case in.cmd == "FROM":
			f := strings.Fields(in.args)
			s := &stage{base: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
		case len(stages) == 0 && in.cmd == "ARG":
			k, v, _ := strings.Cut(in.args, "=")
			args[k] = v
		case len(stages) == 0:
			t.Fatalf("%s before the first FROM", in.cmd)
		default:
			stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return args, stages
}

// copies lists a stage's COPY instructions as source → destination, for
// those from the given stage ("" for the build context).
func (s *stage) copies(from string) map[string]string {
	out := map[string]string{}
	for _, in := range s.body {
		if in.cmd != "COPY" {
			continue
		}
		f := strings.Fields(in.args)
		src := ""
		if v, ok := strings.CutPrefix(f[0], "--from="); ok {
			src, f = v, f[1:]
		}
		if src != from {
			continue
		}
		for _, p := range f[:len(f)-1] {
			out[p] = f[len(f)-1]
		}
	}
	return out
}

func (s *stage) last(cmd string) string {
	v := ""
	for _, in := range s.body {
		if in.cmd == cmd {
			v = in.args
		}
	}
	return v
}

func TestDockerfile(t *testing.T) {
	root, err := fixture.Root()
	if err != nil {
		t.Fatal(err)
	}
	globalArgs, stages := parseDockerfile(t, filepath.Join(root, "Dockerfile"))
	byName := map[string]*stage{}
	for _, s := range stages {
		byName[s.name] = s
	}
	build, entry, final := byName["build"], byName["entrypoint"], stages[len(stages)-1]
	if build == nil || entry == nil {
		t.Fatal("the Dockerfile needs stages named build and entrypoint")
	}

	t.Run("Go version", func(t *testing.T) {
		want := goDirective(t, filepath.Join(root, "go.mod"))
		if got := globalArgs["GO_VERSION"]; got != want {
			t.Errorf("GO_VERSION %q, go.mod says go %s", got, want)
		}
	})

	t.Run("runtime stages", func(t *testing.T) {
		for _, s := range []*stage{entry, final} {
			if !strings.HasPrefix(s.base, "gcr.io/distroless/static") {
				t.Errorf("stage %s is based on %s, not distroless static", s.name, s.base)
			}
			if u := s.last("USER"); u == "" || strings.HasPrefix(u, "0") || strings.HasPrefix(u, "root") {
				t.Errorf("stage %s runs as %q, not a non-root user", s.name, u)
			}
			if !slices.Contains(destinations(s), pod.EntrypointBinary) {
				t.Errorf("stage %s lacks %s, which action Pods copy", s.name, pod.EntrypointBinary)
			}
			// Action Pods mount their tools directory there, in this image
			// too (the init container that copies the wrapper runs it): a
			// file in the way fails every Pod.
			for _, d := range destinations(s) {
				if d == pod.ToolsPath || strings.HasPrefix(d, pod.ToolsPath+"/") {
					t.Errorf("stage %s puts %s where action Pods mount %s", s.name, d, pod.ToolsPath)
				}
			}
		}
		if ep := entrypoint(t, final); !slices.Contains(destinations(final), ep) {
			t.Errorf("the image's ENTRYPOINT %s is not copied into it", ep)
		}
		if cmd := managerCommand(t, filepath.Join(root, "config", "manager", "manager.yaml")); !slices.Contains(destinations(final), cmd) {
			t.Errorf("config/manager runs %s, which the image does not hold", cmd)
		}
	})

	// Build as the build stage would, on a copy of only what it copies in.
	src, out := filepath.Join(t.TempDir(), "src"), filepath.Join(t.TempDir(), "out")
	ignored := dockerignore(t, filepath.Join(root, ".dockerignore"))
	for from := range build.copies("") {
		from = strings.TrimSuffix(from, "/")
		if ignored(from) {
			t.Errorf(".dockerignore keeps %s out of the build context", from)
		}
		cp := exec.Command("cp", "-r", filepath.Join(root, from), filepath.Join(src, from))
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatal(err)
		}
		if b, err := cp.CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
	}
	vars := map[string]string{"TARGETOS": "linux", "TARGETARCH": runtime.GOARCH}
	for _, in := range build.body {
		if in.cmd != "RUN" {
			continue
		}
		script := os.Expand(in.args, func(k string) string { return vars[k] })
		script = strings.ReplaceAll(script, "/out/", out+"/")
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = src
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("RUN %s: %v\n%s", in.args, err, b)
		}
	}

	t.Run("binaries", func(t *testing.T) {
		for _, s := range []*stage{entry, final} {
			for from := range s.copies("build") {
				bin := strings.Replace(from, "/out", out, 1)
				if _, err := os.Stat(bin); err != nil {
					t.Errorf("stage %s copies %s, which the build does not produce", s.name, from)
					continue
				}
				checkStatic(t, bin)
			}
		}
		for _, c := range [][]string{{"manager", "--help"}, {"entrypoint", "--help"}, {"looprun", "--help"}} {
			cmd := exec.Command(filepath.Join(out, c[0]), c[1:]...)
			if b, err := cmd.CombinedOutput(); err != nil && !strings.Contains(string(b), "Usage") {
				t.Errorf("%s: %v\n%s", strings.Join(c, " "), err, b)
			}
		}
	})
}

func destinations(s *stage) []string {
	var d []string
	for _, in := range s.body {
		if in.cmd == "COPY" {
			f := strings.Fields(in.args)
			d = append(d, f[len(f)-1])
		}
	}
	return d
}

func entrypoint(t *testing.T, s *stage) string {
	var argv []string
	if err := yaml.Unmarshal([]byte(s.last("ENTRYPOINT")), &argv); err != nil || len(argv) == 0 {
		t.Fatalf("stage %s: ENTRYPOINT %q is not an exec-form list", s.name, s.last("ENTRYPOINT"))
	}
	return argv[0]
}

// checkStatic fails for an executable that needs a dynamic loader, which
// distroless static does not have.
func checkStatic(t *testing.T, path string) {
	f, err := elf.Open(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s is dynamically linked", filepath.Base(path))
		}
	}
}

func goDirective(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "go "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("go.mod has no go directive")
	return ""
}

// dockerignore reads "ignore everything but" files: a leading * and !path lines.
func dockerignore(t *testing.T, path string) func(string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	all, kept := false, map[string]bool{}
	for line := range strings.SplitSeq(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "*":
			all = true
		case strings.HasPrefix(line, "!"):
			kept[strings.TrimSuffix(strings.TrimPrefix(line, "!"), "/")] = true
		}
	}
	return func(p string) bool { return all && !kept[p] }
}

func managerCommand(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for doc := range strings.SplitSeq(string(b), "\n---") {
		var d struct {
			Kind string
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Name    string
							Command []string
						}
					}
				}
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatal(err)
		}
		if d.Kind == "Deployment" {
			for _, c := range d.Spec.Template.Spec.Containers {
				if c.Name == "manager" && len(c.Command) > 0 {
					return c.Command[0]
				}
			}
		}
	}
	t.Fatal("config/manager has no manager container with a command")
	return ""
}
