package controllers

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/runner/pod"
	"github.com/looprun/looprun/test/fixture"
)

// gitLoop edits the checkout of url (a.txt fixed, b.txt removed, a run
// directory kept) and pushes its work to looprun/NAME-RUN, with the
// Secret creds.
func gitLoop(url string) v1alpha1.LoopSpec {
	return v1alpha1.LoopSpec{Initial: "edit",
		Runner: &v1alpha1.RunnerSpec{Workspace: &v1alpha1.WorkspaceSpec{ClaimName: "ws", Git: &v1alpha1.GitWorkspace{
			URL: url, Depth: 1, SecretRef: &corev1.LocalObjectReference{Name: "creds"},
			Push: &v1alpha1.GitPush{Branch: "looprun/${loop.name}-${run.id}", Author: &v1alpha1.GitAuthor{Name: "Loop", Email: "loop@example.com"}},
		}}},
		States: map[string]v1alpha1.State{
			// The actions work in the checkout, which ${context.repo_dir} names.
			"edit": {Action: `test "$PWD" = "${context.repo_dir}" && cd "${context.repo_dir}" && test -f b.txt && echo fixed > a.txt && rm b.txt && mkdir -p .loops/x && touch .loops/x/f`, Next: "done"},
			"done": {Terminal: true},
		}}
}

func gitSecret(ns, password string) {
	Expect(k8sClient.Create(bg, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds"},
		Type: corev1.SecretTypeBasicAuth, StringData: map[string]string{"username": "loop", "password": password}})).To(Succeed())
}

// gitPods are the Loop's clone and push Pods.
func gitPods(ns, loop string) []string {
	var names []string
	for _, p := range loopPods(ns, loop) {
		if s := p.Labels[v1alpha1.LabelState]; s == executor.GitCloneState || s == executor.GitPushState {
			names = append(names, p.Name)
		}
	}
	return names
}

