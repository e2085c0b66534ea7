// Command test-kubelet runs the test kubelet against a cluster without a
// real one (the dev cluster of make demo): it binds action Pods to a fake
// Node and runs them as local processes. Never shipped.
package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/looprun/looprun/internal/runner/pod"
	"github.com/looprun/looprun/test/kubelet"
)

func main() {
	dir := flag.String("dir", filepath.Join(os.TempDir(), "looprun-test-kubelet"), "where Pod volumes, logs and termination messages go")
	entrypoint := flag.String("entrypoint", "bin/entrypoint", "the entrypoint binary, run for "+pod.EntrypointBinary)
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("test-kubelet")

	ep, err := filepath.Abs(*entrypoint)
	if err != nil {
		log.Error(err, "Bad --entrypoint")
		os.Exit(1)
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{Scheme: scheme,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		log.Error(err, "Unable to create the manager")
		os.Exit(1)
	}
	k := &kubelet.Kubelet{Client: mgr.GetClient(), Dir: *dir, Binaries: map[string]string{pod.EntrypointBinary: ep}}
	if err := k.SetupWithManager(mgr); err != nil {
		log.Error(err, "Unable to set up the kubelet")
		os.Exit(1)
	}
	log.Info("Running Pods as local processes", "dir", *dir)
	ctx := ctrl.SetupSignalHandler()
	direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		log.Error(err, "Unable to make a client")
		os.Exit(1)
	}
	// Container logs through the API server (kubectl logs, looprun logs),
	// once the manager's client can read.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if err := k.ServeLogs(ctx, direct); err != nil {
			log.Error(err, "Serving container logs failed; kubectl logs will not work")
		}
		<-ctx.Done()
		return nil
	})); err != nil {
		log.Error(err, "Unable to set up the log server")
		os.Exit(1)
	}
	err = mgr.Start(ctx)
	k.Stop()
	if err != nil {
		log.Error(err, "Stopped")
		os.Exit(1)
	}
}
