package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// How a Loop's actions and judge run: the LLM judge, the agent and MCP
// commands, the action Pods and their workspace, and the history kept.

// LLMSpec configures the LLM judge.
type LLMSpec struct {
	// enabled turns LLM evaluation off when false: llm_structured then gives error.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// model is the model the judge uses. Default claude-sonnet-5-5; the
	// little-loops aliases sonnet, opus and haiku are accepted.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Model string `json:"model,omitempty"`

	// maxTokens bounds the judge's answer. Default 1024.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxTokens *int32 `json:"maxTokens,omitempty"`

	// timeout bounds one judge call. Default 120s.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// apiKeySecretRef names the Secret key holding the API key (in a cluster).
	// Locally the key comes from ANTHROPIC_API_KEY.
	// +optional
	APIKeySecretRef *SecretKeyRef `json:"apiKeySecretRef,omitempty"`

	// baseURL overrides the API endpoint.
	// +optional
	BaseURL string `json:"baseURL,omitempty"`

	// via says how the judge is asked: api (the Anthropic Messages API,
	// with a key), or cli (the agent CLI's JSON mode, claude -p
	// --output-format json --json-schema, with the user's own login; local
	// runs only). Unset: api in a cluster; locally api when
	// ANTHROPIC_API_KEY is set, else cli, as ll-loop does.
	// +optional
	// +kubebuilder:validation:Enum=api;cli
	Via JudgeVia `json:"via,omitempty"`
}

// JudgeVia says how the LLM judge is asked.
type JudgeVia string

// How the judge is asked.
const (
	JudgeViaAPI JudgeVia = "api"
	JudgeViaCLI JudgeVia = "cli"
)

// SecretKeyRef names one key of a Secret in the Loop's namespace.
type SecretKeyRef struct {
	// name of the Secret.
	// +required
	Name string `json:"name"`
	// key in the Secret.
	// +required
	Key string `json:"key"`
}

// AgentSpec configures agent actions.
type AgentSpec struct {
	// image runs agent actions in a cluster.
	// +optional
	Image string `json:"image,omitempty"`

	// command runs an agent action; the prompt is appended as the last argument.
	// Default: claude --dangerously-skip-permissions --verbose --output-format stream-json -p.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Command []string `json:"command,omitempty"`

	// output is what the command prints: stream-json (one JSON record per
	// line, as claude --output-format stream-json prints them: the
	// assistant's text is the action's output and its log, the result
	// record's usage is recorded; a line that is not a JSON object passes
	// through) or text (the output as printed, usage unknown). Default
	// stream-json.
	// +optional
	// +kubebuilder:validation:Enum=stream-json;text
	Output AgentOutput `json:"output,omitempty"`

	// model is the model of agent actions whose state names none (claude
	// --model; looprun run --model).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Model string `json:"model,omitempty"`

	// automationProfile is the profile agent actions run under when their
	// state names none: their environment has LL_AUTOMATION=1 and
	// LL_AUTOMATION_PROFILE set to it, for the agent's hooks to trim what
	// they add (little-loops: pruning_profile). Unset, both are set empty.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	AutomationProfile string `json:"automationProfile,omitempty"`

	// effort is the reasoning effort of agent actions whose state names
	// none (looprun run --effort), recorded in action_complete as
	// little-loops records it.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Effort string `json:"effort,omitempty"`

	// apiKeySecretRef names the Secret key holding the agent's API key. In an
	// action Pod it becomes the environment variable ANTHROPIC_API_KEY; the
	// operator never reads it.
	// +optional
	APIKeySecretRef *SecretKeyRef `json:"apiKeySecretRef,omitempty"`
}

// AgentOutput is what an agent command prints.
type AgentOutput string

// The agent outputs.
const (
	AgentOutputStreamJSON AgentOutput = "stream-json"
	AgentOutputText       AgentOutput = "text"
)

