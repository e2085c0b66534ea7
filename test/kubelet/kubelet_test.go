package kubelet_test

import (
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/go-logr/logr"

	"github.com/looprun/looprun/internal/runner/entrypoint"
	"github.com/looprun/looprun/test/fixture"
	"github.com/looprun/looprun/test/kubelet"
	"github.com/looprun/looprun/test/proc"
)

func TestKubeletRunsPods(t *testing.T) {
	logf.SetLogger(logr.Discard())
	cfg, c := fixture.Start(t, false)
	k, err := fixture.StartKubelet(cfg, &kubelet.Kubelet{NeverStarts: map[string]bool{"example.invalid/missing:1": true}}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	ctx := t.Context()

	ns := "default"
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	no := false
	pod := func(name, script string, deadline *int64) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: &no, ActiveDeadlineSeconds: deadline,
				Volumes: []corev1.Volume{
					{Name: "looprun", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					{Name: "workspace", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "ws"}}},
				},
				InitContainers: []corev1.Container{{Name: "copy", Image: "looprun/entrypoint", Command: []string{"/entrypoint", "--copy-to", "/looprun/entrypoint"},
					VolumeMounts: []corev1.VolumeMount{{Name: "looprun", MountPath: "/looprun"}}}},
				Containers: []corev1.Container{{Name: "action", Image: "busybox", WorkingDir: "/workspace",
					Command:      []string{"/looprun/entrypoint", "--evaluate", `{"type":"output_contains","pattern":"shared"}`, "--", "bash", "-c", script},
					VolumeMounts: []corev1.VolumeMount{{Name: "looprun", MountPath: "/looprun"}, {Name: "workspace", MountPath: "/workspace"}}}},
			},
		}
	}
	wait := func(name string, done func(*corev1.Pod) bool) *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{}
		proc.Until(t, 30*time.Second, "pod "+name, func() bool {
			p = &corev1.Pod{}
			return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p) == nil && done(p)
		})
		return p
	}
	finished := func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	}

	// Two steps share the workspace; the result comes back in the termination message.
	if err := c.Create(ctx, pod("step-1", "echo shared > note; echo wrote", nil)); err != nil {
		t.Fatal(err)
	}
	p := wait("step-1", finished)
	if p.Spec.NodeName != kubelet.NodeName || p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("step-1: node %q phase %s", p.Spec.NodeName, p.Status.Phase)
	}
	if err := c.Create(ctx, pod("step-2", "cat /workspace/note", nil)); err != nil {
		t.Fatal(err)
	}
	p = wait("step-2", finished)
	term := p.Status.ContainerStatuses[0].State.Terminated
	res, err := entrypoint.Decode(term.Message)
	if err != nil || term.ExitCode != 0 || res.Output != "shared\n" || res.Verdict == nil || res.Verdict.Verdict != "success" {
		t.Fatalf("step-2: %+v, %+v, %v", term, res, err)
	}

	// A failing action fails the Pod, with its exit code.
	if err := c.Create(ctx, pod("fails", "exit 3", nil)); err != nil {
		t.Fatal(err)
	}
	if p := wait("fails", finished); p.Status.Phase != corev1.PodFailed || p.Status.ContainerStatuses[0].State.Terminated.ExitCode != 3 {
		t.Errorf("fails: %+v", p.Status)
	}

	// activeDeadlineSeconds ends a Pod that runs too long.
	one := int64(1)
	if err := c.Create(ctx, pod("slow", "sleep 30", &one)); err != nil {
		t.Fatal(err)
	}
	if p := wait("slow", finished); p.Status.Phase != corev1.PodFailed || p.Status.Reason != "DeadlineExceeded" {
		t.Errorf("slow: %+v", p.Status)
	}

	// Deleting a Pod kills its processes.
	if err := c.Create(ctx, pod("deleted", "echo $$ > pid; exec sleep 30", nil)); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(k.Dir, "claims", ns, "ws", "pid")
	pid := proc.WaitPid(t, pidFile)
	// While it runs, its container is reported running, as a kubelet does.
	wait("deleted", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "deleted", Namespace: ns}}, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	proc.WaitGone(t, pid) // the deleted Pod's action was killed

	// An image that cannot be pulled keeps the Pod Pending, and says why.
	bad := pod("never", "true", nil)
	bad.Spec.Containers[0].Image = "example.invalid/missing:1"
	if err := c.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	p = wait("never", func(p *corev1.Pod) bool { return len(p.Status.ContainerStatuses) > 0 })
	if w := p.Status.ContainerStatuses[0].State.Waiting; p.Status.Phase != corev1.PodPending || w == nil || w.Reason != "ErrImagePull" {
		t.Errorf("never: %+v", p.Status)
	}
}
