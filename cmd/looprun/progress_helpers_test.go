package main

import (
	"fmt"
	"regexp"
	"strings"
)

var (
	stepLine    = regexp.MustCompile(`^(\s*)\[(\d+)(?:/\d+)?\] (\S+) \(`)
	verdictLine = regexp.MustCompile(`^(\s*)(?:verdict: |✓ |✗ )(\S+)`)
	subLoopEnd  = regexp.MustCompile(`^(\s*)sub-loop \S+ ended: \S+, verdict (\S+)`)
	routeLine   = regexp.MustCompile(`^(\s*)-> (\S+)$`)
	restartLine = regexp.MustCompile(`^(\s*)(\S+) -> (\S+) \((.+)\)$`)
	// moveLine is a move of its own from the state on the line above (a
	// maintain loop's restart).
	moveLine = regexp.MustCompile(`^(\s*)(?:↻ )?-> (\S+) \((.+)\)$`)
)

// steps reads the progress a run printed back as one line per move,
// "[n] from -> to (verdict)", indented by the sub-loop's depth: what the
// tests check of it.
func steps(out string) string {
	type at struct {
		n, state, verdict string
	}
	open := map[int]*at{} // by the indent of the state's line
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		switch {
		case stepLine.MatchString(l):
			m := stepLine.FindStringSubmatch(l)
			open[len(m[1])] = &at{n: m[2], state: m[3]}
		case subLoopEnd.MatchString(l):
			m := subLoopEnd.FindStringSubmatch(l)
			if a := open[len(m[1])]; a != nil {
				a.verdict = m[2]
			}
		case verdictLine.MatchString(l):
			m := verdictLine.FindStringSubmatch(l)
			if a := open[len(m[1])-7]; a != nil {
				a.verdict = m[2]
			}
		case moveLine.MatchString(l):
			m := moveLine.FindStringSubmatch(l)
			indent := len(m[1]) - 7
			if a := open[indent]; a != nil {
				fmt.Fprintf(&b, "%s[%s] %s -> %s (%s)\n", strings.Repeat(" ", max(indent, 0)), a.n, a.state, m[2], m[3])
			}
		case restartLine.MatchString(l):
			m := restartLine.FindStringSubmatch(l)
			fmt.Fprintf(&b, "%s%s -> %s (%s)\n", strings.Repeat(" ", max(len(m[1])-7, 0)), m[2], m[3], m[4])
		case routeLine.MatchString(l):
			m := routeLine.FindStringSubmatch(l)
			indent := len(m[1]) - 7
			a := open[indent]
			if a == nil {
				continue
			}
			why := a.verdict
			line := fmt.Sprintf("%s[%s] %s -> %s", strings.Repeat(" ", max(indent, 0)), a.n, a.state, m[2])
			if why != "" {
				line += " (" + why + ")"
			}
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
