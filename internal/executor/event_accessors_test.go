package executor

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
)

// eventReader is how a type's events are read, and payloads to read back:
// every optional part set, and left out.
type eventReader struct {
	of      func(Event) EventData
	samples []EventData
}

func reader[T EventData](of func(Event) T, samples ...T) eventReader {
	r := eventReader{of: func(e Event) EventData { return of(e) }}
	for _, s := range samples {
		r.samples = append(r.samples, s)
	}
	return r
}

// eventReaders has a reader for every type of event the engine writes.
var eventReaders = map[string]eventReader{
	EventLoopStart: reader(LoopStartOf, LoopStartEvent{Loop: "fix"}),
	EventLoopResume: reader(LoopResumeOf, LoopResumeEvent{Loop: "fix", FromState: "test", Iteration: 3},
		LoopResumeEvent{Loop: "fix", FromState: "test", Iteration: 3, FromHandoff: true, ContinuationPrompt: "go on"}),
	EventStateEnter: reader(StateEnterOf, StateEnterEvent{State: "test", Iteration: 4, IterationCount: 1},
		StateEnterEvent{State: "test", Iteration: 4, IterationCount: 1, Flushed: true}),
	EventActionStart: reader(ActionStartOf, ActionStartEvent{Action: "make", IsPrompt: false},
		ActionStartEvent{Action: "fix it", IsPrompt: true, Retry: 2}),
	EventActionComplete: reader(ActionCompleteOf, ActionCompleteEvent{ExitCode: 1, DurationMs: 1500},
		ActionCompleteEvent{ExitCode: 0, DurationMs: 20, OutputPreview: "ok", StderrPreview: "warn", IsPrompt: true,
			Failure: &ActionFailure{Reason: "PodDeleted", Message: "gone"}, Effort: "high", Model: "claude-x",
			Usage: &EventUsage{InputTokens: 10, OutputTokens: 20, CacheReadTokens: 3, CacheCreationTokens: 4, CostUSD: 0.25, Priced: true}},
		ActionCompleteEvent{IsPrompt: true, Usage: &EventUsage{InputTokens: 1}}),
	EventActionRestarted: reader(RestartedOf, RestartedEvent{State: "test", Iteration: 2, Action: "make"}),
	EventActionError:     reader(ActionErrorOf, ActionErrorEvent{State: "test", Error: "bad template", Route: "on_error"}),
	EventEvaluate: reader(EvaluateOf, EvaluateEvent{Type: "exit_code", Verdict: "success", Details: map[string]any{}},
		EvaluateEvent{Type: "llm_structured", Verdict: "failure", Details: map[string]any{"reason": "no tests", "llm_model": "m", "matched": true},
			Usage: &EventUsage{InputTokens: 5, OutputTokens: 6}}),
	EventRoute: reader(RouteOf, RouteEvent{From: "a", To: "b"}, RouteEvent{From: "a", To: "a", Verdict: "success", Reason: "maintain"}),
	EventRetryExhausted: reader(RetryExhaustedOf, RetryExhaustedEvent{State: "a", Retries: 3},
		RetryExhaustedEvent{State: "a", Retries: 3, Reason: "PodDeleted", Next: "b"}),
	EventActionRetry:      reader(RetryOf, RetryEvent{State: "a", Retry: 1, Limit: 3, DelayMs: 500, Reason: "PodDeleted"}),
	EventCycleDetected:    reader(CycleDetectedOf, CycleDetectedEvent{Edge: "a->b", From: "a", To: "b", Count: 101, Max: 100}),
	EventLoopComplete:     reader(LoopCompleteOf, LoopCompleteEvent{FinalState: "done", Iterations: 7, TerminatedBy: "terminal"}, LoopCompleteEvent{FinalState: "x", TerminatedBy: "error", FailureTerminal: true, Error: "boom"}),
	EventSpecChanged:      reader(SpecChangedOf, SpecChangedEvent{Generation: 3}),
	EventLoopFork:         reader(LoopForkOf, LoopForkEvent{Source: "other", State: "b", Iteration: 2}, LoopForkEvent{State: "b", Iteration: 2}),
	EventLoopRewind:       reader(LoopRewindOf, LoopRewindEvent{State: "a", Iteration: 1, FromState: "c", FromIteration: 5}),
	EventCaptureTruncated: reader(CaptureTruncatedOf, CaptureTruncatedEvent{Capture: "out", KeptBytes: 1024, Bound: "run_state"}),
	EventHandoffDetected:  reader(HandoffDetectedOf, HandoffDetectedEvent{State: "a", Iteration: 2, Continuation: "next: b"}),
	EventMaxStepsSummary:  reader(MaxStepsSummaryOf, MaxStepsSummaryEvent{Iterations: 50, SummaryState: "sum"}),
	EventMaxPassesSummary: reader(MaxPassesSummaryOf, MaxPassesSummaryEvent{IterationCount: 3, SummaryState: "sum"}),
	EventMessagesAppend:   reader(MessagesAppendOf, MessagesAppendEvent{State: "a", Message: "hello"}),
	EventGitClone: reader(GitCloneOf, GitCloneEvent{URL: "https://example.com/r.git", Commit: "abc"},
		GitCloneEvent{URL: "https://example.com/r.git", Commit: "abc", Revision: "main"}),
	EventApprovalRequested: reader(ApprovalRequestedOf, ApprovalRequestedEvent{State: "ask", Message: "ship?"},
		ApprovalRequestedEvent{State: "ask", Message: "ship?", Deadline: "2026-01-15T10:30:00Z"}),
	EventApprovalAnswered: reader(ApprovalAnsweredOf, ApprovalAnsweredEvent{State: "ask", Verdict: "timeout"},
		ApprovalAnsweredEvent{State: "ask", Verdict: "approved", By: "ann", Message: "go"}),
	EventStallDetected: reader(StallDetectedOf, StallDetectedEvent{State: "a", ExitCode: 1, Verdict: "failure", Consecutive: 3, Action: "abort"},
		StallDetectedEvent{State: "a", Verdict: "error", Recurrent: 4, Action: "route:b"}),
	EventThrottleWarn:        reader(ThrottleWarnOf, ThrottleWarnEvent{State: "a", Count: 5, WarnMax: 5, HardMax: 10}),
	EventThrottleHard:        reader(ThrottleHardOf, ThrottleHardEvent{State: "a", Count: 10, HardMax: 10, Next: "b"}),
	EventThrottleStop:        reader(ThrottleStopOf, ThrottleStopEvent{State: "a", Count: 11, HardMax: 10}),
	EventRateLimitWaiting:    reader(RateLimitWaitingOf, RateLimitWaitingEvent{State: "a", Tier: "short", Attempt: 2, WaitSeconds: 1.5, NextAttemptAt: 1767225600.25, TotalWaitedSeconds: 3.5, BudgetSeconds: 3600}),
	EventRateLimitExhausted:  reader(RateLimitExhaustedOf, RateLimitExhaustedEvent{State: "a", Retries: 5, ShortRetries: 3, LongRetries: 2, TotalWaitSeconds: 900.5, Next: "b"}),
	EventRateLimitStorm:      reader(RateLimitStormOf, RateLimitStormEvent{State: "a", Count: 3}),
	EventAPIErrorRetry:       reader(TransientRetryOf, TransientRetryEvent{State: "a", Attempt: 1, Backoff: 2.5}),
	EventAPIErrorExhausted:   reader(TransientExhaustedOf, TransientExhaustedEvent{State: "a", Retries: 3}),
	EventInfraRetry:          reader(TransientRetryOf, TransientRetryEvent{State: "a", Attempt: 2, Backoff: 30}),
	EventInfraRetryExhausted: reader(TransientExhaustedOf, TransientExhaustedEvent{State: "a", Retries: 3}),
	EventBudgetWarning: reader(BudgetWarningOf, BudgetWarningEvent{State: "a", WarnAtPercent: 80, CostUSD: 0.8, MaxCostUSD: 1},
		BudgetWarningEvent{State: "a", WarnAtPercent: 80, Tokens: 800, MaxTokens: 1000}),
	EventBudgetExceeded: reader(BudgetExceededOf, BudgetExceededEvent{State: "a", Action: "pause", Reason: "spent $1", CostUSD: 1.25, Tokens: 9},
		BudgetExceededEvent{State: "a", Action: "route", Reason: "spent $1", Next: "b", CostUSD: 1.25, Tokens: 9, MaxCostUSD: ptr.To(1.0), MaxTokens: ptr.To(int64(1000))},
		BudgetExceededEvent{State: "a", Action: "pause", Reason: "the sub-loop paused", Child: "fix-a-1"}),
	EventBudgetResumed: reader(BudgetResumedOf, BudgetResumedEvent{State: "a"}, BudgetResumedEvent{State: "a", MaxCostUSD: ptr.To(0.0), MaxTokens: ptr.To(int64(5))}),
	EventCostCeiling: reader(CostCeilingOf, CostCeilingEvent{State: "a", CostUSD: 0.5, CeilingUSD: 0.25, Exceeded: true},
		CostCeilingEvent{State: "a", CostUSD: 0.5, WarnAtUSD: 0.4}),
	EventSubLoopStart: reader(SubLoopStartOf, SubLoopStartEvent{State: "a", Loop: "child", Child: "run-a-1"}),
	EventSubLoopComplete: reader(SubLoopCompleteOf, SubLoopCompleteEvent{State: "a", Loop: "child", Lost: true, Error: "lost"},
		SubLoopCompleteEvent{State: "a", Loop: "child", TerminatedBy: "terminal", Verdict: "success"},
		SubLoopCompleteEvent{State: "a", Loop: "child", TerminatedBy: "terminal", Verdict: "failure", FailureTerminal: true, Error: "x"}),
	EventLearningTargetStale:    reader(LearningTargetStaleOf, LearningTargetStaleEvent{State: "l", Target: "t", Cause: "edited"}),
	EventLearningExploreInvoked: reader(LearningExploreInvokedOf, LearningExploreInvokedEvent{State: "l", Target: "t", Attempt: 2}),
	EventLearningTargetProven:   reader(LearningTargetOf, LearningTargetEvent{State: "l", Target: "t"}),
	EventLearningTargetRefuted:  reader(LearningTargetOf, LearningTargetEvent{State: "l", Target: "t"}),
	EventLearningBlocked:        reader(LearningBlockedOf, LearningBlockedEvent{State: "l", Target: "t", Reason: "flaky"}),
	EventLearningComplete:       reader(LearningCompleteOf, LearningCompleteEvent{State: "l", Targets: []string{}}, LearningCompleteEvent{State: "l", Targets: []string{"a", "b"}}),
}