// MCPSpec configures mcp actions.
type MCPSpec struct {
	// command calls an MCP tool; the tool (server/tool) and its params as
	// JSON are appended. It exits 127 when the server or tool is unknown,
	// 124 when the call timed out, and prints the tool's result envelope
	// (isError says whether the tool failed). In a cluster it must be in
	// the runner image. Default: mcp-call.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Command []string `json:"command,omitempty"`
}

// DefaultMCPCommand calls MCP tools: server/tool and the JSON params are appended.
var DefaultMCPCommand = []string{"mcp-call"}

// DefaultMCPTimeoutSeconds bounds an mcp action whose state sets no timeout.
const DefaultMCPTimeoutSeconds = 30

// DefaultShell runs shell actions in a Pod: SHELL -c ACTION.
const DefaultShell = "bash"

// DefaultWorkspacePath is where the workspace is mounted in every action Pod.
const DefaultWorkspacePath = "/workspace"

// DefaultKeepPods is how many finished action Pods are kept for kubectl logs.
const DefaultKeepPods int32 = 5

// DefaultKeepChildren is how many finished child Loops are kept.
const DefaultKeepChildren int32 = 5

// DefaultRunAsUser is the user action Pods run as unless runner.securityContext says otherwise.
const DefaultRunAsUser int64 = 65532

// RunnerMode says how a Loop's steps run in a cluster.
// +kubebuilder:validation:Enum=Pod;Warm
type RunnerMode string

const (
	// RunnerModePod runs each step in a Pod of its own (the default).
	RunnerModePod RunnerMode = "Pod"
	// RunnerModeWarm runs a run's shell steps in one runner Pod of that run,
	// started at its first such step and kept until the run ends or the
	// runner idles out; the steps share its filesystem.
	RunnerModeWarm RunnerMode = "Warm"
)

// DefaultWarmIdleTimeoutSeconds is how long a warm runner Pod waits for
// its run's next step before it exits.
const DefaultWarmIdleTimeoutSeconds = 300

// RunnerSpec is the Pod template subset every action Pod is built from.
type RunnerSpec struct {
	// mode is Pod (default): each step in a Pod of its own; or Warm: the
	// shell steps of a run in one runner Pod of that run, handed over in
	// milliseconds instead of a Pod start each. Agent steps, clones and
	// pushes run in Pods of their own either way. See docs/runner.md.
	// +optional
	Mode RunnerMode `json:"mode,omitempty"`

	// warmIdleTimeoutSeconds is how long a warm runner Pod waits for the
	// run's next step before it exits (an approval or a long agent step
	// in between); the next step starts a new one. Default 300.
	// +optional
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=86400
	WarmIdleTimeoutSeconds *int32 `json:"warmIdleTimeoutSeconds,omitempty"`

	// image runs shell actions. Default: the operator's --runner-image.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image,omitempty"`

	// shell runs a shell action as SHELL -c ACTION. Default bash.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Shell string `json:"shell,omitempty"`

	// serviceAccountName is the identity action Pods run under. Default: the
	// namespace's default service account. Never the operator's.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// automountServiceAccountToken mounts the service account's token into
	// action Pods. Default false: actions get no API credentials unless asked.
	// +optional
	AutomountServiceAccountToken *bool `json:"automountServiceAccountToken,omitempty"`

	// env sets environment variables in the action container.
	// +optional
	// +kubebuilder:validation:MaxItems=128
	Env []corev1.EnvVar `json:"env,omitempty"`

	// envFrom fills the action container's environment from ConfigMaps and Secrets.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	EnvFrom []corev1.EnvFromSource `json:"envFrom,omitempty"`

	// resources are the action container's requests and limits.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// nodeSelector constrains the nodes action Pods run on.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations let action Pods run on tainted nodes.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// imagePullSecrets are used to pull the action images.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// securityContext is merged, field by field, over the Pod security
	// context defaults: non-root user 65532 (group 65532, fsGroup 65532)
	// with the RuntimeDefault seccomp profile; what it sets wins. The
	// container always drops all capabilities, forbids privilege escalation
	// and has a read-only root filesystem (/tmp and the workspace are
	// writable).
	// +optional
	SecurityContext *corev1.PodSecurityContext `json:"securityContext,omitempty"`

	// workspace is the volume every step mounts at the same path, so steps
	// share files. Unset: each step gets an empty directory of its own.
	// +optional
	Workspace *WorkspaceSpec `json:"workspace,omitempty"`
	// network says where the Loop's Pods may connect to, enforced by a
	// NetworkPolicy the operator owns (it needs a network plugin that
	// implements NetworkPolicy). Unset, the operator's default applies.
	// +optional
	Network *NetworkSpec `json:"network,omitempty"`
}

