package kubelet

import (
	"os"
	"path/filepath"
	"testing"
)

// Container paths are rewritten whole, never inside another path, and a
// path of this machine under a mounted directory (a checkout under /tmp
// while the Pod mounts /tmp) is left alone.
func TestRewriteWholePathsOnly(t *testing.T) {
	host := t.TempDir() // under /tmp on most machines: the case at hand
	if err := os.MkdirAll(filepath.Join(host, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := &pathMap{}
	m.add("/tmp", "/vol/tmp")
	m.add("/workspace", "/vol/ws")
	m.add("/workspace/repo/", "/vol/repo") // a mount path may end in '/'

	for in, want := range map[string]string{
		"cat /tmp/x > /tmp/y":                "cat /vol/tmp/x > /vol/tmp/y",
		"cd /workspace/repo/src && ls /tmp":  "cd /vol/repo/src && ls /vol/tmp",
		"/workspace":                         "/vol/ws",
		"echo /data/tmp/x /tmpfile":          "echo /data/tmp/x /tmpfile",
		"X=/tmp;Y='/tmp/a' \"/workspace/b\"": "X=/vol/tmp;Y='/vol/tmp/a' \"/vol/ws/b\"",
		host + "/bin/tool --out /tmp/o":      host + "/bin/tool --out /vol/tmp/o",
		"test -f " + host + "/bin/new-file":  "test -f " + host + "/bin/new-file",
	} {
		if got := m.rewrite(in); got != want {
			t.Errorf("rewrite(%q) = %q, want %q", in, got, want)
		}
	}
}
