package main

import (
	"fmt"
	"strings"
	"testing"
)

// looprun history, status and a run's progress print what an action
// printed with its control characters escaped: a hostile output cannot
// move the cursor or set the terminal's title.
func TestTerminalEscapesAreEscaped(t *testing.T) {
	dir := t.TempDir()
	hostile := `printf '\033]0;pwned\007\033[2J\033[1;1H\233?1049h'; printf '\033[31mred' >&2; exit 3`
	write(t, dir, "evil.yaml", fmt.Sprintf("name: evil\ninitial: s\nstates:\n  s:\n    action: %q\n    capture: out\n    on_yes: done\n    on_no: done\n    on_error: \"done\"\n  done:\n    terminal: true\n", hostile))
	run := looprun(t, dir, "run", "evil.yaml")
	for _, r := range []result{run, looprun(t, dir, "history", "evil"), looprun(t, dir, "status", "evil"), looprun(t, dir, "list")} {
		out := r.stdout + r.stderr
		if strings.ContainsAny(out, "\x1b\x07\u009b") || strings.Contains(out, "\x9b") {
			t.Errorf("raw control characters reach the terminal: %q", out)
		}
	}
	h := looprun(t, dir, "history", "evil")
	if !strings.Contains(h.stdout, `\x1b]0;pwned\x07`) {
		t.Errorf("history does not show the output escaped:\n%s", h.stdout)
	}
	// The escaping is for the terminal only: -o json keeps the bytes.
	if j := looprun(t, dir, "history", "evil", "-o", "json"); !strings.Contains(j.stdout, `\u001b]0;pwned\u0007`) {
		t.Errorf("history -o json lost the output:\n%s", j.stdout)
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ünïcode ✓": "plain text, ünïcode ✓",
		"\x1b[2J\x07":           `\x1b[2J\x07`,
		"a\nb\tc\rd\x7f":        `a\nb       c\x0dd\x7f`,
		"ok  \tpkg\t0.1s":       "ok      pkg     0.1s",
		"\x1b\tx":               `\x1b    x`,
		"\u009b31m":             `\u009b31m`,
		"\x9b31m":               `\x9b31m`,
		"abc\u202edcba":         `abc\u202edcba`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}

// A run's progress shows an output's tabs as a terminal does (go test's
// lines keep their columns); history quotes a value on one line, each
// newline escaped once.
func TestTabsAndNewlinesShownOnce(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "tabs.yaml", "name: tabs\ninitial: s\nstates:\n  s:\n    action: \"printf 'ok  \\\\tpkg\\\\t0.1s\\\\nnext\\\\n'\"\n    next: done\n  done:\n    terminal: true\n")
	run := looprun(t, dir, "run", "tabs.yaml")
	if !strings.Contains(run.stdout, "       ok      pkg     0.1s\n       next\n") {
		t.Errorf("run shows the tabs escaped:\n%s", run.stdout)
	}
	h := looprun(t, dir, "history", "tabs")
	if !strings.Contains(h.stdout, `output_preview="ok  \tpkg\t0.1s\nnext"`) {
		t.Errorf("history's preview:\n%s", h.stdout)
	}
}
