package main

import (
	"fmt"
	"io"

	"github.com/looprun/looprun/internal/executor"
)

// progress prints one line per state as a loop runs.
type progress struct {
	w         io.Writer
	iteration any
	verdict   any
}

func newProgress(w io.Writer) *progress { return &progress{w: w} }

func (p *progress) print(events []executor.Event) {
	for _, e := range events {
		d := e.Data
		switch e.Type {
		case executor.EventLoopStart:
			fmt.Fprintf(p.w, "loop %v started\n", d["loop"])
		case executor.EventLoopResume:
			fmt.Fprintf(p.w, "loop %v resumed in %v at iteration %v\n", d["loop"], d["from_state"], d["iteration"])
		case executor.EventActionRestarted:
			fmt.Fprintf(p.w, "  running the action of %v again (it was cut off)\n", d["state"])
		case executor.EventStateEnter:
			p.iteration, p.verdict = d["iteration"], nil
		case executor.EventEvaluate:
			p.verdict = d["verdict"]
		case executor.EventRoute:
			line := fmt.Sprintf("[%v] %v -> %v", p.iteration, d["from"], d["to"])
			if d["reason"] != nil {
				line = fmt.Sprintf("    %v -> %v (%v)", d["from"], d["to"], d["reason"])
			} else if p.verdict != nil {
				line += fmt.Sprintf(" (%v)", p.verdict)
			}
			fmt.Fprintln(p.w, line)
		case executor.EventActionError, executor.EventRetryExhausted, executor.EventCycleDetected:
			fmt.Fprintf(p.w, "  %s: %v\n", e.Type, d)
		case executor.EventLoopComplete:
			fmt.Fprintf(p.w, "loop ended in %v after %v iterations: %v", d["final_state"], d["iterations"], d["terminated_by"])
			if d["error"] != nil {
				fmt.Fprintf(p.w, " (%v)", d["error"])
			}
			fmt.Fprintln(p.w)
		}
	}
}
