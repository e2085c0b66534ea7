// Package action holds what a runner is given and what it gives back: an
// Action to run, its Result (with the Signal the runner found in the
// output, a probe's result, why it failed), and the helpers both sides of a
// runner use on an output (SignalScanner, Tail).
//
// The executor plans actions and reads results; runners, the in-pod wrapper
// (cmd/entrypoint) among them, only run them. Keeping the types here lets the
// wrapper link the evaluators it judges with, but not the engine, pricing or
// the LLM client. The executor names them by aliases (executor.Action).
package action

import (
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/gitws"
)

// Action is an action to run.
type Action struct {
	State     string
	Iteration int32
	// Retry is 0 for the first try of the iteration's action, n for the
	// n-th retry (spec.states[].retryPolicy).
	Retry   int32
	Command string
	Agent   bool
	// RunDir is the run's context.run_dir: the runner makes sure it
	// exists before the action starts, as little-loops does. "" for none.
	RunDir string
	// UsageTo, when set, is where the agent's usage goes (a row of
	// usage.jsonl) instead of RunDir, State and Iteration: for a
	// sub-loop's action, the top run's run_dir and its sub-loop state, as
	// little-loops counts a child's usage under the state that ran it.
	UsageTo *UsageTarget
	// CallsAgent is true for a shell command that runs the agent command
	// itself (a learning state's gate): it runs where agent actions run.
	CallsAgent bool
	// AgentStream says the agent (of an agent action, or the one a
	// CallsAgent command runs) prints stream-json: the runner decodes the
	// output (agentstream) and reports the usage.
	AgentStream bool
	// AgentCommand runs an agent action, Command appended (spec.agent.command).
	AgentCommand []string
	// Env is more of the action's environment, NAME=VALUE, after the
	// runner's own.
	Env     []string
	Timeout time.Duration
	// IdleTimeout stops the action when it prints nothing for this long
	// (exit code 124); 0: none.
	IdleTimeout time.Duration
	// Probe is a shell command for the runner to run right after the
	// action, where it ran, when the evaluator needs to look there
	// (diff_stall's git diff, score_stall's history file); its result goes
	// in Result.Probe. "" for none.
	Probe string
	// Evaluate is the state's evaluator with its templates expanded, for a
	// runner that judges the complete output itself (the pod entrypoint). It
	// is nil when the evaluator is not deterministic or reads values only
	// known once the action ended (prev, result, loop.elapsed, source).
	Evaluate *v1alpha1.Evaluate
	// Exit is true for the run's exit hook (spec.onExit), run once the
	// run ended; its iteration is the run's last.
	Exit bool
	// Git is the clone or the push of the Loop's workspace.git: the
	// runner fills in where the checkout and the credentials are.
	Git *gitws.Op
	// Learning is a learning state's gate (Command is its script) as
	// data, for a runner that plays it instead of running it (simulate).
	Learning *LearningGate
}

// LearningCallMark starts the line a learning state's gate prints before
// each agent call it makes (an explore call): a runner that decodes the
// agent's stream tells the calls' usage apart by it (Result.CallUsages).
const LearningCallMark = "looprun-learning: explore "

// LearningGate is what a learning state's gate does: it proves Targets in
// order, exploring each missing or stale one at most MaxRetries times.
type LearningGate struct {
	Targets    []string
	MaxRetries int
}

// UsageTarget is where a row of usage.jsonl is written and what it names.
type UsageTarget struct {
	RunDir    string
	State     string
	Iteration int32
}

// UsageTarget is where the action's usage goes: UsageTo, else its own
// run_dir, state and iteration.
func (a *Action) UsageTarget() UsageTarget {
	if a.UsageTo != nil {
		return *a.UsageTo
	}
	return UsageTarget{RunDir: a.RunDir, State: a.State, Iteration: a.Iteration}
}

