// Command mkimages writes the images of the end-to-end tests as image
// archives, without a Docker engine:
//
//   - the operator and entrypoint images, laid out from the Dockerfile's
//     stages (its build stage's commands build the binaries, its COPY,
//     USER and ENTRYPOINT lines place and run them) over what
//     distroless/static:nonroot provides;
//   - an action image: busybox, a static bash, a stub agent CLI and a stub
//     of claude that calls the model gateway (test/e2e/gatewayagent);
//   - the same without bash, for the error a shell-less image gives;
//   - a git server: this machine's git http-backend (with the libraries
//     it links) behind test/e2e/gitserver, serving /srv/git/project.git;
//   - the cluster's sandbox (pause) image.
//
// Usage: mkimages -out DIR [-tag TAG]; each image goes to DIR/NAME.tar and
// its reference is printed.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/looprun/looprun/test/dockerfile"
	"github.com/looprun/looprun/test/fixture"
)

// Image references the end-to-end tests use.
const (
	Repository = "looprun.local/"
	PauseImage = "registry.k8s.io/pause:3.10"
)

// nonroot is the user of distroless' nonroot images.
const nonroot = 65532

// stubAgent stands in for the agent CLI: it answers its prompt (the last
// argument) and says whether it was given an API key; asked for
// stream-json (as looprun asks by default), it answers as claude does, with
// the usage of the turn, and the budget it was given (--max-budget-usd).
const stubAgent = `#!/bin/sh
budget= prev=
for last; do [ "$prev" = --max-budget-usd ] && budget=$last; prev=$last; done
if [ -n "$ANTHROPIC_API_KEY" ]; then key=yes; else key=no; fi
case " $* " in
*" stream-json "*)
	echo '{"type":"system","subtype":"init","model":"claude-sonnet-4-6"}'
	echo '{"type":"assistant","message":{"content":[{"type":"text","text":"thinking"}]}}'
	printf '{"type":"assistant","message":{"content":[{"type":"text","text":"agent: %s (key: %s)"}]}}\n' "$last" "$key"
	[ -z "$budget" ] || printf '{"type":"assistant","message":{"content":[{"type":"text","text":"budget: %s"}]}}\n' "$budget"
	echo '{"type":"result","total_cost_usd":0.5,"usage":{"input_tokens":1000,"output_tokens":100}}'
	;;
*) echo "agent: $last (key: $key)" ;;
esac
`

func main() {
	out := flag.String("out", "", "directory for the image archives")
	tag := flag.String("tag", "e2e", "tag of the project's images")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "mkimages: -out is required")
		os.Exit(2)
	}
	if err := run(*out, *tag); err != nil {
		fmt.Fprintln(os.Stderr, "mkimages:", err)
		os.Exit(1)
	}
}

