package v1alpha1

import (
	"encoding/json"
	"math"
	"path"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// GetMaxIterations returns spec.maxIterations or its default.
func (s *LoopSpec) GetMaxIterations() int32 {
	if s.MaxIterations != nil && *s.MaxIterations > 0 {
		return *s.MaxIterations
	}
	return DefaultMaxIterations
}

// GetMaxEdgeRevisits returns spec.maxEdgeRevisits or its default.
func (s *LoopSpec) GetMaxEdgeRevisits() int32 {
	if s.MaxEdgeRevisits != nil && *s.MaxEdgeRevisits > 0 {
		return *s.MaxEdgeRevisits
	}
	return DefaultMaxEdgeRevisits
}

// Classifies reports whether the failed action of st is read for a cause
// the machine knows (spec.classifyFailures, agent actions by default).
func (s *LoopSpec) Classifies(st *State) bool {
	switch s.ClassifyFailures {
	case ClassifyAll:
		return true
	case ClassifyNone:
		return false
	}
	return st.IsAgent()
}

// GetTimeout returns the loop's wall-clock limit, zero when unlimited.
func (s *LoopSpec) GetTimeout() time.Duration {
	if s.Timeout == nil {
		return 0
	}
	return s.Timeout.Duration
}

// GetBackoff returns the pause after each routed transition.
func (s *LoopSpec) GetBackoff() time.Duration {
	if s.Backoff == nil {
		return 0
	}
	return s.Backoff.Duration
}

// GetMCPCommand returns the command mcp actions run, tool and params appended.
func (s *LoopSpec) GetMCPCommand() []string {
	if s.MCP != nil && len(s.MCP.Command) > 0 {
		return s.MCP.Command
	}
	return DefaultMCPCommand
}

// GetAgentCommand returns the command agent actions run, the prompt appended.
func (s *LoopSpec) GetAgentCommand() []string {
	if s.Agent != nil && len(s.Agent.Command) > 0 {
		return s.Agent.Command
	}
	return DefaultAgentCommand
}

// AgentStreams reports whether agent actions print stream-json.
func (s *LoopSpec) AgentStreams() bool {
	return s.Agent == nil || s.Agent.Output != AgentOutputText
}

// GetShell returns the shell that runs shell actions in a Pod.
func (s *LoopSpec) GetShell() string {
	if s.Runner != nil && s.Runner.Shell != "" {
		return s.Runner.Shell
	}
	return DefaultShell
}

// GetKeepChildren returns how many finished child Loops are kept.
func (s *LoopSpec) GetKeepChildren() int32 {
	if s.History != nil && s.History.KeepChildren != nil && *s.History.KeepChildren >= 0 {
		return *s.History.KeepChildren
	}
	return DefaultKeepChildren
}

// GetKeepPods returns how many finished action Pods are kept.
func (s *LoopSpec) GetKeepPods() int32 {
	if s.History != nil && s.History.KeepPods != nil && *s.History.KeepPods >= 0 {
		return *s.History.KeepPods
	}
	return DefaultKeepPods
}

// GetMountPath returns where the workspace is mounted.
func (w *WorkspaceSpec) GetMountPath() string {
	if w == nil || w.MountPath == "" {
		return DefaultWorkspacePath
	}
	return w.MountPath
}

// GetWorkingDir returns the working directory of every action: workingDir
// under the mount path, by default the checkout when git is set.
func (w *WorkspaceSpec) GetWorkingDir() string {
	return path.Join(w.GetMountPath(), w.GetRelWorkingDir())
}

// GetRelWorkingDir returns the working directory of every action relative
// to the mount path: workingDir, by default the checkout when git is set,
// else "" (the mount path itself).
func (w *WorkspaceSpec) GetRelWorkingDir() string {
	switch {
	case w == nil:
		return ""
	case w.WorkingDir == "" && w.Git != nil:
		return CheckoutDir
	}
	return w.WorkingDir
}

// GetCheckoutPath returns where workspace.git clones to; empty without git.
func (w *WorkspaceSpec) GetCheckoutPath() string {
	if w == nil || w.Git == nil {
		return ""
	}
	return path.Join(w.GetMountPath(), CheckoutDir)
}

// GetCheckoutPath returns where the runner's workspace.git clones to;
// empty without git.
func (r *RunnerSpec) GetCheckoutPath() string {
	if r == nil {
		return ""
	}
	return r.Workspace.GetCheckoutPath()
}

// GitWorkspace returns the Loop's workspace.git, nil for none.
func (s *LoopSpec) GitWorkspace() *GitWorkspace {
	if s.Runner == nil || s.Runner.Workspace == nil {
		return nil
	}
	return s.Runner.Workspace.Git
}

// LLMEnabled reports whether llm_structured evaluators may call the judge.
func (s *LoopSpec) LLMEnabled() bool {
	return s.LLM == nil || s.LLM.Enabled == nil || *s.LLM.Enabled
}

// DefaultLLMModelAlias is the judge's model when spec.llm.model is unset,
// as the agent CLI is asked for it: its alias, which the CLI resolves.
const DefaultLLMModelAlias = "sonnet"

// GetModel returns the judge's model, resolving the little-loops aliases.
func (l *LLMSpec) GetModel() string {
	if l == nil {
		return DefaultLLMModel
	}
	return ResolveModelAlias(l.Model)
}

// GetModelAlias returns the judge's model as written (an alias such as
// sonnet, or a model id), sonnet when unset: what the agent CLI is asked
// for, which resolves aliases itself.
func (l *LLMSpec) GetModelAlias() string {
	if l == nil || l.Model == "" {
		return DefaultLLMModelAlias
	}
	return l.Model
}

// ResolveModelAlias turns a little-loops model alias (sonnet, opus,
// haiku) into the model id the API is asked for; "" is the default model,
// and any other name is returned as it is.
func ResolveModelAlias(model string) string {
	switch strings.ToLower(model) {
	case "", "sonnet":
		return DefaultLLMModel
	case "opus":
		return "claude-opus-5-5"
	case "haiku":
		return "claude-haiku-5-5"
	}
	return model
}

// GetMaxTokens returns the judge's answer budget.
func (l *LLMSpec) GetMaxTokens() int32 {
	if l == nil || l.MaxTokens == nil || *l.MaxTokens <= 0 {
		return DefaultLLMMaxTokens
	}
	return *l.MaxTokens
}

// GetTimeout returns the bound of one judge call.
func (l *LLMSpec) GetTimeout() time.Duration {
	if l == nil || l.Timeout == nil || l.Timeout.Duration <= 0 {
		return DefaultLLMTimeoutSeconds * time.Second
	}
	return l.Timeout.Duration
}

// failureTerminalNames are terminal state names that count as failures by default.
var failureTerminalNames = map[string]bool{"failed": true, "error": true, "aborted": true, "finalize_aborted": true}

// IsFailure reports whether the terminal state named name ends the loop as failed.
func (s *State) IsFailure(name string) bool {
	if s.Failure != nil {
		return *s.Failure
	}
	return s.Terminal && failureTerminalNames[name]
}

// IsAgent reports whether the state's action is an agent prompt.
func (s *State) IsAgent() bool {
	if s.ActionType != "" {
		return s.ActionType == ActionAgent
	}
	return strings.HasPrefix(strings.TrimSpace(s.Action), "/")
}

// GetTimeout returns the action timeout.
func (s *State) GetTimeout() time.Duration {
	if s.Timeout == nil || s.Timeout.Duration <= 0 {
		if s.ActionType == ActionMCP {
			return DefaultMCPTimeoutSeconds * time.Second
		}
		return DefaultActionTimeoutSeconds * time.Second
	}
	return s.Timeout.Duration
}

// GetMinConfidence returns the confidence threshold of an llm_structured evaluator.
func (e *Evaluate) GetMinConfidence() float64 {
	if e == nil || e.MinConfidence == nil {
		return DefaultMinConfidence
	}
	return *e.MinConfidence
}

// Evaluators lists the evaluators, as the CRD's enum does.
var Evaluators = []EvaluatorType{EvalExitCode, EvalOutputNumeric, EvalOutputJSON, EvalOutputContains, EvalConvergence, EvalClassify, EvalHarborScorer, EvalLLMStructured,
	EvalDiffStall, EvalScoreStall, EvalOpenQuestionStall, EvalActionStall, EvalMCPResult}

// IsKnown reports whether t names one of the evaluators.
func (t EvaluatorType) IsKnown() bool { return slices.Contains(Evaluators, t) }

// CanonicalVerdict maps the little-loops spellings yes and no onto success and failure.
func CanonicalVerdict(v string) string {
	switch v {
	case "yes":
		return VerdictSuccess
	case "no":
		return VerdictFailure
	}
	return v
}

// SetContext sets the context variable k to v (null when v cannot be
// rendered as JSON).
func (s *LoopSpec) SetContext(k string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte("null")
	}
	if s.Context == nil {
		s.Context = map[string]apiextensionsv1.JSON{}
	}
	s.Context[k] = apiextensionsv1.JSON{Raw: b}
}

