package loopfile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

func load(t *testing.T, name string) *File {
	t.Helper()
	f, err := Load(filepath.Join("testdata", name), Options{LoopsDir: "testdata"})
	if err != nil {
		t.Fatalf("Load(%s): %v", name, err)
	}
	if errs := executor.Validate(&f.Loop.Spec); len(errs) > 0 {
		t.Fatalf("%s does not validate: %v", name, errs.ToAggregate())
	}
	return f
}

func specJSON(t *testing.T, s v1alpha1.LoopSpec) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A Loop manifest and the same loop in little-loops YAML give the same spec.
func TestManifestAndLittleLoopsAgree(t *testing.T) {
	m := load(t, "fix.manifest.yaml")
	l := load(t, "fix.little.yaml")
	if m.Format != FormatManifest || l.Format != FormatLittleLoops {
		t.Errorf("formats %s, %s", m.Format, l.Format)
	}
	if a, b := specJSON(t, m.Loop.Spec), specJSON(t, l.Loop.Spec); a != b {
		t.Errorf("specs differ:\nmanifest %s\nlittle   %s", a, b)
	}
	if m.Loop.Name != "fix" || l.Loop.Name != "fix" {
		t.Errorf("names %q %q", m.Loop.Name, l.Loop.Name)
	}
}

func TestQualityGate(t *testing.T) {
	f := load(t, "quality-gate.yaml")
	s := f.Loop.Spec
	if s.GetMaxIterations() != 30 || s.GetTimeout() != 2*time.Hour {
		t.Errorf("limits %d %v", s.GetMaxIterations(), s.GetTimeout())
	}
	lint := s.States["check-lint"]
	if lint.ActionType != v1alpha1.ActionAgent || lint.Evaluate.Type != v1alpha1.EvalLLMStructured || lint.OnSuccess != "check-tests" ||
		lint.OnFailure != "analyze" || lint.OnError != "analyze" || lint.Route["partial"] != "check-lint" || lint.GetTimeout() != 5*time.Minute {
		t.Errorf("check-lint %+v", lint)
	}
	if a := s.States["analyze"]; !a.IsAgent() || a.Capture != "lint_report" {
		t.Errorf("analyze %+v", a)
	}
	tests := s.States["check-tests"]
	if tests.ActionType != v1alpha1.ActionShell || tests.Evaluate == nil || tests.Evaluate.Type != v1alpha1.EvalExitCode || tests.GetTimeout() != 10*time.Minute {
		t.Errorf("fragment not applied: %+v", tests)
	}
	if f.Loop.Annotations["looprun.io/description"] != "Lint must be clean before the tests run." {
		t.Errorf("annotations %v", f.Loop.Annotations)
	}
	if !strings.Contains(f.Notice, "(scope)") || !strings.Contains(f.Notice, "(on_handoff: spawn)") {
		t.Errorf("notice %q", f.Notice)
	}
}

func TestSweepMaintain(t *testing.T) {
	s := load(t, "sweep.yaml").Loop.Spec
	if !s.Maintain || s.GetBackoff() != 5*time.Second || s.GetMaxIterations() != 40 {
		t.Errorf("spec %+v", s)
	}
	failed := s.States["failed"]
	if !failed.IsFailure("failed") {
		t.Error("a terminal state named failed is a failure by default")
	}
	if done := s.States["done"]; done.IsFailure("done") || done.OnMaintain != "count_stale" {
		t.Errorf("done %+v", done)
	}
}

func TestBanditRouteTable(t *testing.T) {
	s := load(t, "bandit.yaml").Loop.Spec
	score := s.States["score"]
	want := map[string]v1alpha1.StateName{"target": "done", "progress": "exploit", "stall": "explore", "error": "failed"}
	if !reflect.DeepEqual(score.Route, want) || string(score.Evaluate.Target.Raw) != `"${context.goal}"` || string(score.Evaluate.Tolerance.Raw) != "0.05" {
		t.Errorf("score %+v", score)
	}
	if s.GetMaxIterations() != 12 {
		t.Errorf("a lone max_iterations is the step cap: %d", s.GetMaxIterations())
	}
	if string(s.Context["goal"].Raw) != "0.8" {
		t.Errorf("context keeps numbers as written: %s", s.Context["goal"].Raw)
	}
}

