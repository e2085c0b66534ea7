package controllers

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/looprun/looprun/internal/eventlog"
)

// Config configures the reconciler.
type Config struct {
	AllowLocalActions bool
	LocalWorkdir      string
	SegmentBytes      int
	MaxEventBytes     int64
	Workers           int
}

// NewReconciler wires a LoopReconciler to a manager.
func NewReconciler(mgr ctrl.Manager, cfg Config) *LoopReconciler {
	r := &LoopReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Scheme:    mgr.GetScheme(),
		Recorder:  mgr.GetEventRecorder("looprun"),
		Clock:     clock.RealClock{},
		EventLog: &eventlog.ConfigMaps{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(),
			SegmentBytes: cfg.SegmentBytes, MaxBytes: cfg.MaxEventBytes},
		JudgeFor:                (&SecretJudges{Reader: mgr.GetAPIReader()}).JudgeFor,
		MaxConcurrentReconciles: cfg.Workers,
	}
	if cfg.AllowLocalActions {
		local := NewLocalActions(cfg.LocalWorkdir)
		r.Actions, r.ActionEvents = local, local.Events()
	}
	return r
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
