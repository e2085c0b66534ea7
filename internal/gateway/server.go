package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/looprun/looprun/internal/gateway/ledger"
	"github.com/looprun/looprun/internal/pricing"
)

// Defaults of Config.
const (
	DefaultCheckpointEvery  = time.Second
	DefaultMaxRequestBytes  = 32 << 20
	DefaultMaxResponseBytes = 64 << 20
	// DefaultMaxEventBytes bounds one server-sent event of a stream (the
	// upstream's events are a few hundred bytes; a delta of a large tool
	// input is still far below this).
	DefaultMaxEventBytes = 8 << 20
	// recordTimeout bounds the write of what a cut-off stream saw, which
	// runs on a fresh context (the request's is gone).
	recordTimeout = 10 * time.Second
)

// The routes forwarded. The claude CLI calls only POST /v1/messages
// (?beta=true) for a prompt; count_tokens is the Messages API's other
// endpoint an agent may call (docs/gateway-protocol.md).
const (
	routeMessages    = "/v1/messages"
	routeCountTokens = "/v1/messages/count_tokens"
)

// Config is what the gateway needs.
type Config struct {
	// Upstream is the model API's base URL (https://api.anthropic.com).
	Upstream *url.URL
	// Key is the upstream's key, asked on every call.
	Key KeySource
	// Auth maps a call's credential to its caller.
	Auth Authenticator
	// Budget refuses the calls of a Loop whose budget is spent.
	Budget Budget
	// Ledger keeps each step's calls.
	Ledger Ledger
	// Prices totals a step's ledger for Budget.
	Prices *pricing.Table
	// CheckpointEvery is how often a streaming call's output so far is
	// recorded (default 1s): a gateway killed mid-stream loses at most
	// this much of the output.
	CheckpointEvery time.Duration
	// MaxRequestBytes bounds a call's body (default 32 MiB).
	MaxRequestBytes int64
	// MaxResponseBytes bounds a non-streaming answer (default 64 MiB);
	// a larger one fails the call (502) rather than go on uncounted.
	MaxResponseBytes int64
	// MaxEventBytes bounds one event of a stream (default 8 MiB).
	MaxEventBytes int
	// Transport reaches the upstream (default: one tuned for many
	// concurrent streams to one host).
	Transport http.RoundTripper
	// Registry gets the gateway's metrics (none when nil).
	Registry prometheus.Registerer
	// Logger logs calls that failed and refusals.
	Logger logr.Logger
}

// NewTransport is the default upstream transport: many concurrent
// streams to the one upstream host, kept alive between calls.
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ReadBufferSize:        8 << 10,
		WriteBufferSize:       8 << 10,
	}
}

type gw struct {
	cfg    Config
	client *http.Client
	m      *metrics
	log    logr.Logger
}

