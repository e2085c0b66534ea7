// Package kubelet is a stand-in kubelet for tests and the demo, never
// shipped. envtest has an API server but no kubelet, so Pods never run; this
// controller binds Pods to a fake Node and runs their containers as local
// processes, so the real pod runner can be exercised end to end.
//
// A container's image is ignored: its command runs on this machine. Paths
// under the container's volume mounts are rewritten to a directory per
// volume (emptyDir: per Pod; persistentVolumeClaim: per claim, shared by the
// Pods that mount it; secret: its keys as files), and absolute commands found in Binaries are replaced
// by local binaries. The termination message file is read back into the
// container status, activeDeadlineSeconds kills the Pod (DeadlineExceeded),
// and deleting the Pod kills its processes. An image named in NeverStarts
// keeps its Pod Pending with ErrImagePull.
package kubelet

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// NodeName is the fake Node Pods are bound to.
const NodeName = "looprun-test-node"

// gracePeriod is how long a killed container has between SIGTERM and SIGKILL.
const gracePeriod = 2 * time.Second

// Kubelet runs Pods as local processes.
type Kubelet struct {
	Client client.Client
	// Dir holds the volumes and termination messages.
	Dir string
	// Binaries maps absolute commands to local binaries (the entrypoint).
	Binaries map[string]string
	// NeverStarts lists images whose Pods never start (ErrImagePull).
	NeverStarts map[string]bool
	// NeverScheduled lists images whose Pods no node takes: they stay
	// Pending and unbound, and nothing about them changes.
	NeverScheduled map[string]bool
	// OnFinish, when set, is called when a Pod's containers ended, just
	// before its final status is written (benchmarks time the controller
	// from there).
	OnFinish func(pod *corev1.Pod)

	mu      sync.Mutex
	running map[types.UID]podRun
	ips     map[types.UID]string
	nextIP  int
	wg      sync.WaitGroup
}

// podRun is a Pod whose containers run.
type podRun struct {
	key    types.NamespacedName
	cancel context.CancelFunc
}

// SetupWithManager registers the kubelet on Pods.
func (k *Kubelet) SetupWithManager(mgr ctrl.Manager) error {
	// The classic work queue, as the operator's (its priority queue can
	// deadlock on shutdown, kubernetes-sigs/controller-runtime#3538).
	return ctrl.NewControllerManagedBy(mgr).For(&corev1.Pod{}).Named("test-kubelet").
		WithOptions(controller.Options{UsePriorityQueue: ptr.To(false)}).Complete(k)
}

// Stop kills every Pod process and waits for them.
func (k *Kubelet) Stop() {
	k.mu.Lock()
	for _, r := range k.running {
		r.cancel()
	}
	k.mu.Unlock()
	k.wg.Wait()
}

// Reconcile binds a new Pod, starts a bound one, and kills a deleted one.
func (k *Kubelet) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := k.Client.Get(ctx, req.NamespacedName, pod); err != nil {
		if apierrors.IsNotFound(err) {
			k.kill(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	for _, c := range pod.Spec.Containers {
		if k.NeverScheduled[c.Image] && pod.DeletionTimestamp.IsZero() {
			return reconcile.Result{}, nil
		}
	}
	switch {
	case !pod.DeletionTimestamp.IsZero():
		k.kill(req.NamespacedName)
		return reconcile.Result{}, nil
	case pod.Spec.NodeName == "":
		binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
			Target: corev1.ObjectReference{Kind: "Node", Name: NodeName}}
		return reconcile.Result{}, client.IgnoreAlreadyExists(k.Client.SubResource("binding").Create(ctx, pod, binding))
	case pod.Spec.NodeName != NodeName || pod.Status.Phase != "" && pod.Status.Phase != corev1.PodPending:
		return reconcile.Result{}, nil
	}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if k.NeverStarts[c.Image] {
			return reconcile.Result{}, k.neverStarts(ctx, pod, c)
		}
	}
	k.start(pod)
	return reconcile.Result{}, nil
}

