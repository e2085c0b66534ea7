package main

import (
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/looprun/looprun/api/v1alpha1"
)

// A bundle laid out as little-loops' bundled loops are: outer names its
// oracle as oracles/gate, the oracle names its sibling as oracles/leaf
// (found beside the file the run started from) and imports lib/ (beside
// outer), none of it under .loops or on the library path.
func bundleDir(t *testing.T) string {
	dir := t.TempDir()
	write(t, dir, "bundle/outer.yaml", `name: outer
initial: run
states:
  run:
    loop: oracles/gate
    on_yes: done
    on_no: failed
  done: {terminal: true}
  failed: {terminal: true}
`)
	write(t, dir, "bundle/oracles/gate.yaml", `name: gate
initial: mark
import: [lib/common.yaml]
states:
  mark:
    fragment: append
    next: deeper
  deeper:
    loop: oracles/leaf
    on_yes: done
    on_no: failed
  done: {terminal: true}
  failed: {terminal: true}
`)
	write(t, dir, "bundle/oracles/leaf.yaml", "name: leaf\ninitial: mark\nstates:\n  mark:\n    action: echo leaf >> trace\n    next: done\n  done: {terminal: true}\n")
	write(t, dir, "bundle/lib/common.yaml", "fragments:\n  append:\n    action: echo gate >> trace\n")
	return dir
}

// run, resume and validate find a sub-loop the same way: beside the file
// naming it and the files above it, then what it imports the same way.
func TestSubLoopFoundBesideForRunAndValidate(t *testing.T) {
	dir := bundleDir(t)
	if r := looprun(t, dir, "run", "-q", "bundle/outer.yaml"); r.code != 0 {
		t.Fatalf("run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := looprun(t, dir, "validate", "bundle/outer.yaml"); r.code != 0 {
		t.Fatalf("validate: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := readFile(dir, "trace"); got != "gate\nleaf\n" {
		t.Errorf("trace %q, want the oracle's action, then its sibling's", got)
	}
	// A missing one is an error naming the file and state that name it.
	write(t, dir, "bundle/lost.yaml", "name: lost\ninitial: run\nstates:\n  run:\n    loop: oracles/nowhere\n    on_yes: done\n  done: {terminal: true}\n")
	want := filepath.Join("bundle", "lost.yaml") + `: states.run.loop: no loop file "oracles/nowhere"`
	if r := looprun(t, dir, "run", "bundle/lost.yaml"); r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("run of a missing sub-loop: exit %d, stderr %q; want %q", r.code, r.stderr, want)
	}
	if r := looprun(t, dir, "validate", "bundle/lost.yaml"); r.code != 1 || !strings.Contains(r.stdout, want) {
		t.Errorf("validate of a missing sub-loop: exit %d, stdout %q; want %q", r.code, r.stdout, want)
	}
}

// objects reads the YAML documents apply --dry-run printed.
func objects(t *testing.T, out string) (templates map[string]v1alpha1.LoopTemplate, loop *v1alpha1.Loop) {
	t.Helper()
	templates = map[string]v1alpha1.LoopTemplate{}
	for _, doc := range strings.Split(out, "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%v in:\n%s", err, doc)
		}
		switch meta.Kind {
		case "LoopTemplate":
			var tpl v1alpha1.LoopTemplate
			if err := yaml.UnmarshalStrict([]byte(doc), &tpl); err != nil {
				t.Fatal(err)
			}
			templates[tpl.Name] = tpl
		case "Loop":
			loop = &v1alpha1.Loop{}
			if err := yaml.UnmarshalStrict([]byte(doc), loop); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("a document of kind %q:\n%s", meta.Kind, doc)
		}
	}
	if loop == nil {
		t.Fatalf("no Loop in:\n%s", out)
	}
	return templates, loop
}

