package ui

import (
	"maps"
	"slices"
	"strings"

	"github.com/looprun/looprun/internal/executor"
)

// maxPeriod is the longest pass (in state visits) folded when repeated.
const maxPeriod = 8

// digester reads a run's events as they come: its timeline of state
// visits (repeated passes folded), what each state last did, and how
// often each was entered.
type digester struct {
	visits    []Visit
	last      map[string]Last
	entered   map[string]int
	cur       *Visit
	iteration int32
	// offset is how far the event log was read, lastSeq the last event's.
	offset  int64
	lastSeq int64
}

func newDigester() *digester {
	return &digester{last: map[string]Last{}, entered: map[string]int{}}
}

// snapshot is the timeline, the visit in progress last.
func (d *digester) snapshot() []Visit {
	if d.cur == nil {
		return d.visits
	}
	return append(slices.Clip(d.visits), *d.cur)
}

// digested is a copy of what d found so far.
func (d *digester) digested() digested {
	return digested{visits: slices.Clone(d.snapshot()), last: maps.Clone(d.last), entered: maps.Clone(d.entered)}
}

func (d *digester) closeVisit() {
	if d.cur != nil {
		d.visits = fold(append(d.visits, *d.cur))
		d.cur = nil
	}
}

func (d *digester) add(e executor.Event) {
	d.lastSeq = e.Seq
	switch e.Type {
	case executor.EventStateEnter:
		d.closeVisit()
		enter := executor.StateEnterOf(e)
		state := enter.State
		d.iteration++
		if enter.Iteration > 0 {
			d.iteration = enter.Iteration
		}
		d.cur = &Visit{Seq: e.Seq, Iteration: d.iteration, State: state, At: e.Time}
		d.entered[state]++
	case executor.EventActionStart:
		if d.cur != nil {
			d.cur.Action, _, _ = strings.Cut(strings.TrimSpace(executor.ActionStartOf(e).Action), "\n")
		}
	case executor.EventSubLoopStart:
		if d.cur != nil {
			l := d.last[d.cur.State]
			l.Iteration, l.Child = d.cur.Iteration, executor.SubLoopStartOf(e).Child
			d.last[d.cur.State] = l
		}
	case executor.EventActionComplete:
		if d.cur != nil {
			a := executor.ActionCompleteOf(e)
			code := int64(a.ExitCode)
			d.cur.ExitCode = &code
			l := d.last[d.cur.State]
			l.Iteration, l.ExitCode = d.cur.Iteration, &code
			l.Output, l.Stderr = a.OutputPreview, a.StderrPreview
			d.last[d.cur.State] = l
		}
	case executor.EventEvaluate, executor.EventApprovalAnswered: // an approval's verdict is its answer (who, why)
		if d.cur != nil {
			var details map[string]any
			d.cur.Verdict, details = verdictOf(e)
			l := d.last[d.cur.State]
			l.Iteration, l.Verdict, l.Details = d.cur.Iteration, d.cur.Verdict, details
			d.last[d.cur.State] = l
		}
	case executor.EventRoute:
		if d.cur != nil {
			r := executor.RouteOf(e)
			d.cur.Next = r.To
			if d.cur.Verdict == "" {
				d.cur.Verdict = r.Verdict
			}
			d.cur.DurationMs = e.Time.Sub(d.cur.At).Milliseconds()
			d.closeVisit()
		}
	case executor.EventLoopComplete:
		if d.cur != nil {
			d.cur.DurationMs = e.Time.Sub(d.cur.At).Milliseconds()
		}
		d.closeVisit()
	}
}

// fold folds the newest visits into the pass before them when they repeat
// it (the same states, verdicts and next states): that pass counts one
// more repeat.
func fold(vs []Visit) []Visit {
	for p := 1; p <= maxPeriod && 2*p <= len(vs); p++ {
		a, b := vs[len(vs)-2*p:len(vs)-p], vs[len(vs)-p:]
		same := true
		for i := range a {
			if a[i].State != b[i].State || a[i].Verdict != b[i].Verdict || a[i].Next != b[i].Next {
				same = false
				break
			}
		}
		if !same {
			continue
		}
		if a[p-1].Repeat == 0 || a[p-1].Period == p {
			a[p-1].Repeat++
			a[p-1].Period = p
			a[p-1].DurationMs += sumDuration(b)
			return vs[:len(vs)-p]
		}
	}
	return vs
}

func sumDuration(vs []Visit) int64 {
	var d int64
	for _, v := range vs {
		d += v.DurationMs
	}
	return d
}

// verdictOf is the verdict of an evaluate or approval_answered event and
// what it says beside: the evaluator's details (its type as evaluator, and
// what a judge's call used), or who answered the approval and why.
func verdictOf(e executor.Event) (string, map[string]any) {
	if e.Type == executor.EventApprovalAnswered {
		a := executor.ApprovalAnsweredOf(e)
		details := a.Data()
		delete(details, "verdict")
		return a.Verdict, details
	}
	ev := executor.EvaluateOf(e)
	details := maps.Clone(ev.Details)
	if ev.Usage != nil {
		maps.Copy(details, ev.Usage.Data())
	}
	details["evaluator"] = ev.Type
	return ev.Verdict, details
}
