// Command manager is the looprun operator: it runs Loop objects.
package main

import (
	"flag"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/controllers"
	"github.com/looprun/looprun/internal/eventlog"
	"github.com/looprun/looprun/internal/runner/pod"
)

// Default images of action Pods; the Helm chart and kustomize set them.
const (
	DefaultEntrypointImage = "ghcr.io/looprun/looprun:latest"
	DefaultRunnerImage     = "docker.io/library/bash:5.2"
)

func main() {
	var (
		metricsAddr, probeAddr, localWorkdir string
		leaderElect, allowLocal              bool
		segmentBytes, workers                int
		maxEventBytes                        int64
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "address of the metrics endpoint (0 disables it)")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of the health and readiness probes")
	flag.BoolVar(&leaderElect, "leader-elect", false, "elect a leader, so that only one of several replicas runs Loops")
	flag.BoolVar(&allowLocal, "allow-local-actions", false,
		"run actions as processes of the operator itself (development only: they run with the operator's identity)")
	flag.StringVar(&localWorkdir, "local-workdir", filepath.Join(os.TempDir(), "looprun"), "working directories of local actions, one per Loop")
	flag.IntVar(&segmentBytes, "event-segment-bytes", eventlog.DefaultSegmentBytes, "size cap of one event-log ConfigMap")
	flag.Int64Var(&maxEventBytes, "max-event-bytes", 0, "delete the oldest event-log segments of a Loop past this size (0 keeps all)")
	flag.IntVar(&workers, "max-concurrent-reconciles", 4, "Loops reconciled at once")
	pods := pod.Options{OperatorNamespace: os.Getenv("POD_NAMESPACE"), OperatorServiceAccount: os.Getenv("SERVICE_ACCOUNT_NAME")}
	flag.StringVar(&pods.Images.Entrypoint, "entrypoint-image", DefaultEntrypointImage, "image holding /entrypoint, copied into every action Pod")
	flag.StringVar(&pods.Images.Runner, "runner-image", DefaultRunnerImage, "image of shell actions when a Loop sets no spec.runner.image")
	flag.StringVar(&pods.Images.Agent, "agent-image", "", "image of agent actions when a Loop sets no spec.agent.image (default: the runner image)")
	flag.DurationVar(&pods.StartAllowance, "pod-start-timeout", pod.DefaultStartAllowance, "how long an action Pod may take to start before its step fails")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))

	cacheOpts, clientOpts := controllers.CacheOptions()
	mgr, err := ctrl.NewManager(controllers.RestConfig(ctrl.GetConfigOrDie()), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "looprun-manager.looprun.io",
		Cache:                  cacheOpts,
		Client:                 clientOpts,
	})
	if err != nil {
		log.Error(err, "Unable to create the manager")
		os.Exit(1)
	}
	r := controllers.NewReconciler(mgr, controllers.Config{AllowLocalActions: allowLocal, LocalWorkdir: localWorkdir,
		SegmentBytes: segmentBytes, MaxEventBytes: maxEventBytes, Workers: workers, Pods: pods})
	if err := r.SetupWithManager(mgr); err != nil {
		log.Error(err, "Unable to set up the Loop controller")
		os.Exit(1)
	}
	utilruntime.Must(mgr.AddHealthzCheck("healthz", healthz.Ping))
	utilruntime.Must(mgr.AddReadyzCheck("readyz", healthz.Ping))
	if allowLocal {
		log.Info("Actions run as processes of the operator (--allow-local-actions): for development only")
	} else {
		log.Info("Actions run as Pods", "entrypointImage", pods.Images.Entrypoint, "runnerImage", pods.Images.Runner)
	}
	log.Info("Starting the manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "Manager stopped")
		os.Exit(1)
	}
}
