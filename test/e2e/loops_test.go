//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/runner/pod"
	"github.com/looprun/looprun/test/fixture"
)

// kstatusOf is the Loop's health as Flux and Argo CD read it.
func kstatusOf(g Gomega, key client.ObjectKey) status.Status {
	st, err := fixture.KStatus(bg, k8sClient, key)
	g.Expect(err).NotTo(HaveOccurred())
	return st
}

func create(ns, name string, spec v1alpha1.LoopSpec) client.ObjectKey {
	GinkgoHelper()
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	Expect(k8sClient.Create(bg, loop)).To(Succeed())
	return client.ObjectKeyFromObject(loop)
}

// withWorkspace gives a spec a workspace claim its steps share.
func withWorkspace(spec v1alpha1.LoopSpec) v1alpha1.LoopSpec {
	spec.Runner = &v1alpha1.RunnerSpec{Workspace: &v1alpha1.WorkspaceSpec{VolumeClaimTemplate: &corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}}}
	return spec
}

// counting is a loop of n steps, each a Pod that appends its iteration to
// a file of the shared workspace, and to one in the run's run_dir (which
// the entrypoint makes); the n-th goes to done.
func counting(n int32) v1alpha1.LoopSpec {
	return withWorkspace(v1alpha1.LoopSpec{Initial: "append", MaxIterations: ptr.To(n + 5), States: map[string]v1alpha1.State{
		"append": {Action: fmt.Sprintf("echo ${state.iteration} >> lines && echo ${state.iteration} >> ${context.run_dir}lines && test ${state.iteration} -ge %d", n), OnSuccess: "done", OnFailure: "append"},
		"done":   {Terminal: true},
	}})
}

// workspaceFile reads a file of a Loop's workspace claim from the local
// volume bound to it.
func workspaceFile(ns, loop, file string) string {
	GinkgoHelper()
	pvc := &corev1.PersistentVolumeClaim{}
	Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: pod.WorkspaceClaim(loop)}, pvc)).To(Succeed())
	pv := &corev1.PersistentVolume{}
	Expect(k8sClient.Get(bg, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv)).To(Succeed())
	b, err := os.ReadFile(filepath.Join(pv.Spec.Local.Path, file))
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}

// expectCountFollowed checks what looprun watch showed of a state count
// that printed seq 1 2000 long before it ended: followed, its head, and
// how much more there was.
func expectCountFollowed(out string) {
	GinkgoHelper()
	Expect(out).To(ContainSubstring("] count ("))
	Expect(out).To(ContainSubstring("\n       1\n       2\n       3\n"))
	Expect(out).To(ContainSubstring("… 1960 more lines"))
}

