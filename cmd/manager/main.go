// Command manager is the looprun operator: it runs Loop objects.
package main

import (
	"flag"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/controllers"
	"github.com/looprun/looprun/internal/eventlog"
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
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))

	mgr, err := ctrl.NewManager(controllers.RestConfig(ctrl.GetConfigOrDie()), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "looprun-manager.looprun.io",
		// Event-log segments and Secrets are read through the API server:
		// caching every Loop's log would cost gigabytes.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}}}},
	})
	if err != nil {
		log.Error(err, "Unable to create the manager")
		os.Exit(1)
	}
	r := controllers.NewReconciler(mgr, controllers.Config{AllowLocalActions: allowLocal, LocalWorkdir: localWorkdir,
		SegmentBytes: segmentBytes, MaxEventBytes: maxEventBytes, Workers: workers})
	if err := r.SetupWithManager(mgr); err != nil {
		log.Error(err, "Unable to set up the Loop controller")
		os.Exit(1)
	}
	utilruntime.Must(mgr.AddHealthzCheck("healthz", healthz.Ping))
	utilruntime.Must(mgr.AddReadyzCheck("readyz", healthz.Ping))
	if !allowLocal {
		log.Info("Actions cannot run: start with --allow-local-actions for development; Loops wait and say so")
	}
	log.Info("Starting the manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "Manager stopped")
		os.Exit(1)
	}
}