func TestFlow(t *testing.T) {
	s := load(t, "flow.yaml").Loop.Spec
	if st := s.States["build"]; st.Action != "make build" || st.Next != "test" {
		t.Errorf("build %+v", st)
	}
	if st := s.States["test"]; st.OnSuccess != "ship" || st.OnFailure != "fix" {
		t.Errorf("test %+v", st)
	}
	if st := s.States["fix"]; st.Next != "test" {
		t.Errorf("state_defs win over the flow: %+v", st)
	}
	if st := s.States["ship"]; !st.Terminal || st.Action != "echo shipped" {
		t.Errorf("ship %+v", st)
	}
}

func TestInheritance(t *testing.T) {
	s := load(t, "child.yaml").Loop.Spec
	if st := s.States["check"]; st.Action != "echo check ${context.target}" || st.OnFailure != "repair" || st.OnSuccess != "done" {
		t.Errorf("check %+v", st)
	}
	if string(s.Context["target"].Raw) != `"child"` || string(s.Context["level"].Raw) != `"info"` || s.GetMaxIterations() != 10 {
		t.Errorf("context %v max %d", s.Context, s.GetMaxIterations())
	}
}

func TestUnknownKeysAreReported(t *testing.T) {
	f := load(t, "unknown-keys.yaml")
	if th := f.Loop.Spec.States["a"].Throttle; th == nil || *th.HardMax != 3 || th.WarnMax != nil {
		t.Errorf("states.a.throttle %+v", th)
	}
	for _, w := range []string{"frobnicate: unknown key", "states.a.with_: unknown key", "states.a.evaluate.wobble: unknown evaluator key"} {
		if !hasWarning(f, w) {
			t.Errorf("no warning %q in %v", w, f.Warnings)
		}
	}
}

func TestSubLoopStates(t *testing.T) {
	f := load(t, "sub-loop.yaml")
	s := f.Loop.Spec
	child := s.States["child"]
	if child.Loop != "other-loop" || string(child.With["target"].Raw) != `"${context.goal}"` || string(child.With["depth"].Raw) != "2" ||
		child.Route["timeout"] != "done" || child.OnSuccess != "share" {
		t.Errorf("child %+v", child)
	}
	if share := s.States["share"]; share.Loop != "third" || !share.ContextPassthrough || share.With != nil || share.Worktree == "" {
		t.Errorf("share %+v", share)
	}
	if p := f.Parameters; !p["target"].Required || p["mode"].Type != "enum" || string(p["mode"].Default.Raw) != `"careful"` || len(p["mode"].Values) != 2 {
		t.Errorf("parameters %+v", p)
	}
}

