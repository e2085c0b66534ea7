package loopfile

import (
	"strings"
	"testing"
)

// A key is either read or known-and-ignored, never both; and a table says
// which of the three a key is.
func TestKeyTables(t *testing.T) {
	check := func(name string, keys map[string]bool, ignored map[string]string) {
		for k := range ignored {
			if keys[k] {
				t.Errorf("%s: %s is both read and ignored", name, k)
			}
		}
	}
	names := func(m map[string]key[stateRead]) map[string]bool {
		out := map[string]bool{}
		for k := range m {
			out[k] = true
		}
		return out
	}
	check("state", names(stateKeys.keys), stateKeys.ignored)
	top := map[string]bool{}
	for k := range topLevelKeys.keys {
		top[k] = true
	}
	check("top level", top, topLevelKeys.ignored)

	r := &reader{}
	var st stateRead
	st.extra = map[string]string{}
	stateKeys.read(r, map[string]any{"action": "make", "model": "opus", "session_mode": "fresh", "description": "d", "wobble": 1, "on_blocked": "ask"}, "states.a", &st)
	if st.Action != "make" || st.Model != "opus" || st.extra["blocked"] != "ask" {
		t.Errorf("read %+v, extra %v", st.State, st.extra)
	}
	got := strings.Join(append(r.warnings, r.ignoredNotice()), "\n")
	for _, want := range []string{"Claude CLI options (states.a.session_mode)", "states.a.wobble: unknown key; ignored"} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings %q lack %q", got, want)
		}
	}
	if strings.Contains(got, "description") {
		t.Errorf("a silently ignored key was warned about: %q", got)
	}
}
