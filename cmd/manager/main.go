// Command manager is the looprun operator: it runs Loop objects.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // LoopSchedules' time zones, in an image without a zoneinfo

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/controllers"
	"github.com/looprun/looprun/internal/baseurl"
	"github.com/looprun/looprun/internal/cloudevents"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/pricing"
	"github.com/looprun/looprun/internal/runner/judge"
	"github.com/looprun/looprun/internal/runner/pod"
	"github.com/looprun/looprun/internal/tracing"
)

// Default images of action Pods; the Helm chart and kustomize set them.
const (
	DefaultEntrypointImage = "ghcr.io/looprun/looprun:latest"
	DefaultRunnerImage     = "docker.io/library/bash:5.2"
)

// settings are the manager's command-line flags.
type settings struct {
	metricsAddr, probeAddr string
	metricsSecure          bool
	leaderElect            bool
	leaseDuration          time.Duration
	renewDeadline          time.Duration
	retryPeriod            time.Duration
	watchNamespaces        []string
	otlpEndpoint           string
	reconciler             controllers.Config
	zap                    zap.Options
}

// parseFlags reads the command line. The entrypoint image defaults to
// $LOOPRUN_ENTRYPOINT_IMAGE, which kustomize sets to the manager's own image.
func parseFlags(args []string, getenv func(string) string) (*settings, error) {
	s := &settings{}
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.StringVar(&s.metricsAddr, "metrics-bind-address", "0", "address of the metrics endpoint, e.g. :8443 (0 disables it)")
	fs.BoolVar(&s.metricsSecure, "metrics-secure", true,
		"serve metrics over HTTPS to clients the API server authenticates and authorizes (get on the /metrics URL)")
	fs.StringVar(&s.probeAddr, "health-probe-bind-address", ":8081", "address of the health and readiness probes")
	fs.BoolVar(&s.leaderElect, "leader-elect", false, "elect a leader, so that only one of several replicas runs Loops")
	fs.DurationVar(&s.leaseDuration, "leader-elect-lease-duration", 15*time.Second,
		"how long a standby waits, after the leader last renewed its lease, before taking over from a leader that died without releasing it")
	fs.DurationVar(&s.renewDeadline, "leader-elect-renew-deadline", 10*time.Second,
		"how long the leader keeps trying to renew its lease (while the API server cannot be reached, say) before it stops")
	fs.DurationVar(&s.retryPeriod, "leader-elect-retry-period", 2*time.Second, "how often the lease is renewed or tried for")
	fs.StringVar(&s.reconciler.Shard, "shard", "",
		"run only the Loops labelled looprun.io/shard=SHARD (default: only the Loops without that label); each shard elects its own leader")
	var watch string
	fs.StringVar(&watch, "watch-namespaces", "", "comma-separated namespaces whose Loops this operator runs (empty: all)")
	c := &s.reconciler
	fs.BoolVar(&c.AllowLocalActions, "allow-local-actions", false,
		"run actions as processes of the operator itself (development only: they run with the operator's identity)")
	fs.StringVar(&c.LocalWorkdir, "local-workdir", filepath.Join(os.TempDir(), "looprun"), "working directories of local actions, one per Loop")
	fs.IntVar(&c.SegmentBytes, "event-segment-bytes", configmaps.DefaultSegmentBytes, "size cap of one event-log ConfigMap")
	fs.Int64Var(&c.MaxEventBytes, "max-event-bytes", 0, "delete the oldest event-log segments of a Loop past this size (0 keeps all)")
	fs.IntVar(&c.Workers, "max-concurrent-reconciles", 4, "Loops reconciled at once")
	fs.IntVar(&c.MaxRunningPerNamespace, "max-running-loops-per-namespace", 0,
		"Loops running at once in a namespace (0: no cap); the others wait as Pending and start in creation order")
	fs.StringVar(&c.CloudEventsSink, "cloudevents-sink", "", "send Loops' milestones (started, completed, failed, paused, waiting for approval) as CloudEvents over HTTP to this URL")
	fs.StringVar(&c.CloudEventsHeadersFile, "cloudevents-headers-file", "",
		`a file of headers sent with every CloudEvent, one "Name: value" a line (the sink's credentials, a mounted Secret; read for each event)`)
	fs.IntVar(&c.CloudEventsQueue, "cloudevents-queue", 1000, "CloudEvents waiting to be sent at most; past it they are dropped (counted in looprun_cloudevents_failed_total)")
	fs.StringVar(&s.otlpEndpoint, "otlp-endpoint", "",
		"send OpenTelemetry traces of runs over OTLP/HTTP to this base URL, e.g. http://collector:4318 (default: $OTEL_EXPORTER_OTLP_ENDPOINT; unset: no tracing)")
	fs.DurationVar(&c.StartGrace, "start-grace", controllers.DefaultStartGrace,
		"how long a new run's first status write waits for its first action to end, to save both at once (0: write at once)")
	c.Pods = pod.Options{OperatorNamespace: getenv("POD_NAMESPACE"), OperatorServiceAccount: getenv("SERVICE_ACCOUNT_NAME")}
	entrypoint := getenv("LOOPRUN_ENTRYPOINT_IMAGE")
	if entrypoint == "" {
		entrypoint = DefaultEntrypointImage
	}
	fs.StringVar(&c.Pods.Images.Entrypoint, "entrypoint-image", entrypoint, "image holding /entrypoint, copied into every action Pod")
	fs.StringVar(&c.Pods.Images.Runner, "runner-image", DefaultRunnerImage, "image of shell actions when a Loop sets no spec.runner.image")
	fs.StringVar(&c.Pods.Images.Agent, "agent-image", "", "image of agent actions when a Loop sets no spec.agent.image (default: the runner image)")
	fs.DurationVar(&c.Pods.StartAllowance, "pod-start-timeout", pod.DefaultStartAllowance, "how long an action Pod may take to start before its step fails")
	var runnerKeyFile string
	fs.StringVar(&runnerKeyFile, "runner-key-file", "",
		"a file holding the operator's runner key (at least 32 bytes; a mounted Secret): each warm runner Pod's key is derived from it, so that every replica, before and after a restart, can talk to the runners (empty: a key of this process only; warm steps in flight at a restart then run again)")
	var gatewayURL, gatewaySelector, defaultEgress string
	gw := pod.Gateway{}
	fs.StringVar(&gatewayURL, "gateway-url", "",
		"the model gateway's address as action Pods reach it: agent Pods call it with a token of their own instead of holding a key, and each step is billed what it metered (empty: no gateway)")
	fs.StringVar(&gw.Audience, "gateway-audience", "looprun-gateway", "audience of the agent Pods' gateway tokens (the gateway's --audience)")
	fs.StringVar(&c.LedgerNamespace, "gateway-namespace", getenv("POD_NAMESPACE"), "namespace of the gateway and its usage ledgers")
	fs.StringVar(&gatewaySelector, "gateway-selector", "app.kubernetes.io/component=gateway",
		"labels of the gateway's Pods (k=v,...), which a Restricted Loop's Pods may reach")
	fs.StringVar(&defaultEgress, "default-egress", "",
		"egress of a Loop that sets no spec.runner.network.egress: Restricted or Unrestricted (empty: Restricted for Loops that run an agent when there is a gateway, else Unrestricted)")
	c.LLM = controllers.LLMConfig{APIKey: getenv("ANTHROPIC_API_KEY"), BaseURL: getenv("ANTHROPIC_BASE_URL")}
	var allowed string
	fs.StringVar(&allowed, "llm-allowed-base-urls", "",
		"comma-separated endpoints a Loop may send its LLM judge calls to (spec.llm.baseURL); such a Loop brings its own key. Empty: none")
	fs.DurationVar(&c.LLM.MaxTimeout, "llm-max-timeout", judge.DefaultMaxTimeout, "cap on every LLM judge call, whatever a Loop's spec.llm.timeout says")
	var prices, pricesFile string
	fs.StringVar(&prices, "prices", "", `price table of agent models over the defaults, as JSON or YAML: {"models": {"NAME": {"input": USD, "output": USD, "cacheRead": USD, "cacheCreation": USD}}}, dollars per million tokens`)
	fs.StringVar(&pricesFile, "prices-file", "", "a file holding such a table (a mounted ConfigMap, say)")
	// Logs are JSON lines unless --zap-devel; --zap-log-level sets the level.
	s.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	s.watchNamespaces = splitList(watch)
	if err := gatewayOptions(&c.Pods, gatewayURL, gw, gatewaySelector, defaultEgress); err != nil {
		return nil, err
	}
	if c.StartGrace <= 0 {
		c.StartGrace = -1 // the flag's 0 is "write at once"; the reconciler's is its default
	}
	if c.Shard != "" {
		if err := controllers.ValidateShard(c.Shard); err != nil {
			return nil, err
		}
	}
	if s.leaseDuration <= s.renewDeadline || s.renewDeadline <= s.retryPeriod || s.retryPeriod <= 0 {
		return nil, fmt.Errorf("leader election: need lease duration (%s) > renew deadline (%s) > retry period (%s) > 0",
			s.leaseDuration, s.renewDeadline, s.retryPeriod)
	}
	if err := readFiles(c, runnerKeyFile); err != nil {
		return nil, err
	}
	switch {
	case prices != "" && pricesFile != "":
		return nil, errors.New("--prices and --prices-file: give one price table")
	case prices != "":
		t, err := pricing.Parse([]byte(prices))
		if err != nil {
			return nil, fmt.Errorf("--prices: %w", err)
		}
		c.Prices = t
	case pricesFile != "":
		t, err := pricing.Load(pricesFile)
		if err != nil {
			return nil, fmt.Errorf("--prices-file: %w", err)
		}
		c.Prices = t
	}
	c.LLM.AllowedBaseURLs = splitList(allowed)
	for _, u := range c.LLM.AllowedBaseURLs {
		if _, err := baseurl.Parse(u); err != nil {
			return nil, fmt.Errorf("--llm-allowed-base-urls: %q %w", u, err)
		}
	}
	return s, nil
}

