package loopfile

import (
	"os"
	"path/filepath"
	"testing"
)

// The values little-loops prints as written keep the file's order of
// keys: a context mapping (merge keys as PyYAML merges them, a parent's
// keys first), an MCP call's params, a sub-loop's with, a fragment's
// parameters.
func TestMappingsKeepTheFilesOrder(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "base.yaml"), []byte("name: base\ninitial: s\ncontext:\n  cfg: {zeta: 1, alpha: {y: 1, b: 2}}\nstates:\n  s: {terminal: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := `name: ord
from: base
initial: call
context:
  cfg: {beta: 3, alpha: {c: 3}}
  m: {zulu: 1, alpha: [3, {y: 1, b: 2}]}
  defaults: &d {k2: 1, k1: 2}
  merged:
    <<: *d
    k0: 0
    k2: 9
  multi:
    <<: [{m2: 1, m1: 1}, {n2: 2, m2: 2}]
    z: 0
states:
  call:
    action: files/read
    action_type: mcp_tool
    params: {zz: 1, aa: {y: 1, b: [{d: 1, c: 2}]}}
    route: {_: child}
  child:
    loop: base
    with: {cfg: {z: 1, a: 2}}
    on_yes: done
  done: {terminal: true}
`
	f, err := Parse([]byte(doc), dir, Options{LoopsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	spec := f.Loop.Spec
	for k, want := range map[string]string{
		"cfg":    `{"zeta":1,"alpha":{"y":1,"b":2,"c":3},"beta":3}`,
		"m":      `{"zulu":1,"alpha":[3,{"y":1,"b":2}]}`,
		"merged": `{"k2":9,"k1":2,"k0":0}`,
		"multi":  `{"n2":2,"m2":1,"m1":1,"z":0}`,
	} {
		if got := string(spec.Context[k].Raw); got != want {
			t.Errorf("context.%s = %s, want %s", k, got, want)
		}
	}
	if got, want := string(spec.States["call"].Params.Raw), `{"zz":1,"aa":{"y":1,"b":[{"d":1,"c":2}]}}`; got != want {
		t.Errorf("params = %s, want %s", got, want)
	}
	if got, want := string(spec.States["child"].With["cfg"].Raw), `{"z":1,"a":2}`; got != want {
		t.Errorf("with.cfg = %s, want %s", got, want)
	}
}
