package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/controllers"
	"github.com/looprun/looprun/internal/runner/pod"
	"github.com/looprun/looprun/test/fixture"
	"github.com/looprun/looprun/test/kubelet"
	"github.com/looprun/looprun/test/proc"
)

var update = flag.Bool("update", false, "rewrite the golden files of the cluster command tests")

// clusterFixture is an envtest API server with the operator (actions as
// Pods) and the test kubelet (which also serves container logs), shared by
// the cluster command tests.
type clusterFixture struct {
	kubeconfig string
	c          client.Client
	stop       func()
}

var (
	clusterOnce sync.Once
	cluster     *clusterFixture
	clusterErr  error
)

func stopCluster() {
	if cluster != nil {
		cluster.stop()
	}
}

func startCluster(t *testing.T) *clusterFixture {
	t.Helper()
	clusterOnce.Do(func() { cluster, clusterErr = newClusterFixture() })
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return cluster
}

func newClusterFixture() (*clusterFixture, error) {
	ctrl.SetLogger(logr.Discard())
	cfg, c, stopEnv, err := fixture.StartEnv(true)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "looprun-cluster")
	if err != nil {
		stopEnv()
		return nil, err
	}
	k, err := fixture.StartKubelet(cfg, &kubelet.Kubelet{}, true)
	if err != nil {
		stopEnv()
		return nil, err
	}
	cacheOpts, clientOpts := controllers.CacheOptions("")
	mgr, err := fixture.StartManager(controllers.RestConfig(cfg), ctrl.Options{Scheme: c.Scheme(), Cache: cacheOpts, Client: clientOpts},
		func(mgr ctrl.Manager) error {
			return controllers.NewReconciler(mgr, controllers.Config{SegmentBytes: 16 << 10,
				Pods: pod.Options{Images: pod.Images{Entrypoint: "looprun.test/entrypoint:dev", Runner: "looprun.test/bash:dev"}, StartAllowance: time.Minute}}).
				SetupWithManager(mgr)
		})
	if err != nil {
		k.Stop()
		stopEnv()
		return nil, err
	}
	f := &clusterFixture{kubeconfig: filepath.Join(dir, "kubeconfig"), c: c}
	f.stop = func() {
		_ = mgr.Stop()
		k.Stop()
		stopEnv()
		_ = os.RemoveAll(dir)
	}
	if err := writeKubeconfig(cfg, f.kubeconfig); err != nil {
		f.stop()
		return nil, err
	}
	return f, nil
}

func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kc, path)
}

func (f *clusterFixture) namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cli-"}}
	if err := f.c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns.Name}}
	if err := f.c.Create(context.Background(), sa); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// kubectlLoop runs the binary against the fixture's cluster in namespace ns.
func (f *clusterFixture) run(t *testing.T, dir, ns string, args ...string) result {
	t.Helper()
	// --namespace, not -n: run's -n is --max-steps.
	return looprun(t, dir, append([]string{"--kubeconfig", f.kubeconfig, "--namespace", ns}, args...)...)
}

func (f *clusterFixture) loop(t *testing.T, ns, name string) *v1alpha1.Loop {
	t.Helper()
	loop := &v1alpha1.Loop{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, loop); err != nil {
		t.Fatal(err)
	}
	return loop
}

// waitFor polls until cond holds for the Loop, or fails after a minute.
func (f *clusterFixture) waitFor(t *testing.T, ns, name, what string, cond func(*v1alpha1.Loop) bool) *v1alpha1.Loop {
	t.Helper()
	loop := &v1alpha1.Loop{}
	proc.Until(t, time.Minute, "loop "+ns+"/"+name+" until "+what, func() bool {
		loop = &v1alpha1.Loop{}
		return f.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, loop) == nil && cond(loop)
	})
	return loop
}

func finished(l *v1alpha1.Loop) bool {
	return l.Status.Phase.IsFinished() && l.Status.ObservedGeneration == l.Generation && l.Annotations[v1alpha1.RequestAnnotation] == l.Status.LastRequest
}

var normalizers = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`), "<time>"},
	{regexp.MustCompile(`\b\d\d:\d\d:\d\d\.\d{3}\b`), "<clock>"},
	{regexp.MustCompile(`\b\d\d:\d\d:\d\d +\+(\d+ms|\d+\.\ds|\d+m\d\ds|\d+h\d\dm)`), "<clock> +<t>"},
	{regexp.MustCompile(`(duration|delay)=(\d+ms|\d+\.\ds|\d+m\d\ds|\d+h\d\dm)`), "$1=<d>"},
	{regexp.MustCompile(`(?m)^(\s+\d+  )(\d+[smhdy])+ +`), "$1<ago> "},
	{regexp.MustCompile(`\b[0-9a-f]{8}\b`), "<run>"},
	{regexp.MustCompile(`(duration_ms|exit_code_ms)=\d+`), "$1=<n>"},
	{regexp.MustCompile(`\d+ bytes`), "<n> bytes"},
	{regexp.MustCompile(`(Running time:\s+)(under 1s|\S+)`), "$1<d>"},
	{regexp.MustCompile(`(?m)\b\d+[smhd]$`), "<age>"},
}

// golden compares out, normalised (times, run ids, the namespace), with
// testdata/cluster/NAME.golden; -update rewrites it.
func golden(t *testing.T, name, ns, out string) {
	t.Helper()
	out = strings.ReplaceAll(out, ns, "<ns>")
	for _, n := range normalizers {
		out = n.re.ReplaceAllString(out, n.with)
	}
	path := filepath.Join("testdata", "cluster", name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if out != string(want) {
		t.Errorf("%s: output differs from %s\n--- got\n%s\n--- want\n%s", name, path, out, want)
	}
}

// ok runs a command that must exit 0 and returns its stdout.
func (f *clusterFixture) ok(t *testing.T, dir, ns string, args ...string) string {
	t.Helper()
	r := f.run(t, dir, ns, args...)
	if r.code != 0 {
		t.Fatalf("looprun %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}
