package executor

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/pricing"
)

// An agent action's usage goes into its action_complete event with
// little-loops' keys; an action that reported none has none of them.
func TestActionCompleteUsage(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "agent", States: map[string]v1alpha1.State{
		"agent": {Action: "/fix", ActionType: v1alpha1.ActionAgent, Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode}, Next: "plain"},
		"plain": {Action: "/again", ActionType: v1alpha1.ActionAgent, Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode}, Next: "shell"},
		"shell": {Action: "make", Next: "done"},
		"done":  {Terminal: true},
	}}
	acts := &fakeActions{results: map[string][]ActionResult{
		"/fix":   {{Output: "fixed", Usage: &agentstream.Usage{InputTokens: 1, OutputTokens: 2, CacheReadTokens: 3, CacheCreationTokens: 4, Model: "claude-x"}}},
		"/again": {{Output: "plain text", Usage: &agentstream.Usage{InputTokens: 5}}},
	}}
	r := runLoop(t, spec, acts, Options{}, time.Millisecond)
	var got []map[string]any
	for _, e := range r.events {
		if e.Type == EventActionComplete {
			got = append(got, e.Data)
		}
	}
	if len(got) != 3 {
		t.Fatalf("%d action_complete events", len(got))
	}
	for k, want := range map[string]any{"input_tokens": int64(1), "output_tokens": int64(2), "cache_read_tokens": int64(3), "cache_creation_tokens": int64(4), "model": "claude-x"} {
		if got[0][k] != want {
			t.Errorf("%s = %v (%T), want %v", k, got[0][k], got[0][k], want)
		}
	}
	if m := got[1]["model"]; m != agentstream.UnknownModel {
		t.Errorf("an unnamed model is %v, want %q as little-loops writes it", m, agentstream.UnknownModel)
	}
	if _, ok := got[2]["input_tokens"]; ok {
		t.Errorf("a shell action has usage keys: %v", got[2])
	}
	if _, ok := got[1]["cost_usd"]; ok {
		t.Errorf("an unnamed model was priced: %v", got[1])
	}
	// The run's totals, and per state; claude-x priced by a table of the run.
	u := r.run.Usage
	if u == nil || u.Calls != 2 || u.InputTokens != 6 || u.OutputTokens != 2 || u.UnpricedCalls != 2 || u.Model != "claude-x" {
		t.Fatalf("usage %+v", u)
	}
	if s := u.States["agent"]; s.Calls != 1 || s.CacheReadTokens != 3 || s.CacheCreationTokens != 4 {
		t.Errorf("state agent %+v", s)
	}
	if s := u.States["plain"]; s.Calls != 1 || s.InputTokens != 5 {
		t.Errorf("state plain %+v", s)
	}
	prices, err := pricing.Parse([]byte("models: {claude-x: {input: 1, output: 1, cacheRead: 1, cacheCreation: 1}}"))
	if err != nil {
		t.Fatal(err)
	}
	acts.results["/fix"] = []ActionResult{{Usage: &agentstream.Usage{InputTokens: 1, OutputTokens: 2, CacheReadTokens: 3, CacheCreationTokens: 4, Model: "claude-x", CLICostUSD: 1.5}}}
	r = runLoop(t, spec, acts, Options{Prices: prices}, time.Millisecond)
	if u := r.run.Usage; u.CostMicroUSD != 10 || u.UnpricedCalls != 1 || u.CLICostMicroUSD != 1500000 {
		t.Errorf("priced usage %+v", u.UsageTotals)
	}
	for _, e := range r.events {
		if e.Type == EventActionComplete && e.Data["model"] == "claude-x" && e.Data["cost_usd"] != 10/1e6 {
			t.Errorf("cost_usd %v", e.Data["cost_usd"])
		}
	}
}

