package main

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/gateway"
	"github.com/looprun/looprun/internal/gateway/kubeauth"
	"github.com/looprun/looprun/internal/gateway/ledger"
	"github.com/looprun/looprun/internal/pricing"
)

// kube is what the gateway takes from the cluster: who a call is for, the
// Loops' budgets, and the steps' ledgers.
type kube struct {
	auth   gateway.Authenticator
	budget gateway.Budget
	ledger gateway.Ledger
	// journal is the ledger: calls recorded on the gateway's volume,
	// shipped to the ledgers behind.
	journal *ledger.Journal
	// start runs the Loop cache until ctx ends; it returns once the cache
	// has synced (or failed to).
	start func(ctx context.Context) error
	// sweep drops the ledgers of steps no longer in flight.
	sweep func(ctx context.Context, now time.Time) (int, error)
}

// ledgerMinAge is how old a ledger must be before a sweep may drop it.
const ledgerMinAge = 10 * time.Minute

// inFlight says whether step is still its Loop's step in flight: its Loop
// exists (the same one) and its status names the step's Pod.
func inFlight(r client.Reader) func(context.Context, ledger.Step) (bool, error) {
	return func(ctx context.Context, step ledger.Step) (bool, error) {
		loop := &v1alpha1.Loop{}
		err := r.Get(ctx, client.ObjectKey{Namespace: step.Namespace, Name: step.Loop}, loop)
		switch {
		case apierrors.IsNotFound(err):
			return false, nil
		case err != nil:
			return false, err
		}
		a := loop.Status.Action
		return loop.UID == step.LoopUID && a != nil && a.PodUID == string(step.PodUID), nil
	}
}

// newKube wires the gateway's seams to the cluster. Loops are read from
// an informer's cache (the operator writes their status; a status a watch
// event late costs at most the overspend bound of docs/gateway-protocol.md);
// Pods and TokenReviews are asked of the API server (kubeauth keeps its
// own short caches). A call is recorded in the journal on the gateway's
// volume (s.journalDir) and shipped to its step's ledger behind; the
// budget check reads a step's ledger from a watch of the ledgers merged
// with this replica's own writes and records not yet shipped, so a call of
// this replica is never missed and another replica's is seen a watch event
// late (docs/gateway-protocol.md, the overspend bound).
func newKube(cfg *rest.Config, s *settings, prices *pricing.Table, log logr.Logger) (*kube, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	opts := cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}: {
			Namespaces: map[string]cache.Config{s.ledgerNamespace: {}},
			Label:      labels.SelectorFromSet(labels.Set{ledger.LabelLedger: "true"}),
			Transform:  cache.TransformStripManagedFields(),
			// The ledgers read are never changed: no copy per call.
			UnsafeDisableDeepCopy: ptr.To(true),
		},
	}}
	if len(s.watchNamespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range s.watchNamespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	loops, err := cache.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("the Loop cache: %w", err)
	}
	reader, err := client.New(cfg, client.Options{Scheme: scheme, Cache: &client.CacheOptions{
		Reader:     loops,
		DisableFor: []client.Object{&corev1.Pod{}, &corev1.ConfigMap{}, &corev1.Secret{}, &corev1.ServiceAccount{}},
	}})
	if err != nil {
		return nil, err
	}
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	store := &ledger.Store{Client: direct, Namespace: s.ledgerNamespace}
	journal, err := ledger.OpenJournal(s.journalDir, store, loops, log.WithName("journal"))
	if err != nil {
		return nil, err
	}
	return &kube{
		sweep: func(ctx context.Context, now time.Time) (int, error) {
			return store.Sweep(ctx, inFlight(reader), ledgerMinAge, now)
		},
		auth:    kubeauth.NewAuthenticator(reader, cs.AuthenticationV1().TokenReviews(), s.audience, s.operatorSA),
		budget:  kubeauth.NewBudget(reader, prices),
		ledger:  journal,
		journal: journal,
		start: func(ctx context.Context) error {
			if _, err := loops.GetInformer(ctx, &v1alpha1.Loop{}); err != nil {
				return err
			}
			if _, err := loops.GetInformer(ctx, &corev1.ConfigMap{}); err != nil {
				return err
			}
			errc := make(chan error, 1)
			go func() { errc <- loops.Start(ctx) }()
			if !loops.WaitForCacheSync(ctx) {
				select {
				case err := <-errc:
					return fmt.Errorf("the Loop cache: %w", err)
				default:
					return fmt.Errorf("the Loop cache did not sync")
				}
			}
			return nil
		},
	}, nil
}
