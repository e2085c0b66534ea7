//go:build e2e

// Package e2e tests looprun on a real one-node cluster (kubelet, containerd,
// runc, the garbage collector), with the operator installed by its own Helm
// chart as a user installs it. `make test-e2e` builds the cluster
// (hack/e2e/cluster.sh) and the images (test/e2e/mkimages), then runs these
// specs; `make test` does not.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/test/fixture"
)

// The images test/e2e/mkimages writes and the cluster imports.
const (
	operatorImage = "looprun.local/looprun"
	actionsImage  = "looprun.local/actions:e2e"
	nobashImage   = "looprun.local/nobash:e2e"
	release       = "looprun"
	operatorNS    = "looprun-system"
	nodeName      = "e2e-node"
)

var (
	bg        = context.Background()
	k8sClient client.Client
	root      string // the project
	e2eDir    string // the cluster's directory
	helm      string
	looprun   string // the CLI, built for the specs
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "looprun on a real node")
}

var _ = BeforeSuite(func() {
	var err error
	root, err = fixture.Root()
	Expect(err).NotTo(HaveOccurred())
	e2eDir = envOr("E2E_DIR", filepath.Join(root, "bin", "e2e"))
	helm = envOr("HELM", filepath.Join(root, "bin", "helm"))
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	Expect(err).NotTo(HaveOccurred(), "KUBECONFIG names the e2e cluster (make test-e2e sets it)")
	k8sClient, err = client.New(cfg, client.Options{Scheme: fixture.Scheme()})
	Expect(err).NotTo(HaveOccurred())

	looprun = filepath.Join(GinkgoT().TempDir(), "looprun")
	// As the Dockerfile builds it (and as run.sh builds everything else),
	// so that the build reuses what the image build compiled.
	run("go", "build", "-trimpath", "-ldflags=-s -w", "-o", looprun, "./cmd/looprun")

	installOperator("e2e")
})

// installOperator installs (or upgrades to) the operator image of this tag
// with the chart's defaults, but for the images of this cluster; extra
// are more --set values.
func installOperator(tag string, extra ...string) {
	args := []string{"upgrade", "--install", release, filepath.Join(root, "charts", "looprun"),
		"--namespace", operatorNS, "--create-namespace", "--wait", "--timeout", "180s",
		"--set", "image.repository=" + operatorImage, "--set", "image.tag=" + tag, "--set", "image.pullPolicy=Never",
		"--set", "runner.image=" + actionsImage, "--set", "runner.podStartTimeout=20s"}
	for _, e := range extra {
		args = append(args, "--set", e)
	}
	run(helm, args...)
	waitOperatorLeads()
}

// waitOperatorLeads waits until the Deployment is rolled out and one of its
// Pods holds the lease.
func waitOperatorLeads() {
	Eventually(func(g Gomega) {
		d := &appsv1.Deployment{}
		g.Expect(k8sClient.Get(bg, client.ObjectKey{Namespace: operatorNS, Name: release}, d)).To(Succeed())
		g.Expect(d.Status.ObservedGeneration).To(Equal(d.Generation))
		g.Expect(d.Status.UpdatedReplicas).To(Equal(*d.Spec.Replicas))
		g.Expect(d.Status.AvailableReplicas).To(Equal(*d.Spec.Replicas))
		g.Expect(d.Status.Replicas).To(Equal(*d.Spec.Replicas), "old Pods still there")
	}, 3*time.Minute, time.Second).Should(Succeed())
	Eventually(func() string { return leader() }, 2*time.Minute, 250*time.Millisecond).ShouldNot(BeEmpty())
}

