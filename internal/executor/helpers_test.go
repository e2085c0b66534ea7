package executor

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var t0 = time.Date(2026, 1, 15, 10, 30, 0, 0, time.UTC)

// fakeActions answers actions by command: each command has a queue of
// results; the last one repeats.
type fakeActions struct {
	results map[string][]ActionResult
	ran     []string
}

func (f *fakeActions) run(a *Action) ActionResult {
	f.ran = append(f.ran, a.Command)
	q := f.results[a.Command]
	if len(q) == 0 {
		return ActionResult{ExitCode: 0, Duration: 10 * time.Millisecond}
	}
	r := q[0]
	if len(q) > 1 {
		f.results[a.Command] = q[1:]
	}
	if r.Duration == 0 {
		r.Duration = 10 * time.Millisecond
	}
	return r
}

// fakeJudge returns scripted verdicts and records the requests.
type fakeJudge struct {
	verdicts []string
	reqs     []evaluate.JudgeRequest
}

func (j *fakeJudge) Judge(_ context.Context, req evaluate.JudgeRequest) evaluate.Result {
	j.reqs = append(j.reqs, req)
	v := "error"
	if len(j.verdicts) > 0 {
		v = j.verdicts[0]
		j.verdicts = j.verdicts[1:]
	}
	return evaluate.Result{Verdict: v, Details: map[string]any{"confidence": 0.9, "reason": "scripted"}}
}

// runResult is what a whole run produced.
type runResult struct {
	run    *v1alpha1.RunState
	events []Event
	ran    []string
}

func (r *runResult) count(typ string) int {
	n := 0
	for _, e := range r.events {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// runLoop drives a spec to the end the way a driver does: Plan, run, Complete.
// The clock advances by step for every call, and to the end of every wait.
// A question to the LLM judge gets the answer no judge gives.
func runLoop(t *testing.T, spec *v1alpha1.LoopSpec, acts *fakeActions, opts Options, step time.Duration) *runResult {
	t.Helper()
	return runJudged(t, spec, acts, nil, opts, step)
}

// runJudged is runLoop with judge answering the StepJudge questions.
func runJudged(t *testing.T, spec *v1alpha1.LoopSpec, acts *fakeActions, judge evaluate.Judge, opts Options, step time.Duration) *runResult {
	t.Helper()
	m, err := New("test", spec, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if acts == nil {
		acts = &fakeActions{}
	}
	if judge == nil {
		judge = noJudge{}
	}
	now := t0
	run := &v1alpha1.RunState{}
	events := m.Start(run, "test-1", now)
	complete := func(res *ActionResult) {
		s, evs := m.Complete(run, res, now)
		if s.Kind == StepJudge {
			if len(evs) > 0 {
				t.Fatalf("a question to the judge came with %d events", len(evs))
			}
			res = Judged(res, judge.Judge(context.Background(), *s.Judge))
			s, evs = m.Complete(run, res, now)
		}
		if s.Kind != StepNext {
			t.Fatalf("Complete asked for %s after the judge answered", s.Kind)
		}
		events = append(events, evs...)
	}
	for i := 0; i < 10000; i++ {
		now = now.Add(step)
		s, evs := m.Plan(run, now)
		events = append(events, evs...)
		switch s.Kind {
		case StepDone:
			checkSeqs(t, events)
			return &runResult{run: run, events: events, ran: acts.ran}
		case StepWait:
			now = s.WaitUntil
			continue
		case StepEvaluate:
			complete(nil)
		case StepAction:
			res := acts.run(s.Action)
			now = now.Add(res.Duration)
			complete(&res)
		}
	}
	t.Fatal("the loop did not end")
	return nil
}

// noJudge answers as a driver with no judge configured does.
type noJudge struct{}

func (noJudge) Judge(context.Context, evaluate.JudgeRequest) evaluate.Result {
	return evaluate.Result{Verdict: v1alpha1.VerdictError, Details: map[string]any{"error": "no LLM judge is configured (set ANTHROPIC_API_KEY)"}}
}

// eventsOf is the events of a Plan or Complete.
func eventsOf(_ Step, evs []Event) []Event { return evs }

func checkSeqs(t *testing.T, events []Event) {
	t.Helper()
	for i, e := range events {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d (%s) has seq %d, want %d", i, e.Type, e.Seq, i+1)
		}
	}
}

func jsonValue(v any) apiextensionsv1.JSON {
	b, _ := json.Marshal(v)
	return apiextensionsv1.JSON{Raw: b}
}

func jsp(v any) *apiextensionsv1.JSON {
	j := jsonValue(v)
	return &j
}

func i32(v int32) *int32 { return &v }

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// golden compares the event trace with testdata/NAME.golden.
func golden(t *testing.T, name string, events []Event) {
	t.Helper()
	var b strings.Builder
	for _, e := range events {
		line, err := MarshalJSON(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("event trace differs from %s:\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// startRun builds spec's machine under name and starts a run of it ("r", at t0).
func startRun(t *testing.T, name string, spec *v1alpha1.LoopSpec, opts Options) (*Machine, *v1alpha1.RunState) {
	t.Helper()
	m, err := New(name, spec, opts)
	if err != nil {
		t.Fatal(err)
	}
	run := &v1alpha1.RunState{}
	m.Start(run, "r", t0)
	return m, run
}
