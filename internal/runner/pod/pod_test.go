package pod

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/gitws"
	"github.com/looprun/looprun/internal/runner"
	"github.com/looprun/looprun/internal/runner/entrypoint"
)

func TestName(t *testing.T) {
	if got := Name("fix", "0a1b2c3d", 7, 0); got != "fix-0a1b2c3d-7" {
		t.Errorf("short name %q", got)
	}
	long := strings.Repeat("a", 60) + ".b-" + strings.Repeat("c", 100)
	other := strings.Repeat("a", 60) + ".b-" + strings.Repeat("c", 99)
	n1, n2 := Name(long, "0a1b2c3d", 1234567, 0), Name(other, "0a1b2c3d", 1234567, 0)
	for _, n := range []string{n1, n2} {
		if len(n) > 63 || len(validation.IsDNS1123Subdomain(n)) > 0 {
			t.Errorf("name %q (%d) is not a valid short Pod name", n, len(n))
		}
	}
	if n1 == n2 || Name(long, "0a1b2c3d", 1234567, 0) != n1 {
		t.Errorf("names not stable and distinct: %q %q", n1, n2)
	}
	if Name(long, "0a1b2c3d", 1, 0) == Name(long, "0a1b2c3d", 2, 0) || Name(long, "0a1b2c3d", 1, 0) == Name(long, "ffffffff", 1, 0) {
		t.Error("iteration and run must change the name")
	}
}

func TestNameOfAMovedRun(t *testing.T) {
	// A run started on a laptop has an id with upper case; rewinds add -wN.
	if got := Name("count", "count-20261121T083506-w1", 4, 0); got != "count-count-20261121t083506-w1-4" {
		t.Errorf("name %q", got)
	}
	if errs := validation.IsDNS1123Subdomain(Name("count", "Run_ID.x", 4, 0)); len(errs) > 0 {
		t.Error(errs)
	}
}

func TestRetryName(t *testing.T) {
	if got := Name("fix", "0a1b2c3d", 7, 2); got != "fix-0a1b2c3d-7-r2" {
		t.Errorf("Name = %q", got)
	}
	long := strings.Repeat("a", 80)
	if n := Name(long, "0a1b2c3d", 1234567, 100); len(n) > 63 || n == Name(long, "0a1b2c3d", 1234567, 0) {
		t.Errorf("retry name %q", n)
	}
}

func testLoop() *v1alpha1.Loop {
	return &v1alpha1.Loop{
		ObjectMeta: metav1.ObjectMeta{Name: "fix", Namespace: "team", UID: "0a1b2c3d-uid"},
		Spec: v1alpha1.LoopSpec{Initial: "check", States: map[string]v1alpha1.State{
			"check": {Action: "make lint", OnSuccess: "done", OnFailure: "check"}, "done": {Terminal: true},
		}},
	}
}

var testOptions = Options{Images: Images{Entrypoint: "looprun/entrypoint:1", Runner: "bash:5"}, StartAllowance: time.Minute}

