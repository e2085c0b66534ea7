package loopfile

import "testing"

// TestClusterLoopCarriesTheThresholdsItReads: a Loop made from a
// little-loops file carries the runner's thresholds it reads (the operator
// gives none); a loop's own value wins, and one it does not read is left out.
func TestClusterLoopCarriesTheThresholdsItReads(t *testing.T) {
	doc := "name: x\ninitial: a\ncontext:\n  outcome_threshold: 70\nstates:\n  a:\n" +
		"    action: \"gate ${context.readiness_threshold} ${context.outcome_threshold}\"\n    next: done\n  done:\n    terminal: true\n"
	f, err := Parse([]byte(doc), t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	loop, err := ClusterLoop(f)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for k, v := range loop.Spec.Context {
		got[k] = string(v.Raw)
	}
	if got["readiness_threshold"] != "85" || got["outcome_threshold"] != "70" || len(got) != 2 {
		t.Errorf("context %v, want readiness_threshold 85 and the loop's own outcome_threshold 70", got)
	}
	if _, ok := f.Loop.Spec.Context["readiness_threshold"]; ok {
		t.Error("ClusterLoop changed the file's own spec")
	}

	plain, err := Parse([]byte("name: y\ninitial: done\nstates:\n  done:\n    terminal: true\n"), t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if loop, err := ClusterLoop(plain); err != nil || len(loop.Spec.Context) != 0 {
		t.Errorf("a loop that reads no threshold: context %v, %v", loop.Spec.Context, err)
	}
}
