package loopfile

import "testing"

// An action is a slash command only when / is its very first character;
// after white space it is shell, as in little-loops.
func TestSlashCommandOnlyAtTheStart(t *testing.T) {
	for action, agent := range map[string]bool{`"/fix it"`: true, `"  /bin/true"`: false, `"echo /x"`: false} {
		doc := "name: x\ninitial: s\nstates:\n  s:\n    action: " + action + "\n    next: done\n  done: {terminal: true}\n"
		f, err := Parse([]byte(doc), t.TempDir(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		st := f.Loop.Spec.States["s"]
		if st.IsAgent() != agent {
			t.Errorf("action %s: agent %v, want %v", action, st.IsAgent(), agent)
		}
	}
}