// Every type of event the engine writes has a reader, and EventTypes
// lists them all.
func TestEveryEventTypeHasAnAccessor(t *testing.T) {
	for _, typ := range EventTypes {
		if _, ok := eventReaders[typ]; !ok {
			t.Errorf("event type %s has no accessor in eventReaders", typ)
		}
	}
	for typ := range eventReaders {
		if !slices.Contains(EventTypes, typ) {
			t.Errorf("event type %s is not in EventTypes", typ)
		}
	}
	for name, typ := range eventConstants(t) {
		if _, ok := eventReaders[typ]; !ok {
			t.Errorf("%s (%q) has no accessor: give it an event struct, an accessor and a line in eventReaders", name, typ)
		}
	}
}

// eventConstants are the Event… string constants of the package's source.
func eventConstants(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			d, ok := n.(*ast.GenDecl)
			if !ok || d.Tok != token.CONST {
				return true
			}
			for _, spec := range d.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Event") || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						out[name.Name], _ = strconv.Unquote(lit.Value)
					}
				}
			}
			return false
		})
	}
	if len(out) < len(EventTypes) {
		t.Fatalf("found %d Event constants in the source, fewer than EventTypes' %d", len(out), len(EventTypes))
	}
	return out
}

// Each event's accessor reads back what its Data wrote: from the engine's
// own payload, from JSON read back as the log reads it (json.Number) and
// as a plain decoder does (float64), and writes the same bytes again.
func TestEventAccessorsRoundTrip(t *testing.T) {
	for typ, r := range eventReaders {
		if len(r.samples) == 0 {
			t.Errorf("%s: no sample", typ)
		}
		for _, sample := range r.samples {
			want := sample.Data()
			line, err := json.Marshal(Event{Seq: 1, Type: typ, Data: want})
			if err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			var logged Event
			if err := json.Unmarshal(line, &logged); err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			var plain map[string]any
			if err := json.Unmarshal(line, &plain); err != nil {
				t.Fatal(err)
			}
			delete(plain, "event")
			delete(plain, "seq")
			delete(plain, "ts")
			for how, data := range map[string]map[string]any{"in memory": want, "from the log": logged.Data, "from plain JSON": plain} {
				got := r.of(Event{Type: typ, Data: data})
				if !reflect.DeepEqual(got, sample) {
					t.Errorf("%s %s: read %#v, want %#v", typ, how, got, sample)
				}
				again, err := json.Marshal(Event{Seq: 1, Type: typ, Data: got.Data()})
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(again, line) {
					t.Errorf("%s %s: wrote\n%s\nwant\n%s", typ, how, again, line)
				}
			}
		}
	}
}

