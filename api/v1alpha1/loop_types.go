package v1alpha1

import (
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Defaults applied when a field is left empty.
const (
	// DefaultMaxIterations is the cap on state executions when spec.maxIterations is unset.
	DefaultMaxIterations int32 = 50
	// DefaultMaxEdgeRevisits is the cap on traversals of one edge when spec.maxEdgeRevisits is unset.
	DefaultMaxEdgeRevisits int32 = 100
	// DefaultActionTimeoutSeconds is the action timeout when a state sets none.
	DefaultActionTimeoutSeconds = 120
	// DefaultLLMModel is the model of the LLM judge when spec.llm.model is unset.
	DefaultLLMModel = "claude-sonnet-5-5"
	// DefaultLLMMaxTokens is the response budget of the LLM judge.
	DefaultLLMMaxTokens int32 = 1024
	// DefaultLLMTimeoutSeconds bounds one call of the LLM judge.
	DefaultLLMTimeoutSeconds = 120
	// DefaultMinConfidence is the confidence below which an LLM verdict is not confident.
	DefaultMinConfidence = 0.5
)

// DefaultAgentCommand runs agent actions: the prompt is appended as the last argument.
var DefaultAgentCommand = []string{"claude", "--dangerously-skip-permissions", "--verbose", "--output-format", "stream-json", "-p"}

// LoopSpec is the state machine a Loop runs.
// +kubebuilder:validation:XValidation:rule="self.initial in self.states",messageExpression="'initial ' + self.initial + ' is not a state (initial must name a state)'"
// +kubebuilder:validation:XValidation:rule="self.states.exists(k, has(self.states[k].terminal) && self.states[k].terminal)",message="at least one state must be terminal"
// +kubebuilder:validation:XValidation:rule="self.states.all(k, !has(self.states[k].next) || self.states[k].next in self.states)",messageExpression="'state ' + self.states.filter(k, has(self.states[k].next) && !(self.states[k].next in self.states))[0] + ': next ' + self.states[self.states.filter(k, has(self.states[k].next) && !(self.states[k].next in self.states))[0]].next + ' is not a state (next must name a state)'"
// +kubebuilder:validation:XValidation:rule="self.states.all(k, !has(self.states[k].onMaintain) || self.states[k].onMaintain in self.states)",messageExpression="'state ' + self.states.filter(k, has(self.states[k].onMaintain) && !(self.states[k].onMaintain in self.states))[0] + ': onMaintain ' + self.states[self.states.filter(k, has(self.states[k].onMaintain) && !(self.states[k].onMaintain in self.states))[0]].onMaintain + ' is not a state (onMaintain must name a state)'"
// +kubebuilder:validation:XValidation:rule="self.states.all(k, !has(self.states[k].onRetryExhausted) || self.states[k].onRetryExhausted in self.states)",messageExpression="'state ' + self.states.filter(k, has(self.states[k].onRetryExhausted) && !(self.states[k].onRetryExhausted in self.states))[0] + ': onRetryExhausted ' + self.states[self.states.filter(k, has(self.states[k].onRetryExhausted) && !(self.states[k].onRetryExhausted in self.states))[0]].onRetryExhausted + ' is not a state (onRetryExhausted must name a state)'"
// +kubebuilder:validation:XValidation:rule="self.states.all(k, !has(self.states[k].onSuccess) || self.states[k].onSuccess == '$current' || self.states[k].onSuccess in self.states)",messageExpression="'state ' + self.states.filter(k, has(self.states[k].onSuccess) && self.states[k].onSuccess != '$current' && !(self.states[k].onSuccess in self.states))[0] + ': onSuccess ' + self.states[self.states.filter(k, has(self.states[k].onSuccess) && self.states[k].onSuccess != '$current' && !(self.states[k].onSuccess in self.states))[0]].onSuccess + ' is not a state (onSuccess must name a state or be $current)'"
// +kubebuilder:validation:XValidation:rule="self.states.all(k, !has(self.states[k].onFailure) || self.states[k].onFailure == '$current' || self.states[k].onFailure in self.states)",messageExpression="'state ' + self.states.filter(k, has(self.states[k].onFailure) && self.states[k].onFailure != '$current' && !(self.states[k].onFailure in self.states))[0] + ': onFailure ' + self.states[self.states.filter(k, has(self.states[k].onFailure) && self.states[k].onFailure != '$current' && !(self.states[k].onFailure in self.states))[0]].onFailure + ' is not a state (onFailure must name a state or be $current)'"
// +kubebuilder:validation:XValidation:rule="self.states.all(k, !has(self.states[k].onError) || self.states[k].onError == '$current' || self.states[k].onError in self.states)",messageExpression="'state ' + self.states.filter(k, has(self.states[k].onError) && self.states[k].onError != '$current' && !(self.states[k].onError in self.states))[0] + ': onError ' + self.states[self.states.filter(k, has(self.states[k].onError) && self.states[k].onError != '$current' && !(self.states[k].onError in self.states))[0]].onError + ' is not a state (onError must name a state or be $current)'"
// +kubebuilder:validation:XValidation:rule="self.states.all(k, !has(self.states[k].route) || self.states[k].route.all(v, self.states[k].route[v] == '$current' || self.states[k].route[v] in self.states))",messageExpression="'state ' + self.states.filter(k, has(self.states[k].route) && self.states[k].route.exists(v, self.states[k].route[v] != '$current' && !(self.states[k].route[v] in self.states)))[0] + ': a route target is not a state (route targets must name a state or be $current)'"
// +kubebuilder:validation:XValidation:rule="!has(self.budget) || !has(self.budget.state) || self.budget.state in self.states",messageExpression="'budget.state ' + self.budget.state + ' is not a state (budget.state must name a state)'"
// +kubebuilder:validation:XValidation:rule="self.states.all(k, !has(self.states[k].onThrottleHard) || self.states[k].onThrottleHard == '$current' || self.states[k].onThrottleHard in self.states)",message="a state's onThrottleHard must name a state or be $current"
// +kubebuilder:validation:XValidation:rule="self.states.all(k, !has(self.states[k].rateLimit) || !has(self.states[k].rateLimit.onExhausted) || self.states[k].rateLimit.onExhausted in self.states)",message="a state's rateLimit.onExhausted must name a state"
// +kubebuilder:validation:XValidation:rule="!has(self.onMaxIterations) || self.onMaxIterations in self.states",message="onMaxIterations must name a state"
// +kubebuilder:validation:XValidation:rule="!has(self.onMaxPasses) || self.onMaxPasses in self.states",message="onMaxPasses must name a state"
// +kubebuilder:validation:XValidation:rule="!has(self.circuit) || !has(self.circuit.repeatedFailure) || !has(self.circuit.repeatedFailure.onRepeatedFailure) || self.circuit.repeatedFailure.onRepeatedFailure == 'abort' || self.circuit.repeatedFailure.onRepeatedFailure in self.states",message="circuit.repeatedFailure.onRepeatedFailure must be abort or name a state"
type LoopSpec struct {
	// initial names the state the loop starts in.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Initial string `json:"initial"`

	// states maps each state name to what the state does and where it goes next.
	// +required
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=128
	States map[string]State `json:"states"`

	// context holds user variables, read in templates as ${context.NAME}.
	// Values may be strings, numbers, booleans, lists or objects.
	// +optional
	// +kubebuilder:validation:MaxProperties=256
	Context map[string]apiextensionsv1.JSON `json:"context,omitempty"`

	// maxIterations caps the number of state executions. Default 50.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxIterations *int32 `json:"maxIterations,omitempty"`

	// onMaxIterations is a state run once when maxIterations is reached
	// (a summary); the loop then ends max_iterations all the same.
	// little-loops: on_max_steps.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	OnMaxIterations string `json:"onMaxIterations,omitempty"`

	// maxPasses caps the full passes of a maintain-mode loop (restarts
	// from a terminal state); the loop then ends max_passes. Unset: no
	// cap. little-loops: max_iterations beside max_steps.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxPasses *int32 `json:"maxPasses,omitempty"`

	// onMaxPasses is a state run once when maxPasses is reached.
	// little-loops: on_max_iterations.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	OnMaxPasses string `json:"onMaxPasses,omitempty"`

	// timeout bounds the loop's wall-clock time, checked between states
	// (for example "2h"). Unset means no limit.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// maintain restarts the loop at the terminal state's onMaintain (or at
	// initial) instead of finishing; the loop then ends only by a limit.
	// +optional
	Maintain bool `json:"maintain,omitempty"`

	// backoff is a pause after every routed transition (for example "30s").
	// +optional
	Backoff *metav1.Duration `json:"backoff,omitempty"`

	// maxEdgeRevisits caps how often one edge (from -> to) may be taken before
	// the loop ends with cycle_detected. Default 100.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxEdgeRevisits *int32 `json:"maxEdgeRevisits,omitempty"`

	// llm configures the LLM judge used by llm_structured evaluators.
	// +optional
	LLM *LLMSpec `json:"llm,omitempty"`

	// budget bounds what the loop's agent actions and LLM judge calls may
	// spend, in dollars (priced by the operator's price table) and tokens.
	// It is checked before every state that spends; a spec edit raising it
	// lets a paused loop go on.
	// +optional
	Budget *Budget `json:"budget,omitempty"`

	// runner says how actions run in a cluster: each action is one Pod built
	// from this template subset (image, service account, environment,
	// resources, workspace volume, security context).
	// +optional
	Runner *RunnerSpec `json:"runner,omitempty"`

	// agent configures how agent actions run.
	// +optional
	Agent *AgentSpec `json:"agent,omitempty"`

	// mcp configures how mcp actions call their tools.
	// +optional
	MCP *MCPSpec `json:"mcp,omitempty"`

	// history says how much of a run's past is kept.
	// +optional
	History *HistorySpec `json:"history,omitempty"`

	// suspend pauses the loop between states while true.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// onExit runs once when the run ends, whatever the end (completed,
	// failed, interrupted): a shell command or an agent prompt, in the
	// runner's image, a Pod of the Loop's namespace in a cluster. Its
	// templates also read ${loop.phase}, ${loop.terminated_by},
	// ${loop.final_state}, ${loop.message}, ${loop.iterations} and
	// ${loop.usage.*}. Its result is status.exitHook; it does not change
	// how the run ended.
	// +optional
	OnExit *ExitHook `json:"onExit,omitempty"`

	// ttlSecondsAfterFinished deletes the Loop this many seconds after it finished.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// throttle bounds how many times in a row every state may run its
	// action (a state's own throttle overrides it). Unset: no bound.
	// little-loops files get little-loops' default (warn at 8, hard at 12).
	// +optional
	Throttle *Throttle `json:"throttle,omitempty"`

	// circuit stops a loop that keeps repeating itself.
	// +optional
	Circuit *CircuitSpec `json:"circuit,omitempty"`

	// classifyFailures says whose failed actions are read for a cause the
	// machine knows, as little-loops reads them: a rate limit or quota
	// (the action waits and runs again, see a state's rateLimit), an API
	// server error (run twice more, 30s apart), an agent killed after its
	// result (twice more, 5s apart), a refused credential (straight to
	// onError). Agent (default): agent actions only; All: every action, as
	// little-loops files get; None: no action.
	// +optional
	ClassifyFailures FailureScope `json:"classifyFailures,omitempty"`

	// resumeFrom forks another Loop's run: this Loop starts from that Loop's
	// checkpoint at the given iteration (its context, captured results and
	// iteration count) and runs on its own; the source is not touched. Read
	// once, when the Loop starts.
	// +optional
	ResumeFrom *ResumeFrom `json:"resumeFrom,omitempty"`
}

// ResumeFrom names a checkpoint of another Loop in the same namespace.
type ResumeFrom struct {
	// loop is the name of the Loop whose checkpoint this Loop starts from.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Loop string `json:"loop"`

	// iteration picks the checkpoint: the one taken after that iteration.
	// Unset: the source's latest checkpoint.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Iteration *int32 `json:"iteration,omitempty"`
}

// StateName names a state, or is $current.
// +kubebuilder:validation:MaxLength=253
type StateName string

// ActionType says how a state's action runs.
// +kubebuilder:validation:Enum=shell;agent;mcp
type ActionType string

const (
	// ActionShell runs the action with bash -c.
	ActionShell ActionType = "shell"
	// ActionAgent sends the action as a prompt to the agent command.
	ActionAgent ActionType = "agent"
	// ActionMCP calls the MCP tool the action names (server/tool) with the
	// state's params: spec.mcp.command, the tool and the params as JSON.
	ActionMCP ActionType = "mcp"
)

// State is one state of the machine.
// +kubebuilder:validation:XValidation:rule="(has(self.terminal) && self.terminal) || has(self.next) || has(self.route) || has(self.onSuccess) || has(self.onFailure) || has(self.onError)",message="a state that is not terminal needs a way out: next, route, onSuccess, onFailure or onError"
// +kubebuilder:validation:XValidation:rule="!has(self.next) || self.next != '$current'",message="next cannot be $current; use onSuccess, onFailure, onError or route"
// +kubebuilder:validation:XValidation:rule="!has(self.maxRetries) || has(self.onRetryExhausted)",message="maxRetries needs onRetryExhausted"
// +kubebuilder:validation:XValidation:rule="!has(self.onRetryExhausted) || has(self.maxRetries) || has(self.retryPolicy)",message="onRetryExhausted needs maxRetries or retryPolicy"
// +kubebuilder:validation:XValidation:rule="!has(self.__loop__) || !has(self.action)",message="a state runs an action or a loop, not both"
// +kubebuilder:validation:XValidation:rule="!has(self.params) || (has(self.actionType) && self.actionType == 'mcp')",message="params are the arguments of an MCP tool: they need actionType mcp"
// +kubebuilder:validation:XValidation:rule="!has(self.learning) || (!has(self.action) && !has(self.__loop__))",message="a learning state runs its gate: it has no action and no loop"
// +kubebuilder:validation:XValidation:rule="!has(self.worktree) || has(self.__loop__)",message="worktree is where a sub-loop runs: it needs loop"
// +kubebuilder:validation:XValidation:rule="!has(self.approval) || (!has(self.action) && !has(self.__loop__) && !has(self.learning) && !has(self.next) && !has(self.evaluate) && !(has(self.terminal) && self.terminal))",message="an approval state waits for a person: it has no action, loop, learning, next or evaluate, and is not terminal"
type State struct {
	// action is a shell command, or an agent prompt when actionType is agent
	// or the action starts with "/". Templates ${namespace.path} are expanded first.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	Action string `json:"action,omitempty"`

	// actionType is shell, agent or mcp. Unset: agent when the action starts with "/", else shell.
	// An mcp action names an MCP tool as server/tool; its default timeout is 30s.
	// +optional
	ActionType ActionType `json:"actionType,omitempty"`

	// params are the arguments of an mcp action, a JSON object. Their
	// strings are templates, expanded as the action is.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	Params *apiextensionsv1.JSON `json:"params,omitempty"`

	// evaluate judges the action's result. Unset: exit_code for shell actions,
	// llm_structured for agent actions, mcp_result for mcp actions.
	// +optional
	Evaluate *Evaluate `json:"evaluate,omitempty"`

	// onSuccess is the next state when the verdict is success (little-loops: yes).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	OnSuccess string `json:"onSuccess,omitempty"`

	// onFailure is the next state when the verdict is failure (little-loops: no).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	OnFailure string `json:"onFailure,omitempty"`

	// onError is the next state when the verdict is error, when a failure has no
	// onFailure, or when the action cannot be prepared (a missing variable).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	OnError string `json:"onError,omitempty"`

	// route maps verdicts to next states. "_" is the default for any verdict;
	// "_error" catches error and failure verdicts. Checked before the shorthands.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	Route map[string]StateName `json:"route,omitempty"`

	// next is an unconditional transition: the action runs, nothing is evaluated.
	// A non-zero exit goes to onError instead when onError is set.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Next string `json:"next,omitempty"`

	// terminal ends the loop when it is entered. Its action never runs.
	// +optional
	Terminal bool `json:"terminal,omitempty"`

	// failure marks a terminal state as a failed ending. Default: true for
	// terminal states named failed, error, aborted or finalize_aborted.
	// +optional
	Failure *bool `json:"failure,omitempty"`

	// capture stores the action's result under this name, read as
	// ${captured.NAME.output}, .stderr, .exit_code, .duration_ms, .verdict.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Capture string `json:"capture,omitempty"`
	// appendToMessages is a template appended, once the action ran, to the
	// run's messages log, which templates read as ${messages} (all of it,
	// one entry a line), ${messages.last(N)} and ${messages.summary}
	// (little-loops' append_to_messages). It must hold a ${...}.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	AppendToMessages string `json:"appendToMessages,omitempty"`

	// timeout bounds the action; when hit the process group is killed and the
	// exit code is 124. Default 120s.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// idleTimeout stops the action when it prints nothing (stdout or
	// stderr) for this long: its process group is killed and the exit code
	// is 124, as for timeout. Unset: none. little-loops: idle_timeout (and
	// default_idle_timeout for every state without one).
	// +optional
	IdleTimeout *metav1.Duration `json:"idleTimeout,omitempty"`

	// onMaintain is where a maintain-mode loop restarts after this terminal state.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	OnMaintain string `json:"onMaintain,omitempty"`

	// maxRetries caps consecutive re-entries of this state; past it the loop
	// goes to onRetryExhausted without running the state again.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxRetries *int32 `json:"maxRetries,omitempty"`

	// onRetryExhausted is where the loop goes when maxRetries is exceeded, or
	// when retryPolicy's retries are used up. Without it, used-up retries end
	// the loop Failed with terminatedBy retry_exhausted.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	OnRetryExhausted string `json:"onRetryExhausted,omitempty"`

	// loop runs another loop as a child, a sub-loop, and routes on how it
	// ended: onSuccess when it reached a terminal state that is not a
	// failure; onError when it ended in error; route "timeout" when its
	// timeout or maxIterations cut it off; onFailure otherwise (and for
	// error and timeout when the state has no route for them). Templates
	// are expanded. In a cluster it names a LoopTemplate of the namespace,
	// from which the operator creates a child Loop; locally, a loop file
	// found as looprun run NAME finds it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Loop string `json:"loop,omitempty"`

	// contextPassthrough starts the sub-loop from this loop's context and
	// captured outputs (the child's own context wins) and brings the
	// child's captures back under this state's name.
	// +optional
	ContextPassthrough bool `json:"contextPassthrough,omitempty"`

	// worktree runs the sub-loop in a git worktree of this branch (a
	// template; empty after expansion: no worktree). Locally the worktree
	// is made under .worktrees of the directory looprun runs in, and removed
	// (the branch kept) once the child ended. In a cluster it is not
	// supported: the child runs in the parent's workspace, and an event
	// says so.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Worktree string `json:"worktree,omitempty"`

	// learning makes the state a learning gate (little-loops type:
	// learning) instead of an action: each target must have a proven record
	// in the learning-tests registry (.ll/learning-tests/SLUG.md where the
	// action runs); a missing or stale one is explored with the agent
	// (/ll:explore-api TARGET) up to maxRetries times. All proven is
	// success; a refuted target, or one still unproven, is the verdict
	// blocked when the state routes it, else failure.
	// +optional
	Learning *LearningSpec `json:"learning,omitempty"`

	// model is the model of this state's agent action (claude --model);
	// unset: spec.agent.model, else the CLI's own.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Model string `json:"model,omitempty"`

	// automationProfile is the profile this state's agent action runs
	// under (see spec.agent.automationProfile), over the loop's; empty:
	// none, whatever the loop's.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	AutomationProfile *string `json:"automationProfile,omitempty"`

	// tools are the only tools this state's agent may use (claude --tools).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=128
	Tools []string `json:"tools,omitempty"`

	// agentName names the agent configuration this state's agent action
	// runs as (claude --agent). little-loops: agent.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	AgentName string `json:"agentName,omitempty"`

	// effort is the reasoning effort of this state's agent action,
	// recorded in action_complete; unset: spec.agent.effort.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Effort string `json:"effort,omitempty"`

	// costCeiling bounds what one visit of this state may spend.
	// +optional
	CostCeiling *CostCeiling `json:"costCeiling,omitempty"`

	// approval makes the state wait for a person's answer: its verdict is
	// approved, rejected or timeout (route keys; approved falls back to
	// onSuccess, the others to onFailure, then onError).
	// +optional
	Approval *Approval `json:"approval,omitempty"`

	// with binds the sub-loop's parameters over its context (templates in
	// strings are expanded) and brings the child's captures back under this
	// state's name.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	With map[string]apiextensionsv1.JSON `json:"with,omitempty"`

	// retryableExitCodes are the exit codes for which a failed action takes
	// the state's error route (onError, often a retry); any other non-zero
	// exit goes to onRetryExhausted (else onError). Unset: all do.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	RetryableExitCodes []int32 `json:"retryableExitCodes,omitempty"`

	// throttle bounds how many times in a row this state may run its
	// action; unset: spec.throttle.
	// +optional
	Throttle *Throttle `json:"throttle,omitempty"`

	// onThrottleHard is where the state goes when its action ran
	// throttle.hardMax times in a row (else onError; with neither the
	// state goes on, and one more run ends the loop in error).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	OnThrottleHard string `json:"onThrottleHard,omitempty"`

	// fragmentParams are the values of ${param.NAME} in this state's
	// templates (templates in strings are expanded first): little-loops'
	// with on a state made from a fragment, with the fragment's parameter
	// defaults.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	FragmentParams map[string]apiextensionsv1.JSON `json:"fragmentParams,omitempty"`

	// rateLimit is how the action waits and runs again after a rate limit
	// (spec.classifyFailures says which actions are read); unset: the
	// defaults, 3 short tries from 30s, then 5m, 15m, 30m, 1h up to 6h.
	// +optional
	RateLimit *RateLimit `json:"rateLimit,omitempty"`

	// retryPolicy runs the action again, after a growing delay, when it fails
	// for a transient reason: its Pod never started, its image could not be
	// pulled, its Pod was deleted or failed without a result, or it exited
	// with one of exitCodes. A retry is the same iteration.
	// +optional
	RetryPolicy *RetryPolicy `json:"retryPolicy,omitempty"`
}

// Approval is what an approval state asks a person.
type Approval struct {
	// message is shown to whoever may answer; templates are expanded when
	// the wait begins.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
	// timeout ends the wait with the verdict timeout; unset waits until
	// answered.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// LearningSpec lists what a learning state must prove.
// +kubebuilder:validation:XValidation:rule="has(self.targets) != has(self.targetsCSV)",message="set targets or targetsCSV, not both"
type LearningSpec struct {
	// targets are the APIs or libraries to prove, in order.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Targets []string `json:"targets,omitempty"`

	// targetsCSV is a template expanding to comma-separated targets.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	TargetsCSV string `json:"targetsCSV,omitempty"`

	// maxRetries bounds the explorations of one target. Default 2.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxRetries *int32 `json:"maxRetries,omitempty"`

	// maxRetriesExpr is a template expanding to maxRetries.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	MaxRetriesExpr string `json:"maxRetriesExpr,omitempty"`
}

// DefaultLearningMaxRetries bounds the explorations of one learning target.
const DefaultLearningMaxRetries = 2

// CircuitSpec holds the loop's circuit breakers.
type CircuitSpec struct {
	// repeatedFailure trips when an evaluated state gives the same exit
	// code and verdict window times in a row, or recurrentWindow times in
	// all (little-loops circuit.repeated_failure).
	// +optional
	RepeatedFailure *RepeatedFailure `json:"repeatedFailure,omitempty"`
}

// RepeatedFailure is the repeated-failure circuit: it records (state, exit
// code, verdict) of every evaluated state.
type RepeatedFailure struct {
	// window is how many identical results in a row trip it. Default 3.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Window *int32 `json:"window,omitempty"`

	// recurrentWindow trips it when one result has been seen this many
	// times in the run, in a row or not. Unset: never.
	// +optional
	// +kubebuilder:validation:Minimum=2
	RecurrentWindow *int32 `json:"recurrentWindow,omitempty"`

	// onRepeatedFailure is where a tripped circuit goes instead of the
	// verdict's route: a state, or abort (the default) to end the loop with
	// terminatedBy stall_detected.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	OnRepeatedFailure string `json:"onRepeatedFailure,omitempty"`

	// progressPaths are files (templates) whose change (modification time
	// or size, where the action ran) is progress: it starts the count again.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	ProgressPaths []string `json:"progressPaths,omitempty"`

	// excludePaths are left out of progressPaths (a loop's own bookkeeping).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	ExcludePaths []string `json:"excludePaths,omitempty"`
}

// CircuitAbort ends a loop whose repeated-failure circuit tripped.
const CircuitAbort = "abort"

// DefaultCircuitWindow is how many identical results in a row trip the
// repeated-failure circuit.
const DefaultCircuitWindow = 3

// Throttle bounds how many times in a row a state runs its action: at
// warnMax a throttle_warn event; at hardMax the state goes to its
// onThrottleHard (or onError); past hardMax the loop ends in error.
type Throttle struct {
	// warnMax is the run that is warned about. Default 8.
	// +optional
	// +kubebuilder:validation:Minimum=1
	WarnMax *int32 `json:"warnMax,omitempty"`
	// hardMax is the run that escalates. Default 12.
	// +optional
	// +kubebuilder:validation:Minimum=1
	HardMax *int32 `json:"hardMax,omitempty"`
}

// Defaults of Throttle (little-loops' own).
const (
	DefaultThrottleWarnMax int32 = 8
	DefaultThrottleHardMax int32 = 12
)

// RetryPolicy retries an action that failed for a transient reason.
type RetryPolicy struct {
	// limit is how many times the action is run again after its first try.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Limit int32 `json:"limit"`

	// backoff is the delay before the first retry. Default 10s.
	// +optional
	Backoff *metav1.Duration `json:"backoff,omitempty"`

	// factor multiplies the delay after each retry. Default 2.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	Factor *int32 `json:"factor,omitempty"`

	// maxDelay caps the delay between tries. Default 5m.
	// +optional
	MaxDelay *metav1.Duration `json:"maxDelay,omitempty"`

	// exitCodes are exit codes that count as transient failures, such as a
	// tool's "try again later" code. A timeout is exit code 124.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	ExitCodes []int32 `json:"exitCodes,omitempty"`
}

// Defaults of RetryPolicy.
const (
	DefaultRetryBackoff  = 10 * time.Second
	DefaultRetryFactor   = 2
	DefaultRetryMaxDelay = 5 * time.Minute
)

// Delay is the wait before retry number n (1 for the first retry):
// backoff * factor^(n-1), at most maxDelay.
func (p *RetryPolicy) Delay(n int32) time.Duration {
	d, maxDelay, factor := DefaultRetryBackoff, DefaultRetryMaxDelay, int64(DefaultRetryFactor)
	if p.Backoff != nil {
		d = p.Backoff.Duration
	}
	if p.MaxDelay != nil {
		maxDelay = p.MaxDelay.Duration
	}
	if p.Factor != nil {
		factor = int64(*p.Factor)
	}
	for i := int32(1); i < n && d < maxDelay; i++ {
		d = time.Duration(int64(d) * factor)
	}
	return min(d, maxDelay)
}

// EvaluatorType names an evaluator.
// +kubebuilder:validation:Enum=exit_code;output_numeric;output_json;output_contains;convergence;classify;harbor_scorer;llm_structured;diff_stall;score_stall;open_question_stall;action_stall;mcp_result
type EvaluatorType string

// The evaluators.
const (
	EvalExitCode       EvaluatorType = "exit_code"
	EvalOutputNumeric  EvaluatorType = "output_numeric"
	EvalOutputJSON     EvaluatorType = "output_json"
	EvalOutputContains EvaluatorType = "output_contains"
	EvalConvergence    EvaluatorType = "convergence"
	EvalClassify       EvaluatorType = "classify"
	// EvalHarborScorer judges a scoring command: a number printed with
	// exit code 0 is success (details.score), a non-zero exit failure.
	EvalHarborScorer  EvaluatorType = "harbor_scorer"
	EvalLLMStructured EvaluatorType = "llm_structured"
	// EvalDiffStall compares `git diff --stat` (of scope) with the last
	// time: changed is success; unchanged maxStall times in a row is
	// failure; git failing is error.
	EvalDiffStall EvaluatorType = "diff_stall"
	// EvalScoreStall reads one score per line from historyFile: failure
	// once the best score has not risen by more than epsilon for maxStall
	// rounds, success before.
	EvalScoreStall EvaluatorType = "score_stall"
	// EvalOpenQuestionStall is score_stall where lower is better (a count
	// of open questions).
	EvalOpenQuestionStall EvaluatorType = "open_question_stall"
	// EvalActionStall compares the values named in track (the action by
	// default) with the last time: the same maxRepeat times in a row is
	// failure.
	EvalActionStall EvaluatorType = "action_stall"
	// EvalMCPResult judges an MCP tool call: exit 127 is not_found, 124
	// timeout, a result envelope with isError (or, without it, a non-zero
	// exit) or no JSON is tool_error, otherwise success.
	EvalMCPResult EvaluatorType = "mcp_result"
)

// Evaluate configures how an action's result becomes a verdict.
type Evaluate struct {
	// type is the evaluator.
	// +required
	Type EvaluatorType `json:"type"`

	// operator compares a value with target: eq, ne, lt, le, gt, ge. Default eq.
	// +optional
	// +kubebuilder:validation:Enum=eq;ne;lt;le;gt;ge
	Operator string `json:"operator,omitempty"`

	// target is the value to compare with (output_numeric, output_json) or to
	// converge on (convergence). A string may be a template such as "${context.goal}".
	// +optional
	Target *apiextensionsv1.JSON `json:"target,omitempty"`

	// tolerance is how close to target counts as reached (convergence). Number or template.
	// +optional
	Tolerance *apiextensionsv1.JSON `json:"tolerance,omitempty"`

	// pattern is the regular expression output_contains looks for; an invalid
	// expression is matched as plain text.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Pattern string `json:"pattern,omitempty"`

	// negate inverts the output_contains verdict.
	// +optional
	Negate bool `json:"negate,omitempty"`

	// errorPatterns turn an output_contains failure into error when one of them
	// occurs in the output as plain text.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	ErrorPatterns []string `json:"errorPatterns,omitempty"`

	// path selects a value in the JSON output (output_json), dot-separated with
	// list indexes, for example "items.0.name".
	// +optional
	Path string `json:"path,omitempty"`

	// key makes output_numeric read the last "KEY = NUMBER" in the output instead
	// of the whole output.
	// +optional
	Key string `json:"key,omitempty"`

	// direction is minimize or maximize (convergence). Default minimize.
	// +optional
	// +kubebuilder:validation:Enum=minimize;maximize
	Direction string `json:"direction,omitempty"`

	// previous is a template giving the previous measurement (convergence),
	// for example "${captured.metric.output}". Without it the verdict is progress
	// until the target is reached.
	// +optional
	Previous string `json:"previous,omitempty"`

	// source is a template evaluated instead of the action's stdout.
	// +optional
	Source string `json:"source,omitempty"`

	// line selects the line classify reads: first, last (default) or an index
	// (negative counts from the end).
	// +optional
	Line *intstr.IntOrString `json:"line,omitempty"`

	// prompt is the question the LLM judge answers about the output (llm_structured).
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	Prompt string `json:"prompt,omitempty"`

	// schema is the JSON schema of the judge's answer; it must have a string
	// property "verdict". Default: verdict yes|no|blocked|partial|cannot_judge,
	// confidence, reason, evidence.
	// +optional
	Schema *apiextensionsv1.JSON `json:"schema,omitempty"`

	// minConfidence is the confidence below which a verdict is not confident (0..1). Default 0.5.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	MinConfidence *float64 `json:"minConfidence,omitempty"`

	// scope limits diff_stall's git diff to these paths.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Scope []string `json:"scope,omitempty"`

	// maxStall is how many rounds without progress make diff_stall,
	// score_stall and open_question_stall say failure. Default 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxStall *int32 `json:"maxStall,omitempty"`

	// historyFile is score_stall's and open_question_stall's file of one
	// number per line, where the action runs. Default
	// ${context.run_dir}/.score_history (.open_questions_history).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	HistoryFile string `json:"historyFile,omitempty"`

	// epsilon is the least change of the best score that counts as
	// progress. Default 0.5 (score_stall), 0 (open_question_stall).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Epsilon *float64 `json:"epsilon,omitempty"`

	// track names the values action_stall compares (action, or a
	// context, captured, prev or result path). Default [action].
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Track []string `json:"track,omitempty"`

	// maxRepeat is how many times in a row the same tracked values make
	// action_stall say failure. Default 2.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxRepeat *int32 `json:"maxRepeat,omitempty"`

	// uncertainSuffix appends "_uncertain" to a verdict that is not confident.
	// +optional
	UncertainSuffix bool `json:"uncertainSuffix,omitempty"`
}

// ExitHook is the action a run takes once it ended (spec.onExit).
type ExitHook struct {
	// action is the shell command, or the agent's prompt.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=65536
	Action string `json:"action"`

	// actionType is shell (default) or agent.
	// +optional
	// +kubebuilder:validation:Enum=shell;agent
	ActionType ActionType `json:"actionType,omitempty"`

	// timeout bounds the hook (default 120s).
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// AsState is the hook as a state's action: what runs it reads the same
// fields.
func (h *ExitHook) AsState() *State {
	return &State{Action: h.Action, ActionType: h.ActionType, Timeout: h.Timeout}
}