// In a cluster a sub-loop is a LoopTemplate named by its name: oracles/gate
// is the template oracles-gate, in the parent's loop: and in the name of
// the template apply makes (and convert prints).
func TestApplyMapsSubLoopPathsToTemplateNames(t *testing.T) {
	dir := bundleDir(t)
	for _, args := range [][]string{
		{"convert", "bundle/outer.yaml"},
		{"apply", "--dry-run", "-f", "bundle/outer.yaml"},
	} {
		r := looprun(t, dir, args...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, r.code, r.stderr)
		}
		templates, loop := objects(t, r.stdout)
		if len(templates) != 2 || templates["oracles-gate"].Spec.States["deeper"].Loop != "oracles-leaf" || templates["oracles-leaf"].Name == "" {
			t.Errorf("%v: templates %v, want oracles-gate running oracles-leaf", args, templates)
		}
		if got := loop.Spec.States["run"].Loop; got != "oracles-gate" {
			t.Errorf("%v: the Loop's state run has loop: %q, want oracles-gate", args, got)
		}
	}
	// A name that cannot be a template's, even so, names file and state.
	write(t, dir, "bundle/spaced.yaml", "name: spaced\ninitial: run\nstates:\n  run:\n    loop: oracles/My Gate\n    on_yes: done\n  done: {terminal: true}\n")
	want := filepath.Join("bundle", "spaced.yaml") + `: states.run.loop: "oracles/My Gate" cannot name a LoopTemplate in a cluster (as "oracles-my gate")`
	r := looprun(t, dir, "apply", "--dry-run", "-f", "bundle/spaced.yaml")
	if r.code != 1 || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "regex") {
		t.Errorf("apply of an impossible name: exit %d, stderr %q; want %q", r.code, r.stderr, want)
	}
	// ... and so in a loop it runs.
	write(t, dir, "bundle/oracles/gate.yaml", strings.Replace(readFile(dir, "bundle/oracles/gate.yaml"), "loop: oracles/leaf", "loop: oracles/Leaf Two", 1))
	write(t, dir, "bundle/oracles/Leaf Two.yaml", readFile(dir, "bundle/oracles/leaf.yaml"))
	want = filepath.Join("bundle", "oracles", "gate.yaml") + `: states.deeper.loop: "oracles/Leaf Two" cannot name a LoopTemplate`
	if r := looprun(t, dir, "apply", "--dry-run", "-f", "bundle/outer.yaml"); r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("apply of an impossible name in a sub-loop: exit %d, stderr %q; want %q", r.code, r.stderr, want)
	}
}

// apply --dry-run prints what apply would send, with the input and
// --set variables in the Loop's context, and talks to no cluster.
func TestApplyDryRunSetAndInput(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "topic.yaml", `name: topic
input_key: topic
required_inputs: [topic]
initial: a
context:
  depth: 1
states:
  a:
    action: echo ${context.topic} ${context.depth} ${context.run_dir} ${context.max_steps} ${context.input_hash:default=}
    next: done
  done: {terminal: true}
`)
	nowhere := []string{"--kubeconfig", filepath.Join(dir, "no-kubeconfig")}
	r := looprun(t, dir, append(nowhere, "apply", "-f", "topic.yaml", "--dry-run")...)
	if r.code != 1 || !strings.Contains(r.stderr, `loop topic needs input "topic": pass it as looprun apply -f topic.yaml --input VALUE (or --set topic=VALUE)`) {
		t.Errorf("without its input: exit %d, stderr %q", r.code, r.stderr)
	}
	r = looprun(t, dir, append(nowhere, "apply", "-f", "topic.yaml", "--input", "knots", "--set", "depth=3", "--set", "extra=a=b", "--dry-run=client", "-n", "team")...)
	if r.code != 0 {
		t.Fatalf("dry run: exit %d\n%s", r.code, r.stderr)
	}
	_, loop := objects(t, r.stdout)
	got := map[string]string{}
	for k, v := range loop.Spec.Context {
		got[k] = string(v.Raw)
	}
	if want := map[string]string{"topic": `"knots"`, "depth": `"3"`, "extra": `"a=b"`}; len(got) != len(want) || got["topic"] != want["topic"] || got["depth"] != want["depth"] || got["extra"] != want["extra"] {
		t.Errorf("context %v, want %v", got, want)
	}
	if loop.Name != "topic" || loop.Namespace != "team" || loop.Status.Phase != "" || strings.Contains(r.stdout, "status:") || strings.Contains(r.stdout, "creationTimestamp") {
		t.Errorf("printed:\n%s", r.stdout)
	}
	for _, bad := range []struct{ flag, want string }{
		{"--set=no-value", `--set "no-value": want KEY=VALUE`},
		{"--dry-run=maybe", `--dry-run "maybe": want client or server`},
	} {
		r := looprun(t, dir, append(nowhere, "apply", "-f", "topic.yaml", "--input", "x", bad.flag)...)
		if r.code != 1 || !strings.Contains(r.stderr, bad.want) {
			t.Errorf("%s: exit %d, stderr %q; want %q", bad.flag, r.code, r.stderr, bad.want)
		}
	}
	// Without --dry-run it does want a cluster.
	if r := looprun(t, dir, append(nowhere, "apply", "-f", "topic.yaml", "--input", "x")...); r.code != 1 || !strings.Contains(r.stderr, "no cluster") {
		t.Errorf("apply with no cluster: exit %d, stderr %q", r.code, r.stderr)
	}
}