func TestUnsupportedFeaturesAreErrors(t *testing.T) {
	_, err := Parse([]byte("name: p\ninitial: a\nstates:\n  a:\n    action: x\n    type: learning\n    next: b\n  b: {terminal: true}\n"), "", Options{})
	if err == nil || !strings.Contains(err.Error(), "states.a.type: a learning state needs learning") {
		t.Errorf("err %v", err)
	}
	_, err = Parse([]byte("name: p\ninitial: a\nparameters:\n  x: {required: true, default: 1}\nstates:\n  a: {terminal: true}\n"), "", Options{})
	if err == nil || !strings.Contains(err.Error(), "parameters.x: a required parameter cannot have a default") {
		t.Errorf("err %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"not a mapping", "- a\n- b\n", "must be a YAML mapping"},
		{"missing fields", "name: x\n", "initial: required: the state the loop starts in\nstates: required: the mapping of state names to states"},
		{"missing name beside other problems", "initial: a\nstates:\n  a:\n    action: x\n    on_no: nowhere\n    on_yes: d\n  d:\n    terminal: true\n    action_type: contract\n",
			"line 5: states.a.on_no: no state is called \"nowhere\"\nline 9: states.d.action_type: action type \"contract\" is not supported (shell, prompt, slash_command, mcp_tool)\nname: required"},
		{"bad action type", "name: x\ninitial: a\nstates:\n  a:\n    action: x\n    action_type: contract\n    next: d\n  d:\n    terminal: true\n", "states.a.action_type"},
		{"params not a mapping", "name: x\ninitial: a\nstates:\n  a:\n    action: s/t\n    action_type: mcp_tool\n    params: [1]\n    next: d\n  d:\n    terminal: true\n", "states.a.params: must be a mapping"},
		{"bad timeout", "name: x\ninitial: a\nstates:\n  a:\n    action: x\n    timeout: soon\n    next: d\n  d:\n    terminal: true\n", "states.a.timeout"},
		{"bad evaluator", "name: x\ninitial: a\nstates:\n  a:\n    action: x\n    evaluate:\n      type: comparator\n    on_yes: d\n  d:\n    terminal: true\n", `states.a.evaluate.type: evaluator "comparator"`},
		{"missing import", "name: x\ninitial: a\nimport: [lib/nope.yaml]\nstates:\n  a:\n    terminal: true\n", "import[0]"},
		{"missing fragment", "name: x\ninitial: a\nstates:\n  a:\n    fragment: nope\n    terminal: true\n", `no fragment "nope"`},
		{"bad flow", "name: x\ninitial: a\nflow: [\"a?b\"]\n", "flow[0]"},
		{"manifest unknown field", "apiVersion: looprun.io/v1alpha1\nkind: Loop\nmetadata: {name: x}\nspec:\n  initial: a\n  sttes: {}\n", "unknown field"},
		{"manifest wrong kind", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "expected apiVersion looprun.io/v1alpha1 and kind Loop"},
		{"inheritance cycle", "name: x\nfrom: cycle-a\ninitial: a\nstates: {a: {terminal: true}}\n", "inheritance cycle"},
		{"bad input_key", "name: x\ninitial: a\ninput_key: \"a b\"\nstates: {a: {terminal: true}}\n", `input_key: "a b" is not`},
		{"bad required_inputs", "name: x\ninitial: a\nrequired_inputs: topic\nstates: {a: {terminal: true}}\n", "required_inputs: must be a list"},
		{"numeric without operator", "name: x\ninitial: a\nstates:\n  a:\n    action: x\n    evaluate: {type: output_numeric, target: 1}\n    on_yes: d\n  d:\n    terminal: true\n",
			"states.a.evaluate: output_numeric needs an operator (eq, ne, lt, le, gt, ge); ll-loop refuses the file without one"},
		{"json with a null operator", "name: x\ninitial: a\nstates:\n  a:\n    action: x\n    evaluate: {type: output_json, path: a, operator: null, target: 1}\n    on_yes: d\n  d:\n    terminal: true\n",
			"states.a.evaluate: output_json needs an operator"},
		{"empty operator", "name: x\ninitial: a\nstates:\n  a:\n    action: x\n    evaluate: {type: output_numeric, operator: '', target: 1}\n    on_yes: d\n  d:\n    terminal: true\n",
			`states.a.evaluate.operator: must be one of eq, ne, lt, le, gt, ge, not ""`},
		{"contains without pattern", "name: x\ninitial: a\nstates:\n  a:\n    action: x\n    evaluate: {type: output_contains}\n    on_yes: d\n  d:\n    terminal: true\n",
			"states.a.evaluate: output_contains needs a pattern"},
	}
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "cycle-a.yaml"), []byte("from: cycle-b\n"), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "cycle-b.yaml"), []byte("from: cycle-a\n"), 0o644)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), dir, Options{LoopsDir: dir})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want %q", err, tt.want)
			}
		})
	}
}

// A little-loops file whose target ll-loop reads only when the state is
// evaluated is read, with a warning; its route keys are kept as written
// (yes and success are two verdicts there); an empty pattern is one.
func TestLittleLoopsEvaluatorFields(t *testing.T) {
	lf, err := Parse([]byte(`name: x
initial: a
states:
  a:
    action: x
    evaluate: {type: output_numeric, operator: ge, target: abc}
    route: {"yes": b, success: d, _error: d}
  b:
    action: x
    evaluate: {type: convergence, target: [1], tolerance: wide}
    on_target: c
  c:
    action: x
    evaluate: {type: output_contains, pattern: ""}
    on_yes: d
  d:
    terminal: true
`), ".", Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]v1alpha1.StateName{"yes": "b", "success": "d", "_error": "d"}
	if got := lf.Loop.Spec.States["a"].Route; !reflect.DeepEqual(got, want) {
		t.Errorf("route %v, want %v", got, want)
	}
	for _, w := range []string{
		`line 6: states.a.evaluate.target: "abc" is not a number; when the state is evaluated the run ends in error there, as in ll-loop`,
		"line 10: states.b.evaluate.target: a list is not a number; when the state is evaluated the run ends in error there, as in ll-loop",
		`line 10: states.b.evaluate.tolerance: "wide" is not a number; when the state is evaluated it counts as 0, as in ll-loop`,
	} {
		if !slices.Contains(lf.Warnings, w) {
			t.Errorf("warnings %q\nlack %q", lf.Warnings, w)
		}
	}
}

