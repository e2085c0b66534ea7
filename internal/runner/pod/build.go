package pod

import (
	"cmp"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/gitws"
	"github.com/looprun/looprun/internal/runner"
	"github.com/looprun/looprun/internal/runner/entrypoint"
)

// The parts of an action Pod.
const (
	// ActionContainer runs the action under the wrapper.
	ActionContainer = v1alpha1.ActionContainerName
	// EntrypointContainer is the init container that copies the wrapper.
	EntrypointContainer = "entrypoint"
	// EntrypointBinary is where the wrapper lives in the entrypoint image.
	EntrypointBinary = "/entrypoint"
	// ToolsPath is where the wrapper is copied to, in an emptyDir.
	ToolsPath   = "/looprun"
	toolsVolume = "looprun-tools"
	tmpVolume   = "looprun-tmp"
	// WorkspaceVolume is the volume the steps share.
	WorkspaceVolume = "workspace"
	// EvaluateEnv carries the state's evaluator to the wrapper.
	EvaluateEnv = "LOOPRUN_EVALUATE"
	// APIKeyEnv carries the agent's API key from spec.agent.apiKeySecretRef.
	APIKeyEnv = "ANTHROPIC_API_KEY"
)

// DefaultStartAllowance is how long an action Pod may take to start (pull
// images, be scheduled) before it is given up.
const DefaultStartAllowance = 5 * time.Minute

// Images are the operator's defaults for the images a Loop leaves unset.
type Images struct {
	// Entrypoint holds /entrypoint; its init container copies it into the Pod.
	Entrypoint string
	// Runner runs shell actions.
	Runner string
	// Agent runs agent actions; unset, the runner image does.
	Agent string
}

// Options shape every action Pod.
type Options struct {
	Images Images
	// StartAllowance is added to the action's timeout for the Pod's
	// activeDeadlineSeconds, and bounds how long a Pod may take to start.
	StartAllowance time.Duration
	// OperatorNamespace and OperatorServiceAccount are the operator's own
	// identity, which no action Pod may use.
	OperatorNamespace, OperatorServiceAccount string
	// Egress is the operator's default and the gateway's Pods, for Loops'
	// egress policies.
	Egress Egress
	// Gateway, when set, is the model gateway agent Pods call instead of
	// the model API: they get its address and a token of their own, never
	// a key.
	Gateway *Gateway
}

// Gateway is where agent Pods reach the model gateway and how they prove
// which Pod they are.
type Gateway struct {
	// URL is the gateway's address as Pods reach it (ANTHROPIC_BASE_URL).
	URL string
	// Audience is the audience of the Pod's projected service-account
	// token: the gateway's own, which the API server does not accept.
	Audience string
	// TokenSeconds is the token's life (default DefaultGatewayTokenSeconds);
	// the kubelet renews the file before it ends.
	TokenSeconds int64
}

// The model gateway's parts of an agent Pod.
const (
	// GatewayPath holds the Pod's gateway token (token).
	GatewayPath = "/var/run/looprun/gateway"
	// GatewayTokenFile is the token the agent sends as its API key.
	GatewayTokenFile = GatewayPath + "/token"
	// GatewayTokenEnv names that file, for agents other than claude.
	GatewayTokenEnv = "LOOPRUN_GATEWAY_TOKEN_FILE"
	// ClaudeSettingsPath holds claude's managed settings: its
	// apiKeyHelper reads the token file afresh, so a step outlives one
	// token.
	ClaudeSettingsPath = "/etc/claude-code"
	// AnnotationClaudeSettings carries the settings into the Pod (through
	// the downward API: no object besides the Pod).
	AnnotationClaudeSettings = "looprun.io/claude-settings"
	// BaseURLEnv points the agent at the gateway.
	BaseURLEnv = "ANTHROPIC_BASE_URL"
	// KeyHelperTTLEnv is how often claude runs its apiKeyHelper again.
	KeyHelperTTLEnv = "CLAUDE_CODE_API_KEY_HELPER_TTL_MS"
	// DefaultGatewayTokenSeconds is a gateway token's life: the shortest
	// the API server issues.
	DefaultGatewayTokenSeconds = 600
	gatewayVolume              = "looprun-gateway"
)