// DefaultMaxCheckpoints is how many checkpoints a Loop keeps by default.
const DefaultMaxCheckpoints = 100

// GetMaxCheckpoints returns history.maxCheckpoints or its default.
func (s *LoopSpec) GetMaxCheckpoints() int {
	if s.History != nil && s.History.MaxCheckpoints != nil && *s.History.MaxCheckpoints > 0 {
		return int(*s.History.MaxCheckpoints)
	}
	return DefaultMaxCheckpoints
}

// CheckpointDue reports whether a checkpoint is due after iteration, the
// last one taken at time last (nil: none yet): every checkpointEvery
// iterations (default 1 unless only checkpointInterval is set), or when
// checkpointInterval seconds passed.
func (s *LoopSpec) CheckpointDue(iteration int32, last *time.Time, now time.Time) bool {
	every := int32(1)
	var interval time.Duration
	if h := s.History; h != nil {
		if h.CheckpointInterval != nil {
			interval = time.Duration(*h.CheckpointInterval) * time.Second
			every = 0
		}
		if h.CheckpointEvery != nil {
			every = *h.CheckpointEvery
		}
	}
	if every > 0 && iteration%every == 0 {
		return true
	}
	return interval > 0 && (last == nil || now.Sub(*last) >= interval)
}

// DefaultServiceAccountName is the service account a Loop acts as when
// spec.runner.serviceAccountName is unset.
const DefaultServiceAccountName = "default"