func TestInputKeys(t *testing.T) {
	lf, err := Parse([]byte("name: x\ninitial: a\ninput_key: topic\nrequired_inputs: [topic, depth]\nstates: {a: {terminal: true}}\n"), ".", Options{})
	if err != nil || lf.InputKey != "topic" || !slices.Equal(lf.RequiredInputs, []string{"topic", "depth"}) || len(lf.Warnings) != 0 {
		t.Fatalf("%+v %v", lf, err)
	}
	if lf, err := Parse([]byte("name: x\ninitial: a\nstates: {a: {terminal: true}}\n"), ".", Options{}); err != nil || lf.InputKey != DefaultInputKey {
		t.Errorf("default input key: %+v %v", lf, err)
	}
}

func TestResolve(t *testing.T) {
	p, err := Resolve("sweep", Options{LoopsDir: "testdata"})
	if err != nil || p != filepath.Join("testdata", "sweep.yaml") {
		t.Errorf("Resolve = %q, %v", p, err)
	}
	if _, err := Resolve("nope", Options{LoopsDir: "testdata"}); err == nil {
		t.Error("Resolve of a missing loop succeeded")
	}
}

func TestKubernetesName(t *testing.T) {
	for in, want := range map[string]string{"fix_types": "fix-types", "Fix Types!": "fix-types", "__": "loop", strings.Repeat("a", 70): strings.Repeat("a", 63)} {
		if got := KubernetesName(in); got != want {
			t.Errorf("KubernetesName(%q) = %q, want %q", in, got, want)
		}
	}
}

func hasWarning(f *File, sub string) bool {
	for _, w := range f.Warnings {
		if strings.Contains(w, sub) {
			return true
		}
	}
	return false
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"quality-gate.yaml", "sweep.yaml", "bandit.yaml", "flow.yaml", "fix.manifest.yaml", "unknown-keys.yaml"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lf, err := Parse(data, "testdata", Options{LoopsDir: "testdata"})
		if err != nil {
			return
		}
		if lf.Loop == nil {
			t.Fatal("no error and no loop")
		}
		// Whatever was read, validation must not panic and a valid spec must build a machine.
		if errs := executor.Validate(&lf.Loop.Spec); len(errs) == 0 {
			if _, err := executor.New(lf.Loop.Name, &lf.Loop.Spec, executor.Options{}); err != nil {
				t.Fatalf("valid spec rejected by New: %v", err)
			}
		}
	})
}