func TestBuild(t *testing.T) {
	loop := testLoop()
	a := executor.Action{State: "check", Iteration: 3, Command: "make lint", Timeout: 90 * time.Second,
		Evaluate: &v1alpha1.Evaluate{Type: "output_contains", Pattern: "ok"}}
	pod, err := Build(loop, "0a1b2c3d", a, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Name != "fix-0a1b2c3d-3" || pod.Namespace != "team" {
		t.Errorf("name %s/%s", pod.Namespace, pod.Name)
	}
	wantLabels := map[string]string{v1alpha1.LabelLoop: "fix", v1alpha1.LabelRun: "0a1b2c3d", v1alpha1.LabelIteration: "3", v1alpha1.LabelState: "check"}
	for k, v := range wantLabels {
		if pod.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, pod.Labels[k], v)
		}
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.UID != loop.UID || owner.Kind != "Loop" || owner.APIVersion != "looprun.io/v1alpha1" || owner.BlockOwnerDeletion == nil || !*owner.BlockOwnerDeletion {
		t.Errorf("owner %+v", owner)
	}
	spec := pod.Spec
	if spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %s", spec.RestartPolicy)
	}
	if spec.ActiveDeadlineSeconds == nil || *spec.ActiveDeadlineSeconds != 150 {
		t.Errorf("activeDeadlineSeconds %v, want timeout + start allowance = 150", spec.ActiveDeadlineSeconds)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the service account token must not be mounted by default")
	}
	if spec.ServiceAccountName != "" {
		t.Errorf("serviceAccountName %q", spec.ServiceAccountName)
	}
	sc := spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 || sc.SeccompProfile == nil {
		t.Errorf("pod security context %+v", sc)
	}
	if len(spec.InitContainers) != 1 || len(spec.Containers) != 1 {
		t.Fatalf("containers %d + %d", len(spec.InitContainers), len(spec.Containers))
	}
	init, c := spec.InitContainers[0], spec.Containers[0]
	if init.Image != "looprun/entrypoint:1" || strings.Join(init.Command, " ") != "/entrypoint --copy-to /looprun/entrypoint" {
		t.Errorf("init container %s %v", init.Image, init.Command)
	}
	if c.Image != "bash:5" || strings.Join(c.Command, " ") != "/looprun/entrypoint --timeout 1m30s -- bash -c make lint" {
		t.Errorf("action container %s %q", c.Image, c.Command)
	}
	if c.WorkingDir != "/workspace" || c.TerminationMessagePath != corev1.TerminationMessagePathDefault {
		t.Errorf("workdir %s, termination message %s", c.WorkingDir, c.TerminationMessagePath)
	}
	for _, ctr := range []corev1.Container{init, c} {
		s := ctr.SecurityContext
		if s == nil || s.AllowPrivilegeEscalation == nil || *s.AllowPrivilegeEscalation || s.Capabilities == nil || len(s.Capabilities.Drop) != 1 ||
			s.ReadOnlyRootFilesystem == nil || !*s.ReadOnlyRootFilesystem {
			t.Errorf("container %s security context %+v", ctr.Name, s)
		}
	}
	var eval v1alpha1.Evaluate
	if err := json.Unmarshal([]byte(envValue(c.Env, EvaluateEnv)), &eval); err != nil || eval.Pattern != "ok" {
		t.Errorf("LOOPRUN_EVALUATE %q: %v", envValue(c.Env, EvaluateEnv), err)
	}
	if envValue(c.Env, "LOOPRUN_ITERATION") != "3" {
		t.Errorf("env %+v", c.Env)
	}
	if v := spec.Volumes[1]; v.Name != WorkspaceVolume || v.EmptyDir == nil {
		t.Errorf("workspace volume %+v", v)
	}
	for _, ctr := range append(spec.InitContainers, spec.Containers...) {
		for _, m := range ctr.VolumeMounts {
			if strings.Contains(m.MountPath, "serviceaccount") {
				t.Errorf("token mounted in %s", ctr.Name)
			}
		}
	}
}