func run(out, tag string) error {
	root, err := fixture.Root()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	bins, err := os.MkdirTemp("", "mkimages-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(bins) }()

	df, err := dockerfile.Parse(filepath.Join(root, "Dockerfile"))
	if err != nil {
		return err
	}
	if err := buildStage(df, root, bins); err != nil {
		return err
	}
	base := distrolessBase()
	for stage, ref := range map[string]string{"manager": Repository + "looprun:" + tag, "entrypoint": Repository + "entrypoint:" + tag} {
		s := df.Stage(stage)
		if s == nil {
			return fmt.Errorf("the Dockerfile has no stage %s", stage)
		}
		entry, err := s.Entrypoint()
		if err != nil {
			return err
		}
		l := newLayer()
		for from, to := range s.Copies("build") {
			if err := l.executable(to, filepath.Join(bins, strings.TrimPrefix(from, "/out/"))); err != nil {
				return err
			}
		}
		if err := write(out, ref, config{entrypoint: entry, user: s.Last("USER")}, base, l); err != nil {
			return err
		}
	}

	busybox, err := busyboxLayer()
	if err != nil {
		return err
	}
	tools, err := actionTools(root, bins)
	if err != nil {
		return err
	}
	shellCfg := config{cmd: []string{"/bin/sh"}}
	if err := write(out, Repository+"actions:"+tag, shellCfg, base, busybox, tools); err != nil {
		return err
	}
	if err := write(out, Repository+"nobash:"+tag, shellCfg, base, busybox); err != nil {
		return err
	}

	if err := gitServerImage(root, out, tag, bins, base, busybox); err != nil {
		return err
	}

	pause := newLayer()
	if err := goBuild(root, "./test/e2e/pause", filepath.Join(bins, "pause")); err != nil {
		return err
	}
	if err := pause.executable("/pause", filepath.Join(bins, "pause")); err != nil {
		return err
	}
	return write(out, PauseImage, config{entrypoint: []string{"/pause"}, user: "65535:65535"}, pause)
}

// actionTools is the action image's own layer: a static bash, the stub
// agent CLI and the stub claude of the gateway tests.
func actionTools(root, bins string) (*layer, error) {
	tools := newLayer()
	if err := tools.executable("/bin/bash", "/bin/bash-static"); err != nil {
		return nil, err
	}
	tools.data("/usr/local/bin/claude", []byte(stubAgent), 0o755)
	if err := goBuild(root, "./test/e2e/gatewayagent", filepath.Join(bins, "gateway-agent")); err != nil {
		return nil, err
	}
	if err := tools.executable("/usr/local/bin/gateway-agent", filepath.Join(bins, "gateway-agent")); err != nil {
		return nil, err
	}
	return tools, nil
}

// gitServerImage writes the git server's image: test/e2e/gitserver, git
// and git-http-backend from this machine with what they link, busybox for
// a shell, and the bare repository project.git (a.txt and b.txt on main),
// owned by the user it runs as so that pushes land.
func gitServerImage(root, out, tag, bins string, base, busybox *layer) error {
	srv := filepath.Join(bins, "gitserver")
	if err := goBuild(root, "./test/e2e/gitserver", srv); err != nil {
		return err
	}
	l := newLayer()
	if err := l.executable("/gitserver", srv); err != nil {
		return err
	}
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		return fmt.Errorf("the git server image needs git: %w", err)
	}
	gitCore := strings.TrimSpace(string(execPath))
	libs := map[string]bool{}
	for _, bin := range []string{"git", "git-http-backend"} {
		p := filepath.Join(gitCore, bin)
		if err := l.executable(path.Join("/usr/lib/git-core", bin), p); err != nil {
			return err
		}
		if err := linked(p, libs); err != nil {
			return err
		}
	}
	for lib := range libs {
		if err := l.executable(lib, lib); err != nil {
			return err
		}
	}
	g, err := fixture.StartGitServer("", "")
	if err != nil {
		return err
	}
	defer g.Close()
	bare, err := g.NewRepo("project", map[string]string{"a.txt": "broken\n", "b.txt": "old\n"})
	if err != nil {
		return err
	}
	if err := l.tree("/srv/git/project.git", bare, nonroot); err != nil {
		return err
	}
	return write(out, Repository+"gitserver:"+tag, config{entrypoint: []string{"/gitserver"}, user: "65532:65532"}, base, busybox, l)
}

// linked adds to libs the shared libraries (and the loader) bin links, as
// ldd finds them.
func linked(bin string, libs map[string]bool) error {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return fmt.Errorf("ldd %s: %w", bin, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				libs[f] = true
			}
		}
	}
	return nil
}

// buildStage runs the build stage's RUN commands as the Dockerfile would,
// its /out/ directory replaced by bins.
func buildStage(df *dockerfile.File, root, bins string) error {
	build := df.Stage("build")
	if build == nil {
		return fmt.Errorf("the Dockerfile has no build stage")
	}
	vars := map[string]string{"TARGETOS": "linux", "TARGETARCH": runtime.GOARCH}
	for _, in := range build.Body {
		if in.Cmd != "RUN" {
			continue
		}
		script := os.Expand(in.Args, func(k string) string { return vars[k] })
		script = strings.ReplaceAll(script, "/out/", bins+"/")
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("RUN %s: %w", in.Args, err)
		}
	}
	return nil
}

func goBuild(root, pkg, out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd.Run()
}