// A judge call's usage goes into its evaluate event and the run's totals.
func TestJudgeUsage(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "agent", States: map[string]v1alpha1.State{
		"agent": {Action: "/fix", OnSuccess: "done", OnFailure: "done"},
		"done":  {Terminal: true},
	}}
	judge := usageJudge{evaluate.Result{Verdict: "success", Details: map[string]any{}, Usage: &agentstream.Usage{InputTokens: 1000, OutputTokens: 100, Model: "claude-haiku-4-5-20251001"}}}
	r := runJudged(t, spec, &fakeActions{}, judge, Options{}, time.Millisecond)
	var ev map[string]any
	for _, e := range r.events {
		if e.Type == EventEvaluate {
			ev = e.Data
		}
	}
	// 1000×0.8 + 100×4 micro-dollars.
	if ev["input_tokens"] != int64(1000) || ev["output_tokens"] != int64(100) || ev["cost_usd"] != 1200/1e6 {
		t.Errorf("evaluate event %v", ev)
	}
	if u := r.run.Usage; u == nil || u.Calls != 1 || u.CostMicroUSD != 1200 || u.States["agent"].InputTokens != 1000 {
		t.Errorf("usage %+v", u)
	}
}

type usageJudge struct{ r evaluate.Result }

func (j usageJudge) Judge(context.Context, evaluate.JudgeRequest) evaluate.Result { return j.r }

// What an agent reports it used is checked before it is priced: negative,
// mixed-sign or absurd counts and costs make the step an error (its onError
// route), counted nowhere, never a free step.
func TestInvalidUsageIsAnErrorOfTheStep(t *testing.T) {
	prices, err := pricing.Parse([]byte("models: {claude-x: {input: 1, output: 1, cacheRead: 1, cacheCreation: 1}}"))
	if err != nil {
		t.Fatal(err)
	}
	for name, u := range map[string]agentstream.Usage{
		"mixed signs":      {InputTokens: 1000000, OutputTokens: -1000000, Model: "claude-x"},
		"negative":         {InputTokens: -5, Model: "claude-x"},
		"overflowing":      {InputTokens: 3e18, OutputTokens: 3e18, CacheReadTokens: 3e18, Model: "claude-x"},
		"negative cost":    {InputTokens: 1, CLICostUSD: -100, Model: "claude-x"},
		"not a number":     {InputTokens: 1, CLICostUSD: math.NaN(), Model: "claude-x"},
		"a model of 1 MiB": {InputTokens: 1, Model: strings.Repeat("m", 1<<20)},
	} {
		t.Run(name, func(t *testing.T) {
			spec := &v1alpha1.LoopSpec{Initial: "agent", States: map[string]v1alpha1.State{
				"agent":  {Action: "/fix", ActionType: v1alpha1.ActionAgent, Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode}, OnSuccess: "done", OnError: "failed"},
				"done":   {Terminal: true},
				"failed": {Terminal: true},
			}}
			acts := &fakeActions{results: map[string][]ActionResult{"/fix": {{Output: "done", Usage: &u}}}}
			r := runLoop(t, spec, acts, Options{Prices: prices}, time.Millisecond)
			if r.run.CurrentState != "failed" {
				t.Fatalf("ended in %s, want failed (onError)", r.run.CurrentState)
			}
			if r.run.Usage != nil && (r.run.Usage.Calls != 0 || r.run.Usage.CostMicroUSD != 0) {
				t.Errorf("the bad usage was counted: %+v", r.run.Usage)
			}
			for _, e := range r.events {
				if e.Type == EventActionComplete && e.Data["failure"] != ReasonInvalidUsage {
					t.Errorf("action_complete %v", e.Data)
				}
			}
		})
	}
	// The judge's call too.
	spec := &v1alpha1.LoopSpec{Initial: "agent", States: map[string]v1alpha1.State{
		"agent":  {Action: "/fix", OnSuccess: "done", OnFailure: "done", OnError: "failed"},
		"done":   {Terminal: true},
		"failed": {Terminal: true},
	}}
	judge := usageJudge{evaluate.Result{Verdict: "success", Details: map[string]any{}, Usage: &agentstream.Usage{InputTokens: -1000, Model: "claude-haiku-4-5-20251001"}}}
	r := runJudged(t, spec, &fakeActions{}, judge, Options{}, time.Millisecond)
	if r.run.CurrentState != "failed" || r.run.Usage != nil && r.run.Usage.Calls != 0 {
		t.Fatalf("a judge's bad usage: ended in %s, usage %+v", r.run.CurrentState, r.run.Usage)
	}
}

