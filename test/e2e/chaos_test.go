//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/test/fixture"
)

// The chaos run (make test-chaos, not part of make test-e2e): Loops of
// every shape run at once while the operator Pod is killed again and again
// and the API server goes away now and then; each must end as an
// undisturbed run of the same Loop ends.
const (
	chaosLoops     = 50  // Loops running at once
	chaosKills     = 100 // operator Pods killed
	chaosAPIServer = 5   // API server restarts, spread over the kills
)

// chaosShape is one kind of Loop of the chaos run.
type chaosShape struct {
	name      string
	workspace bool
	spec      func() v1alpha1.LoopSpec
	// files are workspace files and what each must hold at the end: a step
	// run twice would have written its line twice.
	files map[string]string
}

func chaosShapes(llmURL string) []chaosShape {
	ge := func(n int) *apiextensionsv1.JSON { return &apiextensionsv1.JSON{Raw: []byte(fmt.Sprint(n))} }
	return []chaosShape{
		{name: "count", workspace: true, spec: func() v1alpha1.LoopSpec { return counting(12) },
			files: map[string]string{"lines": oneToN(12)}},
		{name: "numeric", spec: func() v1alpha1.LoopSpec {
			return v1alpha1.LoopSpec{Initial: "step", States: map[string]v1alpha1.State{
				"step": {Action: "echo ${state.iteration}", Capture: "n", Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalOutputNumeric, Operator: "ge", Target: ge(10)},
					OnSuccess: "done", OnFailure: "step"},
				"done": {Terminal: true},
			}}
		}},
		{name: "subloop", spec: func() v1alpha1.LoopSpec {
			return v1alpha1.LoopSpec{Initial: "work", States: map[string]v1alpha1.State{
				"work":   {Action: "echo pass ${state.iteration}", Next: "child"},
				"child":  {Loop: "chaos-child", OnSuccess: "check", OnFailure: "broken"},
				"check":  {Action: "test ${state.iteration} -ge 9", OnSuccess: "done", OnFailure: "work"},
				"done":   {Terminal: true},
				"broken": {Terminal: true, Failure: ptr.To(true)},
			}}
		}},
		{name: "judge", spec: func() v1alpha1.LoopSpec {
			return v1alpha1.LoopSpec{Initial: "check",
				LLM: &v1alpha1.LLMSpec{BaseURL: llmURL, APIKeySecretRef: &v1alpha1.SecretKeyRef{Name: "llm", Key: "api-key"}},
				States: map[string]v1alpha1.State{
					"check":  {Action: "echo ${state.iteration}", Evaluate: &v1alpha1.Evaluate{Type: v1alpha1.EvalLLMStructured}, OnSuccess: "count", OnFailure: "failed", OnError: "failed"},
					"count":  {Action: "test ${state.iteration} -ge 10", OnSuccess: "done", OnFailure: "check"},
					"done":   {Terminal: true},
					"failed": {Terminal: true, Failure: ptr.To(true)},
				}}
		}},
		{name: "maintain", spec: func() v1alpha1.LoopSpec {
			return v1alpha1.LoopSpec{Initial: "tick", Maintain: true, MaxIterations: ptr.To[int32](8), States: map[string]v1alpha1.State{
				"tick": {Action: "echo tick ${state.iteration}", Next: "rest"},
				"rest": {Terminal: true, OnMaintain: "tick"},
			}}
		}},
		{name: "retry", workspace: true, spec: func() v1alpha1.LoopSpec {
			return withWorkspace(v1alpha1.LoopSpec{Initial: "try", States: map[string]v1alpha1.State{
				// Fails with the transient code 3 twice, then succeeds: the
				// same iteration, three Pods, one line each in tries.
				"try": {Action: `echo x >> tries; test "$(wc -l < tries)" -ge 3 || exit 3`,
					RetryPolicy: &v1alpha1.RetryPolicy{Limit: 5, Backoff: &metav1.Duration{Duration: time.Second}, ExitCodes: []int32{3}},
					OnSuccess:   "after", OnFailure: "failed"},
				"after":  {Action: "wc -l < tries", Capture: "tries", Next: "done"},
				"done":   {Terminal: true},
				"failed": {Terminal: true, Failure: ptr.To(true)},
			}})
		}, files: map[string]string{"tries": "x\nx\nx\n"}},
	}
}