func (k *Kubelet) start(pod *corev1.Pod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.running == nil {
		k.running = map[types.UID]podRun{}
	}
	if _, ok := k.running[pod.UID]; ok {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	if d := pod.Spec.ActiveDeadlineSeconds; d != nil {
		cancelCtx := cancel
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*d)*time.Second)
		stop := cancel
		cancel = func() { stop(); cancelCtx() }
	}
	k.running[pod.UID] = podRun{key: client.ObjectKeyFromObject(pod), cancel: cancel}
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		defer cancel()
		k.run(ctx, pod.DeepCopy())
	}()
}

// kill kills the processes of the Pod with this key.
func (k *Kubelet) kill(key types.NamespacedName) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range k.running {
		if r.key == key {
			r.cancel()
		}
	}
}

// run runs the Pod's init containers, then its main container, and writes
// the outcome to the Pod's status.
func (k *Kubelet) run(ctx context.Context, pod *corev1.Pod) {
	defer func() {
		k.mu.Lock()
		delete(k.running, pod.UID)
		k.mu.Unlock()
	}()
	started := metav1.Now()
	k.setStatus(pod, func(st *corev1.PodStatus) {
		st.Phase, st.StartTime = corev1.PodRunning, &started
	})
	for _, c := range pod.Spec.InitContainers {
		if code, _, reason := k.runContainer(ctx, pod, c); code != 0 {
			k.finish(pod, c, code, "", reason)
			return
		}
	}
	if len(pod.Spec.Containers) == 0 {
		return
	}
	c := pod.Spec.Containers[0]
	// As a kubelet does, the main container is reported running while it
	// runs: the operator's start allowance ends there.
	ip := k.podIP(pod)
	k.setStatus(pod, func(st *corev1.PodStatus) {
		st.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, Started: new(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
		st.PodIP, st.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	})
	code, msg, reason := k.runContainer(ctx, pod, c)
	k.finish(pod, c, code, msg, reason)
}

// runContainer runs one container as a process group and returns its exit
// code, its termination message and, when it did not simply exit, why.
func (k *Kubelet) runContainer(ctx context.Context, pod *corev1.Pod, c corev1.Container) (int32, string, string) {
	paths := k.paths(pod, c)
	argv := append(append([]string{}, c.Command...), c.Args...)
	for i := range argv {
		argv[i] = paths.rewrite(argv[i])
	}
	if len(argv) == 0 {
		return 127, "", "NoCommand"
	}
	if bin, ok := k.Binaries[argv[0]]; ok {
		argv[0] = bin
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = os.Environ()
	for _, e := range c.Env {
		value := e.Value
		if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
			value = k.secretValue(pod.Namespace, ref.SecretKeyRef)
		}
		cmd.Env = append(cmd.Env, e.Name+"="+paths.rewrite(value))
	}
	// Every Pod's processes share this machine's network: a warm runner
	// listens on its Pod's own loopback address.
	cmd.Env = append(cmd.Env, "LOOPRUN_RUNNER_LISTEN="+net.JoinHostPort(k.podIP(pod), "7464"))
	if c.WorkingDir != "" {
		cmd.Dir = paths.rewrite(c.WorkingDir)
	}
	termLog := c.TerminationMessagePath
	if termLog == "" {
		termLog = corev1.TerminationMessagePathDefault
	}
	hostLog := filepath.Join(k.Dir, "pods", string(pod.UID), c.Name+".termination-log")
	paths.add(termLog, hostLog)
	for i := range argv {
		argv[i] = strings.ReplaceAll(argv[i], termLog, hostLog)
	}
	cmd.Args = argv
	// The wrapper's default path is /dev/termination-log; a process here
	// cannot be given that file, so it is told where the message goes.
	cmd.Env = append(cmd.Env, "LOOPRUN_TERMINATION_LOG="+hostLog)
	_ = os.MkdirAll(filepath.Dir(hostLog), 0o755)
	logFile, err := os.Create(filepath.Join(k.Dir, "pods", string(pod.UID), c.Name+".log"))
	if err == nil {
		defer logFile.Close()
		cmd.Stdout, cmd.Stderr = logFile, logFile
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return 128, "", "StartError"
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			// As a kubelet does: SIGTERM, a grace period, then SIGKILL.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(gracePeriod):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
		case <-done:
		}
	}()
	_ = cmd.Wait()
	close(done)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	msg, _ := os.ReadFile(hostLog)
	code := exitCode(cmd.ProcessState)
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return code, string(msg), "DeadlineExceeded"
	case ctx.Err() != nil:
		return code, string(msg), "Killed"
	case code == 0:
		return 0, string(msg), "Completed"
	}
	return code, string(msg), "Error"
}