func TestBuildFromRunnerSpec(t *testing.T) {
	loop := testLoop()
	yes := true
	user := int64(1000)
	loop.Spec.Runner = &v1alpha1.RunnerSpec{
		Image: "python:3", Shell: "sh", ServiceAccountName: "builder", AutomountServiceAccountToken: &yes,
		Env:             []corev1.EnvVar{{Name: "GOFLAGS", Value: "-mod=mod"}},
		NodeSelector:    map[string]string{"pool": "ci"},
		Tolerations:     []corev1.Toleration{{Key: "ci", Operator: corev1.TolerationOpExists}},
		SecurityContext: &corev1.PodSecurityContext{RunAsUser: &user},
		Workspace:       &v1alpha1.WorkspaceSpec{MountPath: "/src", VolumeClaimTemplate: &corev1.PersistentVolumeClaimSpec{}},
	}
	pod, err := Build(loop, "r", executor.Action{State: "check", Iteration: 1, Command: "ls"}, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if c.Image != "python:3" || c.Command[len(c.Command)-3] != "sh" || c.WorkingDir != "/src" || envValue(c.Env, "GOFLAGS") != "-mod=mod" {
		t.Errorf("container %s %v %s %v", c.Image, c.Command, c.WorkingDir, c.Env)
	}
	if envValue(c.Env, EvaluateEnv) != "" {
		t.Error("no evaluator, no LOOPRUN_EVALUATE")
	}
	if pod.Spec.ServiceAccountName != "builder" || !*pod.Spec.AutomountServiceAccountToken || pod.Spec.NodeSelector["pool"] != "ci" || len(pod.Spec.Tolerations) != 1 {
		t.Errorf("pod spec %+v", pod.Spec)
	}
	// Merged over the defaults, not replacing them.
	if sc := pod.Spec.SecurityContext; *sc.RunAsUser != 1000 || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("security context %+v", sc)
	}
	loop.Spec.Runner.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(false), RunAsUser: ptr.To(int64(0))}
	if pod, _ := Build(loop, "r", executor.Action{State: "check", Iteration: 1, Command: "ls"}, testOptions); *pod.Spec.SecurityContext.RunAsNonRoot || *pod.Spec.SecurityContext.RunAsUser != 0 {
		t.Errorf("an explicit root is the Loop's to ask for: %+v", pod.Spec.SecurityContext)
	}
	if v := pod.Spec.Volumes[1]; v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "fix-workspace" {
		t.Errorf("workspace %+v", v)
	}
	if ws := (&v1alpha1.WorkspaceSpec{ClaimName: "shared"}); workspaceSource("fix", ws).PersistentVolumeClaim.ClaimName != "shared" {
		t.Error("claimName not used")
	}
}

func TestBuildAgent(t *testing.T) {
	loop := testLoop()
	loop.Spec.Agent = &v1alpha1.AgentSpec{Image: "agent:1", APIKeySecretRef: &v1alpha1.SecretKeyRef{Name: "keys", Key: "anthropic"}}
	a := executor.Action{State: "check", Iteration: 1, Command: "/fix the lint", Agent: true, AgentCommand: []string{"claude", "-p"}, AgentStream: true}
	pod, err := Build(loop, "r", a, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if c.Image != "agent:1" || strings.Join(c.Command[4:], " ") != "claude -p /fix the lint" {
		t.Errorf("agent container %s %q", c.Image, c.Command)
	}
	if !slices.Contains(c.Env, corev1.EnvVar{Name: entrypoint.AgentStreamEnv, Value: entrypoint.AgentStreamPrompt}) {
		t.Errorf("the entrypoint is not told the agent prints stream-json: %+v", c.Env)
	}
	a.AgentStream = false
	if pod, _ := Build(loop, "r", a, testOptions); slices.ContainsFunc(pod.Spec.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == entrypoint.AgentStreamEnv }) {
		t.Error("a text agent is decoded as stream-json")
	}
	var key *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == APIKeyEnv {
			key = &c.Env[i]
		}
	}
	if key == nil || key.Value != "" || key.ValueFrom == nil || key.ValueFrom.SecretKeyRef.Name != "keys" || key.ValueFrom.SecretKeyRef.Key != "anthropic" {
		t.Errorf("API key env %+v", key)
	}
}

// A learning gate is a shell command that calls the agent: it runs in the
// agent image, with the agent's key, through the shell.
func TestBuildCallsAgent(t *testing.T) {
	loop := testLoop()
	loop.Spec.Agent = &v1alpha1.AgentSpec{Image: "agent:1", APIKeySecretRef: &v1alpha1.SecretKeyRef{Name: "keys", Key: "anthropic"}}
	pod, err := Build(loop, "r", executor.Action{State: "gate", Iteration: 1, Command: "mark complete", CallsAgent: true}, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if c.Image != "agent:1" || strings.Join(c.Command[4:], " ") != "bash -c mark complete" {
		t.Errorf("gate container %s %q", c.Image, c.Command)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == APIKeyEnv && e.ValueFrom != nil }) {
		t.Errorf("no API key in %+v", c.Env)
	}
}