// The local driver's worktree events read back as they were written.
func TestWorktreeEventRoundTrip(t *testing.T) {
	for _, w := range []WorktreeEvent{{Branch: "fix-a", Path: ".worktrees/run-a-1"}, {Branch: "fix-a", Error: "git worktree add: exit 128"}} {
		line, err := json.Marshal(Event{Type: "sub_loop_worktree_attached", Data: w.Data()})
		if err != nil {
			t.Fatal(err)
		}
		var back Event
		if err := json.Unmarshal(line, &back); err != nil {
			t.Fatal(err)
		}
		if got := WorktreeOf(back); got != w {
			t.Errorf("read %+v, want %+v", got, w)
		}
	}
}

// An event forwarded from a sub-loop reads as the child's own, with its
// depth beside it.
func TestForwardedEventReadsAsItsOwn(t *testing.T) {
	m := &Machine{}
	run := &v1alpha1.RunState{}
	evs := m.Forward(run, []Event{{Type: EventStateEnter, Data: StateEnterEvent{State: "a", Iteration: 2}.Data()}}, 1)
	if got := StateEnterOf(evs[0]); got != (StateEnterEvent{State: "a", Iteration: 2}) {
		t.Errorf("read %+v", got)
	}
	if !Forwarded(evs[0]) || DepthOf(evs[0]) != 1 {
		t.Errorf("depth %d", DepthOf(evs[0]))
	}
	if own := (Event{Data: StateEnterEvent{State: "a"}.Data()}); Forwarded(own) || DepthOf(own) != 0 {
		t.Error("the run's own event reads as forwarded")
	}
}
