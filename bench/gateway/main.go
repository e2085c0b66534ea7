// Command gateway measures what the model gateway adds to an agent's
// model calls, against an in-process fake Messages API on loopback TCP:
//
//   - per non-streaming call: the same calls made straight to the fake
//     upstream and through the gateway, one after another; the added
//     latency is the difference of their p50 and p99;
//   - per streamed chunk: the upstream stamps each content_block_delta
//     with the time it wrote it; the agent's side reads the stamp when the
//     delta arrives, straight and through the gateway;
//   - memory: 200 streams held open at once (a delta every 100 ms),
//     straight and through the gateway; the heap in use (after a GC) and
//     the process's RSS, over the same process idle.
//
// The gateway runs with what it runs with in a cluster but in memory: an
// authenticator that maps a token to a step, a budget that totals the
// step's ledger, and a ledger kept in memory as the ledger ConfigMap keeps
// it, one JSON document per call (every call reads and decodes its step's
// ledger, prices it, and writes the call at its start, each checkpoint
// and its end); -fake-client-ledger uses ledger.Store over
// controller-runtime's fake client instead.
//
// -apiserver-ledger starts a kube-apiserver and etcd (envtest) and keeps
// the ledgers there as cmd/gateway does: each record appended to a journal
// file and shipped to its step's ledger ConfigMap behind the call, the
// budget reading the ledger from a watch merged with the journal; it also
// prints how long records waited in the journal before their write.
// -sync-ledger instead reads and writes the ledger on the API server in
// the call's path (the gateway before its journal), for comparison.
//
// Targets: at most 2 ms added per call (p99); memory bounded: at most
// 64 KiB of heap per open stream through the gateway, 96 KiB with the
// ledgers on an API server (each stream there is a step of its own, whose
// ledger the watch, the last written copy and its parsed form hold).
// BENCH_HEAPPROFILE=FILE writes a heap profile where memory is measured.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/looprun/looprun/internal/gateway"
	"github.com/looprun/looprun/internal/gateway/ledger"
	"github.com/looprun/looprun/internal/pricing"
	"github.com/looprun/looprun/test/fixture"
)

const (
	callTarget      = 2 * time.Millisecond
	perStreamTarget = 64 << 10
	// perStreamLedgerTarget adds a step's ledger objects (-apiserver-ledger).
	perStreamLedgerTarget = 96 << 10
	model                 = "claude-sonnet-4-6"
	callsPerStep          = 50
)

func main() {
	calls := flag.Int("calls", 2000, "non-streaming calls each way")
	streams := flag.Int("streams", 200, "streams held open at once for the memory figures")
	chunks := flag.Int("chunks", 100, "deltas of each stream of the per-chunk figures")
	streamCalls := flag.Int("stream-calls", 40, "streams each way for the per-chunk figures")
	hold := flag.Duration("hold", 10*time.Second, "how long the open streams are held")
	store := flag.Bool("fake-client-ledger", false, "keep the ledger with ledger.Store over controller-runtime's fake client (whose object tracker costs more than the gateway) instead of in memory")
	apiServer := flag.Bool("apiserver-ledger", false, "keep the ledger on a real kube-apiserver and etcd (envtest; KUBEBUILDER_ASSETS or bin/k8s) as the gateway keeps it in a cluster: recorded in a journal, shipped to the ledger ConfigMaps behind, read through a watch")
	syncLedger := flag.Bool("sync-ledger", false, "with -apiserver-ledger: write each record straight to its ledger ConfigMap and read the ledger from the API server before each call (the gateway before its journal), for comparison")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			_ = pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	var l gateway.Ledger = newMemLedger()
	cleanup := func() {}
	if *store {
		l = newLedger()
	}
	if *apiServer {
		s, stop, err := apiServerLedger(*syncLedger)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gateway bench:", err)
			os.Exit(1)
		}
		defer stop()
		cleanup, l = stop, s
	}
	if err := run(l, *calls, *streamCalls, *chunks, *streams, *hold); err != nil {
		fmt.Fprintln(os.Stderr, "gateway bench:", err)
		pprof.StopCPUProfile()
		cleanup()
		os.Exit(1)
	}
}

