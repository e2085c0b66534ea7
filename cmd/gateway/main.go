// Command gateway is looprun's model gateway: agent Pods call it instead
// of the model API, with a projected service-account token for a key. It
// holds the only copy of the real key, counts each call's usage into the
// step's ledger before the end of the answer reaches the agent, and
// refuses calls once the Loop's budget is spent (docs/gateway-protocol.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/looprun/looprun/internal/gateway"
	"github.com/looprun/looprun/internal/pricing"
)

// DefaultUpstream is Anthropic's API, the only upstream allowed unless
// --allowed-upstreams says otherwise.
const DefaultUpstream = "https://api.anthropic.com"

// settings are the gateway's command-line flags.
type settings struct {
	// watchNamespaces limits the Loops the gateway reads (nil: all).
	watchNamespaces       []string
	listen, metricsListen string
	upstream              *url.URL
	apiKeyFile, apiKey    string
	audience              string
	ledgerNamespace       string
	operatorSA            string
	prices                *pricing.Table
	checkpointEvery       time.Duration
	maxRequestBytes       int64
	shutdownGrace         time.Duration
	journalDir            string
	zap                   zap.Options
}

func parseFlags(args []string, getenv func(string) string) (*settings, error) {
	s := &settings{}
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.StringVar(&s.listen, "listen", ":8080", "address the agents call")
	fs.StringVar(&s.metricsListen, "metrics-listen", ":8081", "address of /metrics, /healthz and /readyz (empty: none)")
	upstream := fs.String("upstream", DefaultUpstream, "the model API's base URL")
	allowed := fs.String("allowed-upstreams", DefaultUpstream, "comma-separated base URLs --upstream may be")
	fs.StringVar(&s.apiKeyFile, "api-key-file", "", "file holding the upstream's key (a mounted Secret; read again when it changes); default $ANTHROPIC_API_KEY")
	fs.StringVar(&s.audience, "audience", "looprun-gateway", "audience of the agents' projected service-account tokens")
	fs.StringVar(&s.ledgerNamespace, "ledger-namespace", getenv("POD_NAMESPACE"), "namespace of the usage ledgers (default $POD_NAMESPACE)")
	var watch string
	fs.StringVar(&watch, "watch-namespaces", "", "comma-separated namespaces whose Loops' agents the gateway serves (empty: all); as the manager's")
	fs.StringVar(&s.operatorSA, "operator-service-account", "", "the looprun manager's NAMESPACE:NAME, whose calls (the LLM judge) are checked but not recorded")
	fs.DurationVar(&s.checkpointEvery, "checkpoint-every", gateway.DefaultCheckpointEvery, "how often a streaming call's output so far is recorded")
	fs.Int64Var(&s.maxRequestBytes, "max-request-bytes", gateway.DefaultMaxRequestBytes, "largest call body")
	fs.DurationVar(&s.shutdownGrace, "shutdown-grace", 45*time.Second,
		"on SIGTERM, how long calls in flight (streams) may take to finish; keep it 15s under the Pod's terminationGracePeriodSeconds, for the calls cut off then to be recorded")
	fs.StringVar(&s.journalDir, "journal-dir", "/var/lib/looprun-gateway",
		"directory of the journal each call is recorded in before its answer ends (keep it on a volume that outlives the gateway's container: an emptyDir)")
	var prices, pricesFile string
	fs.StringVar(&prices, "prices", "", "price table over the defaults, as JSON or YAML (as the manager's --prices)")
	fs.StringVar(&pricesFile, "prices-file", "", "a file holding such a table")
	s.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	u, err := allowedUpstream(*upstream, *allowed)
	if err != nil {
		return nil, err
	}
	s.upstream = u
	if s.apiKeyFile == "" {
		s.apiKey = strings.TrimSpace(getenv("ANTHROPIC_API_KEY"))
		if s.apiKey == "" {
			return nil, errors.New("no upstream key: give --api-key-file or set ANTHROPIC_API_KEY")
		}
	}
	if s.ledgerNamespace == "" {
		return nil, errors.New("no ledger namespace: give --ledger-namespace or set POD_NAMESPACE")
	}
	for _, ns := range strings.Split(watch, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			s.watchNamespaces = append(s.watchNamespaces, ns)
		}
	}
	if s.operatorSA != "" {
		if ns, name, ok := strings.Cut(s.operatorSA, ":"); !ok || ns == "" || name == "" {
			return nil, fmt.Errorf("--operator-service-account %q: want NAMESPACE:NAME", s.operatorSA)
		}
	}
	switch {
	case prices != "" && pricesFile != "":
		return nil, errors.New("--prices and --prices-file: give one price table")
	case prices != "":
		if s.prices, err = pricing.Parse([]byte(prices)); err != nil {
			return nil, fmt.Errorf("--prices: %w", err)
		}
	case pricesFile != "":
		if s.prices, err = pricing.Load(pricesFile); err != nil {
			return nil, fmt.Errorf("--prices-file: %w", err)
		}
	default:
		s.prices = pricing.Default()
	}
	return s, nil
}