// claudeSettings are the managed settings of claude in an agent Pod: the
// key is the Pod's gateway token, read from its file on every refresh.
const claudeSettings = `{"apiKeyHelper": "cat ` + GatewayTokenFile + `"}`

func (o Options) startAllowance() time.Duration {
	if o.StartAllowance > 0 {
		return o.StartAllowance
	}
	return DefaultStartAllowance
}

// OperatorServiceAccountMessage says why a Loop that acts as the
// operator's own service account (see v1alpha1.Loop.ActsAs) is refused.
func OperatorServiceAccountMessage(loop *v1alpha1.Loop) string {
	sa := loop.Spec.GetServiceAccountName()
	if loop.Spec.Runner == nil || loop.Spec.Runner.ServiceAccountName == "" {
		return fmt.Sprintf("spec.runner.serviceAccountName: unset, the Loop acts as %q of namespace %s, the operator's own service account: name the Loop's own", sa, loop.Namespace)
	}
	return fmt.Sprintf("spec.runner.serviceAccountName: %q is the operator's own service account; a Loop acts as its own", sa)
}

// WorkspaceClaim is the PersistentVolumeClaim the operator creates for a
// Loop's volumeClaimTemplate.
func WorkspaceClaim(loop string) string { return loop + "-workspace" }

// actionImage is the image and command of an action: a shell command in
// the runner image; an agent prompt, or a command that calls the agent,
// in the agent image; a clone or push, the wrapper's own git, in the
// entrypoint image.
func actionImage(spec *v1alpha1.LoopSpec, rs *v1alpha1.RunnerSpec, a *executor.Action, o Options) (string, []string) {
	if a.Git != nil { // the in-Pod wrapper clones and pushes itself
		return o.Images.Entrypoint, []string{ToolsPath + "/entrypoint", "git"}
	}
	image, command := cmp.Or(rs.Image, o.Images.Runner), []string{spec.GetShell(), "-c", a.Command}
	if a.Agent || a.CallsAgent {
		var agentImage string
		if spec.Agent != nil {
			agentImage = spec.Agent.Image
		}
		image = cmp.Or(agentImage, o.Images.Agent, image)
	}
	if a.Agent {
		command = append(append([]string{}, a.AgentCommand...), a.Command)
	}
	return image, command
}

