package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Walk is how one simulation went: the states it entered in order, the
// state it ended in, its step count, how many actions it would have run
// and why it ended. Walked is false when
// the simulator printed no summary (the loop did not load, or it crashed);
// Note then says why.
type Walk struct {
	Walked       bool     `json:"walked"`
	Entered      []string `json:"states_visited"`
	FinalState   string   `json:"final_state"`
	Iterations   int      `json:"iterations"`
	Commands     int      `json:"commands"`
	TerminatedBy string   `json:"terminated_by"`
	Note         string   `json:"note,omitempty"`
}

// finalLine starts the line the harness adds to ll-loop's output: the
// state the walk ended in (ExecutionResult.final_state).
const finalLine = "[simcompat] final state: "

// arrow separates the states of ll-loop's "States visited:" line.
const arrow = " \u2192 "

// ParseLLLoop reads what `ll-loop simulate --scenario S` printed on
// stdout: each entered state as "[N] State: NAME", each route as
// "    Transition: A → B", then the summary ("States visited:",
// "Iterations:", "Terminated by:"). The final state is the one the
// harness's line names (finalLine); without one, the target of the last
// route when no state was entered after it (a terminal state is reached,
// not entered), else the last state entered.
func ParseLLLoop(stdout string) (Walk, error) {
	var p llParser
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if err := p.line(sc.Text()); err != nil {
			return p.w, err
		}
	}
	if err := sc.Err(); err != nil {
		return p.w, err
	}
	w := p.w
	if !w.Walked {
		return w, fmt.Errorf("no summary")
	}
	w.FinalState = p.last
	if p.told {
		w.FinalState = p.final
	}
	if w.Entered == nil {
		w.Entered = []string{}
	}
	return w, nil
}

// llParser reads ll-loop's output a line at a time.
type llParser struct {
	w       Walk
	last    string // the state the walk is in as the lines go
	final   string // what the harness's line says
	told    bool   // there was one
	summary bool   // the lines are the summary's
}

func (p *llParser) line(line string) error {
	if line == "=== Summary ===" {
		p.summary = true
		return nil
	}
	if f, ok := strings.CutPrefix(line, finalLine); ok {
		p.final, p.told = f, true
		return nil
	}
	if p.summary {
		return p.summaryLine(line)
	}
	if strings.HasPrefix(line, "[") {
		if _, name, ok := strings.Cut(line, "] State: "); ok {
			p.last = name
		}
	} else if route, ok := strings.CutPrefix(strings.TrimSpace(line), "Transition: "); ok {
		if _, to, ok := strings.Cut(route, arrow); ok {
			p.last = to
		}
	}
	return nil
}

func (p *llParser) summaryLine(line string) error {
	var err error
	if v, ok := strings.CutPrefix(line, "States visited:"); ok {
		if v = strings.TrimSpace(v); v != "" {
			p.w.Entered = strings.Split(v, arrow)
		}
	} else if v, ok := strings.CutPrefix(line, "Iterations:"); ok {
		if p.w.Iterations, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
			return fmt.Errorf("iterations: %w", err)
		}
	} else if v, ok := strings.CutPrefix(line, "Would have executed "); ok {
		if p.w.Commands, err = strconv.Atoi(strings.TrimSuffix(v, " commands")); err != nil {
			return fmt.Errorf("commands: %w", err)
		}
	} else if v, ok := strings.CutPrefix(line, "Terminated by:"); ok {
		p.w.TerminatedBy, p.w.Walked = strings.TrimSpace(v), true
	}
	return nil
}

// ParseLooprun reads what `looprun simulate -o json` printed.
func ParseLooprun(stdout string) (Walk, error) {
	var s struct {
		Entered      []string `json:"states_visited"`
		FinalState   string   `json:"final_state"`
		Iterations   int      `json:"iterations"`
		Commands     int      `json:"commands"`
		TerminatedBy string   `json:"terminated_by"`
	}
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		return Walk{}, err
	}
	if s.Entered == nil {
		s.Entered = []string{}
	}
	return Walk{Walked: true, Entered: s.Entered, FinalState: s.FinalState, Iterations: s.Iterations, Commands: s.Commands, TerminatedBy: s.TerminatedBy}, nil
}

// Diff says how b's walk differs from a's; nothing when they agree.
func Diff(a, b Walk) []string {
	if !a.Walked || !b.Walked {
		if a.Walked == b.Walked {
			return nil
		}
		return []string{fmt.Sprintf("walked %v, not %v", b.Walked, a.Walked)}
	}
	var d []string
	if a.TerminatedBy != b.TerminatedBy {
		d = append(d, fmt.Sprintf("terminated_by %s, not %s", b.TerminatedBy, a.TerminatedBy))
	}
	if a.FinalState != b.FinalState {
		d = append(d, fmt.Sprintf("final state %s, not %s", b.FinalState, a.FinalState))
	}
	if a.Iterations != b.Iterations {
		d = append(d, fmt.Sprintf("iterations %d, not %d", b.Iterations, a.Iterations))
	}
	if a.Commands != b.Commands {
		d = append(d, fmt.Sprintf("commands %d, not %d", b.Commands, a.Commands))
	}
	if !slices.Equal(a.Entered, b.Entered) {
		i := 0
		for i < len(a.Entered) && i < len(b.Entered) && a.Entered[i] == b.Entered[i] {
			i++
		}
		d = append(d, fmt.Sprintf("path parts at step %d: %s, not %s", i+1, at(b.Entered, i), at(a.Entered, i)))
	}
	return d
}

func at(states []string, i int) string {
	if i < len(states) {
		return states[i]
	}
	return "(end)"
}