func TestBuildRefuses(t *testing.T) {
	loop := testLoop()
	loop.Namespace = "looprun-system"
	loop.Spec.Runner = &v1alpha1.RunnerSpec{ServiceAccountName: "looprun-manager"}
	o := testOptions
	o.OperatorNamespace, o.OperatorServiceAccount = "looprun-system", "looprun-manager"
	var refused *runner.Refused
	if _, err := Build(loop, "r", executor.Action{Command: "id"}, o); !errors.As(err, &refused) || refused.Reason != "ForbiddenServiceAccount" {
		t.Errorf("the operator's service account: %v", err)
	}
	loop.Spec.Runner = nil
	o.Images.Runner = ""
	if _, err := Build(loop, "r", executor.Action{Command: "id"}, o); !errors.As(err, &refused) || refused.Reason != "NoImage" {
		t.Errorf("no image: %v", err)
	}
}

// A Loop in the operator's namespace that names no service account acts as
// "default": when that is the operator's own, its Pods are refused, as
// when it names it; in another namespace, "default" is the Loop's own.
func TestBuildRefusesTheOperatorsDefaultServiceAccount(t *testing.T) {
	o := testOptions
	o.OperatorNamespace, o.OperatorServiceAccount = "looprun-system", "default"
	for _, rs := range []*v1alpha1.RunnerSpec{nil, {}, {ServiceAccountName: "default"}} {
		loop := testLoop()
		loop.Namespace = "looprun-system"
		loop.Spec.Runner = rs
		var refused *runner.Refused
		if _, err := Build(loop, "r", executor.Action{Command: "id"}, o); !errors.As(err, &refused) || refused.Reason != "ForbiddenServiceAccount" ||
			!strings.Contains(refused.Message, "operator's own service account") {
			t.Errorf("runner %+v: %v", rs, err)
		}
	}
	loop := testLoop()
	loop.Namespace = "team-a"
	if _, err := Build(loop, "r", executor.Action{Command: "id"}, o); err != nil {
		t.Errorf("the default service account of another namespace: %v", err)
	}
	loop.Namespace = "looprun-system"
	loop.Spec.Runner = &v1alpha1.RunnerSpec{ServiceAccountName: "builder"}
	if _, err := Build(loop, "r", executor.Action{Command: "id"}, o); err != nil {
		t.Errorf("another service account of the operator's namespace: %v", err)
	}
}