// readFiles reads the files the flags name, so that a bad one stops the
// manager at start: the sink's headers, the runner key.
func readFiles(c *controllers.Config, runnerKeyFile string) error {
	if err := checkCloudEventsHeaders(c); err != nil {
		return err
	}
	key, err := runnerKey(runnerKeyFile)
	if err != nil {
		return fmt.Errorf("--runner-key-file: %w", err)
	}
	c.RunnerKey = key
	return nil
}

// runnerKey reads the operator's runner key, or makes one for this
// process when no file is given.
func runnerKey(file string) ([]byte, error) {
	if file == "" {
		key := make([]byte, 32)
		_, err := rand.Read(key)
		return key, err
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	key := bytes.TrimSpace(b)
	if len(key) < 32 {
		return nil, fmt.Errorf("%d bytes: a runner key has at least 32", len(key))
	}
	return key, nil
}

// checkCloudEventsHeaders reads the sink's headers file once, so that a
// malformed one stops the manager at start rather than failing each event.
func checkCloudEventsHeaders(c *controllers.Config) error {
	if c.CloudEventsHeadersFile == "" {
		return nil
	}
	if c.CloudEventsSink == "" {
		return errors.New("--cloudevents-headers-file without --cloudevents-sink")
	}
	if _, err := cloudevents.ReadHeaders(c.CloudEventsHeadersFile); err != nil {
		return fmt.Errorf("--cloudevents-headers-file: %w", err)
	}
	return nil
}

// splitList reads a comma-separated flag.
func splitList(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// logger builds the manager's logger: JSON lines (time, level, logger, msg
// and the keys of each message, such as loop, state and iteration).
func (s *settings) logger(w io.Writer) logr.Logger {
	return zap.New(zap.UseFlagOptions(&s.zap), zap.WriteTo(w))
}

// options builds the manager's options.
func (s *settings) options() ctrl.Options {
	cacheOpts, clientOpts := controllers.CacheOptions(s.reconciler.Shard)
	if len(s.watchNamespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range s.watchNamespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	metrics := metricsserver.Options{BindAddress: s.metricsAddr, SecureServing: s.metricsSecure}
	if s.metricsSecure {
		metrics.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	return ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metrics,
		HealthProbeBindAddress: s.probeAddr,
		LeaderElection:         s.leaderElect,
		LeaderElectionID:       leaderElectionID(s.reconciler.Shard),
		// The process exits as soon as the manager stops, so the lease can
		// go at once: a restart or rollout does not wait out its expiry.
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &s.leaseDuration,
		RenewDeadline:                 &s.renewDeadline,
		RetryPeriod:                   &s.retryPeriod,
		Cache:                         cacheOpts,
		Client:                        clientOpts,
	}
}

func main() {
	s, err := parseFlags(os.Args[1:], os.Getenv)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := run(ctrl.SetupSignalHandler(), s, ctrl.GetConfigOrDie(), os.Stderr); err != nil {
		os.Exit(1)
	}
}

// run runs the operator until ctx ends, logging to logw.
func run(ctx context.Context, s *settings, cfg *rest.Config, logw io.Writer) error {
	ctrl.SetLogger(s.logger(logw))
	log := ctrl.Log.WithName("setup")
	mgr, err := ctrl.NewManager(controllers.RestConfig(cfg), s.options())
	if err != nil {
		log.Error(err, "Unable to create the manager")
		return err
	}
	tracer, err := tracing.New(ctx, s.otlpEndpoint, "looprun-operator")
	if err != nil {
		log.Error(err, "Unable to set up tracing")
		return err
	}
	defer func() {
		flush, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tracer.Shutdown(flush)
	}()
	s.reconciler.Tracer = tracer
	if err := controllers.NewReconciler(mgr, s.reconciler).SetupWithManager(mgr); err != nil {
		log.Error(err, "Unable to set up the Loop controller")
		return err
	}
	if err := controllers.NewScheduleReconciler(mgr).SetupWithManager(mgr); err != nil {
		log.Error(err, "Unable to set up the LoopSchedule controller")
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	if s.reconciler.AllowLocalActions {
		log.Info("Actions run as processes of the operator (--allow-local-actions): for development only")
	} else {
		log.Info("Actions run as Pods", "entrypointImage", s.reconciler.Pods.Images.Entrypoint,
			"runnerImage", s.reconciler.Pods.Images.Runner)
	}
	if len(s.watchNamespaces) > 0 {
		log.Info("Watching only some namespaces", "namespaces", s.watchNamespaces)
	}
	log.Info("Starting the manager")
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "Manager stopped")
		return err
	}
	return nil
}

// leaderElectionID is the lease of a shard's managers: each shard elects its
// own leader.
func leaderElectionID(shard string) string {
	if shard == "" {
		return "looprun-manager.looprun.io"
	}
	return "looprun-manager-" + shard + ".looprun.io"
}

// gatewayOptions sets how action Pods reach the model gateway and where
// Loops' Pods may connect to.
func gatewayOptions(o *pod.Options, url string, gw pod.Gateway, selector, egress string) error {
	switch v1alpha1.EgressMode(egress) {
	case "", v1alpha1.EgressRestricted, v1alpha1.EgressUnrestricted:
		o.Egress.Default = v1alpha1.EgressMode(egress)
	default:
		return fmt.Errorf("--default-egress %q: Restricted or Unrestricted", egress)
	}
	if url == "" {
		return nil
	}
	u, err := neturl.Parse(url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--gateway-url %q: an http(s) URL", url)
	}
	gw.URL = url
	o.Gateway = &gw
	labels, err := labels.ConvertSelectorToLabelsMap(selector)
	if err != nil {
		return fmt.Errorf("--gateway-selector %q: %w", selector, err)
	}
	o.Egress.GatewayLabels = labels
	port, _ := strconv.ParseUint(u.Port(), 10, 16)
	if port == 0 && u.Scheme == "https" {
		port = 443
	} else if port == 0 {
		port = 80
	}
	o.Egress.GatewayPort = int32(port) // at most 65535
	return nil
}
