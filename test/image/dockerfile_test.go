// Package image checks the Dockerfile without a Docker engine: its build
// commands, run as written on a copy of only what it copies in, must produce
// the static binaries that its runtime stages copy, at the paths the
// manifests and the Pod builder use.
package image

import (
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
	"github.com/looprun/looprun/test/dockerfile"
	"github.com/looprun/looprun/test/fixture"
)

func TestDockerfile(t *testing.T) {
	root, err := fixture.Root()
	if err != nil {
		t.Fatal(err)
	}
	df, err := dockerfile.Parse(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	globalArgs := df.Args
	build, entry, final := df.Stage("build"), df.Stage("entrypoint"), df.Stages[len(df.Stages)-1]
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
		for _, s := range []*dockerfile.Stage{entry, final} {
			if !strings.HasPrefix(s.Base, "gcr.io/distroless/static") {
				t.Errorf("stage %s is based on %s, not distroless static", s.Name, s.Base)
			}
			if u := s.Last("USER"); u == "" || strings.HasPrefix(u, "0") || strings.HasPrefix(u, "root") {
				t.Errorf("stage %s runs as %q, not a non-root user", s.Name, u)
			}
			if !slices.Contains(s.Destinations(), pod.EntrypointBinary) {
				t.Errorf("stage %s lacks %s, which action Pods copy", s.Name, pod.EntrypointBinary)
			}
			// Action Pods mount their tools directory there, in this image
			// too (the init container that copies the wrapper runs it): a
			// file in the way fails every Pod.
			for _, d := range s.Destinations() {
				if d == pod.ToolsPath || strings.HasPrefix(d, pod.ToolsPath+"/") {
					t.Errorf("stage %s puts %s where action Pods mount %s", s.Name, d, pod.ToolsPath)
				}
			}
		}
		if ep, err := final.Entrypoint(); err != nil {
			t.Error(err)
		} else if !slices.Contains(final.Destinations(), ep[0]) {
			t.Errorf("the image's ENTRYPOINT %s is not copied into it", ep[0])
		}
		if cmd := managerCommand(t, filepath.Join(root, "config", "manager", "manager.yaml")); !slices.Contains(final.Destinations(), cmd) {
			t.Errorf("config/manager runs %s, which the image does not hold", cmd)
		}
	})

	// Build as the build stage would, on a copy of only what it copies in.
	src, out := filepath.Join(t.TempDir(), "src"), filepath.Join(t.TempDir(), "out")
	ignored := dockerignore(t, filepath.Join(root, ".dockerignore"))
	for from := range build.Copies("") {
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
	vars := map[string]string{"TARGETOS": "linux", "TARGETARCH": runtime.GOARCH, "VERSION": "9.9.9-test", "GIT_COMMIT": "c0ffee1"}
	for _, in := range build.Body {
		if in.Cmd != "RUN" {
			continue
		}
		script := os.Expand(in.Args, func(k string) string { return vars[k] })
		script = strings.ReplaceAll(script, "/out/", out+"/")
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = src
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("RUN %s: %v\n%s", in.Args, err, b)
		}
	}

	t.Run("binaries", func(t *testing.T) {
		for _, s := range []*dockerfile.Stage{entry, final} {
			for from := range s.Copies("build") {
				bin := strings.Replace(from, "/out", out, 1)
				if _, err := os.Stat(bin); err != nil {
					t.Errorf("stage %s copies %s, which the build does not produce", s.Name, from)
					continue
				}
				checkStatic(t, bin)
			}
		}
		// The CLI says the version the build was given.
		if b, err := exec.Command(filepath.Join(out, "looprun"), "version", "--client").CombinedOutput(); err != nil ||
			!strings.Contains(string(b), "9.9.9-test") || !strings.Contains(string(b), "c0ffee1") {
			t.Errorf("looprun version --client: %v\n%s", err, b)
		}
		for _, c := range [][]string{{"manager", "--help"}, {"entrypoint", "--help"}, {"looprun", "--help"}} {
			cmd := exec.Command(filepath.Join(out, c[0]), c[1:]...)
			if b, err := cmd.CombinedOutput(); err != nil && !strings.Contains(string(b), "Usage") {
				t.Errorf("%s: %v\n%s", strings.Join(c, " "), err, b)
			}
		}
	})
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