// finish writes the terminated state of the container and the Pod's phase.
func (k *Kubelet) finish(pod *corev1.Pod, c corev1.Container, code int32, msg, reason string) {
	if k.OnFinish != nil {
		k.OnFinish(pod)
	}
	now := metav1.Now()
	k.setStatus(pod, func(st *corev1.PodStatus) {
		st.Phase = corev1.PodSucceeded
		if code != 0 || reason == "DeadlineExceeded" || reason == "Killed" {
			st.Phase = corev1.PodFailed
		}
		if reason == "DeadlineExceeded" {
			st.Reason, st.Message = "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"
		}
		st.ContainerStatuses = []corev1.ContainerStatus{{
			Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: code, Reason: reason, Message: msg, StartedAt: *pod.Status.StartTime, FinishedAt: now,
			}},
		}}
	})
}

func (k *Kubelet) neverStarts(ctx context.Context, pod *corev1.Pod, c corev1.Container) error {
	if len(pod.Status.ContainerStatuses) > 0 {
		return nil
	}
	patch := client.MergeFrom(pod.DeepCopy())
	pod.Status.Phase = corev1.PodPending
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: fmt.Sprintf("image %q cannot be pulled", c.Image)},
	}}}
	return k.Client.Status().Patch(ctx, pod, patch)
}

// setStatus changes the Pod's status, retrying on conflicts. A Pod deleted
// meanwhile is left alone.
func (k *Kubelet) setStatus(pod *corev1.Pod, change func(*corev1.PodStatus)) {
	ctx := context.Background()
	for range 10 {
		cur := &corev1.Pod{}
		if err := k.Client.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil {
			return
		}
		before := cur.DeepCopy()
		change(&cur.Status)
		if cur.Status.StartTime == nil {
			now := metav1.Now()
			cur.Status.StartTime = &now
		}
		pod.Status.StartTime = cur.Status.StartTime
		if err := k.Client.Status().Patch(ctx, cur, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err == nil || !apierrors.IsConflict(err) {
			return
		}
	}
}

// pathMap rewrites container paths to host directories.
type pathMap struct{ from, to []string }

func (k *Kubelet) paths(pod *corev1.Pod, c corev1.Container) *pathMap {
	m := &pathMap{}
	for _, vm := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name != vm.Name {
				continue
			}
			dir := filepath.Join(k.Dir, "pods", string(pod.UID), "volumes", v.Name)
			if v.PersistentVolumeClaim != nil {
				dir = filepath.Join(k.Dir, "claims", pod.Namespace, v.PersistentVolumeClaim.ClaimName)
			}
			_ = os.MkdirAll(dir, 0o755)
			if v.Secret != nil {
				k.writeSecret(pod.Namespace, v.Secret.SecretName, dir)
			}
			m.add(vm.MountPath, dir)
		}
	}
	return m
}

// secretValue is a key of a Secret, "" when it cannot be read.
func (k *Kubelet) secretValue(ns string, ref *corev1.SecretKeySelector) string {
	secret := &corev1.Secret{}
	if err := k.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: ref.Name}, secret); err != nil {
		return ""
	}
	return string(secret.Data[ref.Key])
}