// A step metered by the model gateway is billed what the gateway counted:
// what the agent printed (here far less, and once absurd) is only kept
// beside it, and the budget bites on the metered figure.
func TestMeteredUsageIsTheTruth(t *testing.T) {
	spec := &v1alpha1.LoopSpec{Initial: "agent", Budget: &v1alpha1.Budget{MaxCostUSD: "1.00", OnExceeded: v1alpha1.BudgetStop}, States: map[string]v1alpha1.State{
		"agent": {Action: "/fix", ActionType: v1alpha1.ActionAgent, Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode}, Next: "again"},
		"again": {Action: "/again", ActionType: v1alpha1.ActionAgent, Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode}, Next: "done"},
		"done":  {Terminal: true},
	}}
	metered := &Metered{Usage: agentstream.Usage{InputTokens: 900_000, OutputTokens: 50_000, Model: "claude-x"}, Calls: 3, CostMicroUSD: 1_200_000}
	acts := &fakeActions{results: map[string][]ActionResult{
		"/fix":   {{Output: "fixed", Usage: &agentstream.Usage{InputTokens: 1, OutputTokens: 1, Model: "claude-x", CLICostUSD: 0.000001}, Metered: metered}},
		"/again": {{Output: "again", Usage: &agentstream.Usage{InputTokens: -5}, Metered: &Metered{}}},
	}}
	r := runLoop(t, spec, acts, Options{}, time.Millisecond)
	u := r.run.Usage
	if u == nil || u.CostMicroUSD != 1_200_000 || u.Calls != 3 || u.InputTokens != 900_000 || u.OutputTokens != 50_000 {
		t.Fatalf("totals %+v, want the gateway's count", u)
	}
	if u.Reported == nil || u.Reported.InputTokens != 1 || u.Reported.CLICostMicroUSD != 1 {
		t.Errorf("reported %+v, want what the agent printed kept beside", u.Reported)
	}
	if r.run.TerminatedBy != v1alpha1.TerminatedBudgetExceeded || r.run.CurrentState != "again" {
		t.Errorf("ended by %s in %s: the metered $1.20 spent a $1.00 budget, the run should stop before %q", r.run.TerminatedBy, r.run.CurrentState, "again")
	}
	var ev ActionCompleteEvent
	for _, e := range r.events {
		if e.Type == EventActionComplete {
			ev = ActionCompleteOf(e)
			break
		}
	}
	if !ev.Metered || ev.Usage == nil || ev.Usage.InputTokens != 900_000 || ev.Reported == nil || ev.Reported.InputTokens != 1 {
		t.Errorf("action_complete %+v (usage %+v, reported %+v)", ev, ev.Usage, ev.Reported)
	}

	// A false report beside a metered step is dropped, not a failure.
	spec.Budget = nil
	acts.results["/fix"] = []ActionResult{{Output: "fixed", Usage: &agentstream.Usage{InputTokens: -5}, Metered: metered}}
	r = runLoop(t, spec, acts, Options{}, time.Millisecond)
	if r.run.Usage.Reported != nil || r.run.Usage.InputTokens != 900_000 {
		t.Errorf("usage %+v reported %+v", r.run.Usage.UsageTotals, r.run.Usage.Reported)
	}
	for _, e := range r.events {
		if e.Type == EventActionComplete && ActionCompleteOf(e).Failure != nil {
			t.Errorf("a metered step failed for its false report: %v", e.Data)
		}
	}
}