// EgressMode says where a Loop's Pods may connect to.
// +kubebuilder:validation:Enum=Restricted;Unrestricted
type EgressMode string

const (
	// EgressRestricted lets a Loop's Pods reach the model gateway, DNS, and
	// the addresses the Loop lists in spec.runner.network.allow; nothing else.
	EgressRestricted EgressMode = "Restricted"
	// EgressUnrestricted lets them reach anywhere (no NetworkPolicy is made).
	EgressUnrestricted EgressMode = "Unrestricted"
)

// NetworkSpec is where a Loop's Pods may connect to.
type NetworkSpec struct {
	// egress is Restricted or Unrestricted. Unset: the operator's default
	// (--default-egress; Restricted for Loops that run an agent when a
	// model gateway is installed, else Unrestricted).
	// +optional
	Egress EgressMode `json:"egress,omitempty"`
	// allow lists the addresses a Restricted Loop's Pods may reach beyond
	// the gateway and DNS: its git server, package registries. A
	// NetworkPolicy speaks addresses, not host names.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Allow []EgressRule `json:"allow,omitempty"`
}

// EgressRule is an address block and the ports of it a Loop may reach.
type EgressRule struct {
	// cidr is the block, e.g. 10.0.12.7/32 or 140.82.112.0/20.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="an address block, such as 10.0.12.7/32 (a NetworkPolicy speaks addresses, not host names)"
	CIDR string `json:"cidr"`
	// ports are the TCP ports; empty means every port.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=65535
	Ports []int32 `json:"ports,omitempty"`
}

// WorkspaceSpec is the volume the steps of a Loop share.
// +kubebuilder:validation:XValidation:rule="!(has(self.claimName) && has(self.volumeClaimTemplate))",message="set claimName or volumeClaimTemplate, not both"
// +kubebuilder:validation:XValidation:rule="!has(self.git) || has(self.claimName) || has(self.volumeClaimTemplate)",message="git needs a workspace that outlives a Pod: set claimName or volumeClaimTemplate"
type WorkspaceSpec struct {
	// mountPath is where the workspace is mounted. Default /workspace.
	// +optional
	// +kubebuilder:validation:Pattern=`^/`
	// +kubebuilder:validation:MaxLength=1024
	MountPath string `json:"mountPath,omitempty"`

	// workingDir is the working directory of every action, relative to
	// mountPath. Default: the checkout (repo) when git is set, else
	// mountPath itself.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.split('/').exists(p, p == '..')",message="a path inside the workspace: relative, without '..'"
	WorkingDir string `json:"workingDir,omitempty"`

	// git makes the workspace a checkout of a repository: cloned into
	// MOUNTPATH/repo by a Pod of the Loop's own before the run's first
	// step, and, with push, committed and pushed by another after its end.
	// +optional
	Git *GitWorkspace `json:"git,omitempty"`

	// claimName names an existing PersistentVolumeClaim in the Loop's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName,omitempty"`

	// volumeClaimTemplate makes the operator create a PersistentVolumeClaim
	// named LOOP-workspace, owned by the Loop (deleted with it).
	// +optional
	VolumeClaimTemplate *corev1.PersistentVolumeClaimSpec `json:"volumeClaimTemplate,omitempty"`
}

// CheckoutDir is where workspace.git clones to, under mountPath.
const CheckoutDir = "repo"

// DefaultGitTimeoutSeconds bounds a clone or a push.
const DefaultGitTimeoutSeconds = 600