// podIP is a Pod's address: a loopback address of its own (127.0.0.0/8
// is all this machine's), so that Pods listening on one port do not meet.
func (k *Kubelet) podIP(pod *corev1.Pod) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ips == nil {
		k.ips = map[types.UID]string{}
	}
	if ip, ok := k.ips[pod.UID]; ok {
		return ip
	}
	k.nextIP++
	n := k.nextIP
	ip := fmt.Sprintf("127.%d.%d.%d", 10+n>>16&0xff, n>>8&0xff, n&0xff)
	k.ips[pod.UID] = ip
	return ip
}

// writeSecret puts the Secret's keys in dir as files, as a kubelet fills a
// secret volume; a Secret that cannot be read leaves dir empty.
func (k *Kubelet) writeSecret(ns, name, dir string) {
	secret := &corev1.Secret{}
	if err := k.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, secret); err != nil {
		return
	}
	for key, value := range secret.Data {
		_ = os.WriteFile(filepath.Join(dir, key), value, 0o600)
	}
}

func (m *pathMap) add(from, to string) {
	if from != "/" {
		from = filepath.Clean(from) // a mount path may end in '/'
	}
	m.from, m.to = append(m.from, from), append(m.to, to)
	// Longest first, so /a/b wins over /a.
	idx := make([]int, len(m.from))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return len(m.from[idx[a]]) > len(m.from[idx[b]]) })
	froms, tos := make([]string, len(idx)), make([]string, len(idx))
	for i, j := range idx {
		froms[i], tos[i] = m.from[j], m.to[j]
	}
	m.from, m.to = froms, tos
}

// rewrite replaces container paths in one pass, so a host directory put in
// is never rewritten again. Only whole paths are: a mount path where a
// path starts (not inside another path: /work/tmp is not /tmp) and up to a
// path's end or its next element. A path that is this machine's own (its
// deepest existing directory is below the mount path: a test's checkout
// under /tmp, while the Pod mounts /tmp) is left as it is.
func (m *pathMap) rewrite(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j := m.match(s, i)
		if j < 0 {
			b.WriteByte(s[i])
			i++
			continue
		}
		b.WriteString(m.to[j])
		i += len(m.from[j])
	}
	return b.String()
}

// match is the index of the mount path that starts a whole container path
// at s[i:], or -1.
func (m *pathMap) match(s string, i int) int {
	if i > 0 && isPathChar(s[i-1]) {
		return -1
	}
	for j, f := range m.from { // longest first
		rest := s[i:]
		if !strings.HasPrefix(rest, f) {
			continue
		}
		if end := len(f); end < len(rest) && rest[end] != '/' && isPathChar(rest[end]) {
			continue // /tmpfoo is not under /tmp
		}
		end := 0
		for end < len(rest) && isPathChar(rest[end]) {
			end++
		}
		token := rest[:end]
		if hostPath(token, f) {
			continue
		}
		return j
	}
	return -1
}

// hostPath says whether p is a path of this machine rather than under the
// container's mount path mount: its deepest existing ancestor (itself
// included) lies below mount.
func hostPath(p, mount string) bool {
	for q := filepath.Clean(p); len(q) > len(mount); q = filepath.Dir(q) {
		if _, err := os.Lstat(q); err == nil {
			return strings.HasPrefix(q, strings.TrimSuffix(mount, "/")+"/")
		}
	}
	return false
}

func isPathChar(c byte) bool {
	return c == '/' || c == '.' || c == '-' || c == '_' || c == '~' || c == '+' ||
		'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c >= 0x80
}

// exitCode is the container's exit code as a kubelet reports it: 128+N
// after signal N.
func exitCode(ps *os.ProcessState) int32 {
	code := ps.ExitCode()
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	if code < 0 || code > 255 {
		return 255
	}
	return int32(code)
}