func run(l gateway.Ledger, calls, streamCalls, chunks, streams int, hold time.Duration) error {
	up, err := listen(http.HandlerFunc(upstream))
	if err != nil {
		return err
	}
	upURL, _ := url.Parse(up)
	h, err := gateway.New(gateway.Config{Upstream: upURL, Key: gateway.StaticKey("sk-bench"), Auth: auth{},
		Budget: budget{limit: 1 << 50}, Ledger: l, Prices: pricing.Default(), CheckpointEvery: time.Second})
	if err != nil {
		return err
	}
	gw, err := listen(h)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxIdleConns: 2048, DisableCompression: true}}
	fmt.Printf("machine: %d cores, %s/%s, %s\n", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())

	var missed []string
	// Warm both paths (connections, the fake client's first writes).
	for i := range 100 {
		_ = call(client, up, i)
		_ = call(client, gw, i)
	}
	var direct, through []time.Duration
	for i := range calls {
		d, err := timed(func() error { return call(client, up, i) })
		if err != nil {
			return err
		}
		direct = append(direct, d)
		if d, err = timed(func() error { return call(client, gw, i) }); err != nil {
			return err
		}
		through = append(through, d)
	}
	d50, d99, g50, g99 := pct(direct, 50), pct(direct, 99), pct(through, 50), pct(through, 99)
	fmt.Printf("non-streaming call (%d each way): direct p50 %v p99 %v; through the gateway p50 %v p99 %v; added p50 %v p99 %v (target <= %v)\n",
		calls, d50, d99, g50, g99, g50-d50, g99-d99, callTarget)
	if g99-d99 > callTarget {
		missed = append(missed, "added p99 per call")
	}
	if f, ok := l.(*ledger.Journal); ok {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := f.Flush(ctx)
		cancel()
		if err != nil {
			return err
		}
		lags := shipLags.take()
		fmt.Printf("shipping to the ledger ConfigMaps behind the calls: %d writes for %d records; a record waited in the journal p50 %v p99 %v\n",
			len(lags.waited), lags.calls, pct(lags.waited, 50), pct(lags.waited, 99))
	}

	var cd, cg []time.Duration
	for i := range streamCalls {
		lat, err := stream(context.Background(), client, up, i, chunks, time.Millisecond)
		if err != nil {
			return err
		}
		cd = append(cd, lat...)
		lat, err = stream(context.Background(), client, gw, i, chunks, time.Millisecond)
		if err != nil {
			return err
		}
		cg = append(cg, lat...)
	}
	fmt.Printf("streamed chunk (%d streams of %d deltas, 1 ms apart): direct p50 %v p99 %v; through the gateway p50 %v p99 %v; added p50 %v p99 %v\n",
		streamCalls, chunks, pct(cd, 50), pct(cd, 99), pct(cg, 50), pct(cg, 99), pct(cg, 50)-pct(cd, 50), pct(cg, 99)-pct(cd, 99))

	idle := memory()
	dm, err := holdOpen(client, up, streams, hold)
	if err != nil {
		return err
	}
	gm, err := holdOpen(client, gw, streams, hold)
	if err != nil {
		return err
	}
	perStream := int64((float64(gm.heap) - float64(dm.heap)) / float64(streams))
	target := int64(perStreamTarget)
	if _, ok := l.(*ledger.Journal); ok {
		target = perStreamLedgerTarget
	}
	fmt.Printf("%d open streams for %v: heap in use idle %s, direct %s, through the gateway %s: the gateway %s per stream (target <= %s); RSS idle %s, direct %s, through the gateway %s\n",
		streams, hold, mib(idle.heap), mib(dm.heap), mib(gm.heap), kib(perStream), kib(target), mib(idle.rss), mib(dm.rss), mib(gm.rss))
	if perStream > target {
		missed = append(missed, "heap per open stream")
	}
	if len(missed) > 0 {
		return fmt.Errorf("missed: %s", strings.Join(missed, ", "))
	}
	return nil
}

func listen(h http.Handler) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go func() { _ = (&http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}).Serve(l) }()
	return "http://" + l.Addr().String(), nil
}