// Result is what running an action produced. Output and Stderr are the
// tails the runner kept; the machine bounds them again before storing them.
type Result struct {
	Output          string
	Stderr          string
	ExitCode        int
	Duration        time.Duration
	OutputTruncated bool
	StderrTruncated bool
	// Verdict, when set, was computed by the runner over the complete output
	// (the pod entrypoint does this) or scripted (simulate); it replaces
	// deterministic evaluation.
	Verdict *evaluate.Result
	// Failure, when set, says why the action did not finish on its own (its
	// Pod was deleted or never started): the verdict is error, with the
	// reason and message in its details. For a sub-loop, why the child
	// could not run (its loop not found, too deep, a cycle).
	Failure *Failure
	// Child is how a sub-loop ended (StepLoop).
	Child *ChildResult
	// Judgement is the LLM judge's verdict on the StepJudge request that
	// Complete returned for this result.
	Judgement *evaluate.Result
	// Approval is a person's answer to a StepApproval.
	Approval *ApprovalAnswer
	// Probe is what Action.Probe printed.
	Probe *ProbeResult
	// Signal is the signal (FATAL_ERROR:, CONTEXT_HANDOFF:, LOOP_STOP:)
	// the runner found in the complete stdout, nil for none; with
	// SignalScanned false the runner did not look and the machine scans
	// Output.
	Signal        *Signal
	SignalScanned bool
	// Usage is what an agent action reported it used (tokens, model);
	// nil when it reported nothing.
	Usage *agentstream.Usage
	// ResultSeen: the agent's stream-json came to its result record (its
	// turn ended), whether or not the record reported usage.
	ResultSeen bool
	// CallUsages is, for a command that calls the agent itself (a
	// learning gate), what each call reported using, in order (nil for a
	// call that reported nothing); nil when the runner did not tell the
	// calls apart (Usage is then their sum).
	CallUsages []*agentstream.Usage
	// Metered is what the action's model calls used as looprun's model
	// gateway counted them from the model API's own answers. Set, it is
	// the action's usage for every total and budget, and Usage is only
	// what the agent reported, kept beside it (never trusted).
	Metered *Metered
	// TimedOut: the action ran out of its time and was killed (its exit
	// code is then 124); Output is what it printed until then.
	TimedOut bool
	// IdledOut: it was killed for printing nothing for its idle timeout
	// (TimedOut is set too).
	IdledOut bool
}

// Metered is what a step's model calls used, counted by the gateway.
type Metered struct {
	// Usage sums the calls' tokens; its Model is the model most used.
	Usage agentstream.Usage
	// Calls counts the calls, Unpriced those of a model the price table
	// lacks (their tokens count, their cost does not).
	Calls, Unpriced int64
	// CostMicroUSD is the priced calls' cost, each call priced for its
	// own model.
	CostMicroUSD int64
}

// Failure is why an action did not run to its end.
type Failure struct {
	// Reason is a CamelCase word, for example PodDeleted or ImagePullFailed.
	Reason string
	// Message says what happened, for people.
	Message string
	// Transient says the same action may well succeed if run again (its Pod
	// never started or was lost): a state's retryPolicy retries it.
	Transient bool
}

// ProbeResult is what a probe printed: the runner runs a state's probe
// (Action.Probe) right after its action, where the action ran, for the
// evaluators that look at the workspace (diff_stall, score_stall,
// open_question_stall).
type ProbeResult struct {
	// Output is the tail of its stdout; SHA256 the hash of all of it.
	Output string
	SHA256 string
	// ExitCode of the probe; Stderr the tail of its stderr.
	ExitCode int
	Stderr   string
}

// ChildResult is how a sub-loop ended.
type ChildResult struct {
	TerminatedBy    v1alpha1.TerminationReason
	FailureTerminal bool
	Error           string
	Captured        map[string]v1alpha1.CapturedResult
	// Events is the child's event stream as JSON lines, for a state that
	// captures it; empty when the driver does not have it.
	Events string
	// Usage is what the child's agents used in all; nil when nothing.
	Usage *v1alpha1.UsageTotals
	// Scripted says the child did not run (simulate): its ending was
	// scripted, and it leaves nothing to capture.
	Scripted bool
}

// ApprovalAnswer is a person's answer to an ApprovalRequest.
type ApprovalAnswer struct {
	Approved bool
	// By names who answered, as the driver knows them ("" unknown).
	By string
	// Message is what they said.
	Message string
}