func oneToN(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

// summary is what two runs of one loop must agree on.
func summary(l *v1alpha1.Loop) string {
	s := l.Status
	verdict := "<none>"
	if s.LastResult != nil {
		verdict = s.LastResult.Verdict
	}
	return fmt.Sprintf("phase=%s state=%s iteration=%d terminatedBy=%s verdict=%s lastSeq=%d", s.Phase, s.CurrentState, s.Iteration,
		s.TerminatedBy, verdict, s.LastSeq)
}

var _ = Describe("Loops on a real node", func() {
	It("runs the sample with real Pods: Ready for kubectl wait and kstatus, logs, and deletion collects what it owned", func() {
		ns := newNamespace()
		volumes(1)
		applyFile(ns, filepath.Join(root, "config", "samples", "looprun_v1alpha1_loop.yaml"))
		run("kubectl", "wait", "-n", ns, "--for=condition=Ready", "loop/fix-until-clean", "--timeout=180s")
		key := client.ObjectKey{Namespace: ns, Name: "fix-until-clean"}
		loop := getLoop(Default, key)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), describe(loop))
		Expect(loop.Status.CurrentState).To(Equal("done"))
		Expect(kstatusOf(Default, key)).To(Equal(status.CurrentStatus))
		Expect(workspaceFile(ns, "fix-until-clean", "fixes")).To(Equal("fixed\nfixed\n"))

		// The action Pods' logs, through the API server and the kubelet.
		out := run(looprun, "logs", "-n", ns, "fix-until-clean")
		Expect(out).To(ContainSubstring("fix 2 applied"))
		Expect(out).To(ContainSubstring("clean"))

		Expect(k8sClient.Delete(bg, loop)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(loopPods(ns, "fix-until-clean")).To(BeEmpty())
			cms := &corev1.ConfigMapList{}
			g.Expect(k8sClient.List(bg, cms, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelLoop: "fix-until-clean"})).To(Succeed())
			g.Expect(cms.Items).To(BeEmpty())
			err := k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: pod.WorkspaceClaim("fix-until-clean")}, &corev1.PersistentVolumeClaim{})
			g.Expect(client.IgnoreNotFound(err)).To(Succeed())
			g.Expect(err).To(HaveOccurred(), "the workspace claim is still there")
		}, time.Minute, 250*time.Millisecond).Should(Succeed())
	})

	It("runs the examples with real Pods to the same end as a local run", func() {
		ns := newNamespace()
		examples := []string{"fix-until-clean", "drive-a-metric", "maintain-an-invariant"}
		volumes(len(examples))
		type end struct {
			State        string `json:"current_state"`
			Iteration    int32  `json:"iteration"`
			TerminatedBy string `json:"terminated_by"`
		}
		want, keys := map[string]end{}, map[string]client.ObjectKey{}
		for _, name := range examples {
			file := filepath.Join(root, "examples", name, "loop.yaml")
			// Locally, in a directory of its own, its scratch file there.
			dir := GinkgoT().TempDir()
			cmd := exec.Command(looprun, "run", "-q", file, "--set", "file=scratch.txt")
			cmd.Dir = dir
			_ = cmd.Run() // a maintain loop ends by its limit: exit code 1
			var e end
			b, err := os.ReadFile(filepath.Join(dir, ".loops", ".running", name+".state.json"))
			Expect(err).NotTo(HaveOccurred())
			Expect(json.Unmarshal(b, &e)).To(Succeed())
			want[name] = e

			// In the cluster: the manifest looprun convert prints, its steps
			// sharing a workspace claim that holds the scratch file.
			loop := &v1alpha1.Loop{}
			Expect(yaml.Unmarshal([]byte(run(looprun, "convert", file)), loop)).To(Succeed())
			loop.Namespace = ns
			loop.Spec = withWorkspace(loop.Spec)
			loop.Spec.Context["file"] = apiextensionsv1.JSON{Raw: []byte(`"scratch.txt"`)}
			Expect(k8sClient.Create(bg, loop)).To(Succeed())
			keys[name] = client.ObjectKeyFromObject(loop)
		}
		// GitOps health as kstatus reads it: a loop that ended at a limit
		// (the maintain loop) is Failed, the others Current.
		health := map[string]status.Status{"fix-until-clean": status.CurrentStatus, "drive-a-metric": status.CurrentStatus, "maintain-an-invariant": status.FailedStatus}
		for _, name := range examples {
			got := waitFinished(keys[name], 5*time.Minute)
			Expect(end{got.Status.CurrentState, got.Status.Iteration, string(got.Status.TerminatedBy)}).To(Equal(want[name]), "%s: %s", name, describe(got))
			Expect(kstatusOf(Default, keys[name])).To(Equal(health[name]), name)
		}
	})

	It("shows a Loop with looprun watch as looprun run shows a local run, its Pod's output followed as it comes", func() {
		ns := newNamespace()
		// The output is complete long before the Pod ends: followed, the
		// watch shows its head; from the event's preview it could only
		// show its tail.
		key := create(ns, "watched", v1alpha1.LoopSpec{Initial: "count", States: map[string]v1alpha1.State{
			"count": {Action: "seq 1 2000; sleep 8", Next: "done"},
			"done":  {Terminal: true},
		}})
		out := run(looprun, "watch", "-n", ns, "loop/watched")
		Expect(out).To(ContainSubstring("Running loop: watched"))
		expectCountFollowed(out)
		Expect(out).To(ContainSubstring("Loop completed: done (1 iterations"))
		Expect(getLoop(Default, key).Status.Phase).To(Equal(v1alpha1.PhaseCompleted))
	})

	It("holds a suspended Loop, not Ready (in progress for kstatus), and runs it when resumed", func() {
		ns := newNamespace()
		key := create(ns, "held", v1alpha1.LoopSpec{Initial: "a", Suspend: true, States: map[string]v1alpha1.State{
			"a": {Action: "echo ran", Capture: "a", Next: "done"}, "done": {Terminal: true},
		}})
		Eventually(func(g Gomega) { g.Expect(getLoop(g, key).Status.Phase).To(Equal(v1alpha1.PhaseSuspended)) }, time.Minute).Should(Succeed())
		// Paused, not done: kubectl wait --for=condition=Ready goes on waiting.
		Expect(kstatusOf(Default, key)).To(Equal(status.InProgressStatus))
		ready := findCondition(getLoop(Default, key), v1alpha1.ReadyCondition)
		Expect(ready).NotTo(BeNil())
		Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		Expect(ready.Reason).To(Equal(v1alpha1.ReasonSuspended))
		Expect(loopPods(ns, "held")).To(BeEmpty())
		run(looprun, "resume", "-n", ns, "loop/held")
		loop := waitFinished(key, 2*time.Minute)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), describe(loop))
		Expect(loop.Status.Captured["a"].Output).To(Equal("ran"))
	})

	It("says why a shell action cannot start in an image without bash", func() {
		ns := newNamespace()
		key := create(ns, "nobash", v1alpha1.LoopSpec{Initial: "a", Runner: &v1alpha1.RunnerSpec{Image: nobashImage}, States: map[string]v1alpha1.State{
			"a":    {Action: "echo hi", Next: "done"},
			"done": {Terminal: true},
		}})
		loop := waitFinished(key, 2*time.Minute)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseFailed), describe(loop))
		Expect(kstatusOf(Default, key)).To(Equal(status.FailedStatus))
		stalled := findCondition(loop, v1alpha1.StalledCondition)
		Expect(stalled).NotTo(BeNil())
		Expect(stalled.Message).To(ContainSubstring(`cannot start bash`))
		Expect(stalled.Message).To(ContainSubstring(`executable file not found`))

		// With the image's own shell, the same image serves.
		key = create(ns, "sh", v1alpha1.LoopSpec{Initial: "a", Runner: &v1alpha1.RunnerSpec{Image: nobashImage, Shell: "sh"}, States: map[string]v1alpha1.State{
			"a":    {Action: "echo hi from sh", Capture: "a", Next: "done"},
			"done": {Terminal: true},
		}})
		loop = waitFinished(key, 2*time.Minute)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), describe(loop))
		Expect(loop.Status.Captured["a"].Output).To(Equal("hi from sh"))
	})

	It("gives actions envFrom a Secret, and an agent its key from a Secret; the agent's text is its log and output, its usage in status", func() {
		ns := newNamespace()
		Expect(k8sClient.Create(bg, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"},
			StringData: map[string]string{"GREETING": "hello from a Secret"}})).To(Succeed())
		Expect(k8sClient.Create(bg, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"},
			StringData: map[string]string{"api-key": "sk-test"}})).To(Succeed())
		spec := v1alpha1.LoopSpec{Initial: "greet",
			Runner: &v1alpha1.RunnerSpec{EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}},
			Agent:  &v1alpha1.AgentSpec{APIKeySecretRef: &v1alpha1.SecretKeyRef{Name: "agent", Key: "api-key"}},
			States: map[string]v1alpha1.State{
				"greet": {Action: `echo "$GREETING"`, Capture: "greet", Next: "ask"},
				"ask":   {Action: "say hi", ActionType: v1alpha1.ActionAgent, Capture: "ask", Next: "done"},
				"done":  {Terminal: true},
			}}
		loop := waitFinished(create(ns, "secrets", spec), 2*time.Minute)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), describe(loop))
		Expect(loop.Status.Captured["greet"].Output).To(Equal("hello from a Secret"))
		Expect(loop.Status.Captured["ask"].Output).To(Equal("thinking\nagent: say hi (key: yes)"))
		// The stream-json the agent printed is read in its Pod: its text is
		// the Pod's log, its usage (priced by the default table) the Loop's.
		Expect(loop.Status.Usage).NotTo(BeNil())
		Expect(loop.Status.Usage.UsageTotals).To(Equal(v1alpha1.UsageTotals{Calls: 1, InputTokens: 1000, OutputTokens: 100,
			CostMicroUSD: 1000*3 + 100*15, CLICostMicroUSD: 500000, Model: "claude-sonnet-4-6"}))
		var askPod string
		for _, p := range loopPods(ns, "secrets") {
			if p.Labels[v1alpha1.LabelState] == "ask" {
				askPod = p.Name
			}
		}
		Expect(askPod).NotTo(BeEmpty())
		Expect(run("kubectl", "logs", "-n", ns, askPod, "-c", "action")).To(Equal("thinking\nagent: say hi (key: yes)\n"))
	})

	It("pauses an agent Loop on its budget, and goes on when looprun budget raises it, every action once", func() {
		ns := newNamespace()
		// The stub agent's turn costs 1000×3 + 100×15 = 4500 micro-dollars.
		spec := v1alpha1.LoopSpec{Initial: "ask", MaxIterations: ptr.To[int32](6), Budget: &v1alpha1.Budget{MaxCostUSD: "0.0045"},
			States: map[string]v1alpha1.State{
				"ask":   {Action: "go on", ActionType: v1alpha1.ActionAgent, Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalExitCode}, Capture: "ask", Next: "check"},
				"check": {Action: "true", Next: "ask"},
				"done":  {Terminal: true},
			}}
		key := create(ns, "spender", spec)
		paused := func(calls int64) *v1alpha1.Loop {
			var loop *v1alpha1.Loop
			Eventually(func(g Gomega) {
				loop = &v1alpha1.Loop{}
				g.Expect(k8sClient.Get(bg, key, loop)).To(Succeed())
				g.Expect(loop.Status.Phase).To(Equal(v1alpha1.PhasePaused))
				g.Expect(loop.Status.Usage).NotTo(BeNil())
				g.Expect(loop.Status.Usage.Calls).To(Equal(calls))
			}, 2*time.Minute, time.Second).Should(Succeed())
			return loop
		}
		loop := paused(1)
		Expect(findCondition(loop, v1alpha1.ReadyCondition).Reason).To(Equal(v1alpha1.ReasonBudgetExceeded))
		Expect(kstatusOf(Default, key)).To(Equal(status.InProgressStatus))
		// The agent was told the whole budget as its own ceiling.
		Expect(loop.Status.Captured["ask"].Output).To(Equal("thinking\nagent: go on (key: no)\nbudget: 0.0045"))
		Expect(run(looprun, "budget", "-n", ns, "loop/spender", "--add", "0.0045")).To(ContainSubstring("$0.0045 of $0.009 spent"))
		loop = paused(2)
		Expect(loop.Status.Captured["ask"].Output).To(HaveSuffix("budget: 0.0045"))
		Expect(run(looprun, "describe", "-n", ns, "loop/spender")).To(ContainSubstring("Budget:"))
		run(looprun, "budget", "-n", ns, "loop/spender", "--set", "1")
		loop = waitFinished(key, 2*time.Minute)
		Expect(loop.Status.TerminatedBy).To(Equal(v1alpha1.TerminatedMaxIterations), describe(loop))
		Expect(loop.Status.Usage.Calls).To(Equal(int64(3)))
		// Each action started once across the pauses (the event log; the
		// operator prunes old step Pods, so they are no record).
		starts := run(looprun, "history", "-n", ns, "loop/spender", "--type", "action_start", "-o", "json")
		Expect(strings.Count(starts, `"action_start"`)).To(Equal(6), starts)
	})

	It("admits an approval only from a user holding the verb approve, named as the API server knows them (the chart's policy)", func() {
		ns := newNamespace()
		key := create(ns, "gate", v1alpha1.LoopSpec{Initial: "ask", States: map[string]v1alpha1.State{
			"ask":     {Approval: &v1alpha1.Approval{Message: "ship it?"}, Route: map[string]v1alpha1.StateName{"approved": "done", "rejected": "stopped"}},
			"done":    {Terminal: true},
			"stopped": {Terminal: true},
		}})
		var waiting v1alpha1.ApprovalTarget
		Eventually(func(g Gomega) {
			loop := getLoop(g, key)
			g.Expect(loop.Status.Action).NotTo(BeNil())
			g.Expect(loop.Status.Action.Approval).NotTo(BeNil())
			waiting = v1alpha1.ApprovalTarget{RunID: loop.Status.RunID, State: loop.Status.Action.State, Iteration: loop.Status.Action.Iteration}
		}, time.Minute, time.Second).Should(Succeed())
		// bob may edit Loops in the namespace, but not approve them.
		run("kubectl", "create", "role", "loop-editor", "-n", ns, "--verb=get,patch,update", "--resource=loops.looprun.io")
		run("kubectl", "create", "rolebinding", "editors", "-n", ns, "--role=loop-editor", "--user=bob")
		denied := exec.Command("kubectl", "annotate", "--overwrite", "-n", ns, "--as", "bob", "loop/gate",
			v1alpha1.RequestAnnotation+"="+v1alpha1.ApprovalRequest(true, waiting, "1"), v1alpha1.ApprovedByAnnotation+"=bob")
		denied.Dir = root
		out, err := denied.CombinedOutput()
		Expect(err).To(HaveOccurred(), "bob approved:\n%s", out)
		Expect(string(out)).To(ContainSubstring("bob may not approve or reject loop gate"))
		// alice holds the chart's approver role: her approval goes through.
		run("kubectl", "create", "rolebinding", "approvers", "-n", ns, "--clusterrole=looprun-approver", "--user=alice")
		run("kubectl", "annotate", "--overwrite", "-n", ns, "--as", "alice", "loop/gate",
			v1alpha1.ApprovalMessageAnnotation+"=fine by me", v1alpha1.RequestAnnotation+"="+v1alpha1.ApprovalRequest(true, waiting, "2"),
			v1alpha1.ApprovedByAnnotation+"=alice")
		loop := waitFinished(key, time.Minute)
		Expect(loop.Status.CurrentState).To(Equal("done"), describe(loop))
		Expect(run(looprun, "history", "-n", ns, "loop/gate", "--type", "approval_answered", "-o", "json")).To(
			And(MatchRegexp(`"by": ?"alice"`), MatchRegexp(`"message": ?"fine by me"`)))
	})

	It("ends a step whose Pod cannot start, naming the cause", func() {
		ns := newNamespace()
		missing := create(ns, "missing-image", v1alpha1.LoopSpec{Initial: "a", Runner: &v1alpha1.RunnerSpec{Image: "looprun.local/missing:1"},
			States: map[string]v1alpha1.State{"a": {Action: "true", Next: "done"}, "done": {Terminal: true}}})
		pending := withWorkspace(v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{"a": {Action: "true", Next: "done"}, "done": {Terminal: true}}})
		pending.Runner.Workspace.VolumeClaimTemplate.StorageClassName = ptr.To("no-such-class")
		claim := create(ns, "pending-claim", pending)

		loop := waitFinished(missing, 2*time.Minute)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseFailed), describe(loop))
		Expect(findCondition(loop, v1alpha1.StalledCondition).Message).To(And(ContainSubstring(pod.ReasonImagePullFailed), ContainSubstring("looprun.local/missing:1")))

		loop = waitFinished(claim, 2*time.Minute)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseFailed), describe(loop))
		Expect(findCondition(loop, v1alpha1.StalledCondition).Message).To(And(ContainSubstring(pod.ReasonPodNeverStarted), ContainSubstring("not scheduled"), ContainSubstring("PersistentVolumeClaim")))
	})

	It("stops a running Loop's Pod when the Loop is deleted, and collects everything it owned", func() {
		ns := newNamespace()
		volumes(1)
		spec := withWorkspace(v1alpha1.LoopSpec{Initial: "wait", States: map[string]v1alpha1.State{
			"wait": {Action: "sleep 600", Next: "done"},
			"done": {Terminal: true},
		}})
		key := create(ns, "long", spec)
		var podName string
		Eventually(func(g Gomega) {
			pods := loopPods(ns, "long")
			g.Expect(pods).To(HaveLen(1))
			g.Expect(pods[0].Status.Phase).To(Equal(corev1.PodRunning))
			podName = pods[0].Name
		}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())
		Eventually(func(g Gomega) { g.Expect(kstatusOf(g, key)).To(Equal(status.InProgressStatus)) }).Should(Succeed())

		loop := getLoop(Default, key)
		Expect(k8sClient.Delete(bg, loop)).To(Succeed())
		Eventually(func(g Gomega) {
			err := k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: podName}, &corev1.Pod{})
			g.Expect(err).To(HaveOccurred(), "the action Pod is still there")
			g.Expect(client.IgnoreNotFound(err)).To(Succeed())
			cms := &corev1.ConfigMapList{}
			g.Expect(k8sClient.List(bg, cms, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelLoop: "long"})).To(Succeed())
			g.Expect(cms.Items).To(BeEmpty())
		}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())
	})

	It("runs a sub-loop as a child Loop with real Pods, and deleting the parent deletes the child and its Pod", func() {
		ns := newNamespace()
		tpl := &v1alpha1.LoopTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sleeper"},
			Spec: v1alpha1.LoopTemplateSpec{LoopSpec: v1alpha1.LoopSpec{Initial: "wait", States: map[string]v1alpha1.State{
				"wait": {Action: "echo started; sleep 600", Next: "done"},
				"done": {Terminal: true},
			}}}}
		Expect(k8sClient.Create(bg, tpl)).To(Succeed())
		key := create(ns, "parent", v1alpha1.LoopSpec{Initial: "run", States: map[string]v1alpha1.State{
			"run":  {Loop: "sleeper", OnSuccess: "done"},
			"done": {Terminal: true},
		}})
		var child v1alpha1.Loop
		var podName string
		Eventually(func(g Gomega) {
			list := &v1alpha1.LoopList{}
			g.Expect(k8sClient.List(bg, list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelParent: "parent"})).To(Succeed())
			g.Expect(list.Items).To(HaveLen(1))
			child = list.Items[0]
			pods := loopPods(ns, child.Name)
			g.Expect(pods).To(HaveLen(1))
			g.Expect(pods[0].Status.Phase).To(Equal(corev1.PodRunning))
			podName = pods[0].Name
		}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())
		Expect(getLoop(Default, key).Status.Action.Child).To(Equal(child.Name))

		Expect(k8sClient.Delete(bg, getLoop(Default, key))).To(Succeed())
		Eventually(func(g Gomega) {
			err := k8sClient.Get(bg, client.ObjectKeyFromObject(&child), &v1alpha1.Loop{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the child Loop is still there: %v", err)
			err = k8sClient.Get(bg, client.ObjectKey{Namespace: ns, Name: podName}, &corev1.Pod{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the child's action Pod is still there: %v", err)
		}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())
	})

	It("runs a sub-loop's Pods in its parent's workspace, as a sub-loop runs in its parent's directory", func() {
		ns := newNamespace()
		volumes(1)
		tpl := &v1alpha1.LoopTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "append"},
			Spec: v1alpha1.LoopTemplateSpec{LoopSpec: v1alpha1.LoopSpec{Initial: "add", States: map[string]v1alpha1.State{
				"add":  {Action: "test -s note && echo from-child >> note", OnSuccess: "done", OnFailure: "failed"},
				"done": {Terminal: true}, "failed": {Terminal: true},
			}}}}
		Expect(k8sClient.Create(bg, tpl)).To(Succeed())
		key := create(ns, "writer", withWorkspace(v1alpha1.LoopSpec{Initial: "write", States: map[string]v1alpha1.State{
			"write": {Action: "echo from-parent > note", Next: "child"},
			"child": {Loop: "append", OnSuccess: "read", OnFailure: "broken"},
			"read":  {Action: "cat note", Capture: "note", Next: "done"},
			"done":  {Terminal: true}, "broken": {Terminal: true, Failure: ptr.To(true)},
		}}))
		loop := waitFinished(key, 3*time.Minute)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), describe(loop))
		Expect(loop.Status.Captured["note"].Output).To(Equal("from-parent\nfrom-child"))
	})

	It("finishes a 30-step loop once while its operator Pod is deleted five times", func() {
		ns := newNamespace()
		volumes(2)
		want := waitFinished(create(ns, "calm", counting(30)), 5*time.Minute)
		Expect(want.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), describe(want))
		Expect(workspaceFile(ns, "calm", "lines")).To(Equal(oneToN(30)))
		Expect(workspaceFile(ns, "calm", ".loops/runs/"+string(want.UID)[:8]+"/lines")).To(Equal(oneToN(30)), "the run_dir the operator gives a run")

		key := create(ns, "restarts", counting(30))
		for i := range 5 {
			time.Sleep(time.Duration(2000+rand.IntN(3000)) * time.Millisecond)
			Expect(getLoop(Default, key).Status.Phase.IsFinished()).To(BeFalse(), "the loop ended before restart %d", i+1)
			old := leader()
			Expect(old).NotTo(BeEmpty())
			Expect(k8sClient.Delete(bg, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNS, Name: old}})).To(Succeed())
			Eventually(func() string { return leader() }, 2*time.Minute, 250*time.Millisecond).ShouldNot(Or(BeEmpty(), Equal(old)))
		}
		got := waitFinished(key, 5*time.Minute)
		Expect(summary(got)).To(Equal(summary(want)))
		// Each step ran once: each iteration appended its line once.
		Expect(workspaceFile(ns, "restarts", "lines")).To(Equal(oneToN(30)))
	})
})