// upstream is a fake Messages API. A streaming call's query says how many
// deltas (n, 0: until the caller goes) and how far apart (every).
func upstream(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	q := r.URL.Query()
	id := "msg_" + q.Get("id")
	if q.Get("stream") == "" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"id":%q,"type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":"The fixture was stale; I regenerated it and the tests pass."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1200,"output_tokens":300,"cache_creation_input_tokens":500,"cache_read_input_tokens":20000}}`, id, model) //nolint:gosec // a fake upstream writing its own JSON
		return
	}
	n, _ := strconv.Atoi(q.Get("n"))
	every, _ := time.ParseDuration(q.Get("every"))
	w.Header().Set("Content-Type", "text/event-stream")
	f := w.(http.Flusher)
	send := func(name, data string) bool {
		_, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data) //nolint:gosec // a fake upstream writing its own events
		f.Flush()
		return err == nil
	}
	send("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":%q,"type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1200,"cache_creation_input_tokens":500,"cache_read_input_tokens":20000,"output_tokens":1}}}`, id, model))
	send("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; n == 0 || i < n; i++ {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
		if !send("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"t=%d; some words of the answer"}}`, time.Now().UnixNano())) {
			return
		}
	}
	send("content_block_stop", `{"type":"content_block_stop","index":0}`)
	send("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":%d}}`, 8*n))
	send("message_stop", `{"type":"message_stop"}`)
}

// request is call i; the calls of one step are callsPerStep in a row, but
// the open streams are one per step (an agent makes one call at a time).
func request(ctx context.Context, base string, i int, query string) *http.Request {
	body := `{"model":"claude-sonnet-4-6","max_tokens":64000,"messages":[{"role":"user","content":"` + strings.Repeat("context ", 512) + `"}]}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/messages?id="+strconv.Itoa(i)+query, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	step := i / callsPerStep
	if i >= 2_000_000 {
		step = i
	}
	req.Header.Set("X-Api-Key", "pod-"+strconv.Itoa(step))
	return req
}

func call(c *http.Client, base string, i int) error {
	resp, err := c.Do(request(context.Background(), base, i, ""))
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// stream reads one stream and returns each delta's time from the
// upstream's write to its arrival.
func stream(ctx context.Context, c *http.Client, base string, i, n int, every time.Duration) ([]time.Duration, error) {
	resp, err := c.Do(request(ctx, base, 1_000_000+i, fmt.Sprintf("&stream=1&n=%d&every=%s", n, every)))
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	var lat []time.Duration
	sc := bufio.NewScanner(resp.Body)
	stopped := false
	for sc.Scan() {
		line := sc.Text()
		if k := strings.Index(line, `"text":"t=`); k >= 0 {
			rest := line[k+len(`"text":"t=`):]
			if e := strings.IndexByte(rest, ';'); e > 0 {
				if ns, err := strconv.ParseInt(rest[:e], 10, 64); err == nil {
					lat = append(lat, time.Duration(time.Now().UnixNano()-ns))
				}
			}
		}
		if line == `data: {"type":"message_stop"}` {
			stopped = true
		}
	}
	if ctx.Err() == nil && !stopped {
		return lat, errors.New("a stream ended without message_stop")
	}
	return lat, nil
}

type mem struct{ heap, rss uint64 }

func memory() mem {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := mem{heap: ms.HeapInuse}
	if p := os.Getenv("BENCH_HEAPPROFILE"); p != "" {
		if f, err := os.Create(p); err == nil {
			_ = pprof.Lookup("heap").WriteTo(f, 0)
			_ = f.Close()
		}
	}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				m.rss = kb << 10
			}
		}
	}
	return m
}

// holdOpen opens n streams, a delta every 100 ms each, and measures the
// memory once all have run for hold.
func holdOpen(c *http.Client, base string, n int, hold time.Duration) (mem, error) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if _, err := stream(ctx, c, base, 2_000_000+i, 0, 100*time.Millisecond); err != nil && ctx.Err() == nil {
				errs <- err
			}
		})
	}
	time.Sleep(hold)
	m := memory()
	cancel()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return m, err
	}
	time.Sleep(200 * time.Millisecond) // let the cut-off streams' records land
	return m, nil
}

func timed(f func() error) (time.Duration, error) {
	t := time.Now()
	err := f()
	return time.Since(t), err
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, len(s)*p/100)].Round(time.Microsecond)
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
func kib(b int64) string  { return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10)) }

// auth maps a token pod-N to the step of Pod N.
type auth struct{}

func (auth) Authenticate(_ context.Context, cred, _ string) (*gateway.Caller, error) {
	n, ok := strings.CutPrefix(cred, "pod-")
	if !ok {
		return nil, gateway.ErrUnauthenticated
	}
	return &gateway.Caller{Step: ledger.Step{Namespace: "bench", Loop: "loop-" + n, LoopUID: types.UID("loop-uid-" + n),
		Pod: "pod-" + n, PodUID: types.UID("pod-uid-" + n), Run: "r", Iteration: 1, State: "work"}}, nil
}

// budget refuses once a step's calls cost limit micro-USD.
type budget struct{ limit int64 }