// lean keeps one finished action Pod per Loop (the default keeps five): the
// run makes hundreds of Loops on one node, and a kubelet with thousands of
// exited Pods to sync started the operator's replacement Pod ever later
// (6 s at the start of the run of 2026-11-27, 96 s at its end). Which Pods
// were made is checked from the watch, not from the Pods left.
//
// In Warm mode (LOOPRUN_CHAOS_MODE=warm, `make test-chaos MODE=warm`) every
// Loop runs its shell steps in a runner Pod, each step after a pause of
// chaosWarmPause, so that a kill lands in the middle of steps and
// hand-offs rather than between runs of a few milliseconds.
func lean(spec v1alpha1.LoopSpec) v1alpha1.LoopSpec {
	if spec.History == nil {
		spec.History = &v1alpha1.HistorySpec{}
	}
	spec.History.KeepPods = ptr.To[int32](1)
	if chaosWarm {
		if spec.Runner == nil {
			spec.Runner = &v1alpha1.RunnerSpec{}
		}
		spec.Runner.Mode = v1alpha1.RunnerModeWarm
		states := map[string]v1alpha1.State{}
		for name, st := range spec.States {
			if st.Action != "" && st.Loop == "" {
				st.Action = chaosWarmPause + st.Action
			}
			states[name] = st
		}
		spec.States = states
	}
	return spec
}

// chaosWarm runs the chaos Loops in Warm mode.
var chaosWarm = os.Getenv("LOOPRUN_CHAOS_MODE") == "warm"

const chaosWarmPause = "sleep 0.3; "

// chaosWatch records, from the API server's watch, every action Pod
// created (by name, with its UIDs) and when Loops last changed.
type chaosWatch struct {
	mu      sync.Mutex
	podUIDs map[string][]types.UID
	moves   []time.Time // when a Loop's status changed, in order
}

func (w *chaosWatch) pod(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Labels[v1alpha1.LabelLoop] == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !slices.Contains(w.podUIDs[p.Name], p.UID) {
		w.podUIDs[p.Name] = append(w.podUIDs[p.Name], p.UID)
	}
}

func (w *chaosWatch) loopMoved(old, cur any) {
	o, ok1 := old.(*v1alpha1.Loop)
	c, ok2 := cur.(*v1alpha1.Loop)
	if !ok1 || !ok2 || o.ResourceVersion == c.ResourceVersion || o.Status.LastSeq == c.Status.LastSeq {
		return
	}
	w.mu.Lock()
	w.moves = append(w.moves, time.Now())
	w.mu.Unlock()
}

// movedAfter is the first time a Loop moved on after t.
func (w *chaosWatch) movedAfter(t time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	i, _ := slices.BinarySearchFunc(w.moves, t, func(m, t time.Time) int { return m.Compare(t) })
	if i == len(w.moves) {
		return time.Time{}, false
	}
	return w.moves[i], true
}

func (w *chaosWatch) pods() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.podUIDs)
}

func (w *chaosWatch) createdTwice() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var twice []string
	for name, uids := range w.podUIDs {
		if len(uids) > 1 {
			twice = append(twice, name)
		}
	}
	slices.Sort(twice)
	return twice
}