// Build makes the Pod that runs action a of the Loop's run. It refuses, with
// a *runner.Refused, a Pod that would run under the operator's own service
// account or that has no image.
func Build(loop *v1alpha1.Loop, run string, a executor.Action, o Options) (*corev1.Pod, error) {
	spec := &loop.Spec
	rs := spec.Runner
	if rs == nil {
		rs = &v1alpha1.RunnerSpec{}
	}
	sa := rs.ServiceAccountName
	if loop.ActsAs(o.OperatorNamespace, o.OperatorServiceAccount) {
		return nil, &runner.Refused{Reason: "ForbiddenServiceAccount", Message: OperatorServiceAccountMessage(loop)}
	}
	image, command := actionImage(spec, rs, &a, o)
	if image == "" {
		return nil, &runner.Refused{Reason: "NoImage", Message: "no image to run the action: set spec.runner.image (spec.agent.image for agent actions) or the operator's default"}
	}
	if o.Images.Entrypoint == "" {
		return nil, &runner.Refused{Reason: "NoImage", Message: "the operator has no entrypoint image (--entrypoint-image)"}
	}
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = v1alpha1.DefaultActionTimeoutSeconds * time.Second
	}
	deadline := int64((timeout + o.startAllowance() + time.Second - 1) / time.Second)
	env := []corev1.EnvVar{
		{Name: "LOOPRUN_LOOP", Value: loop.Name},
		{Name: "LOOPRUN_STATE", Value: a.State},
		{Name: "LOOPRUN_ITERATION", Value: strconv.Itoa(int(a.Iteration))},
	}
	workdir := rs.Workspace.GetWorkingDir()
	wrapper := ToolsPath + "/entrypoint"
	var gitVolume *corev1.Volume
	if a.Git != nil {
		workdir = rs.Workspace.GetMountPath() // the checkout is yet to be made
		var err error
		if env, gitVolume, err = gitEnv(env, rs.Workspace, *a.Git); err != nil {
			return nil, err
		}
	}

	env, err := wrapperEnv(env, &a)
	if err != nil {
		return nil, err
	}
	callsAgent := a.Agent || a.CallsAgent
	if callsAgent {
		var err error
		if env, err = agentEnv(env, spec, o.Gateway); err != nil {
			return nil, err
		}
	}
	env = append(env, envVars(a.Env)...)
	env = append(env, rs.Env...)

	automount := cmp.Or(rs.AutomountServiceAccountToken, ptr.To(false))
	containerSecurity := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	// The root filesystem is read-only: actions write to the workspace,
	// and to /tmp, an emptyDir of the step's own.
	mounts := []corev1.VolumeMount{
		{Name: toolsVolume, MountPath: ToolsPath, ReadOnly: true},
		{Name: WorkspaceVolume, MountPath: rs.Workspace.GetMountPath()},
	}
	if path.Clean(rs.Workspace.GetMountPath()) != "/tmp" {
		mounts = append(mounts, corev1.VolumeMount{Name: tmpVolume, MountPath: "/tmp"})
	}
	labels := v1alpha1.ChildLabels(loop)
	labels[v1alpha1.LabelRun] = v1alpha1.LabelValue(run)
	labels[v1alpha1.LabelIteration] = strconv.Itoa(int(a.Iteration))
	labels[v1alpha1.LabelState] = v1alpha1.LabelValue(a.State)
	if a.Retry > 0 {
		labels[v1alpha1.LabelRetry] = strconv.Itoa(int(a.Retry))
	}
	var annotations map[string]string
	if labels[v1alpha1.LabelState] != a.State {
		annotations = map[string]string{v1alpha1.AnnotationState: a.State}
	}
	name := podName(loop.Name, run, &a)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: loop.Namespace,
			Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(loop, v1alpha1.GroupVersion.WithKind("Loop"))},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:        ptr.To(deadline),
			ServiceAccountName:           sa,
			AutomountServiceAccountToken: automount,
			EnableServiceLinks:           ptr.To(false),
			NodeSelector:                 rs.NodeSelector,
			Tolerations:                  rs.Tolerations,
			ImagePullSecrets:             rs.ImagePullSecrets,
			SecurityContext:              podSecurity(rs.SecurityContext),
			InitContainers: []corev1.Container{{
				Name: EntrypointContainer, Image: o.Images.Entrypoint,
				Command:         []string{EntrypointBinary, "--copy-to", wrapper},
				VolumeMounts:    []corev1.VolumeMount{{Name: toolsVolume, MountPath: ToolsPath}},
				SecurityContext: containerSecurity,
			}},
			Containers: []corev1.Container{{
				Name: ActionContainer, Image: image,
				Command:                  append(entrypointArgs(wrapper, timeout, a.IdleTimeout), command...),
				WorkingDir:               workdir,
				Env:                      env,
				EnvFrom:                  rs.EnvFrom,
				Resources:                rs.Resources,
				VolumeMounts:             mounts,
				SecurityContext:          containerSecurity,
				TerminationMessagePath:   corev1.TerminationMessagePathDefault,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
			Volumes: []corev1.Volume{
				{Name: toolsVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: WorkspaceVolume, VolumeSource: workspaceSource(loop.Name, rs.Workspace)},
				{Name: tmpVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	if callsAgent && o.Gateway != nil {
		o.Gateway.mount(pod)
	}
	if gitVolume != nil {
		pod.Spec.Volumes = append(pod.Spec.Volumes, *gitVolume)
		c := &pod.Spec.Containers[0]
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: gitVolume.Name, MountPath: GitAuthPath, ReadOnly: true})
	}
	return pod, nil
}

// podName is the Pod of action a: a step's, or the run's exit hook's,
// clone's or push's.
func podName(loop, run string, a *executor.Action) string {
	switch {
	case a.Exit:
		return ExitName(loop, run, a.Iteration)
	case a.Git != nil:
		return GitName(loop, run, a.Git.Op, a.Iteration)
	}
	return Name(loop, run, a.Iteration, a.Retry)
}

// GitAuthPath is where a clone or push Pod mounts the Secret of
// workspace.git.secretRef.
const GitAuthPath = "/var/run/looprun/git"

// gitEnv adds the clone or push op to env, for `entrypoint git`: the
// checkout in the workspace, and the credentials' volume when the Loop
// names a Secret.
func gitEnv(env []corev1.EnvVar, w *v1alpha1.WorkspaceSpec, op gitws.Op) ([]corev1.EnvVar, *corev1.Volume, error) {
	op.Dir = w.GetCheckoutPath()
	var vol *corev1.Volume
	if ref := w.Git.SecretRef; ref != nil && ref.Name != "" {
		op.AuthDir = GitAuthPath
		vol = &corev1.Volume{Name: "git-auth", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: ref.Name}}}
	}
	b, err := json.Marshal(op)
	if err != nil {
		return nil, nil, fmt.Errorf("encode the git operation: %w", err)
	}
	return append(env, corev1.EnvVar{Name: gitws.Env, Value: string(b)}), vol, nil
}

