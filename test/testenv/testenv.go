// Package testenv finds what the envtest suites need: the kube-apiserver,
// etcd and kubectl that hack/setup-envtest.sh builds into bin/k8s, and the
// repository's root.
package testenv

import (
	"errors"
	"os"
	"path/filepath"
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