func watchChaos(ns string) *chaosWatch {
	GinkgoHelper()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	Expect(err).NotTo(HaveOccurred())
	c, err := cache.New(cfg, cache.Options{Scheme: fixture.Scheme(), DefaultNamespaces: map[string]cache.Config{ns: {}}})
	Expect(err).NotTo(HaveOccurred())
	w := &chaosWatch{podUIDs: map[string][]types.UID{}}
	pods, err := c.GetInformer(bg, &corev1.Pod{})
	Expect(err).NotTo(HaveOccurred())
	_, err = pods.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: w.pod, UpdateFunc: func(_, o any) { w.pod(o) }})
	Expect(err).NotTo(HaveOccurred())
	loops, err := c.GetInformer(bg, &v1alpha1.Loop{})
	Expect(err).NotTo(HaveOccurred())
	_, err = loops.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: w.loopMoved})
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(bg)
	DeferCleanup(cancel)
	go func() { _ = c.Start(ctx) }()
	Expect(c.WaitForCacheSync(ctx)).To(BeTrue())
	return w
}

// kill ends the leading operator Pod: deleted as a rollout or a drain does
// (it releases its lease on the way out), or its process killed at once,
// as the kernel's OOM killer or a lost node does (the lease must expire),
// the Pod then force-deleted so that its ReplicaSet makes another.
func kill(pod string, hard bool) {
	GinkgoHelper()
	p := &corev1.Pod{}
	err := k8sClient.Get(bg, client.ObjectKey{Namespace: operatorNS, Name: pod}, p)
	if apierrors.IsNotFound(err) {
		return // gone already
	}
	Expect(err).NotTo(HaveOccurred())
	if !hard {
		Expect(client.IgnoreNotFound(k8sClient.Delete(bg, p))).To(Succeed())
		return
	}
	for _, s := range p.Status.ContainerStatuses {
		if id, ok := strings.CutPrefix(s.ContainerID, "containerd://"); ok && s.State.Running != nil {
			// The status may be behind: the container may have ended (and
			// been restarted) since. Killed or gone, the Pod goes next.
			out, err := exec.Command("ctr", "--address", filepath.Join(e2eDir, "run", "containerd.sock"), "-n", "k8s.io",
				"tasks", "kill", "-s", "SIGKILL", id).CombinedOutput()
			if err != nil {
				GinkgoWriter.Printf("SIGKILL of %s: %v: %s", id, err, out)
			}
		}
	}
	Expect(client.IgnoreNotFound(k8sClient.Delete(bg, p, client.GracePeriodSeconds(0)))).To(Succeed())
}

// leaseAcquired is when the operator's lease was last taken.
func leaseAcquired() time.Time {
	lease := &coordinationv1.Lease{}
	if err := k8sClient.Get(bg, client.ObjectKey{Namespace: operatorNS, Name: "looprun-manager.looprun.io"}, lease); err != nil || lease.Spec.AcquireTime == nil {
		return time.Time{}
	}
	return lease.Spec.AcquireTime.Time
}

// podTimes is when an operator Pod was made and when its container's
// process started (zero when not known).
func podTimes(name string) (created, running time.Time) {
	pod := &corev1.Pod{}
	if name == "" || k8sClient.Get(bg, client.ObjectKey{Namespace: operatorNS, Name: name}, pod) != nil {
		return time.Time{}, time.Time{}
	}
	for _, c := range pod.Status.ContainerStatuses {
		if c.State.Running != nil {
			running = c.State.Running.StartedAt.Time
		}
	}
	return pod.CreationTimestamp.Time, running
}

// since is how long after t0 t was, "?" when t is not known.
func since(t, t0 time.Time) string {
	if t.IsZero() {
		return "?"
	}
	return t.Sub(t0).Round(100 * time.Millisecond).String()
}

// percentile of sorted durations, nearest rank.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (p*len(sorted)+99)/100 - 1
	return sorted[max(i, 0)]
}

func durationStats(name string, ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return fmt.Sprintf("| %s | 0 | | | |", name)
	}
	return fmt.Sprintf("| %s | %d | %.1f s | %.1f s | %.1f s |", name, len(s), percentile(s, 50).Seconds(), percentile(s, 99).Seconds(), s[len(s)-1].Seconds())
}