var _ = Describe("A workspace from git (spec.runner.workspace.git)", func() {
	var srv *fixture.GitServer
	var bare string
	BeforeEach(func() {
		var err error
		srv, err = fixture.StartGitServer("loop", "s3cret")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(srv.Close)
		bare, err = srv.NewRepo("project", map[string]string{"a.txt": "broken\n", "b.txt": "old\n"})
		Expect(err).NotTo(HaveOccurred())
	})

	It("clones before the first step and pushes the run's work to a branch after it", func() {
		op := startPodOperator(Config{})
		DeferCleanup(op.stop)
		ns := newNamespace()
		gitSecret(ns, "s3cret")
		key := createLoop(ns, "fix", gitLoop(srv.URL+"/project.git"))
		var loop *v1alpha1.Loop
		Eventually(func(g Gomega) {
			loop = getLoop(g, key)
			g.Expect(loop.Status.Git).NotTo(BeNil())
			g.Expect(loop.Status.Git.Push).NotTo(BeNil())
			g.Expect(loop.Status.Git.Push.Phase).NotTo(Equal(v1alpha1.ExitHookRunning))
		}, "60s").Should(Succeed())
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), loop.Status.Message)
		main, err := fixture.Git(bare, "rev-parse", "main")
		Expect(err).NotTo(HaveOccurred())
		clone, push := loop.Status.Git.Clone, loop.Status.Git.Push
		Expect(clone.Phase).To(Equal(v1alpha1.ExitHookSucceeded))
		Expect(clone.Commit).To(Equal(main))
		Expect(clone.Pod).To(Equal(pod.GitName("fix", loop.Status.RunID, "clone", 0)))
		Expect(push.Phase).To(Equal(v1alpha1.ExitHookSucceeded), push.Message)
		Expect(push.Pushed).To(BeTrue(), "%+v %+v", loop.Status.PrevResult, loop.Status.LastResult)
		branch := "looprun/fix-" + loop.Status.RunID
		Expect(push.Branch).To(Equal(branch))
		Expect(push.Pod).To(Equal(pod.GitName("fix", loop.Status.RunID, "push", loop.Status.Iteration)))

		// The server has the branch, with the change, made on the clone.
		Expect(fixture.Git(bare, "rev-parse", branch)).To(Equal(push.Commit))
		Expect(fixture.Git(bare, "show", branch+":a.txt")).To(Equal("fixed"))
		Expect(fixture.Git(bare, "ls-tree", "-r", "--name-only", branch)).To(Equal("a.txt"))
		Expect(fixture.Git(bare, "log", "-1", "--format=%an %s", branch)).To(Equal("Loop looprun: fix run " + loop.Status.RunID))
		Expect(fixture.Git(bare, "rev-parse", branch+"~1")).To(Equal(main))

		Expect(eventTypes(loopEvents(loop))).To(ContainElement(executor.EventGitClone))
		Eventually(func(g Gomega) {
			g.Expect(eventNotes(g, ns, "Cloned")).To(ContainElement(ContainSubstring(main)))
			g.Expect(eventNotes(g, ns, "Pushed")).To(ContainElement(ContainSubstring("pushed " + push.Commit + " to branch " + branch)))
		}).Should(Succeed())
		Expect(gitPods(ns, "fix")).To(ConsistOf(clone.Pod, push.Pod))
	})

	It("ends the run with git's message when the clone fails", func() {
		op := startPodOperator(Config{})
		DeferCleanup(op.stop)
		ns := newNamespace()
		gitSecret(ns, "wrong")
		key := createLoop(ns, "denied", gitLoop(srv.URL+"/project.git"))
		loop := waitFinished(key)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
		Expect(loop.Status.TerminatedBy).To(Equal(v1alpha1.TerminatedError))
		Expect(loop.Status.Message).To(ContainSubstring("the clone of " + srv.URL + "/project.git failed"))
		Expect(loop.Status.Message).To(ContainSubstring("authentication required"))
		Expect(loop.Status.Git.Clone.Phase).To(Equal(v1alpha1.ExitHookFailed))
		Expect(loop.Status.Git.Push).To(BeNil()) // nothing to push
		Expect(loop.Status.Iteration).To(BeZero())
		Expect(gitPods(ns, "denied")).To(HaveLen(1))
		Eventually(func(g Gomega) {
			g.Expect(eventNotes(g, ns, "CloneFailed")).To(ContainElement(ContainSubstring("authentication required")))
		}).Should(Succeed())
	})

	It("clones once across an operator restart while the clone runs", func() {
		srv.Hold()
		op := startPodOperator(Config{})
		ns := newNamespace()
		gitSecret(ns, "s3cret")
		key := createLoop(ns, "held", gitLoop(srv.URL+"/project.git"))
		Eventually(func(g Gomega) {
			l := getLoop(g, key)
			g.Expect(l.Status.Git).NotTo(BeNil())
			g.Expect(l.Status.Git.Clone.Phase).To(Equal(v1alpha1.ExitHookRunning))
		}, "60s").Should(Succeed())
		Eventually(srv.Requests, "30s").Should(Equal(1)) // the clone is on the wire
		op.stop()
		op = startPodOperator(Config{})
		DeferCleanup(op.stop)
		Consistently(func() []string { return gitPods(ns, "held") }, "2s").Should(HaveLen(1))
		srv.Release()
		loop := waitFinished(key)
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), loop.Status.Message)
		Eventually(func(g Gomega) {
			g.Expect(getLoop(g, key).Status.Git.Push).NotTo(BeNil())
			g.Expect(getLoop(g, key).Status.Git.Push.Phase).To(Equal(v1alpha1.ExitHookSucceeded))
		}, "60s").Should(Succeed())
		Expect(srv.Requests()).To(Equal(2)) // one clone, one push
		clones := 0
		for _, t := range eventTypes(loopEvents(getLoopNow(key))) {
			if t == executor.EventGitClone {
				clones++
			}
		}
		Expect(clones).To(Equal(1))
	})

	It("rejects git on a workspace that does not outlive a Pod", func() {
		ns := newNamespace()
		spec := gitLoop("https://example.com/r.git")
		spec.Runner.Workspace.ClaimName = ""
		err := k8sClient.Create(bg, &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"}, Spec: spec})
		Expect(err).To(MatchError(ContainSubstring("git needs a workspace that outlives a Pod")))
	})
})

func getLoopNow(key client.ObjectKey) *v1alpha1.Loop {
	loop := &v1alpha1.Loop{}
	Expect(k8sClient.Get(bg, key, loop)).To(Succeed())
	return loop
}
