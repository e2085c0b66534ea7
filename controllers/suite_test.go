package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/looprun/looprun/internal/runner/local"
	"github.com/looprun/looprun/internal/runner/pod"
	"github.com/looprun/looprun/test/fixture"
	"github.com/looprun/looprun/test/kubelet"
)

var (
	cfg       *rest.Config
	k8sClient client.Client // uncached, for assertions
	stopEnv   func()
	scheme    = fixture.Scheme()
	// testKubelet runs the action Pods, across operator restarts.
	testKubelet *fixture.Kubelet
)

// Images of action Pods in the tests: the test kubelet ignores them, except
// that neverStartsImage never starts.
const (
	testEntrypointImage = "looprun.test/entrypoint:dev"
	testRunnerImage     = "looprun.test/bash:dev"
	neverStartsImage    = "looprun.test/missing:1"
	// neverScheduledImage is in Pods no node takes.
	neverScheduledImage = "looprun.test/unschedulable:1"
)

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	// A step of a real API server on a busy 2-core machine can take more
	// than Gomega's default second; an Eventually returns once it holds.
	SetDefaultEventuallyTimeout(15 * time.Second)
	// A spec that hangs is named, with where it waits, before go test's own
	// timeout (make test: 30 minutes) kills the package without a word of
	// which spec it was; a spec that is slow says so as it goes.
	suite, reporter := GinkgoConfiguration()
	if suite.Timeout == time.Hour { // Ginkgo's default: not set by a flag
		suite.Timeout = 20 * time.Minute
	}
	if suite.PollProgressAfter == 0 {
		suite.PollProgressAfter = 2 * time.Minute
		suite.PollProgressInterval = time.Minute
	}
	RunSpecs(t, "Loop controller", suite, reporter)
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	cfg, k8sClient, stopEnv, err = fixture.StartEnv(true)
	Expect(err).NotTo(HaveOccurred())
	testKubelet, err = fixture.StartKubelet(cfg, &kubelet.Kubelet{NeverStarts: map[string]bool{neverStartsImage: true}, NeverScheduled: map[string]bool{neverScheduledImage: true}}, false)
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if testKubelet != nil {
		testKubelet.Stop()
	}
	if stopEnv != nil {
		stopEnv()
	}
})

// operator is a running manager with the real Loop reconciler.
type operator struct {
	reconciler *LoopReconciler
	local      *local.Actions
	mgr        *fixture.Manager
}

// startOperator starts a manager as cmd/manager does, with local actions.
func startOperator(c Config) *operator {
	if c.LocalWorkdir == "" {
		c.LocalWorkdir = GinkgoT().TempDir()
	}
	c.AllowLocalActions = true
	return runOperator(c)
}

// startPodOperator starts a manager as cmd/manager does, running actions as
// Pods (run by the test kubelet).
func startPodOperator(c Config) *operator {
	return startPodOperatorWith(c)
}

// startPodOperatorWith is startPodOperator with the reconciler changed
// before it starts.
func startPodOperatorWith(c Config, tweaks ...func(*LoopReconciler)) *operator {
	c.Pods.Images = pod.Images{Entrypoint: testEntrypointImage, Runner: testRunnerImage}
	if c.Pods.StartAllowance == 0 {
		c.Pods.StartAllowance = time.Minute
	}
	return runOperator(c, tweaks...)
}

func runOperator(c Config, tweaks ...func(*LoopReconciler)) *operator {
	return runOperatorWith(c, nil, tweaks...)
}

// runOperatorWith is runOperator with more controllers set up beside the
// Loop reconciler.
func runOperatorWith(c Config, setup func(ctrl.Manager) error, tweaks ...func(*LoopReconciler)) *operator {
	cacheOpts, clientOpts := CacheOptions(c.Shard)
	op := &operator{}
	var err error
	op.mgr, err = fixture.StartManager(RestConfig(cfg), ctrl.Options{Scheme: scheme, Cache: cacheOpts, Client: clientOpts}, func(mgr ctrl.Manager) error {
		op.reconciler = NewReconciler(mgr, c)
		op.local, _ = op.reconciler.Actions.(*local.Actions)
		for _, t := range tweaks {
			t(op.reconciler)
		}
		if setup != nil {
			if err := setup(mgr); err != nil {
				return err
			}
		}
		return op.reconciler.SetupWithManager(mgr)
	})
	Expect(err).NotTo(HaveOccurred())
	return op
}

// stop stops the manager and kills its actions, as if the operator died.
func (o *operator) stop() {
	if o.local != nil {
		o.local.Close()
	}
	Expect(o.mgr.Stop()).To(Succeed())
}

// newNamespace creates a namespace for one spec, with the default service
// account that a cluster's controllers would have made.
func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "loops-"}}
	Expect(k8sClient.Create(context.Background(), ns)).To(Succeed())
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns.Name}}
	Expect(k8sClient.Create(context.Background(), sa)).To(Succeed())
	return ns.Name
}