// GetServiceAccountName is the service account the Loop acts as: its action
// Pods run under it, and the Secrets it names are read as it.
func (s *LoopSpec) GetServiceAccountName() string {
	if s.Runner != nil && s.Runner.ServiceAccountName != "" {
		return s.Runner.ServiceAccountName
	}
	return DefaultServiceAccountName
}

// ActsAs reports whether the Loop acts as the service account name of
// namespace ns: its own namespace, and its service account once defaulted
// (GetServiceAccountName), so that a Loop naming none acts as "default".
// An empty name is no service account.
func (l *Loop) ActsAs(ns, name string) bool {
	return name != "" && l.Namespace == ns && l.Spec.GetServiceAccountName() == name
}

// IsAction reports whether what is in flight is an action a runner runs:
// not a child Loop, an approval state's wait, nor a verdict awaited.
func (a *ActionStatus) IsAction() bool {
	return a != nil && a.Child == "" && a.Approval == nil && !a.Verdict
}

// GetIdleTimeout returns how long the state's action may print nothing; 0: no limit.
func (s *State) GetIdleTimeout() time.Duration {
	if s.IdleTimeout == nil {
		return 0
	}
	return s.IdleTimeout.Duration
}

// Tokens is every token counted (input, output, cache read, cache
// creation), stopping at the largest int64 instead of wrapping.
func (t *UsageTotals) Tokens() int64 {
	var n int64
	for _, v := range []int64{t.InputTokens, t.OutputTokens, t.CacheReadTokens, t.CacheCreationTokens} {
		switch {
		case v <= 0:
		case n > math.MaxInt64-v:
			return math.MaxInt64
		default:
			n += v
		}
	}
	return n
}

// IsWarm says whether the runner runs a run's shell steps in one warm Pod.
func (r *RunnerSpec) IsWarm() bool { return r != nil && r.Mode == RunnerModeWarm }

// GetWarmIdleTimeout returns how long a warm runner Pod waits for a step.
func (r *RunnerSpec) GetWarmIdleTimeout() time.Duration {
	if r == nil || r.WarmIdleTimeoutSeconds == nil {
		return DefaultWarmIdleTimeoutSeconds * time.Second
	}
	return time.Duration(*r.WarmIdleTimeoutSeconds) * time.Second
}