var _ = Describe("The operator as the chart installs it", Serial, func() {
	It("carries a run across a helm upgrade to a new image with two replicas, and keeps to its watched namespaces", func() {
		DeferCleanup(func() { installOperator("e2e", "replicas=1") })
		// A second tag of the same image, as a release would bring.
		run("ctr", "--address", filepath.Join(e2eDir, "run", "containerd.sock"), "-n", "k8s.io", "images", "tag", "--force",
			operatorImage+":e2e", operatorImage+":e2e-next")
		ns := newNamespace()
		volumes(1)
		key := create(ns, "upgraded", counting(15))
		Eventually(func(g Gomega) { g.Expect(getLoop(g, key).Status.Iteration).To(BeNumerically(">=", 2)) }, 2*time.Minute).Should(Succeed())
		installOperator("e2e-next", "replicas=2")
		d := &appsv1.Deployment{}
		Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: operatorNS, Name: release}, d)).To(Succeed())
		Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal(operatorImage + ":e2e-next"))
		loop := waitFinished(key, 5*time.Minute)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), describe(loop))
		Expect(workspaceFile(ns, "upgraded", "lines")).To(Equal(oneToN(15)))

		// The leader goes: the other replica takes over at once, the lease
		// released, not waited out.
		old := leader()
		start := time.Now()
		Expect(k8sClient.Delete(bg, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNS, Name: old}})).To(Succeed())
		Eventually(func() string { return leader() }, time.Minute, 100*time.Millisecond).ShouldNot(Or(BeEmpty(), Equal(old)))
		GinkgoWriter.Printf("a new leader %s after the old one was deleted\n", time.Since(start))
		Expect(time.Since(start)).To(BeNumerically("<", 12*time.Second), "the new leader waited for the old lease to expire")

		// Watching one namespace, with rights in it only, the operator leaves
		// another's Loops alone.
		watched, other := newNamespace(), newNamespace()
		installOperator("e2e", "replicas=1", "watchNamespaces={"+watched+"}")
		spec := v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{"a": {Action: "echo hi", Next: "done"}, "done": {Terminal: true}}}
		ignored := create(other, "ignored", spec)
		served := waitFinished(create(watched, "served", spec), 2*time.Minute)
		Expect(served.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), describe(served))
		Consistently(func(g Gomega) { g.Expect(getLoop(g, ignored).Status.Phase).To(BeEmpty()) }, 10*time.Second).Should(Succeed())

		// A shard: the chart's second Deployment runs the labelled Loops.
		installOperator("e2e", "replicas=1", "shards={blue}")
		Eventually(func(g Gomega) {
			d := &appsv1.Deployment{}
			g.Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: operatorNS, Name: release + "-shard-blue"}, d)).To(Succeed())
			g.Expect(d.Status.AvailableReplicas).To(Equal(int32(1)))
		}, 2*time.Minute, time.Second).Should(Succeed())
		sharded := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "sharded", Labels: map[string]string{v1alpha1.LabelShard: "blue"}}, Spec: spec}
		Expect(k8sClient.Create(bg, sharded)).To(Succeed())
		loop = waitFinished(client.ObjectKeyFromObject(sharded), 2*time.Minute)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), describe(loop))
		for _, p := range loopPods(other, "sharded") {
			Expect(p.Labels).To(HaveKeyWithValue(v1alpha1.LabelShard, "blue"))
		}
		Expect(run("kubectl", "logs", "-n", operatorNS, "deploy/"+release+"-shard-blue")).To(ContainSubstring(`"name":"sharded"`))
	})
})

func findCondition(loop *v1alpha1.Loop, t string) *metav1.Condition {
	for i := range loop.Status.Conditions {
		if loop.Status.Conditions[i].Type == t {
			return &loop.Status.Conditions[i]
		}
	}
	return nil
}