// distrolessBase is what distroless/static:nonroot gives an image: users,
// a writable /tmp, a home for nonroot and the CA bundle.
func distrolessBase() *layer {
	l := newLayer()
	l.data("/etc/passwd", []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"), 0o644)
	l.data("/etc/group", []byte("root:x:0:\nnonroot:x:65532:\nnobody:x:65534:\n"), 0o644)
	l.dir("/tmp", 0o1777, 0)
	l.dir("/home/nonroot", 0o700, nonroot)
	if b, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		l.data("/etc/ssl/certs/ca-certificates.crt", b, 0o644)
	}
	return l
}

// busyboxLayer is Debian's static busybox with a link for each applet.
func busyboxLayer() (*layer, error) {
	const bin = "/bin/busybox"
	list, err := exec.Command(bin, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w (is busybox-static installed?)", bin, err)
	}
	l := newLayer()
	if err := l.executable(bin, bin); err != nil {
		return nil, err
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet != "busybox" {
			l.symlink("/bin/"+applet, "busybox")
		}
	}
	return l, nil
}

type config struct {
	entrypoint, cmd []string
	user            string
}

// write assembles an image from layers and writes it to out as an archive
// that containerd imports.
func write(out, ref string, c config, layers ...*layer) error {
	img := empty.Image
	for _, l := range layers {
		tl, err := l.image()
		if err != nil {
			return err
		}
		if img, err = mutate.AppendLayers(img, tl); err != nil {
			return err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", runtime.GOARCH, v1.Time{Time: time.Unix(0, 0)}
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User = c.entrypoint, c.cmd, c.user
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	tagged, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	file := filepath.Join(out, strings.NewReplacer("/", "_", ":", "_").Replace(strings.TrimPrefix(ref, Repository))+".tar")
	if err := tarball.WriteToFile(file, tagged, img); err != nil {
		return fmt.Errorf("%s: %w", ref, err)
	}
	fmt.Println(ref, file)
	return nil
}

// layer is a file-system layer built in memory: directories for every
// parent, owned by root unless said otherwise.
type layer struct {
	buf  bytes.Buffer
	tw   *tar.Writer
	dirs map[string]bool
	err  error
}

func newLayer() *layer {
	l := &layer{dirs: map[string]bool{"/": true}}
	l.tw = tar.NewWriter(&l.buf)
	return l
}

func (l *layer) header(h *tar.Header) {
	if l.err == nil {
		h.Name = strings.TrimPrefix(h.Name, "/")
		h.ModTime = time.Unix(0, 0)
		l.err = l.tw.WriteHeader(h)
	}
}

func (l *layer) parents(p string) {
	d := path.Dir(p)
	if l.dirs[d] {
		return
	}
	l.parents(d)
	l.dir(d, 0o755, 0)
}

func (l *layer) dir(p string, mode int64, owner int) {
	l.parents(p)
	l.dirs[p] = true
	l.header(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode, Uid: owner, Gid: owner})
}

func (l *layer) data(p string, b []byte, mode int64) {
	l.parents(p)
	l.header(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(b))})
	if l.err == nil {
		_, l.err = l.tw.Write(b)
	}
}

// executable adds the file from as an executable at p.
func (l *layer) executable(p, from string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	l.data(p, b, 0o755)
	return nil
}

// tree adds the directory from at p, every file and directory owned by owner.
func (l *layer) tree(p, from string, owner int) error {
	return filepath.Walk(from, func(file string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, file)
		if err != nil {
			return err
		}
		target := path.Join(p, filepath.ToSlash(rel))
		if info.IsDir() {
			l.dir(target, 0o755, owner)
			return nil
		}
		b, err := os.ReadFile(file) //nolint:gosec // a repository this program just made
		if err != nil {
			return err
		}
		l.parents(target)
		l.header(&tar.Header{Typeflag: tar.TypeReg, Name: target, Mode: int64(info.Mode().Perm()), Size: int64(len(b)), Uid: owner, Gid: owner})
		if l.err == nil {
			_, l.err = l.tw.Write(b)
		}
		return nil
	})
}

func (l *layer) symlink(p, target string) {
	l.parents(p)
	l.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: p, Linkname: target, Mode: 0o777})
}

func (l *layer) image() (v1.Layer, error) {
	if l.err != nil {
		return nil, l.err
	}
	if err := l.tw.Close(); err != nil {
		return nil, err
	}
	b := l.buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
}