// allowedUpstream parses the upstream and refuses one not in the allowed
// list: the gateway sends the real key to it.
func allowedUpstream(upstream, allowed string) (*url.URL, error) {
	norm := func(raw string) (*url.URL, string, error) {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil {
			return nil, "", err
		}
		if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return nil, "", fmt.Errorf("%q is not a base URL (scheme://host[/path])", raw)
		}
		u.Scheme, u.Host = strings.ToLower(u.Scheme), strings.ToLower(u.Host)
		u.Path = strings.TrimSuffix(u.Path, "/")
		return u, u.String(), nil
	}
	u, want, err := norm(upstream)
	if err != nil {
		return nil, fmt.Errorf("--upstream: %w", err)
	}
	for a := range strings.SplitSeq(allowed, ",") {
		if strings.TrimSpace(a) == "" {
			continue
		}
		_, got, err := norm(a)
		if err != nil {
			return nil, fmt.Errorf("--allowed-upstreams: %w", err)
		}
		if got == want {
			return u, nil
		}
	}
	return nil, fmt.Errorf("--upstream %s is not in --allowed-upstreams (%s): the gateway sends its key only to an allowed upstream", want, allowed)
}

func main() {
	s, err := parseFlags(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(2)
	}
	log := zap.New(zap.UseFlagOptions(&s.zap), zap.WriteTo(os.Stderr))
	ctrl.SetLogger(log)
	if err := run(ctrl.SetupSignalHandler(), s, log); err != nil {
		log.Error(err, "gateway failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, s *settings, log logr.Logger) error {
	k, err := newKube(ctrl.GetConfigOrDie(), s, s.prices, log)
	if err != nil {
		return err
	}
	if k.auth == nil || k.budget == nil {
		return errors.New("no authenticator or budget: this build lacks the cluster's identity checks")
	}
	cacheCtx, stopCache := context.WithCancel(context.Background())
	defer stopCache()
	if err := k.start(cacheCtx); err != nil {
		return err
	}
	go sweepLedgers(cacheCtx, k, log.WithName("ledgers"))
	key := gateway.StaticKey(s.apiKey)
	if s.apiKeyFile != "" {
		key = gateway.FileKey(s.apiKeyFile)
	}
	if _, err := key(); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h, err := gateway.New(gateway.Config{Upstream: s.upstream, Key: key, Auth: k.auth, Budget: k.budget, Ledger: k.ledger,
		Prices: s.prices, CheckpointEvery: s.checkpointEvery, MaxRequestBytes: s.maxRequestBytes,
		Registry: reg, Logger: log.WithName("gateway")})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.listen)
	if err != nil {
		return err
	}
	var mln net.Listener
	if s.metricsListen != "" {
		if mln, err = net.Listen("tcp", s.metricsListen); err != nil {
			return err
		}
	}
	err = serve(ctx, s, ln, mln, h, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), log)
	// The calls are over: what the journal has not shipped goes now (what
	// it cannot ship stays in it, for the next start on this volume).
	closeCtx, cancel := context.WithTimeout(context.Background(), journalCloseTimeout)
	defer cancel()
	if cerr := k.journal.Close(closeCtx); cerr != nil {
		log.Error(cerr, "Shipping the journal's last calls")
	}
	return err
}

// journalCloseTimeout is how long, on the way out, the journal may take to
// ship what it holds.
const journalCloseTimeout = 10 * time.Second

// serve runs the gateway until ctx ends (SIGTERM), then stops taking calls
// and lets those in flight (streams) finish for up to the grace period.
// mln, when not nil, serves /metrics, /healthz and /readyz.
func serve(ctx context.Context, s *settings, ln, mln net.Listener, h, metrics http.Handler, log logr.Logger) error {
	var draining atomic.Bool
	// inFlight counts the calls being served, so that the process does not
	// end before a call cut off at the end of the grace period is recorded.
	var inFlight sync.WaitGroup
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight.Add(1)
		defer inFlight.Done()
		h.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: counted, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	servers := []*http.Server{srv}
	listeners := []net.Listener{ln}
	if mln != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", metrics)
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
			if draining.Load() {
				http.Error(w, "shutting down", http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(w, r)
		})
		servers = append(servers, &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second})
		listeners = append(listeners, mln)
	}
	errc := make(chan error, len(servers))
	for i, sv := range servers {
		go func() {
			log.Info("listening", "address", listeners[i].Addr().String())
			if err := sv.Serve(listeners[i]); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	draining.Store(true)
	log.Info("shutting down: letting calls in flight finish", "grace", s.shutdownGrace)
	shutCtx, cancel := context.WithTimeout(context.Background(), s.shutdownGrace)
	defer cancel()
	err := srv.Shutdown(shutCtx)
	if err != nil {
		log.Error(err, "calls still in flight at the end of the grace period: cut off (each recorded as last seen)")
		_ = srv.Close()
		done := make(chan struct{})
		go func() { inFlight.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			log.Info("calls cut off still recording after 15s: exiting")
		}
	}
	for _, sv := range servers[1:] {
		_ = sv.Close()
	}
	return nil
}

// sweepLedgers drops, every few minutes, the ledgers of steps the operator
// counted and moved on from (one a call cut off as its Pod ended wrote
// after the count). Every replica sweeps; deletes are idempotent.
func sweepLedgers(ctx context.Context, k *kube, log logr.Logger) {
	t := time.NewTicker(ledgerMinAge / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if n, err := k.sweep(ctx, now); err != nil {
				log.Error(err, "Sweeping the ledgers of counted steps")
			} else if n > 0 {
				log.Info("Dropped the ledgers of counted steps", "count", n)
			}
		}
	}
}