// GitWorkspace is the repository a Loop's workspace is a checkout of.
type GitWorkspace struct {
	// url of the repository: https://, http://, ssh:// or user@host:path.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`

	// revision to check out: a branch, a tag, a full ref (refs/...) or a
	// commit. Default: the repository's default branch.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	Revision string `json:"revision,omitempty"`

	// depth limits the clone's history to this many commits (0, the
	// default: all of it). A revision that is a commit is cloned whole.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Depth int32 `json:"depth,omitempty"`

	// secretRef names a Secret of the Loop's namespace mounted into the
	// clone and push Pods (which run as the Loop's service account; the
	// operator never reads it): username and password, or token (with an
	// optional username), or ssh-privatekey (or identity) with known_hosts
	// (required: an unknown host key is never trusted) and an optional
	// passphrase. The keys of kubernetes.io/basic-auth and
	// kubernetes.io/ssh-auth Secrets fit.
	// +optional
	SecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`

	// push commits what the actions left uncommitted after the run and
	// pushes the checkout to a branch. Unset: nothing is pushed.
	// +optional
	Push *GitPush `json:"push,omitempty"`
}

// GitPushWhen says which ends of a run push.
// +kubebuilder:validation:Enum=Completed;Always
type GitPushWhen string

// The ends that push.
const (
	// PushWhenCompleted pushes only a run that completed.
	PushWhenCompleted GitPushWhen = "Completed"
	// PushWhenAlways pushes whatever the end.
	PushWhenAlways GitPushWhen = "Always"
)

// GitPush is where and when a run's work is pushed.
type GitPush struct {
	// branch to push to, interpolated like an action
	// (looprun/${loop.name}-${run.id}). A branch that exists on the remote
	// must be an ancestor of what is pushed: a push is never forced.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	Branch string `json:"branch"`

	// when the run's end pushes: Completed (the default) or Always.
	// +optional
	// +kubebuilder:default=Completed
	When GitPushWhen `json:"when,omitempty"`

	// commitMessage of the commit of what was left uncommitted,
	// interpolated like an action. Default "looprun: ${loop.name} run ${run.id}".
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	CommitMessage string `json:"commitMessage,omitempty"`

	// author of that commit. Default looprun <looprun@localhost>.
	// +optional
	Author *GitAuthor `json:"author,omitempty"`
}

// GitAuthor is who a commit is by.
type GitAuthor struct {
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Email string `json:"email,omitempty"`
}

// HistorySpec says how much of a run's past is kept.
type HistorySpec struct {
	// keepPods is how many finished action Pods are kept (for kubectl logs);
	// older ones are deleted. Default 5.
	// +optional
	// +kubebuilder:validation:Minimum=0
	KeepPods *int32 `json:"keepPods,omitempty"`

	// keepChildren is how many finished child Loops of sub-loop states are
	// kept (with their event logs); older ones are deleted. Default 5.
	// +optional
	// +kubebuilder:validation:Minimum=0
	KeepChildren *int32 `json:"keepChildren,omitempty"`

	// maxEventBytes bounds the event log: past it the oldest ConfigMap
	// segments are deleted (the one being written is always kept). Unset:
	// the operator's --event-log-max-bytes (default unlimited).
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxEventBytes *int64 `json:"maxEventBytes,omitempty"`

	// checkpointEvery takes a checkpoint (a full snapshot of the run state)
	// every this many iterations. Default 1 (after every state) unless only
	// checkpointInterval is set; 0 turns counted checkpoints off.
	// +optional
	// +kubebuilder:validation:Minimum=0
	CheckpointEvery *int32 `json:"checkpointEvery,omitempty"`

	// checkpointInterval takes a checkpoint when this many seconds passed
	// since the last one. With checkpointEvery, whichever comes first.
	// +optional
	// +kubebuilder:validation:Minimum=1
	CheckpointInterval *int32 `json:"checkpointInterval,omitempty"`

	// maxCheckpoints is how many checkpoints are kept, newest first. Default 100.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxCheckpoints *int32 `json:"maxCheckpoints,omitempty"`
}
