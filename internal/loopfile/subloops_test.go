package loopfile

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestTemplateName(t *testing.T) {
	for _, c := range []struct{ ref, want, err string }{
		{ref: "child", want: "child"},
		{ref: "oracles/resolve-decision", want: "oracles-resolve-decision"},
		{ref: "Oracles/Fix_Tests", want: "oracles-fix-tests"},
		{ref: "v1.2", want: "v1.2"},
		{ref: "oracles/My Gate", err: `"oracles/My Gate" cannot name a LoopTemplate in a cluster (as "oracles-my gate")`},
		{ref: "../shared/gate", err: `"../shared/gate" cannot name a LoopTemplate in a cluster (as "..-shared-gate")`},
		{ref: "-x", err: `"-x" cannot name a LoopTemplate in a cluster: a template's name is lower-case letters`},
	} {
		got, err := TemplateName(c.ref)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("TemplateName(%q) = %q, %v; want %q", c.ref, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("TemplateName(%q) = %q, %v; want an error with %q", c.ref, got, err, c.err)
		}
	}
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runs is a loop file whose states run the loops named, one each.
func runs(name string, loops ...string) string {
	s := "name: " + name + "\ninitial: s0\nstates:\n"
	for i, l := range loops {
		next := "done"
		if i+1 < len(loops) {
			next = "s" + string(rune('1'+i))
		}
		s += "  s" + string(rune('0'+i)) + ":\n    loop: " + l + "\n    on_yes: " + next + "\n"
	}
	if len(loops) == 0 {
		s = "name: " + name + "\ninitial: done\nstates:\n"
	}
	return s + "  done: {terminal: true}\n"
}

// One file named two ways is two templates, each loop: naming its own;
// two files that would be one template are an error naming both.
func TestTemplatesNamesAndClashes(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"top.yaml":          runs("top", "oracles/gate", "oracles/leaf"),
		"oracles/gate.yaml": runs("gate", "leaf"), // its sibling, found beside it
		"oracles/leaf.yaml": runs("leaf"),
	})
	top, err := Load(filepath.Join(dir, "top.yaml"), Options{LoopsDir: filepath.Join(dir, ".loops")})
	if err != nil {
		t.Fatal(err)
	}
	templates, _, err := Templates(top, Options{LoopsDir: filepath.Join(dir, ".loops")})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tpl := range templates {
		names = append(names, tpl.Name)
		if tpl.Name == "oracles-gate" && tpl.Spec.States["s0"].Loop != "leaf" {
			t.Errorf("oracles-gate runs %q, want leaf", tpl.Spec.States["s0"].Loop)
		}
	}
	slices.Sort(names)
	if want := []string{"leaf", "oracles-gate", "oracles-leaf"}; !slices.Equal(names, want) {
		t.Errorf("templates %v, want %v", names, want)
	}
	loop, err := ClusterLoop(top)
	if err != nil || loop.Spec.States["s0"].Loop != "oracles-gate" || loop.Spec.States["s1"].Loop != "oracles-leaf" {
		t.Errorf("ClusterLoop: %v, %v", loop.Spec.States, err)
	}
	if top.Loop.Spec.States["s0"].Loop != "oracles/gate" {
		t.Errorf("ClusterLoop changed the file's own loop: %q", top.Loop.Spec.States["s0"].Loop)
	}

	dir = writeFiles(t, map[string]string{
		"top.yaml":          runs("top", "oracles/gate", "oracles-gate"),
		"oracles/gate.yaml": runs("gate"),
		"oracles-gate.yaml": runs("other"),
	})
	top, err = Load(filepath.Join(dir, "top.yaml"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = Templates(top, Options{})
	if err == nil || !strings.Contains(err.Error(), "top.yaml: states.s1.loop: \"oracles-gate\" runs "+filepath.Join(dir, "oracles-gate.yaml")+
		", but LoopTemplate oracles-gate is already "+filepath.Join(dir, "oracles", "gate.yaml")) {
		t.Errorf("a clash: %v", err)
	}
}

// A sub-loop is looked up in the loops directory, then beside the file
// naming it and each file above it, then on the library path; what it
// imports is looked up the same way.
func TestLoadSubLoopOrder(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		".loops/first.yaml":       runs("in-loops-dir"),
		"top/first.yaml":          runs("beside-top"),
		"top/second.yaml":         runs("beside-top"),
		"top/oracles/second.yaml": runs("beside-naming-file"),
		"top/oracles/third.yaml":  "name: third\ninitial: a\nimport: [lib/x.yaml]\nstates:\n  a:\n    fragment: end\n",
		"top/lib/x.yaml":          "fragments:\n  end: {terminal: true}\n",
		"library/fourth.yaml":     runs("on-library-path"),
	})
	opts := Options{LoopsDir: filepath.Join(dir, ".loops"), LibraryPath: []string{filepath.Join(dir, "library")}}
	callers := []string{filepath.Join(dir, "top", "top.yaml"), filepath.Join(dir, "top", "oracles", "gate.yaml")}
	for ref, want := range map[string]string{"first": "in-loops-dir", "second": "beside-naming-file", "oracles/third": "third", "fourth": "on-library-path"} {
		f, abs, err := LoadSubLoop(ref, callers, opts)
		if err != nil {
			t.Errorf("%s: %v", ref, err)
			continue
		}
		if f.Loop.Name != want || !filepath.IsAbs(abs) {
			t.Errorf("%s: loop %s at %s, want %s", ref, f.Loop.Name, abs, want)
		}
	}
	if _, _, err := LoadSubLoop("second", callers[:1], opts); err != nil {
		t.Errorf("beside the top file: %v", err)
	}
}
