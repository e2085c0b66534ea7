package controllers

import (
	"context"
	"os"
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
)

var (
	cfg       *rest.Config
	k8sClient client.Client // uncached, for assertions
	testEnv   *envtest.Environment
	scheme    = runtime.NewScheme()
)

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Loop controller")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		// make test sets it; a plain go test finds what hack/setup-envtest.sh built.
		assets, _ := filepath.Abs(filepath.Join("..", "bin", "k8s"))
		_, err := os.Stat(filepath.Join(assets, "kube-apiserver"))
		Expect(err).NotTo(HaveOccurred(), "no envtest binaries: run make test, or hack/setup-envtest.sh")
		Expect(os.Setenv("KUBEBUILDER_ASSETS", assets)).To(Succeed())
	}
	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	var err error
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
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
	mgr, err := ctrl.NewManager(RestConfig(cfg), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             controllerConfig(),
		Client:                 client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}}}},
	})
	Expect(err).NotTo(HaveOccurred())
	r := NewReconciler(mgr, c)
	Expect(r.SetupWithManager(mgr)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	op := &operator{reconciler: r, local: r.Actions.(*LocalActions), cancel: cancel, done: make(chan struct{})}
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
	o.local.CancelAll()
	Eventually(o.done, 30*time.Second).Should(BeClosed())
}

// newNamespace creates a namespace for one spec.
func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "loops-"}}
	Expect(k8sClient.Create(context.Background(), ns)).To(Succeed())
	return ns.Name
}

func controllerConfig() ctrlconfig.Controller {
	skip := true
	return ctrlconfig.Controller{SkipNameValidation: &skip}
}