// New is the gateway's handler: the forwarded routes, /healthz and
// /readyz.
func New(cfg Config) (http.Handler, error) {
	switch {
	case cfg.Upstream == nil || cfg.Upstream.Scheme == "" || cfg.Upstream.Host == "":
		return nil, errors.New("gateway: no upstream URL")
	case cfg.Key == nil:
		return nil, errors.New("gateway: no upstream key")
	case cfg.Auth == nil || cfg.Budget == nil || cfg.Ledger == nil:
		return nil, errors.New("gateway: an authenticator, a budget and a ledger are required")
	case cfg.Prices == nil:
		return nil, errors.New("gateway: no price table")
	}
	if cfg.CheckpointEvery <= 0 {
		cfg.CheckpointEvery = DefaultCheckpointEvery
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.MaxEventBytes <= 0 {
		cfg.MaxEventBytes = DefaultMaxEventBytes
	}
	if cfg.Transport == nil {
		cfg.Transport = NewTransport()
	}
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = logr.Discard()
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	g := &gw{cfg: cfg, m: m, log: cfg.Logger,
		// No timeout: a call lasts what the upstream takes; the agent's
		// disconnect cancels it (the request's context).
		client: &http.Client{Transport: cfg.Transport,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	return g, nil
}

func (g *gw) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		_, _ = io.WriteString(w, "ok\n")
		return
	case "/readyz":
		if _, err := g.cfg.Key(); err != nil {
			http.Error(w, "no upstream key: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
		return
	case routeMessages, routeCountTokens:
	default:
		g.m.refusals.WithLabelValues(reasonNotFound).Inc()
		refuse(w, http.StatusNotFound, "not_found_error",
			fmt.Sprintf("%s %s is not forwarded (only POST %s and POST %s)", r.Method, r.URL.Path, routeMessages, routeCountTokens), true)
		return
	}
	route := r.URL.Path
	if r.Method != http.MethodPost {
		g.m.refusals.WithLabelValues(reasonNotFound).Inc()
		w.Header().Set("Allow", http.MethodPost)
		refuse(w, http.StatusMethodNotAllowed, "invalid_request_error", r.Method+" "+route+": only POST", true)
		return
	}
	outcome := g.serve(w, r, route)
	g.m.calls.WithLabelValues(route, outcome).Inc()
}

// credential is the caller's key: x-api-key, else Authorization's bearer
// token (the CLI's apiKeyHelper sends both, the same).
func credential(h http.Header) string {
	if k := strings.TrimSpace(h.Get("X-Api-Key")); k != "" {
		return k
	}
	a := strings.TrimSpace(h.Get("Authorization"))
	if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}

func (g *gw) serve(w http.ResponseWriter, r *http.Request, route string) string {
	ctx := r.Context()
	cred := credential(r.Header)
	if cred == "" {
		g.m.refusals.WithLabelValues(reasonUnauthenticated).Inc()
		refuse(w, http.StatusUnauthorized, "authentication_error", "no credential (x-api-key or Authorization: Bearer)", true)
		return outcomeRefused
	}
	caller, err := g.cfg.Auth.Authenticate(ctx, cred, r.Header.Get("X-Looprun-Loop"))
	switch {
	case errors.Is(err, ErrUnauthenticated):
		g.m.refusals.WithLabelValues(reasonUnauthenticated).Inc()
		refuse(w, http.StatusUnauthorized, "authentication_error", err.Error(), true)
		return outcomeRefused
	case errors.Is(err, ErrForbidden):
		g.m.refusals.WithLabelValues(reasonForbidden).Inc()
		refuse(w, http.StatusForbidden, "permission_error", err.Error(), true)
		return outcomeRefused
	case err != nil:
		return g.unavailable(w, "authenticating the call", err)
	case caller == nil:
		return g.unavailable(w, "authenticating the call", errors.New("no caller"))
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxRequestBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			g.m.refusals.WithLabelValues(reasonTooLarge).Inc()
			refuse(w, http.StatusRequestEntityTooLarge, "request_too_large",
				fmt.Sprintf("the request is larger than %d bytes", g.cfg.MaxRequestBytes), true)
			return outcomeRefused
		}
		return outcomeCutOff // the agent went away while sending
	}
	metered := route == routeMessages
	if metered {
		if o, refused := g.checkBudget(ctx, w, caller); refused {
			return o
		}
	}
	key, err := g.cfg.Key()
	if err != nil {
		return g.unavailable(w, "reading the upstream key", err)
	}
	// The upstream call ends with the agent's request, or earlier when
	// the gateway must stop a stream (a checkpoint it could not write).
	upCtx, stopUpstream := context.WithCancel(ctx)
	defer stopUpstream()
	// The host is the configured upstream's; the path one of the two routes.
	out, err := http.NewRequestWithContext(upCtx, http.MethodPost, g.target(r.URL), bytes.NewReader(body)) //nolint:gosec // see above
	if err != nil {
		return g.fail(w, caller, "building the upstream request", err)
	}
	copyRequestHeaders(out.Header, r.Header)
	out.Header.Set("X-Api-Key", key)
	resp, err := g.client.Do(out) //nolint:gosec // the configured upstream only
	if err != nil {
		if ctx.Err() != nil {
			return outcomeCutOff
		}
		return g.fail(w, caller, "calling the upstream", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if !metered || resp.StatusCode < 200 || resp.StatusCode > 299 {
		g.passThrough(w, resp)
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return outcomeUpstream
		}
		return outcomeOK
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "text/event-stream" {
		return g.stream(w, r, resp, caller, stopUpstream)
	}
	return g.whole(w, resp, caller)
}

// checkBudget refuses the call when the Loop's budget is spent. The
// step's ledger is read afresh for every call: nothing is cached that
// could let a call through once the budget is spent.
func (g *gw) checkBudget(ctx context.Context, w http.ResponseWriter, c *Caller) (string, bool) {
	var totals ledger.Totals
	if c.PodUID != "" {
		l, err := g.cfg.Ledger.Read(ctx, c.PodUID)
		if err != nil {
			return g.unavailable(w, "reading the step's ledger", err), true
		}
		totals = l.Totals(g.cfg.Prices)
	}
	err := g.cfg.Budget.Check(ctx, c.Step, totals)
	switch {
	case errors.Is(err, ErrBudgetSpent):
		g.m.refusals.WithLabelValues(reasonBudget).Inc()
		g.log.Info("refused: budget spent", "loop", c.Namespace+"/"+c.Loop, "pod", c.Pod,
			"stepCostUSD", pricing.FormatUSD(totals.CostMicroUSD), "reason", err.Error())
		// 400 with x-should-retry: false: the claude CLI makes the call
		// once, prints "API Error: 400 <message>" and exits 1; a 429 or
		// 5xx would be retried for minutes, a 401 or 403 reads as a bad
		// key.
		refuse(w, http.StatusBadRequest, "invalid_request_error", err.Error(), true)
		return outcomeRefused, true
	case err != nil:
		return g.unavailable(w, "checking the Loop's budget", err), true
	}
	return "", false
}

// unavailable answers a call the gateway could not judge (the API server
// is unreachable, say): 503, which the CLI retries.
func (g *gw) unavailable(w http.ResponseWriter, doing string, err error) string {
	g.m.refusals.WithLabelValues(reasonUnavailable).Inc()
	g.log.Error(err, "call refused", "while", doing)
	refuse(w, http.StatusServiceUnavailable, "api_error", doing+": unavailable, try again", false)
	return outcomeRefused
}

// fail answers a call the gateway cannot carry on with: 502.
func (g *gw) fail(w http.ResponseWriter, c *Caller, doing string, err error) string {
	g.log.Error(err, "call failed", "while", doing, "loop", c.Namespace+"/"+c.Loop, "pod", c.Pod)
	refuse(w, http.StatusBadGateway, "api_error", doing+" failed", false)
	return outcomeFailed
}

func (g *gw) target(in *url.URL) string {
	u := *g.cfg.Upstream
	u.Path = strings.TrimSuffix(u.Path, "/") + in.Path
	u.RawPath = ""
	u.RawQuery = in.RawQuery
	u.Fragment = ""
	return u.String()
}

// hopByHop are the headers of one connection, never forwarded.
var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// copyRequestHeaders copies the agent's headers but its credentials (the
// gateway's own key replaces them), the hop-by-hop ones, looprun's own and
// what the transport sets itself.
func copyRequestHeaders(dst, src http.Header) {
	drop := connectionListed(src)
	for k, vs := range src {
		switch {
		case hopByHop[k], drop[k],
			k == "X-Api-Key", k == "Authorization", k == "Cookie",
			k == "Host", k == "Content-Length", k == "Accept-Encoding",
			k == "Forwarded", strings.HasPrefix(k, "X-Forwarded-"),
			strings.HasPrefix(k, "X-Looprun-"):
			continue
		}
		dst[k] = append([]string(nil), vs...)
	}
}

func connectionListed(h http.Header) map[string]bool {
	var m map[string]bool
	for _, v := range h.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				if m == nil {
					m = map[string]bool{}
				}
				m[http.CanonicalHeaderKey(f)] = true
			}
		}
	}
	return m
}

// copyResponseHeaders copies the upstream's headers but the hop-by-hop
// ones and the length (the gateway's writer sets it).
func copyResponseHeaders(dst, src http.Header) {
	drop := connectionListed(src)
	for k, vs := range src {
		if hopByHop[k] || drop[k] || k == "Content-Length" {
			continue
		}
		dst[k] = append([]string(nil), vs...)
	}
}

// passThrough forwards an answer as it comes, flushing as it goes (an
// error, or count_tokens).
func (g *gw) passThrough(w http.ResponseWriter, resp *http.Response) {
	copyResponseHeaders(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

// newCallID makes an id for a call whose upstream gave none.
func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "looprun_" + hex.EncodeToString(b[:])
}