// leader is the operator Pod that holds the lease, "" if none does.
func leader() string {
	lease := &coordinationv1.Lease{}
	if err := k8sClient.Get(bg, client.ObjectKey{Namespace: operatorNS, Name: "looprun-manager.looprun.io"}, lease); err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	// The holder is the Pod's host name, then a unique suffix.
	holder, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
	pod := &corev1.Pod{}
	if err := k8sClient.Get(bg, client.ObjectKey{Namespace: operatorNS, Name: holder}, pod); err != nil || !pod.DeletionTimestamp.IsZero() {
		return ""
	}
	return holder
}

// run runs a command from the project's directory and returns its output;
// it fails the spec when the command fails.
func run(name string, args ...string) string {
	GinkgoHelper()
	cmd := exec.Command(name, args...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	Expect(cmd.Run()).To(Succeed(), "%s %s:\n%s", name, strings.Join(args, " "), out.String())
	return out.String()
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// newNamespace makes a namespace for one spec and deletes it after.
func newNamespace() string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"}}
	Expect(k8sClient.Create(bg, ns)).To(Succeed())
	Eventually(func() error {
		return k8sClient.Get(bg, client.ObjectKey{Namespace: ns.Name, Name: "default"}, &corev1.ServiceAccount{})
	}, time.Minute).Should(Succeed(), "the default service account")
	DeferCleanup(func() { _ = k8sClient.Delete(bg, ns) })
	return ns.Name
}

// volumes makes n local persistent volumes, free for any claim of the
// node, as a cluster without a provisioner offers them; they go when the
// spec ends.
func volumes(n int) {
	GinkgoHelper()
	for range n {
		dir, err := os.MkdirTemp(filepath.Join(e2eDir, "pv"), "pv-")
		if os.IsNotExist(err) {
			Expect(os.MkdirAll(filepath.Join(e2eDir, "pv"), 0o755)).To(Succeed())
			dir, err = os.MkdirTemp(filepath.Join(e2eDir, "pv"), "pv-")
		}
		Expect(err).NotTo(HaveOccurred())
		Expect(os.Chmod(dir, 0o777)).To(Succeed())
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + filepath.Base(dir)},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}}},
				}}}},
			},
		}
		Expect(k8sClient.Create(bg, pv)).To(Succeed())
		DeferCleanup(func() {
			_ = k8sClient.Delete(bg, pv)
			_ = os.RemoveAll(dir)
		})
	}
}

func getLoop(g Gomega, key client.ObjectKey) *v1alpha1.Loop {
	loop := &v1alpha1.Loop{}
	g.Expect(k8sClient.Get(bg, key, loop)).To(Succeed())
	return loop
}

// waitFinished waits until the Loop ended.
func waitFinished(key client.ObjectKey, within time.Duration) *v1alpha1.Loop {
	GinkgoHelper()
	var loop *v1alpha1.Loop
	Eventually(func(g Gomega) {
		loop = getLoop(g, key)
		g.Expect(loop.Status.Phase.IsFinished()).To(BeTrue(), "phase %q, state %q", loop.Status.Phase, loop.Status.CurrentState)
	}, within, 250*time.Millisecond).Should(Succeed())
	return loop
}

// applyFile applies a manifest file with kubectl, as a user does.
func applyFile(ns, file string) {
	GinkgoHelper()
	run("kubectl", "apply", "-n", ns, "-f", file)
}

// loopPods lists the Pods of a Loop that are not being deleted.
func loopPods(ns, loop string) []corev1.Pod {
	GinkgoHelper()
	list := &corev1.PodList{}
	Expect(k8sClient.List(bg, list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelLoop: loop})).To(Succeed())
	return list.Items
}

func describe(loop *v1alpha1.Loop) string {
	return fmt.Sprintf("phase %s, state %s, terminatedBy %s, lastResult %s", loop.Status.Phase, loop.Status.CurrentState,
		loop.Status.TerminatedBy, resultDetails(loop))
}

func resultDetails(loop *v1alpha1.Loop) string {
	if loop.Status.LastResult == nil || loop.Status.LastResult.Details == nil {
		return ""
	}
	return string(loop.Status.LastResult.Details.Raw)
}
