package controllers

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/runner/pod"
	"github.com/looprun/looprun/test/kubelet"
	"github.com/looprun/looprun/test/testenv"
)

var (
	cfg       *rest.Config
	k8sClient client.Client // uncached, for assertions
	testEnv   *envtest.Environment
	scheme    = runtime.NewScheme()
	// testKubelet runs the action Pods, across operator restarts.
	testKubelet *kubelet.Kubelet
	stopKubelet context.CancelFunc
)

// Images of action Pods in the tests: the test kubelet ignores them, except
// that neverStartsImage never starts.
const (
	testEntrypointImage = "looprun.test/entrypoint:dev"
	testRunnerImage     = "looprun.test/bash:dev"
	neverStartsImage    = "looprun.test/missing:1"
)

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Loop controller")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	_, err := testenv.UseAssets()
	Expect(err).NotTo(HaveOccurred())
	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	startKubelet()
})

// startKubelet builds the entrypoint and runs the test kubelet in a manager
// of its own, so that it outlives operator restarts as a real kubelet does.
func startKubelet() {
	dir, err := os.MkdirTemp("", "looprun-kubelet")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { _ = os.RemoveAll(dir) })
	ep := filepath.Join(dir, "entrypoint")
	out, err := exec.Command("go", "build", "-o", ep, "../cmd/entrypoint").CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), string(out))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Controller: controllerConfig()})
	Expect(err).NotTo(HaveOccurred())
	testKubelet = &kubelet.Kubelet{Client: mgr.GetClient(), Dir: filepath.Join(dir, "node"),
		Binaries: map[string]string{pod.EntrypointBinary: ep}, NeverStarts: map[string]bool{neverStartsImage: true}}
	Expect(testKubelet.SetupWithManager(mgr)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	stopKubelet = cancel
	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
}

var _ = AfterSuite(func() {
	if stopKubelet != nil {
		stopKubelet()
		testKubelet.Stop()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// operator is a running manager with the real Loop reconciler.
type operator struct {
	reconciler *LoopReconciler
	local      *LocalActions
	cancel     context.CancelFunc
	done       chan struct{}
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
	c.Pods.Images = pod.Images{Entrypoint: testEntrypointImage, Runner: testRunnerImage}
	if c.Pods.StartAllowance == 0 {
		c.Pods.StartAllowance = time.Minute
	}
	return runOperator(c)
}

func runOperator(c Config) *operator {
	cacheOpts, clientOpts := CacheOptions()
	mgr, err := ctrl.NewManager(RestConfig(cfg), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             controllerConfig(),
		Cache:                  cacheOpts,
		Client:                 clientOpts,
	})
	Expect(err).NotTo(HaveOccurred())
	r := NewReconciler(mgr, c)
	Expect(r.SetupWithManager(mgr)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	op := &operator{reconciler: r, cancel: cancel, done: make(chan struct{})}
	op.local, _ = r.Actions.(*LocalActions)
	go func() {
		defer GinkgoRecover()
		defer close(op.done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	return op
}

// stop stops the manager and kills its actions, as if the operator died.
func (o *operator) stop() {
	o.cancel()
	if o.local != nil {
		o.local.CancelAll()
	}
	Eventually(o.done, 30*time.Second).Should(BeClosed())
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

func controllerConfig() ctrlconfig.Controller {
	skip := true
	return ctrlconfig.Controller{SkipNameValidation: &skip}
}
