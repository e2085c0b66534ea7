package main

import (
	"bytes"
	"strings"
	"testing"
)

// helpText runs looprun (or kubectl loop) with args and returns stdout.
func helpText(t *testing.T, plugin bool, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := execute(&kube{plugin: plugin}, args, &out, &errb); code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errb.String())
	}
	return out.String()
}

// groupOf is the title of the --help group that lists command.
func groupOf(help, command string) string {
	title := ""
	for _, l := range strings.Split(help, "\n") {
		if strings.HasSuffix(l, ":") && !strings.HasPrefix(l, " ") {
			title = l
		}
		if f := strings.Fields(l); strings.HasPrefix(l, "  ") && len(f) > 0 && f[0] == command {
			return title
		}
	}
	return ""
}

// TestHelpGroups: --help lists each command where a bare NAME means what
// the command makes of it (a local run for resume and history, a Loop for
// rewind and get); as kubectl loop, where a bare NAME is always a Loop.
func TestHelpGroups(t *testing.T) {
	help := helpText(t, false, "--help")
	for cmd, title := range map[string]string{
		"run":         "Local runs and loop files (no cluster):",
		"get":         "Loops in a cluster (NAME and loop/NAME are a Loop; kubeconfig and flags as kubectl's):",
		"resume":      "A local run or a Loop (NAME is a local run under --loops-dir; loop/NAME a Loop in the cluster):",
		"history":     "A local run or a Loop (NAME is a local run under --loops-dir; loop/NAME a Loop in the cluster):",
		"approve":     "A local run or a Loop (NAME is a local run under --loops-dir; loop/NAME a Loop in the cluster):",
		"rewind":      "A Loop or a local run (NAME and loop/NAME are a Loop in the cluster; --local NAME a local run):",
		"checkpoints": "A Loop or a local run (NAME and loop/NAME are a Loop in the cluster; --local NAME a local run):",
		"ui":          "Local runs and cluster Loops together:",
		"version":     "Additional Commands:",
	} {
		if got := groupOf(help, cmd); got != title {
			t.Errorf("%s is listed under %q, want %q", cmd, got, title)
		}
	}
	plugin := helpText(t, true, "--help")
	if got := groupOf(plugin, "resume"); got != groupOf(plugin, "rewind") || !strings.Contains(got, "as kubectl loop") {
		t.Errorf("as kubectl loop, resume is under %q and rewind under %q", got, groupOf(plugin, "rewind"))
	}

	// resume's help shows both commands it is, with an example each.
	resume := helpText(t, false, "resume", "--help")
	for _, want := range []string{"resume NAME        continue the local run NAME", "resume loop/NAME   resume the Loop NAME in the cluster",
		"looprun resume fix-tests --max-cost 5", "looprun resume loop/fix-tests -n ci"} {
		if !strings.Contains(resume, want) {
			t.Errorf("resume --help lacks %q:\n%s", want, resume)
		}
	}
	if resume := helpText(t, true, "resume", "--help"); strings.Contains(resume, "continue the local run") {
		t.Errorf("kubectl loop resume --help speaks of a local run:\n%s", resume)
	}
}