func envValue(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func TestInspect(t *testing.T) {
	created := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	now := created.Add(10 * time.Second)
	result := string(entrypoint.Result{ExitCode: 1, DurationMs: 250, Stdout: "3 problems", Verdict: &evaluate.Result{Verdict: "failure"}}.Encode())
	terminated := func(code int32, reason, msg string) []corev1.ContainerStatus {
		return []corev1.ContainerStatus{{Name: ActionContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg}}}}
	}
	waiting := func(name, reason string) []corev1.ContainerStatus {
		return []corev1.ContainerStatus{{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "details"}}}}
	}
	deleted := metav1.NewTime(now)
	cases := []struct {
		name    string
		status  corev1.PodStatus
		deleted bool
		age     time.Duration
		state   runner.State
		exit    int
		reason  string
		giveUp  bool
	}{
		{name: "pending", status: corev1.PodStatus{Phase: corev1.PodPending}, state: runner.Running},
		{name: "running", status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: ActionContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}, state: runner.Running},
		{name: "result", status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: terminated(1, "Error", result)}, state: runner.Done, exit: 1},
		{name: "no result", status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: terminated(137, "OOMKilled", "")}, state: runner.Done, exit: 137, reason: ReasonNoResult},
		{name: "deadline", status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "DeadlineExceeded"}, state: runner.Done, exit: 124},
		{name: "evicted", status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "disk pressure"}, state: runner.Done, exit: -1, reason: ReasonPodDeleted},
		{name: "init failed", status: corev1.PodStatus{Phase: corev1.PodFailed}, state: runner.Done, exit: -1, reason: ReasonPodFailed},
		{name: "deleting", status: corev1.PodStatus{Phase: corev1.PodRunning}, deleted: true, state: runner.Done, exit: -1, reason: ReasonPodDeleted},
		{name: "finished then deleted", status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: terminated(1, "Error", result)}, deleted: true, state: runner.Done, exit: 1},
		{name: "invalid image", status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: waiting(ActionContainer, "InvalidImageName")}, state: runner.Done, exit: -1, reason: ReasonImagePullFailed, giveUp: true},
		{name: "pull error, young", status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: waiting(EntrypointContainer, "ErrImagePull")}, state: runner.Running},
		{name: "pull error, too old", age: time.Hour, status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: waiting(EntrypointContainer, "ImagePullBackOff")}, state: runner.Done, exit: -1, reason: ReasonImagePullFailed, giveUp: true},
		{name: "never scheduled", age: time.Hour, status: corev1.PodStatus{Phase: corev1.PodPending}, state: runner.Done, exit: -1, reason: ReasonPodNeverStarted, giveUp: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created.Add(-tc.age))}, Status: tc.status}
			if tc.deleted {
				p.DeletionTimestamp = &deleted
			}
			out, giveUp := Inspect(p, now, time.Minute)
			if out.State != tc.state || giveUp != tc.giveUp {
				t.Fatalf("state %v giveUp %v, want %v %v", out.State, giveUp, tc.state, tc.giveUp)
			}
			if out.State == runner.Running {
				if tc.status.Phase == corev1.PodPending && out.RecheckAfter != 50*time.Second {
					t.Errorf("recheck after %s, want the rest of the start allowance", out.RecheckAfter)
				}
				return
			}
			res := out.Result
			if res.ExitCode != tc.exit {
				t.Errorf("exit code %d, want %d", res.ExitCode, tc.exit)
			}
			switch {
			case tc.reason == "" && res.Failure != nil:
				t.Errorf("unexpected failure %+v", res.Failure)
			case tc.reason != "" && (res.Failure == nil || res.Failure.Reason != tc.reason || res.Failure.Message == ""):
				t.Errorf("failure %+v, want reason %s", res.Failure, tc.reason)
			case res.Failure != nil && res.Failure.Transient == (tc.name == "invalid image"):
				// Only an image name that can never be pulled is worth no retry.
				t.Errorf("failure %+v: transient %v", res.Failure, res.Failure.Transient)
			}
			if tc.name == "result" && (res.Output != "3 problems" || res.Verdict == nil || res.Verdict.Verdict != "failure" || res.Duration != 250*time.Millisecond) {
				t.Errorf("result %+v", res)
			}
			if tc.name == "deadline" && res.Verdict != nil {
				t.Error("a timeout is judged again, from exit code 124")
			}
		})
	}
}

// An init container the runtime could not start is named with the
// runtime's own words, not only its exit code.
func TestInspectSaysWhyAContainerCouldNotStart(t *testing.T) {
	p := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, InitContainerStatuses: []corev1.ContainerStatus{{
		Name: EntrypointContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 128, Reason: "StartError", Message: "failed to create containerd task: mount /looprun: not a directory\n",
		}},
	}}}}
	out, _ := Inspect(p, time.Now(), time.Minute)
	if out.State != runner.Done || out.Result.Failure == nil {
		t.Fatalf("outcome %+v", out)
	}
	msg := out.Result.Failure.Message
	for _, want := range []string{"container entrypoint exited with code 128 (StartError)", "mount /looprun: not a directory"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
}

