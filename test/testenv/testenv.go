// Package testenv finds what the envtest suites need: the kube-apiserver,
// etcd and kubectl that hack/setup-envtest.sh builds into bin/k8s, and the
// repository's root.
package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/looprun/looprun/api/v1alpha1"
)

// Root is the repository's root: the nearest directory above the working
// directory holding go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// UseAssets points envtest at the control-plane binaries: KUBEBUILDER_ASSETS
// when set (make test sets it), otherwise bin/k8s, which it then exports.
func UseAssets() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	root, err := Root()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "bin", "k8s")
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		return "", errors.New("no envtest binaries in bin/k8s: run make test, or hack/setup-envtest.sh")
	}
	return dir, os.Setenv("KUBEBUILDER_ASSETS", dir)
}

// Start starts a kube-apiserver and etcd for one test, with the CRDs of
// config/crd/bases when withCRDs, and stops them when the test ends. It
// returns their config and a client for the built-in kinds and Loops.
func Start(t testing.TB, withCRDs bool) (*rest.Config, client.Client) {
	t.Helper()
	cfg, c, stop, err := StartEnv(withCRDs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return cfg, c
}

// StartEnv is Start for programs (the benchmarks): the caller calls stop.
func StartEnv(withCRDs bool) (cfg *rest.Config, c client.Client, stop func(), err error) {
	if _, err := UseAssets(); err != nil {
		return nil, nil, nil, err
	}
	env := &envtest.Environment{}
	if withCRDs {
		root, err := Root()
		if err != nil {
			return nil, nil, nil, err
		}
		env.CRDDirectoryPaths, env.ErrorIfCRDPathMissing = []string{filepath.Join(root, "config", "crd", "bases")}, true
	}
	if cfg, err = env.Start(); err != nil {
		return nil, nil, nil, err
	}
	stop = func() { _ = env.Stop() }
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	if c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		stop()
		return nil, nil, nil, err
	}
	return cfg, c, stop, nil
}
