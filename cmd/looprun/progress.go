package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/looprun/looprun/internal/executor"
)

// progress prints one line per state as a loop runs; a sub-loop's lines
// are indented by its depth.
type progress struct {
	w io.Writer
	// iteration and verdict of the state in progress, by depth.
	iteration map[string]any
	verdict   map[string]any
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, iteration: map[string]any{}, verdict: map[string]any{}}
}

func (p *progress) print(events []executor.Event) {
	for _, e := range events {
		d := e.Data
		depth := fmt.Sprint(d["depth"])
		indent := ""
		if n, err := strconv.Atoi(depth); err == nil {
			indent = strings.Repeat("  ", min(n, 16))
		}
		switch e.Type {
		case executor.EventLoopStart:
			fmt.Fprintf(p.w, "%sloop %v started\n", indent, d["loop"])
		case executor.EventLoopResume:
			fmt.Fprintf(p.w, "%sloop %v resumed in %v at iteration %v\n", indent, d["loop"], d["from_state"], d["iteration"])
		case executor.EventActionRestarted:
			fmt.Fprintf(p.w, "%s  running the action of %v again (it was cut off)\n", indent, d["state"])
		case executor.EventStateEnter:
			p.iteration[depth], p.verdict[depth] = d["iteration"], nil
		case executor.EventEvaluate:
			p.verdict[depth] = d["verdict"]
		case executor.EventSubLoopComplete:
			p.verdict[depth] = d["verdict"]
			if d["error"] != nil {
				fmt.Fprintf(p.w, "%s  sub-loop %v: %v\n", indent, d["loop"], d["error"])
			}
		case executor.EventRoute:
			line := fmt.Sprintf("%s[%v] %v -> %v", indent, p.iteration[depth], d["from"], d["to"])
			if d["reason"] != nil {
				line = fmt.Sprintf("%s    %v -> %v (%v)", indent, d["from"], d["to"], d["reason"])
			} else if p.verdict[depth] != nil {
				line += fmt.Sprintf(" (%v)", p.verdict[depth])
			}
			fmt.Fprintln(p.w, line)
		case executor.EventActionError, executor.EventRetryExhausted, executor.EventCycleDetected:
			fmt.Fprintf(p.w, "%s  %s: %v\n", indent, e.Type, d)
		case executor.EventLoopComplete:
			fmt.Fprintf(p.w, "%sloop ended in %v after %v iterations: %v", indent, d["final_state"], d["iterations"], d["terminated_by"])
			if d["error"] != nil {
				fmt.Fprintf(p.w, " (%v)", d["error"])
			}
			fmt.Fprintln(p.w)
		}
	}
}