// An idle timeout reaches the entrypoint, which stops a quiet action.
func TestBuildIdleTimeout(t *testing.T) {
	a := executor.Action{State: "fix", Iteration: 1, Command: "make", Timeout: time.Minute, IdleTimeout: 20 * time.Second}
	pod, err := Build(testLoop(), "r", a, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(pod.Spec.Containers[0].Command, " "); got != "/looprun/entrypoint --timeout 1m0s --idle-timeout 20s -- bash -c make" {
		t.Errorf("command %q", got)
	}
}

func TestBuildGit(t *testing.T) {
	loop := testLoop()
	loop.Spec.Runner = &v1alpha1.RunnerSpec{Image: "runner:1", Workspace: &v1alpha1.WorkspaceSpec{MountPath: "/w", ClaimName: "ws",
		Git: &v1alpha1.GitWorkspace{URL: "https://git.example.com/r.git", SecretRef: &corev1.LocalObjectReference{Name: "creds"}}}}

	// A step works in the checkout, on the volume mounted where it always is.
	step, err := Build(loop, "r", executor.Action{State: "check", Iteration: 1, Command: "ls"}, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	c := step.Spec.Containers[0]
	if c.WorkingDir != "/w/repo" || c.VolumeMounts[1].MountPath != "/w" || c.Image != "runner:1" {
		t.Fatalf("step: workingDir %s, mounts %+v, image %s", c.WorkingDir, c.VolumeMounts, c.Image)
	}
	for _, v := range step.Spec.Volumes {
		if v.Secret != nil {
			t.Fatalf("a step mounts the git Secret: %+v", v)
		}
	}

	// The clone runs the wrapper's git in the entrypoint image, the Secret mounted.
	clone, err := Build(loop, "r", executor.Action{State: executor.GitCloneState, Timeout: time.Minute, Git: &gitws.Op{Op: gitws.OpClone, URL: "https://git.example.com/r.git"}}, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	c = clone.Spec.Containers[0]
	if clone.Name != "fix-r-clone" || c.Image != testOptions.Images.Entrypoint || c.WorkingDir != "/w" || c.Command[len(c.Command)-1] != "git" {
		t.Fatalf("clone Pod %s: image %s, workingDir %s, command %q", clone.Name, c.Image, c.WorkingDir, c.Command)
	}
	var op gitws.Op
	for _, e := range c.Env {
		if e.Name == gitws.Env {
			if err := json.Unmarshal([]byte(e.Value), &op); err != nil {
				t.Fatal(err)
			}
		}
	}
	if op.Dir != "/w/repo" || op.AuthDir != GitAuthPath || op.URL != "https://git.example.com/r.git" {
		t.Fatalf("the operation: %+v", op)
	}
	var mounted bool
	for _, m := range c.VolumeMounts {
		mounted = mounted || m.MountPath == GitAuthPath && m.ReadOnly
	}
	secret := clone.Spec.Volumes[len(clone.Spec.Volumes)-1].Secret
	if !mounted || secret == nil || secret.SecretName != "creds" {
		t.Fatalf("the Secret is not mounted: %+v %+v", c.VolumeMounts, clone.Spec.Volumes)
	}
	if got := GitName("loop", "r", gitws.OpPush, 7); got != "loop-r-7-push" {
		t.Fatalf("push Pod name %s", got)
	}
}

// With a model gateway an agent Pod (a prompt, or a command that calls the
// agent) gets the gateway's address and a token bound to itself, never a
// key; claude reads the token through its managed settings, afresh; a shell
// step gets none of it; a Loop that brings its own key is refused.
func TestBuildWithGateway(t *testing.T) {
	loop := testLoop()
	loop.Spec.Agent = &v1alpha1.AgentSpec{Image: "agent:1"}
	o := testOptions
	o.Gateway = &Gateway{URL: "http://looprun-gateway.looprun-system.svc:8080", Audience: "looprun-gateway"}
	for _, a := range []executor.Action{
		{State: "fix", Iteration: 1, Command: "/fix", Agent: true, AgentCommand: []string{"claude", "-p"}},
		{State: "gate", Iteration: 2, Command: "mark complete", CallsAgent: true},
	} {
		pod, err := Build(loop, "r", a, o)
		if err != nil {
			t.Fatal(err)
		}
		c := pod.Spec.Containers[0]
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				t.Errorf("%s: env %s comes from a Secret", a.State, e.Name)
			}
		}
		if _, ok := env[APIKeyEnv]; ok {
			t.Errorf("%s: the Pod has %s", a.State, APIKeyEnv)
		}
		if env[BaseURLEnv] != o.Gateway.URL || env[GatewayTokenEnv] != GatewayTokenFile {
			t.Errorf("%s: env %v", a.State, env)
		}
		var vol *corev1.Volume
		for i := range pod.Spec.Volumes {
			if pod.Spec.Volumes[i].Name == gatewayVolume {
				vol = &pod.Spec.Volumes[i]
			}
		}
		if vol == nil || vol.Projected == nil || vol.Projected.Sources[0].ServiceAccountToken == nil {
			t.Fatalf("%s: no projected token volume: %+v", a.State, pod.Spec.Volumes)
		}
		tok := vol.Projected.Sources[0].ServiceAccountToken
		if tok.Audience != "looprun-gateway" || *tok.ExpirationSeconds != DefaultGatewayTokenSeconds {
			t.Errorf("%s: token %+v", a.State, tok)
		}
		mounts := map[string]corev1.VolumeMount{}
		for _, m := range c.VolumeMounts {
			mounts[m.MountPath] = m
		}
		for _, p := range []string{GatewayPath, ClaudeSettingsPath} {
			if m, ok := mounts[p]; !ok || m.SubPath != "" || !m.ReadOnly {
				t.Errorf("%s: mount %s = %+v (a subPath mount never sees the renewed token)", a.State, p, m)
			}
		}
		if pod.Annotations[AnnotationClaudeSettings] != `{"apiKeyHelper": "cat /var/run/looprun/gateway/token"}` {
			t.Errorf("%s: settings %q", a.State, pod.Annotations[AnnotationClaudeSettings])
		}
	}
	pod, err := Build(loop, "r", executor.Action{State: "make", Iteration: 3, Command: "make"}, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range pod.Spec.Containers[0].Env {
		if e.Name == BaseURLEnv || e.Name == GatewayTokenEnv {
			t.Errorf("a shell step got %s", e.Name)
		}
	}
	if len(pod.Spec.Volumes) != 3 {
		t.Errorf("a shell step got volumes %+v", pod.Spec.Volumes)
	}
	loop.Spec.Agent.APIKeySecretRef = &v1alpha1.SecretKeyRef{Name: "keys", Key: "anthropic"}
	var refused *runner.Refused
	if _, err := Build(loop, "r", executor.Action{State: "fix", Command: "/fix", Agent: true}, o); !errors.As(err, &refused) || refused.Reason != "AgentKeyWithGateway" {
		t.Errorf("a Loop's own key beside the gateway: %v", err)
	}
}

// An object admitted before the CIDR rule (or past it) still cannot make a
// policy of a block that does not parse: the step is refused, naming it.
func TestEgressPolicyRefusesABadBlock(t *testing.T) {
	loop := testLoop()
	loop.Spec.Runner = &v1alpha1.RunnerSpec{Network: &v1alpha1.NetworkSpec{Allow: []v1alpha1.EgressRule{{CIDR: "10.0.0.1/32"}, {CIDR: "github.com"}}}}
	var refused *runner.Refused
	if _, err := testOptions.EgressPolicy(loop); !errors.As(err, &refused) || refused.Reason != "InvalidEgress" ||
		!strings.Contains(refused.Message, "spec.runner.network.allow[1].cidr") {
		t.Fatalf("a bad block: %v", err)
	}
	loop.Spec.Runner.Network.Allow[1].CIDR = "10.0.0.0/8"
	np, err := testOptions.EgressPolicy(loop)
	if err != nil || len(np.Spec.Egress) != 3 || np.Spec.Egress[2].To[0].IPBlock.CIDR != "10.0.0.0/8" {
		t.Fatalf("policy %+v, %v", np, err)
	}
}
