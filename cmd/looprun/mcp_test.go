package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// An mcp action runs spec.mcp.command with the tool and its params, and
// routes on mcp_result: a tool that outlives the state's timeout is the
// timeout verdict (not error), an unknown one not_found.
func TestMCPActionsLocally(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "tools/call", `#!/bin/sh
printf '%s %s\n' "$1" "$2" >> calls.log
case $1 in
kv/get) printf '{"content": [{"type": "text", "text": "v"}], "isError": false}\n' ;;
kv/slow) exec sleep 30 ;;
*) exit 127 ;;
esac
`)
	if err := os.Chmod(filepath.Join(dir, "tools", "call"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "loop.yaml", `apiVersion: looprun.io/v1alpha1
kind: Loop
metadata:
  name: tools
spec:
  initial: get
  context:
    key: "it's"
  mcp:
    command: [`+filepath.Join(dir, "tools", "call")+`]
  states:
    get:
      action: kv/get
      actionType: mcp
      params: {key: "${context.key}", count: 1}
      route: {success: slow}
    slow:
      action: kv/slow
      actionType: mcp
      timeout: 1s
      route: {timeout: unknown}
    unknown:
      action: kv/nope
      actionType: mcp
      route: {not_found: done}
    done:
      terminal: true
`)
	cmd := exec.Command(binary, "run", "loop.yaml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"get -> slow (success)", "slow -> unknown (timeout)", "unknown -> done (not_found)"} {
		if !strings.Contains(steps(string(out)), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	want := `kv/get {"count": 1, "key": "it's"}` + "\nkv/slow {}\nkv/nope {}\n"
	if got := readFile(dir, "calls.log"); got != want {
		t.Errorf("calls\n%s\nwant\n%s", got, want)
	}
}