// podSecurity is the non-root default Pod security context with the
// Loop's own spec.runner.securityContext merged over it: what the Loop sets
// wins, field by field, and what it leaves unset keeps the default (a Loop
// that sets runAsUser still runs non-root with the RuntimeDefault seccomp
// profile).
func podSecurity(sc *corev1.PodSecurityContext) *corev1.PodSecurityContext {
	user := v1alpha1.DefaultRunAsUser
	out := &corev1.PodSecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(user), RunAsGroup: ptr.To(user), FSGroup: ptr.To(user),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if sc == nil {
		return out
	}
	// Decoding the Loop's context over the defaults sets exactly the
	// fields it has.
	if b, err := json.Marshal(sc); err == nil {
		_ = json.Unmarshal(b, out)
	}
	return out
}

func workspaceSource(loop string, w *v1alpha1.WorkspaceSpec) corev1.VolumeSource {
	switch {
	case w != nil && w.ClaimName != "":
		return corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: w.ClaimName}}
	case w != nil && w.VolumeClaimTemplate != nil:
		return corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: WorkspaceClaim(loop)}}
	}
	return corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
}

// appendIf appends the variable name=value to env unless value is empty.
func appendIf(env []corev1.EnvVar, name, value string) []corev1.EnvVar {
	if value == "" {
		return env
	}
	return append(env, corev1.EnvVar{Name: name, Value: value})
}

// entrypointArgs run the action under the entrypoint with its timeouts.
func entrypointArgs(wrapper string, timeout, idle time.Duration) []string {
	return append([]string{wrapper}, wrapperFlags(timeout, idle)...)
}

// wrapperFlags are the entrypoint's flags of an action's timeouts, then "--".
func wrapperFlags(timeout, idle time.Duration) []string {
	args := []string{"--timeout", timeout.String()}
	if idle > 0 {
		args = append(args, "--idle-timeout", idle.String())
	}
	return append(args, "--")
}

