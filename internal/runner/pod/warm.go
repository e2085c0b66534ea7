package pod

import (
	"cmp"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner/warm/handoff"
)

// The parts of a warm runner Pod.
const (
	// WarmLabelValue is LabelRunner's value on a warm runner Pod.
	WarmLabelValue = "warm"
	// WarmStatePath holds the runner's ledger, on a volume of its own.
	WarmStatePath = "/var/run/looprun-runner"
	// WarmKeyName is the key of the runner's key in its Secret.
	WarmKeyName = "key"
	// LabelWarmGeneration numbers a run's runner Pods: a runner that
	// idled out or died is followed by the next.
	LabelWarmGeneration = "looprun.io/runner-generation"
	warmStateVolume     = "looprun-runner"
)

// WarmName is the runner Pod of a run: LOOP-RUN-warm, then LOOP-RUN-warm-N
// for the N-th after one that idled out or died. No step Pod takes it.
func WarmName(loop, run string, generation int) string {
	suffix := fmt.Sprintf("-%s-warm", dnsLabel(run))
	if generation > 1 {
		suffix += "-" + strconv.Itoa(generation)
	}
	return withSuffix(loop, suffix)
}

// WarmKeySecret is the Secret holding a Loop's runner key, named with the
// key's fingerprint: LOOP-runner-FINGERPRINT (a new operator key makes a
// new Secret, never meets the old one).
func WarmKeySecret(loop, fingerprint string) string {
	return withSuffix(loop, "-runner-"+fingerprint)
}

// LabelWarmKey is the fingerprint of the key a runner Pod was made with.
const LabelWarmKey = "looprun.io/runner-key"

// Warm says whether action a of the Loop runs in the run's warm runner
// Pod: a shell command of a Loop in Warm mode. Agent prompts and commands
// that call the agent (another image, the gateway's token), clones and
// pushes (the git credentials) and exit hooks run in Pods of their own.
func Warm(loop *v1alpha1.Loop, a *executor.Action) bool {
	return loop.Spec.Runner.IsWarm() && !a.Agent && !a.CallsAgent && a.Git == nil && !a.Exit
}

// BuildWarm makes generation gen of a run's warm runner Pod: the Pod a
// shell step of the run would get, running `entrypoint serve` instead of
// one action, its key from the Secret secret (labelled with the key's
// fingerprint), with a volume of its own for
// the ledger. It lives for the run (no deadline; the runner exits when
// idle) and its container is restarted if the runner dies.
func BuildWarm(loop *v1alpha1.Loop, run string, gen int, secret, fingerprint string, o Options) (*corev1.Pod, error) {
	pod, err := Build(loop, run, executor.Action{State: "", Iteration: 0}, o)
	if err != nil {
		return nil, err
	}
	rs := loop.Spec.Runner
	pod.Name = WarmName(loop.Name, run, gen)
	delete(pod.Labels, v1alpha1.LabelIteration)
	delete(pod.Labels, v1alpha1.LabelState)
	pod.Labels[v1alpha1.LabelRunner] = WarmLabelValue
	pod.Labels[LabelWarmGeneration] = strconv.Itoa(gen)
	pod.Labels[LabelWarmKey] = fingerprint
	pod.Annotations = nil
	pod.Spec.ActiveDeadlineSeconds = nil
	pod.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
	c := &pod.Spec.Containers[0]
	idle := rs.GetWarmIdleTimeout()
	c.Command = []string{ToolsPath + "/entrypoint", "serve", "--idle-timeout", idle.String(), "--ledger", WarmStatePath + "/ledger.jsonl"}
	env := []corev1.EnvVar{{Name: "LOOPRUN_LOOP", Value: loop.Name}}
	env = append(env, rs.Env...)
	env = append(env, corev1.EnvVar{Name: handoff.KeyEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: WarmKeyName}}})
	c.Env = env
	c.Ports = []corev1.ContainerPort{{Name: "runner", ContainerPort: handoff.Port, Protocol: corev1.ProtocolTCP}}
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: warmStateVolume, MountPath: WarmStatePath})
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: warmStateVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	// The runner exits on SIGTERM once its step's processes had theirs.
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](15)
	return pod, nil
}

// WarmStep is shell action a as its warm runner runs it: the wrapper's
// arguments and the variables a step Pod would have beyond the runner
// Pod's (the Loop's own spec.runner.env wins, as in a step Pod), in the
// runner's working directory (the workspace's, as a step Pod's).
func WarmStep(loop *v1alpha1.Loop, a executor.Action) (handoff.Step, error) {
	rs := loop.Spec.Runner
	timeout := cmp.Or(a.Timeout, v1alpha1.DefaultActionTimeoutSeconds*time.Second)
	args := wrapperFlags(timeout, a.IdleTimeout)
	args = append(args, loop.Spec.GetShell(), "-c", a.Command)
	env := []corev1.EnvVar{
		{Name: "LOOPRUN_STATE", Value: a.State},
		{Name: "LOOPRUN_ITERATION", Value: strconv.Itoa(int(a.Iteration))},
	}
	env, err := wrapperEnv(env, &a)
	if err != nil {
		return handoff.Step{}, err
	}
	env = append(env, envVars(a.Env)...)
	own := map[string]bool{}
	for _, e := range rs.Env {
		own[e.Name] = true
	}
	// The step runs in the runner's own working directory: the workspace's.
	out := handoff.Step{State: a.State, Iteration: a.Iteration, Retry: a.Retry, Args: args}
	for _, e := range env {
		if !own[e.Name] {
			out.Env = append(out.Env, e.Name+"="+e.Value)
		}
	}
	return out, nil
}
