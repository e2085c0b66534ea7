package loopfile

import (
	"strings"
	"testing"
)

// pruning_profile becomes the automation profile of agent actions: the
// loop's, a state's own over it, "" for one not enabled, "default" for
// one without a name; no warning that it is ignored.
func TestPruningProfile(t *testing.T) {
	doc := "name: x\ninitial: a\npruning_profile: {name: lean}\nstates:\n" +
		"  a: {action: /a, next: b}\n" +
		"  b: {action: /b, pruning_profile: {enabled: false}, next: c}\n" +
		"  c: {action: /c, pruning_profile: {}, next: done}\n" +
		"  done: {terminal: true}\n"
	f, err := Parse([]byte(doc), t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	spec := f.Loop.Spec
	if spec.Agent == nil || spec.Agent.AutomationProfile != "lean" || spec.States["a"].AutomationProfile != nil {
		t.Fatalf("loop's profile: %+v, a's %v", spec.Agent, spec.States["a"].AutomationProfile)
	}
	if p := spec.States["b"].AutomationProfile; p == nil || *p != "" {
		t.Errorf("b: %v", p)
	}
	if p := spec.States["c"].AutomationProfile; p == nil || *p != "default" {
		t.Errorf("c: %v", p)
	}
	for _, w := range f.Warnings {
		if strings.Contains(w, "pruning_profile") {
			t.Errorf("warning %q", w)
		}
	}
}
