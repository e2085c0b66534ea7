package executor

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/interpolate"
)

// EventStallDetected records a tripped repeated-failure circuit.
const EventStallDetected = "stall_detected"

// The circuit's counters live in the run state's stalls, beside the stall
// evaluators' (so they survive a restart and travel with an export):
// circuitRun counts the same result repeated in a row (t.counter, as the
// stall evaluators count), circuitSeen+state holds the progress
// fingerprint last seen in a state, circuitCount+result counts a result
// over the run.
const (
	circuitRun   = "circuit"
	circuitSeen  = "circuit-progress/"
	circuitCount = "circuit-count/"
	// maxCircuitCounts bounds the results counted for recurrentWindow.
	maxCircuitCounts = 128
	// progressMark starts the probe's stderr line with the fingerprint of
	// the progress paths.
	progressMark = "looprun-progress: "
)

// progressProbe is the shell command that fingerprints the circuit's
// progress paths where the action ran (modification time and size; 0 0
// for a missing file), run after the evaluator's own probe, if any, whose
// output and exit code it leaves alone. "" when there is nothing to watch.
func progressProbe(spec *v1alpha1.LoopSpec, st *v1alpha1.State, vars *interpolate.Vars, evalProbe string) string {
	rf := repeatedFailure(spec)
	if rf == nil || len(rf.ProgressPaths) == 0 || st.Next != "" {
		return evalProbe
	}
	var excluded []string
	for _, p := range rf.ExcludePaths {
		if x, err := interpolate.Expand(p, vars); err == nil {
			excluded = append(excluded, x)
		}
	}
	var paths []string
	for _, p := range rf.ProgressPaths {
		x, err := interpolate.Expand(p, vars)
		if err != nil || slices.Contains(excluded, x) {
			continue
		}
		paths = append(paths, interpolate.ShellQuote(x))
	}
	if len(paths) == 0 {
		return evalProbe
	}
	first := "true"
	if evalProbe != "" {
		first = evalProbe
	}
	return fmt.Sprintf(`{ %s
}; rc=$?; printf '%s%%s\n' "$(for p in %s; do stat -c '%%.9Y %%s' -- "$p" 2>/dev/null || stat -c '%%Y %%s' -- "$p" 2>/dev/null || echo '0 0'; done | cksum)" >&2; exit $rc`,
		first, progressMark, strings.Join(paths, " "))
}

func repeatedFailure(spec *v1alpha1.LoopSpec) *v1alpha1.RepeatedFailure {
	if spec.Circuit == nil {
		return nil
	}
	return spec.Circuit.RepeatedFailure
}

// takeProgress removes the fingerprint line from the probe's stderr and
// returns it ("" when there is none).
func takeProgress(res *ActionResult) string {
	if res == nil || res.Probe == nil {
		return ""
	}
	lines := strings.Split(strings.TrimSuffix(res.Probe.Stderr, "\n"), "\n")
	last := lines[len(lines)-1]
	fp, ok := strings.CutPrefix(last, progressMark)
	if !ok {
		return ""
	}
	p := *res.Probe
	p.Stderr = strings.Join(lines[:len(lines)-1], "\n")
	res.Probe = &p
	return fp
}

// circuitTripped records the state's result with the repeated-failure
// circuit. When it trips it goes where onRepeatedFailure says, instead of
// the verdict's route, and reports true.
func (t *turn) circuitTripped(res *ActionResult, verdict, progress string) bool {
	rf := repeatedFailure(t.m.spec)
	if rf == nil {
		return false
	}
	run, state := t.run, t.run.CurrentState
	exit := 0
	if res != nil {
		exit = res.ExitCode
	}
	if run.Stalls == nil {
		run.Stalls = map[string]v1alpha1.StallCounter{}
	}
	if progress != "" {
		if seen, ok := run.Stalls[circuitSeen+state]; ok && seen.Hash != progress {
			for k := range run.Stalls { // progress: every count starts again
				if k == circuitRun || strings.HasPrefix(k, circuitSeen) {
					delete(run.Stalls, k)
				}
			}
		}
		run.Stalls[circuitSeen+state] = v1alpha1.StallCounter{Hash: progress}
	}
	result := state + "\x00" + strconv.Itoa(exit) + "\x00" + verdict
	repeats, _ := t.counter(circuitRun, result)
	inARow := repeats + 1
	window := int32(v1alpha1.DefaultCircuitWindow)
	if rf.Window != nil {
		window = *rf.Window
	}
	ev := StallDetectedEvent{State: state, ExitCode: exit, Verdict: t.verdictName(verdict)}
	switch {
	case inARow >= window:
		ev.Consecutive = window
	case rf.RecurrentWindow != nil:
		n := t.countResult(result)
		if n < *rf.RecurrentWindow {
			return false
		}
		ev.Recurrent = n
	default:
		return false
	}
	to := cmp.Or(rf.OnRepeatedFailure, v1alpha1.CircuitAbort)
	if to == v1alpha1.CircuitAbort {
		ev.Action = "abort"
		t.emit(EventStallDetected, ev.Data())
		n, what := ev.Consecutive, "consecutive iterations"
		if n == 0 {
			n, what = ev.Recurrent, "iterations in all"
		}
		t.finish(v1alpha1.TerminatedStallDetected, fmt.Sprintf("Stall detected: state '%s' produced (exit_code=%d, verdict='%s') for %v %s",
			state, exit, t.verdictName(verdict), n, what))
		return true
	}
	ev.Action = "route:" + to
	t.emit(EventStallDetected, ev.Data())
	t.transition(to, verdict)
	return true
}

// countResult counts one more of result over the run, and returns the
// count. Past maxCircuitCounts different results, a new one is not counted.
func (t *turn) countResult(result string) int32 {
	key := circuitCount + result
	c, ok := t.run.Stalls[key]
	if !ok {
		n := 0
		for k := range t.run.Stalls {
			if strings.HasPrefix(k, circuitCount) {
				n++
			}
		}
		if n >= maxCircuitCounts {
			return 0
		}
	}
	c.Count++
	t.run.Stalls[key] = c
	return c.Count
}

// verdictName spells a verdict as the loop's events do: yes and no for a
// little-loops file.
func (t *turn) verdictName(v string) string {
	if !t.m.opts.LittleLoops {
		return v
	}
	return v1alpha1.LittleLoopsVerdict(v)
}