var _ = Describe("Chaos on the real node", Serial, Label("chaos"), func() {
	It("ends every Loop as an undisturbed one ends while the operator is killed 100 times and the API server restarted 5 times", func() {
		started := time.Now()
		llm := startLLMServer()
		DeferCleanup(func() { installOperator("e2e", "replicas=1") })
		// A lease of 6 s: a killed leader is replaced in seconds, not the
		// default 15 s (what each kind of kill costs is reported apart).
		installOperator("e2e", "replicas=1", "llm.allowedBaseURLs={"+llm.URL+"}", "runner.podStartTimeout=5m",
			"leaderElection.leaseDuration=6s", "leaderElection.renewDeadline=4s", "leaderElection.retryPeriod=1s")

		ns := newNamespace()
		Expect(k8sClient.Create(bg, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llm"},
			StringData: map[string]string{"api-key": "chaos-key"}})).To(Succeed())
		Expect(k8sClient.Create(bg, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "read-llm-key"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"llm"}, Verbs: []string{"get"}}}})).To(Succeed())
		Expect(k8sClient.Create(bg, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "read-llm-key"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-llm-key"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "default"}}})).To(Succeed())
		Expect(k8sClient.Create(bg, &v1alpha1.LoopTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "chaos-child"},
			Spec: v1alpha1.LoopTemplateSpec{LoopSpec: lean(v1alpha1.LoopSpec{Initial: "one", States: map[string]v1alpha1.State{
				"one":  {Action: "echo child ${state.iteration}", Next: "two"},
				"two":  {Action: "true", OnSuccess: "done"},
				"done": {Terminal: true},
			}})}})).To(Succeed())
		watch := watchChaos(ns)
		shapes := chaosShapes(llm.URL)

		// What each shape ends as, undisturbed.
		want := map[string]string{}
		var wantChild string
		for _, s := range shapes {
			if s.workspace {
				volumes(1)
			}
			create(ns, "calm-"+s.name, lean(s.spec()))
		}
		for _, s := range shapes {
			loop := waitFinished(client.ObjectKey{Namespace: ns, Name: "calm-" + s.name}, 5*time.Minute)
			want[s.name] = summary(loop)
			GinkgoWriter.Printf("undisturbed %s: %s\n", s.name, want[s.name])
		}
		calmPods := watch.pods()

		// The Loops of the chaos run: chaosLoops at once, a finished one
		// replaced by another until the last kill.
		shapeOf := map[string]chaosShape{}
		made := 0
		topUp := func() {
			list := &v1alpha1.LoopList{}
			Expect(k8sClient.List(bg, list, client.InNamespace(ns))).To(Succeed())
			running := 0
			for _, l := range list.Items {
				if _, ours := shapeOf[l.Name]; ours && !l.Status.Phase.IsFinished() {
					running++
				}
			}
			for ; running < chaosLoops; running++ {
				s := shapes[made%len(shapes)]
				name := fmt.Sprintf("%s-%d", s.name, made)
				made++
				if s.workspace {
					volumes(1)
				}
				create(ns, name, lean(s.spec()))
				shapeOf[name] = s
			}
		}
		topUp()

		// The kills, each at a random moment after the operator before it
		// took over; the API server restarts come between them.
		var recovered, phases = map[string][]time.Duration{}, map[string][]time.Duration{}
		restartAt := map[int]bool{}
		for i := range chaosAPIServer {
			restartAt[(2*i+1)*chaosKills/(2*chaosAPIServer)] = true
		}
		for k := range chaosKills {
			Eventually(leader, 3*time.Minute, 100*time.Millisecond).ShouldNot(BeEmpty())
			topUp()
			time.Sleep(time.Duration(rand.IntN(4000)) * time.Millisecond)
			if restartAt[k] {
				down := rand.IntN(6)
				t0 := time.Now()
				run(filepath.Join(root, "hack", "e2e", "cluster.sh"), "restart-apiserver", fmt.Sprint(down))
				back := time.Now()
				Eventually(func() bool { _, ok := watch.movedAfter(back); return ok }, 5*time.Minute, 100*time.Millisecond).Should(BeTrue(),
					"no Loop moved on after the API server came back")
				at, _ := watch.movedAfter(back)
				recovered["API server restart"] = append(recovered["API server restart"], at.Sub(t0))
				GinkgoWriter.Printf("API server restart (%d s down, ready again after %s): Loops moved again %s after it stopped\n",
					down, back.Sub(t0).Round(100*time.Millisecond), at.Sub(t0).Round(100*time.Millisecond))
				Eventually(leader, 3*time.Minute, 100*time.Millisecond).ShouldNot(BeEmpty())
			}
			old := leader()
			Expect(old).NotTo(BeEmpty())
			hard := rand.IntN(2) == 0
			kind := map[bool]string{false: "Pod deleted", true: "process killed"}[hard]
			t0 := time.Now()
			kill(old, hard)
			// The bound is the node's: how long the kubelet takes to start
			// the replacement Pod (up to 2.5 minutes on a loaded node).
			Eventually(leader, 10*time.Minute, 100*time.Millisecond).ShouldNot(Or(BeEmpty(), Equal(old)), "kill %d: no new leader", k+1)
			after := leaseAcquired()
			if after.Before(t0) {
				after = t0
			}
			Eventually(func() bool { _, ok := watch.movedAfter(after); return ok }, 3*time.Minute, 100*time.Millisecond).Should(BeTrue(),
				"kill %d (%s): the new leader moved no Loop on", k+1, kind)
			at, _ := watch.movedAfter(after)
			recovered[kind] = append(recovered[kind], at.Sub(t0))
			// Where the time went: the new Pod made and its process started
			// (the Deployment and the kubelet), the lease taken (the old
			// lease's expiry and the manager's start), Loops moving on (the
			// caches synced and the first reconciles).
			created, running := podTimes(leader())
			for phase, d := range map[string]time.Duration{
				"kill → new Pod created": created.Sub(t0), "new Pod created → its process running": running.Sub(created),
				"process running → lease taken": after.Sub(running), "lease taken → Loops moved": at.Sub(after),
			} {
				if !created.IsZero() && !running.IsZero() {
					phases[phase] = append(phases[phase], max(d, 0))
				}
			}
			GinkgoWriter.Printf("kill %d (%s of %s): Loops moved again after %s (Pod made %s, running %s, lease %s after the kill); %d Loops made\n",
				k+1, kind, old, at.Sub(t0).Round(100*time.Millisecond), since(created, t0), since(running, t0), after.Sub(t0).Round(100*time.Millisecond), made)
		}

		// Every Loop ends, and as its undisturbed twin ended.
		list := &v1alpha1.LoopList{}
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.List(bg, list, client.InNamespace(ns))).To(Succeed())
			for _, l := range list.Items {
				g.Expect(l.Status.Phase.IsFinished()).To(BeTrue(), "%s: %s", l.Name, describe(&l))
			}
		}, 20*time.Minute, time.Second).Should(Succeed())
		children := 0
		for _, l := range list.Items {
			s, ours := shapeOf[l.Name]
			switch {
			case ours:
				Expect(summary(&l)).To(Equal(want[s.name]), "%s ended otherwise than undisturbed: %s", l.Name, describe(&l))
				for file, content := range s.files {
					Expect(workspaceFile(ns, l.Name, file)).To(Equal(content), "%s: %s", l.Name, file)
				}
			case metav1.GetControllerOf(&l) != nil: // a sub-loop's child
				children++
				if wantChild == "" {
					wantChild = summary(&l)
				}
				Expect(summary(&l)).To(Equal(wantChild), "child %s", l.Name)
			}
			events, err := configmaps.Read(bg, k8sClient, &l)
			Expect(err).NotTo(HaveOccurred(), l.Name)
			for i, e := range events {
				Expect(e.Seq).To(Equal(int64(i+1)), "%s: the event log is not contiguous at %d", l.Name, i)
			}
			Expect(int64(len(events))).To(Equal(l.Status.LastSeq), "%s: events kept", l.Name)
		}
		Expect(watch.createdTwice()).To(BeEmpty(), "action Pods created twice for one step")

		// Nothing is left behind: deleting the Loops collects what they owned.
		// Hundreds of Loops in one collection delete can outlast the API
		// server's request timeout (it resets the stream): ask again until
		// it answers; the delete is idempotent.
		Eventually(func() error { return k8sClient.DeleteAllOf(bg, &v1alpha1.Loop{}, client.InNamespace(ns)) }, 5*time.Minute, 5*time.Second).Should(Succeed())
		Eventually(func(g Gomega) {
			loops, pods, claims, cms := &v1alpha1.LoopList{}, &corev1.PodList{}, &corev1.PersistentVolumeClaimList{}, &corev1.ConfigMapList{}
			g.Expect(k8sClient.List(bg, loops, client.InNamespace(ns))).To(Succeed())
			g.Expect(k8sClient.List(bg, pods, client.InNamespace(ns))).To(Succeed())
			g.Expect(k8sClient.List(bg, claims, client.InNamespace(ns))).To(Succeed())
			g.Expect(k8sClient.List(bg, cms, client.InNamespace(ns), client.HasLabels{v1alpha1.LabelLoop})).To(Succeed())
			g.Expect(len(loops.Items)+len(pods.Items)+len(claims.Items)+len(cms.Items)).To(BeZero(),
				"left: %d Loops, %d Pods, %d claims, %d ConfigMaps", len(loops.Items), len(pods.Items), len(claims.Items), len(cms.Items))
		}, 5*time.Minute, time.Second).Should(Succeed())
		ops := &corev1.PodList{}
		Expect(k8sClient.List(bg, ops, client.InNamespace(operatorNS))).To(Succeed())
		Expect(ops.Items).To(HaveLen(1), "operator Pods left over")

		var report strings.Builder
		mode := "Pod mode"
		if chaosWarm {
			mode = "Warm mode"
		}
		fmt.Fprintf(&report, "chaos run of %s (%s): %d Loops (%d at once, %d of them sub-loop children), %d action Pods (%d undisturbed), %d kills, %d API server restarts, %s in all\n\n",
			time.Now().UTC().Format(time.DateOnly), mode, made, chaosLoops, children, watch.pods(), calmPods, chaosKills, chaosAPIServer, time.Since(started).Round(time.Second))
		fmt.Fprintln(&report, "| time until Loops moved again after | n | p50 | p99 | max |\n|---|---|---|---|---|")
		var all []time.Duration
		for _, kind := range []string{"Pod deleted", "process killed"} {
			fmt.Fprintln(&report, durationStats(kind, recovered[kind]))
			all = append(all, recovered[kind]...)
		}
		fmt.Fprintln(&report, durationStats("any kill", all))
		fmt.Fprintln(&report, durationStats("API server restart", recovered["API server restart"]))
		fmt.Fprintln(&report, "\n| a kill's recovery, by phase | n | p50 | p99 | max |\n|---|---|---|---|---|")
		for _, phase := range []string{"kill → new Pod created", "new Pod created → its process running", "process running → lease taken", "lease taken → Loops moved"} {
			fmt.Fprintln(&report, durationStats(phase, phases[phase]))
		}
		GinkgoWriter.Print(report.String())
		Expect(os.WriteFile(filepath.Join(e2eDir, "chaos-report.md"), []byte(report.String()), 0o644)).To(Succeed())
	})
})
