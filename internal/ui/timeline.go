package ui

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/looprun/looprun/internal/executor"
)

// maxPeriod is the longest pass (in state visits) folded when repeated.
const maxPeriod = 8

// digester reads a run's events as they come: its timeline of state
// visits (repeated passes folded), what each state last did, and how
// often each was entered. These are of the run's current timeline only: a
// rewind (looprun rewind) abandons the visits after the checkpoint it went
// back to, and the digester leaves them out (it counts them in rewinds).
type digester struct {
	visits    []Visit
	last      map[string]Last
	entered   map[string]int
	cur       *Visit
	iteration int32
	// offset is how far the event log was read, lastSeq the last event's.
	offset  int64
	lastSeq int64

	// cuts are the rewinds known before the log was read: a visit they
	// abandon is left out. A rewind read that was not known makes the
	// digester stale: what it found before it is read again, with it.
	cuts  []cut
	stale bool
	// abandoned counts the visits left out, by the rewind that abandoned
	// them; rewinds are the rewinds read so far.
	abandoned map[int64]int
	rewinds   []Rewind
	// foldFrom is where the current timeline's folding starts: no pass
	// is folded across a rewind.
	foldFrom int
}

// cut is a rewind as the digester leaves out what it abandoned: the visits
// entered before it (seq) after the checkpoint's iteration.
type cut struct {
	seq       int64
	iteration int32
}

// Rewind is a rewind of the run (looprun rewind): where the run went back
// from and to, and how many state visits after the checkpoint it abandoned
// (the timeline and counts leave them out).
type Rewind struct {
	Seq           int64     `json:"seq"`
	At            time.Time `json:"at"`
	FromState     string    `json:"fromState,omitempty"`
	FromIteration int32     `json:"fromIteration"`
	State         string    `json:"state"`
	Iteration     int32     `json:"iteration"`
	Abandoned     int       `json:"abandoned"`
}

func newDigester(cuts ...cut) *digester {
	return &digester{last: map[string]Last{}, entered: map[string]int{}, cuts: cuts, abandoned: map[int64]int{}}
}

// reread is a digester that reads the log again from its start, knowing
// every rewind d read.
func (d *digester) reread() *digester { return newDigester(d.cuts...) }

// abandonedBy is the rewind that abandoned a visit entered at seq in
// iteration: the first after it that went back to an earlier iteration
// (the checkpoint of iteration k is taken once k routed: k+1 on are
// abandoned); ok is false for a visit of the current timeline.
func (d *digester) abandonedBy(seq int64, iteration int32) (int64, bool) {
	for _, c := range d.cuts {
		if c.seq > seq && iteration > c.iteration {
			return c.seq, true
		}
	}
	return 0, false
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
	return digested{visits: slices.Clone(d.snapshot()), last: maps.Clone(d.last), entered: maps.Clone(d.entered), rewinds: slices.Clone(d.rewinds)}
}

func (d *digester) closeVisit() {
	if d.cur != nil {
		d.visits = fold(append(d.visits, *d.cur), d.foldFrom)
		d.cur = nil
	}
}

// enter begins the visit a state_enter event starts, unless a rewind
// abandoned it: then no visit is current, and what it does goes nowhere.
func (d *digester) enter(e executor.Event) {
	d.closeVisit()
	enter := executor.StateEnterOf(e)
	d.iteration++
	if enter.Iteration > 0 {
		d.iteration = enter.Iteration
	}
	if by, ok := d.abandonedBy(e.Seq, d.iteration); ok {
		d.abandoned[by]++
		return
	}
	d.cur = &Visit{Seq: e.Seq, Iteration: d.iteration, State: enter.State, At: e.Time}
	d.entered[enter.State]++
}

// rewind reads a loop_rewind event: one not known makes d stale; the
// timeline goes on from the checkpoint's iteration, and folds nothing into
// what came before it.
func (d *digester) rewind(e executor.Event) {
	d.closeVisit()
	r := executor.LoopRewindOf(e)
	if !slices.ContainsFunc(d.cuts, func(c cut) bool { return c.seq == e.Seq }) {
		d.cuts, d.stale = append(d.cuts, cut{seq: e.Seq, iteration: r.Iteration}), true
	}
	d.rewinds = append(d.rewinds, Rewind{Seq: e.Seq, At: e.Time, FromState: r.FromState, FromIteration: r.FromIteration,
		State: r.State, Iteration: r.Iteration, Abandoned: d.abandoned[e.Seq]})
	d.iteration, d.foldFrom = r.Iteration, len(d.visits)
}

func (d *digester) add(e executor.Event) {
	d.lastSeq = e.Seq
	switch e.Type {
	case executor.EventStateEnter:
		d.enter(e)
	case executor.EventApprovalRequested:
		if d.cur != nil {
			l := d.last[d.cur.State]
			l.Iteration, l.Question = d.cur.Iteration, executor.ApprovalRequestedOf(e).Message
			d.last[d.cur.State] = l
		}
	case executor.EventLoopRewind:
		d.rewind(e)
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
// more repeat. Visits before from are not folded into.
func fold(vs []Visit, from int) []Visit {
	for p := 1; p <= maxPeriod && 2*p <= len(vs)-from; p++ {
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
