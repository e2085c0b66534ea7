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
		if line, ok := p.line(e); ok {
			// Event data may hold what an action printed: no escape
			// sequence of it reaches the terminal.
			fmt.Fprintln(p.w, printable(line))
		}
	}
}

// line is the line an event prints, if any; it notes the iteration and the
// verdict of the state in progress for the route line that follows.
func (p *progress) line(e executor.Event) (string, bool) {
	d := e.Data
	depth := fmt.Sprint(d["depth"])
	indent := ""
	if n, err := strconv.Atoi(depth); err == nil {
		indent = strings.Repeat("  ", min(n, 16))
	}
	switch e.Type {
	case executor.EventLoopStart:
		return fmt.Sprintf("%sloop %v started", indent, d["loop"]), true
	case executor.EventLoopResume:
		// The state resumed in was entered before: its iteration is
		// the run's, for its route line.
		p.iteration[depth], p.verdict[depth] = d["iteration"], nil
		return fmt.Sprintf("%sloop %v resumed in %v at iteration %v", indent, d["loop"], d["from_state"], d["iteration"]), true
	case executor.EventActionRestarted:
		return fmt.Sprintf("%s  running the action of %v again (it was cut off)", indent, d["state"]), true
	case executor.EventStateEnter:
		p.iteration[depth], p.verdict[depth] = d["iteration"], nil
	case executor.EventEvaluate:
		p.verdict[depth] = d["verdict"]
	case executor.EventSubLoopComplete:
		p.verdict[depth] = d["verdict"]
		if d["error"] != nil {
			return fmt.Sprintf("%s  sub-loop %v: %v", indent, d["loop"], d["error"]), true
		}
	case executor.EventRoute:
		if d["reason"] != nil {
			return fmt.Sprintf("%s    %v -> %v (%v)", indent, d["from"], d["to"], d["reason"]), true
		}
		line := fmt.Sprintf("%s[%v] %v -> %v", indent, p.iteration[depth], d["from"], d["to"])
		if p.verdict[depth] != nil {
			line += fmt.Sprintf(" (%v)", p.verdict[depth])
		}
		return line, true
	case executor.EventRateLimitWaiting:
		return fmt.Sprintf("%s  %v: rate limited; %v try %v in %.0fs", indent, d["state"], d["tier"], d["attempt"], d["wait_seconds"]), true
	case executor.EventAPIErrorRetry, executor.EventInfraRetry:
		return fmt.Sprintf("%s  %v: %s; try %v in %vs", indent, d["state"], strings.ReplaceAll(e.Type, "_", " "), d["attempt"], d["backoff"]), true
	case executor.EventActionError, executor.EventRetryExhausted, executor.EventCycleDetected,
		executor.EventRateLimitExhausted, executor.EventRateLimitStorm, executor.EventAPIErrorExhausted, executor.EventInfraRetryExhausted:
		return fmt.Sprintf("%s  %s: %v", indent, e.Type, d), true
	case executor.EventHandoffDetected:
		return fmt.Sprintf("%shandoff in %v: %v (looprun resume goes on)", indent, d["state"], d["continuation"]), true
	case executor.EventLoopComplete:
		line := fmt.Sprintf("%sloop ended in %v after %v iterations: %v", indent, d["final_state"], d["iterations"], d["terminated_by"])
		if d["error"] != nil {
			line += fmt.Sprintf(" (%v)", d["error"])
		}
		return line, true
	}
	return "", false
}