func (b budget) Check(_ context.Context, st ledger.Step, spent ledger.Totals) error {
	if spent.CostMicroUSD >= b.limit {
		return fmt.Errorf("%w: Loop %s/%s", gateway.ErrBudgetSpent, st.Namespace, st.Loop)
	}
	return nil
}

// memLedger keeps each step's calls in memory as a ledger ConfigMap
// does, one JSON document per call merged by id (the larger count kept);
// a read decodes them all. It stands for ledger.Store without the API
// server's round trips.
type memLedger struct {
	mu    sync.Mutex
	steps map[types.UID]map[string][]byte
}

func newMemLedger() *memLedger { return &memLedger{steps: map[types.UID]map[string][]byte{}} }

func (m *memLedger) Record(_ context.Context, st ledger.Step, c ledger.Call) error {
	if err := c.Usage().Check(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	calls := m.steps[st.PodUID]
	if calls == nil {
		calls = map[string][]byte{}
		m.steps[st.PodUID] = calls
	}
	if old, ok := calls[c.ID]; ok {
		var prev ledger.Call
		if err := json.Unmarshal(old, &prev); err != nil {
			return err
		}
		c.InputTokens = max(c.InputTokens, prev.InputTokens)
		c.OutputTokens = max(c.OutputTokens, prev.OutputTokens)
		c.CacheReadTokens = max(c.CacheReadTokens, prev.CacheReadTokens)
		c.CacheCreationTokens = max(c.CacheCreationTokens, prev.CacheCreationTokens)
		c.Final = c.Final || prev.Final
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	calls[c.ID] = b
	return nil
}

func (m *memLedger) Read(_ context.Context, pod types.UID) (*ledger.Ledger, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	calls := m.steps[pod]
	if calls == nil {
		return nil, nil
	}
	l := &ledger.Ledger{}
	for id, b := range calls {
		var c ledger.Call
		if err := json.Unmarshal(b, &c); err != nil {
			return nil, err
		}
		c.ID = id
		l.Calls = append(l.Calls, c)
	}
	return l, nil
}

func newLedger() *ledger.Store {
	s := kruntime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		panic(err)
	}
	return &ledger.Store{Client: fake.NewClientBuilder().WithScheme(s).Build(), Namespace: "looprun-system"}
}

// apiServerLedger is the gateway's ledger on a real API server, started
// here: a journal shipping to ledger.Store, read through a watch's cache
// (as cmd/gateway keeps it), or with sync ledger.Store itself.
func apiServerLedger(sync bool) (gateway.Ledger, func(), error) {
	cfg, c, stop, err := fixture.StartEnv(false)
	if err != nil {
		return nil, nil, err
	}
	ns := &corev1.Namespace{}
	ns.Name = "looprun-system"
	if err := c.Create(context.Background(), ns); err != nil {
		stop()
		return nil, nil, err
	}
	store := &ledger.Store{Client: c, Namespace: ns.Name}
	if sync {
		return store, stop, nil
	}
	s := kruntime.NewScheme()
	_ = corev1.AddToScheme(s)
	view, err := cache.New(cfg, cache.Options{Scheme: s, ByObject: map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{ns.Name: {}},
			Label:                 labels.SelectorFromSet(labels.Set{ledger.LabelLedger: "true"}),
			Transform:             cache.TransformStripManagedFields(),
			UnsafeDisableDeepCopy: ptr.To(true)},
	}})
	if err != nil {
		stop()
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := view.GetInformer(ctx, &corev1.ConfigMap{}); err != nil {
		cancel()
		stop()
		return nil, nil, err
	}
	go func() { _ = view.Start(ctx) }()
	view.WaitForCacheSync(ctx)
	dir, err := os.MkdirTemp("", "gateway-journal-")
	if err != nil {
		cancel()
		stop()
		return nil, nil, err
	}
	j, err := ledger.OpenJournal(dir, store, view, logr.Discard())
	if err != nil {
		cancel()
		stop()
		return nil, nil, err
	}
	j.Shipped = shipLags.add
	return j, func() {
		_ = j.Close(context.Background())
		cancel()
		_ = os.RemoveAll(dir)
		stop()
	}, nil
}

// shipLags collects what the journal reports of its writes.
var shipLags lagLog

type lagLog struct {
	mu     sync.Mutex
	waited []time.Duration
	calls  int
}

func (l *lagLog) add(calls int, waited time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waited = append(l.waited, waited)
	l.calls += calls
}

type lags struct {
	waited []time.Duration
	calls  int
}

func (l *lagLog) take() lags {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := lags{waited: l.waited, calls: l.calls}
	l.waited, l.calls = nil, 0
	return out
}
