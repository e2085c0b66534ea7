//go:build e2e

package e2e

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
)

const gitServerImage = "looprun.local/gitserver:e2e"

var _ = Describe("A workspace from git on a real node", func() {
	It("clones from a git server in the cluster, and pushes the branch a stub agent's edit went to; a wrong secret fails with git's message", func() {
		ns := newNamespace()
		volumes(2)
		// The git server: git http-backend, asking for loop:s3cret.
		server := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "git"}, Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "git", Image: gitServerImage, ImagePullPolicy: corev1.PullNever,
				Env: []corev1.EnvVar{{Name: "GIT_USER", Value: "loop"}, {Name: "GIT_PASSWORD", Value: "s3cret"}},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		}}
		Expect(k8sClient.Create(bg, server)).To(Succeed())
		var ip string
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(bg, client.ObjectKeyFromObject(server), server)).To(Succeed())
			g.Expect(server.Status.Phase).To(Equal(corev1.PodRunning))
			ip = server.Status.PodIP
			g.Expect(ip).NotTo(BeEmpty())
		}, 2*time.Minute, time.Second).Should(Succeed())
		url := "http://" + ip + ":8080/project.git"
		for name, password := range map[string]string{"creds": "s3cret", "wrong": "guess"} {
			Expect(k8sClient.Create(bg, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Type: corev1.SecretTypeBasicAuth, StringData: map[string]string{"username": "loop", "password": password}})).To(Succeed())
		}
		gitSpec := func(secret string) v1alpha1.LoopSpec {
			spec := withWorkspace(v1alpha1.LoopSpec{Initial: "fix", States: map[string]v1alpha1.State{
				// The stub agent's answer becomes the file; b.txt goes.
				"fix":  {Action: `test "$PWD" = "${context.repo_dir}" && claude -p 'fix a.txt' > a.txt && rm b.txt`, OnSuccess: "done", OnFailure: "failed"},
				"done": {Terminal: true}, "failed": {Terminal: true, Failure: ptr.To(true)},
			}})
			spec.Runner.Workspace.Git = &v1alpha1.GitWorkspace{URL: url, Depth: 1, SecretRef: &corev1.LocalObjectReference{Name: secret},
				Push: &v1alpha1.GitPush{Branch: "looprun/${loop.name}-${run.id}", CommitMessage: "${loop.name}: the agent's fix"}}
			return spec
		}

		key := create(ns, "fix", gitSpec("creds"))
		var loop *v1alpha1.Loop
		Eventually(func(g Gomega) {
			loop = getLoop(g, key)
			g.Expect(loop.Status.Phase.IsFinished()).To(BeTrue())
			if loop.Status.Phase == v1alpha1.PhaseCompleted {
				g.Expect(loop.Status.Git.Push).NotTo(BeNil())
				g.Expect(loop.Status.Git.Push.Phase).NotTo(Equal(v1alpha1.ExitHookRunning))
			}
		}, 4*time.Minute, time.Second).Should(Succeed())
		Expect(loop.Status.Phase).To(Equal(v1alpha1.PhaseCompleted), "%s\nclone log:\n%s\ngit server log:\n%s",
			describe(loop), logsOf(ns, loop.Status.Git.Clone.Pod), logsOf(ns, "git"))
		push := loop.Status.Git.Push
		Expect(push.Phase).To(Equal(v1alpha1.ExitHookSucceeded), "push %+v; its log:\n%s\ngit server log:\n%s", *push, logsOf(ns, push.Pod), logsOf(ns, "git"))
		Expect(push.Pushed).To(BeTrue())
		branch := "looprun/fix-" + loop.Status.RunID
		Expect(push.Branch).To(Equal(branch))

		// The server's repository has the branch, with the agent's change.
		git := func(args ...string) string {
			return strings.TrimSpace(run("kubectl", append([]string{"exec", "-n", ns, "git", "--", "/usr/lib/git-core/git", "--git-dir", "/srv/git/project.git"}, args...)...))
		}
		Expect(git("rev-parse", branch)).To(Equal(push.Commit))
		Expect(git("show", branch+":a.txt")).To(ContainSubstring("agent: fix a.txt"))
		Expect(git("ls-tree", "--name-only", branch)).To(Equal("a.txt"))
		Expect(git("log", "-1", "--format=%s", branch)).To(Equal("fix: the agent's fix"))
		Expect(git("rev-parse", branch+"~1")).To(Equal(loop.Status.Git.Clone.Commit))
		Expect(git("rev-parse", "main")).To(Equal(loop.Status.Git.Clone.Commit)) // main is untouched
		out := run("kubectl", "get", "events", "-n", ns, "--field-selector", "reason=Pushed", "-o", "jsonpath={.items[*].message}")
		Expect(out).To(ContainSubstring(push.Commit))

		// A wrong password: the run fails before its first step, with git's message.
		denied := waitFinished(create(ns, "denied", gitSpec("wrong")), 3*time.Minute)
		Expect(denied.Status.Phase).To(Equal(v1alpha1.PhaseFailed), describe(denied))
		Expect(denied.Status.Message).To(And(ContainSubstring("the clone of "+url+" failed"), ContainSubstring("authentication required")))
		Expect(denied.Status.Iteration).To(BeZero())
	})
})
