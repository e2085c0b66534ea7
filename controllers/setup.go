package controllers

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/cloudevents"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/gateway/ledger"
	"github.com/looprun/looprun/internal/pricing"
	"github.com/looprun/looprun/internal/runner/judge"
	"github.com/looprun/looprun/internal/runner/local"
	"github.com/looprun/looprun/internal/runner/pod"
	"github.com/looprun/looprun/internal/runner/warm"
	"github.com/looprun/looprun/internal/tracing"
)

// Config configures the reconciler.
type Config struct {
	AllowLocalActions bool
	LocalWorkdir      string
	SegmentBytes      int
	MaxEventBytes     int64
	Workers           int
	// StartGrace: see LoopReconciler.StartGrace (0: the default; negative: no wait).
	StartGrace time.Duration
	// Pods shapes action Pods; with an entrypoint image and without
	// AllowLocalActions, actions run as Pods.
	Pods pod.Options
	// RunnerKey derives the keys of warm runner Pods (internal/runner/warm).
	RunnerKey []byte
	// LLM is how Loops may reach the LLM judge.
	LLM LLMConfig
	// Shard is the value of looprun.io/shard of the Loops this operator
	// runs ("": the Loops without the label). CacheOptions selects them.
	Shard string
	// Prices cost agent actions (nil: pricing.Default).
	Prices *pricing.Table
	// MaxRunningPerNamespace caps the Loops running at once in a
	// namespace (0: no cap); the others wait as Pending, in creation order.
	MaxRunningPerNamespace int
	// CloudEventsSink is where Loops' milestones go as CloudEvents ("":
	// nowhere); CloudEventsQueue bounds the events waiting to be sent;
	// CloudEventsHeadersFile holds headers sent with each (the sink's
	// credentials, "Name: value" lines, read for every event).
	CloudEventsSink        string
	CloudEventsQueue       int
	CloudEventsHeadersFile string
	// Tracer makes spans of runs (nil: none are made).
	Tracer *tracing.Tracer
	// LedgerNamespace holds the model gateway's usage ledgers (with
	// Pods.Gateway set; "": the operator's namespace).
	LedgerNamespace string
}

// LLMConfig is the operator's side of the LLM judge.
type LLMConfig struct {
	// APIKey and BaseURL are the operator's own (ANTHROPIC_API_KEY,
	// ANTHROPIC_BASE_URL): the key goes to no other endpoint.
	APIKey, BaseURL string
	// AllowedBaseURLs are the endpoints a Loop may name in spec.llm.baseURL.
	AllowedBaseURLs []string
	// MaxTimeout caps every judge call (default judge.DefaultMaxTimeout).
	MaxTimeout time.Duration
}

// NewReconciler wires a LoopReconciler to a manager.
func NewReconciler(mgr ctrl.Manager, cfg Config) *LoopReconciler {
	r := &LoopReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Scheme:    mgr.GetScheme(),
		Recorder:  mgr.GetEventRecorder("looprun"),
		Clock:     clock.RealClock{},
		EventLog: &configmaps.Log{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(),
			SegmentBytes: cfg.SegmentBytes, MaxBytes: cfg.MaxEventBytes},
		Judges: &Judges{OperatorKey: cfg.LLM.APIKey, OperatorBaseURL: cfg.LLM.BaseURL, AllowedBaseURLs: cfg.LLM.AllowedBaseURLs,
			OperatorNamespace: cfg.Pods.OperatorNamespace, OperatorServiceAccount: cfg.Pods.OperatorServiceAccount,
			Config: mgr.GetConfig(), Runner: judge.NewRunner(cfg.LLM.MaxTimeout)},
		MaxConcurrentReconciles: cfg.Workers,
		StartGrace:              cfg.StartGrace,
		Prices:                  cfg.Prices,
		Tracer:                  cfg.Tracer,
		queue:                   &queue{limit: cfg.MaxRunningPerNamespace},
	}
	if cfg.CloudEventsSink != "" {
		r.CloudEvents = cloudevents.NewSink(cfg.CloudEventsSink, cmp.Or(cfg.CloudEventsQueue, 1000))
		r.CloudEvents.HeadersFile = cfg.CloudEventsHeadersFile
		if err := mgr.Add(r.CloudEvents); err != nil {
			panic(err) // only before the manager started
		}
	}
	if cfg.Pods.Gateway != nil {
		r.Ledger = &ledger.Store{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(),
			Namespace: cmp.Or(cfg.LedgerNamespace, cfg.Pods.OperatorNamespace)}
	}
	switch {
	case cfg.AllowLocalActions:
		r.Actions = local.NewActions(cfg.LocalWorkdir)
	case cfg.Pods.Images.Entrypoint != "":
		pods := &pod.Runner{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Options: cfg.Pods, Now: r.now}
		r.Actions = warm.New(pods, cfg.RunnerKey)
	}
	return r
}

// CacheOptions keeps the manager's cache small: event-log ConfigMaps and
// Secrets are read through the API server, and only action Pods (labelled
// looprun.io/loop) are cached. Only the Loops of the manager's shard are:
// those labelled looprun.io/shard=SHARD, or, for the manager without a
// shard (""), those without the label; the same for LoopSchedules, whose
// runs carry their schedule's shard.
//
// The action Pods of every shard are watched, so that a Loop moved to
// another shard mid-step is woken there when its Pod ends; a Pod event of a
// Loop outside the shard finds no Loop in the cache and does nothing.
func CacheOptions(shard string) (cache.Options, client.Options) {
	pods := labels.NewSelector().Add(requirement(v1alpha1.LabelLoop, selection.Exists))
	loops := labels.NewSelector().Add(requirement(v1alpha1.LabelShard, selection.DoesNotExist))
	if shard != "" {
		loops = labels.NewSelector().Add(requirement(v1alpha1.LabelShard, selection.Equals, shard))
	}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: pods}, &v1alpha1.Loop{}: {Label: loops},
			&v1alpha1.LoopSchedule{}: {Label: loops}}},
		client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}}}}
}

// ValidateShard checks a shard name: a DNS label (lower-case letters,
// digits and '-', at most 63), so that it is a label value and names its
// shard's lease.
func ValidateShard(shard string) error {
	if errs := validation.IsDNS1123Label(shard); len(errs) > 0 {
		return fmt.Errorf("shard %q: %s", shard, strings.Join(errs, "; "))
	}
	return nil
}

func requirement(key string, op selection.Operator, values ...string) labels.Requirement {
	req, err := labels.NewRequirement(key, op, values)
	if err != nil {
		panic(err) // the keys and operators are the constants above
	}
	return *req
}

// RestConfig tunes a client config for the operator: built-in objects (the
// event-log ConfigMaps) travel as protobuf, which costs the API server less
// than JSON; Loops stay JSON, as custom resources must.
func RestConfig(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return cfg
}
