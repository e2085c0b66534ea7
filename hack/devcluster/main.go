// Command devcluster runs a local control plane for development and the demo:
// the kube-apiserver and etcd that hack/setup-envtest.sh built, with the
// CRDs of config/crd/bases installed (test/fixture starts them, as for the
// tests). It writes an admin kubeconfig and runs until interrupted.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/looprun/looprun/test/fixture"
)

func main() {
	kubeconfig := flag.String("write-kubeconfig", "bin/dev/kubeconfig", "where to write the admin kubeconfig")
	flag.Parse()
	if err := run(*kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, "devcluster:", err)
		os.Exit(1)
	}
}

func run(kubeconfig string) error {
	env, cfg, _, err := fixture.StartEnvironment(true)
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		return err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(kubeconfig), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return err
	}
	fmt.Printf("control plane at %s; kubeconfig %s\n", cfg.Host, kubeconfig)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	<-stop
	_ = os.Remove(kubeconfig)
	return nil
}