// envVars are NAME=VALUE pairs as a container's environment.
func envVars(kvs []string) []corev1.EnvVar {
	out := make([]corev1.EnvVar, 0, len(kvs))
	for _, kv := range kvs {
		name, value, _ := strings.Cut(kv, "=")
		out = append(out, corev1.EnvVar{Name: name, Value: value})
	}
	return out
}

// wrapperEnv adds what the in-Pod wrapper is told of the action: its
// evaluator, probe, run directory and whether the agent prints stream-json.
func wrapperEnv(env []corev1.EnvVar, a *executor.Action) ([]corev1.EnvVar, error) {
	if a.Evaluate != nil {
		b, err := json.Marshal(a.Evaluate)
		if err != nil {
			return nil, fmt.Errorf("encode the evaluator: %w", err)
		}
		env = append(env, corev1.EnvVar{Name: EvaluateEnv, Value: string(b)})
	}
	env = appendIf(env, entrypoint.ProbeEnv, a.Probe)
	env = appendIf(env, entrypoint.RunDirEnv, a.RunDir)
	if a.AgentStream {
		kind := entrypoint.AgentStreamShell
		if a.Agent {
			kind = entrypoint.AgentStreamPrompt
		}
		env = append(env, corev1.EnvVar{Name: entrypoint.AgentStreamEnv, Value: kind})
	}
	return env, nil
}

// agentEnv adds what an agent needs to reach the model: with a gateway its
// address and token file, never a key (a Loop's own key beside a gateway
// is refused); without one, the Loop's key, if it names one.
func agentEnv(env []corev1.EnvVar, spec *v1alpha1.LoopSpec, g *Gateway) ([]corev1.EnvVar, error) {
	ownKey := spec.Agent != nil && spec.Agent.APIKeySecretRef != nil
	switch {
	case g != nil && ownKey:
		return nil, &runner.Refused{Reason: "AgentKeyWithGateway", Message: "spec.agent.apiKeySecretRef: in this cluster agents reach the model through looprun's model gateway, which holds the key and meters each call; an agent Pod gets no key: remove apiKeySecretRef"}
	case g != nil:
		return append(env,
			corev1.EnvVar{Name: BaseURLEnv, Value: g.URL},
			corev1.EnvVar{Name: GatewayTokenEnv, Value: GatewayTokenFile},
			corev1.EnvVar{Name: KeyHelperTTLEnv, Value: "60000"}), nil
	case ownKey:
		ref := spec.Agent.APIKeySecretRef
		return append(env, corev1.EnvVar{Name: APIKeyEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name}, Key: ref.Key}}}), nil
	}
	return env, nil
}

// mount gives an agent Pod its gateway token, a projected service-account
// token of the gateway's audience bound to the Pod (the gateway maps it to
// the Pod, its Loop and step; it dies with the Pod), and claude's managed
// settings that read it.
func (g *Gateway) mount(pod *corev1.Pod) {
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationClaudeSettings] = claudeSettings
	if pod.Spec.ServiceAccountName == "" {
		// A projected token names its account (admission would set it,
		// but not every API server runs that plugin).
		pod.Spec.ServiceAccountName = "default"
	}
	seconds := g.TokenSeconds
	if seconds <= 0 {
		seconds = DefaultGatewayTokenSeconds
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: gatewayVolume, VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{DefaultMode: ptr.To[int32](0o444), Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: g.Audience, ExpirationSeconds: ptr.To(seconds), Path: "token"}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
				Path:     "managed-settings.json",
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + AnnotationClaudeSettings + "']"},
			}}}},
		}},
	}})
	// Whole-volume mounts (a subPath mount would never see the renewed
	// token); the settings directory holds the token too, harmlessly.
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts,
		corev1.VolumeMount{Name: gatewayVolume, MountPath: GatewayPath, ReadOnly: true},
		corev1.VolumeMount{Name: gatewayVolume, MountPath: ClaudeSettingsPath, ReadOnly: true})
}