// A little-loops install's loops directory on the library path resolves
// from: and import: as little-loops resolves them (lib/ references from
// inside lib/ too), and names.
func TestLibraryPath(t *testing.T) {
	lib := t.TempDir()
	for name, content := range map[string]string{
		"lib/base.yaml":   "name: base\ninitial: a\ncontext: {depth: 1}\nstates:\n  a:\n    fragment: done_state\n",
		"lib/shape.yaml":  "from: lib/base\ncontext: {depth: 2}\n",
		"lib/common.yaml": "fragments:\n  done_state:\n    terminal: true\n",
		"bundled.yaml":    "name: bundled\ninitial: a\nstates:\n  a:\n    terminal: true\n",
	} {
		p := filepath.Join(lib, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// lib/base's fragment comes from an import of the child.
	doc := "name: child\nfrom: lib/shape\nimport: [lib/common.yaml]\n"
	opts := Options{LoopsDir: t.TempDir(), LibraryPath: []string{lib}}
	lf, err := Parse([]byte(doc), t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(lf.Loop.Spec.Context["depth"].Raw); got != "2" || !lf.Loop.Spec.States["a"].Terminal {
		t.Errorf("depth %s, states %+v", got, lf.Loop.Spec.States)
	}
	if _, err := Parse([]byte(doc), t.TempDir(), Options{LoopsDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), `"lib/shape" not found`) {
		t.Errorf("without the library path: %v", err)
	}
	if p, err := Resolve("bundled", opts); err != nil || p != filepath.Join(lib, "bundled.yaml") {
		t.Errorf("Resolve by name: %q %v", p, err)
	}
}

func TestFragmentParameters(t *testing.T) {
	doc := `name: p
initial: a
fragments:
  writer:
    parameters:
      file: {required: true}
      mode: {default: append}
    action: echo ${param.mode} > ${param.file}
    action_type: shell
states:
  a:
    fragment: writer
    with:
      file: "${context.run_dir}/x"
    next: b
  b: {terminal: true}
`
	f, err := Parse([]byte(doc), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := f.Loop.Spec.States["a"]
	if string(a.FragmentParams["file"].Raw) != `"${context.run_dir}/x"` || string(a.FragmentParams["mode"].Raw) != `"append"` || a.With != nil {
		t.Fatalf("state a: %+v", a)
	}
	for _, w := range f.Warnings {
		if strings.Contains(w, "parameters") || strings.Contains(w, "with") {
			t.Errorf("warning %q", w)
		}
	}
	_, err = Parse([]byte(strings.Replace(doc, "      file: \"${context.run_dir}/x\"\n", "      other: 1\n", 1)), "", Options{})
	if err == nil || !strings.Contains(err.Error(), `states.a.with: fragment "writer" requires parameter "file"`) {
		t.Fatalf("unbound required parameter: %v", err)
	}
}

func TestMCPToolState(t *testing.T) {
	f, err := Parse([]byte("name: m\ninitial: a\nstates:\n  a:\n    action: files/read\n    action_type: mcp_tool\n    params: {path: \"${context.p}\", n: [1]}\n    route: {success: b}\n  b: {terminal: true}\n"), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := f.Loop.Spec.States["a"]
	if a.ActionType != v1alpha1.ActionMCP || a.Params == nil || string(a.Params.Raw) != `{"path":"${context.p}","n":[1]}` {
		t.Errorf("state %+v params %s", a, a.Params.Raw)
	}
}

func TestLearningState(t *testing.T) {
	f, err := Parse([]byte("name: g\ninitial: a\nstates:\n  a:\n    type: learning\n    learning:\n      targets_csv: \"${context.t}\"\n      max_retries_expr: \"${context.n}\"\n    on_yes: b\n    on_blocked: b\n  b: {terminal: true}\n"), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := f.Loop.Spec.States["a"]
	if l := a.Learning; l == nil || l.TargetsCSV != "${context.t}" || l.MaxRetriesExpr != "${context.n}" || a.Route["blocked"] != "b" || a.OnSuccess != "b" {
		t.Errorf("state %+v", a)
	}
	for _, bad := range []string{"    type: learning\n", "    type: other\n    learning: {targets: [x]}\n", "    learning: {targets: [x]}\n", "    type: learning\n    learning: {}\n"} {
		if _, err := Parse([]byte("name: g\ninitial: a\nstates:\n  a:\n"+bad+"    on_yes: b\n  b: {terminal: true}\n"), "", Options{}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// In a manifest, an unquoted y or n key is a boolean to kubectl (YAML 1.1):
// looprun keeps the word and says so, as it does for little-loops files.
func TestManifestYAML11BooleanKeys(t *testing.T) {
	manifest := `apiVersion: looprun.io/v1alpha1
kind: Loop
metadata:
  name: ask
spec:
  initial: ask
  states:
    ask:
      action: "echo y"
      evaluate: {type: classify}
      route:
        y: done
        n: ask
    done: {terminal: true}
`
	f, err := Parse([]byte(manifest), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	route := f.Loop.Spec.States["ask"].Route
	if route["y"] != "done" || route["n"] != "ask" || len(route) != 2 {
		t.Errorf("route %v: want the words y and n", route)
	}
	var found int
	for _, w := range f.Warnings {
		if strings.Contains(w, "kubectl") && (strings.Contains(w, "key y ") || strings.Contains(w, "key n ")) {
			found++
		}
	}
	if found != 2 {
		t.Errorf("warnings %v: want one for y and one for n", f.Warnings)
	}
	// In a little-loops file PyYAML reads y and n as words: nothing to say.
	lf, err := Parse([]byte("name: ask\ninitial: ask\nstates:\n  ask:\n    action: echo y\n    evaluate: {type: classify}\n    route:\n      y: done\n      n: ask\n  done: {terminal: true}\n"), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range lf.Warnings {
		if strings.Contains(w, "kubectl") {
			t.Errorf("a little-loops file warned: %s", w)
		}
	}
}

// The keys little-loops knows and looprun does without are named in one
// notice, not a warning each: there is nothing to change.
func TestIgnoredKeysInOneNotice(t *testing.T) {
	doc := "name: x\ncategory: ci\nscope: [src]\nlabels: [a]\non_handoff: spawn\ninitial: a\nstates:\n  a:\n    action: 'true'\n    session_mode: fresh\n    next: done\n  done:\n    terminal: true\n"
	f, err := Parse([]byte(doc), t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Warnings) != 0 {
		t.Errorf("warnings: %q", f.Warnings)
	}
	want := "looprun does without Claude CLI options (states.a.session_mode); an agent session started on a handoff (on_handoff: spawn); " +
		"catalogue metadata (category, labels); scope locks (scope): these keys are ignored, nothing to change"
	if f.Notice != want {
		t.Errorf("notice:\n %s\nwant\n %s", f.Notice, want)
	}
}
