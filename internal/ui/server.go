package ui

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/localrun"
	"github.com/looprun/looprun/internal/loopfile"
	"github.com/looprun/looprun/internal/pricing"
)

// dist is the front end, built from web/ by `make ui`.
//
//go:embed all:dist
var dist embed.FS

// Server serves the web view of the local runs under LoopsDir.
type Server struct {
	// LoopsDir holds the runs (.loops).
	LoopsDir string
	// Files resolves the loop files runs name.
	Files loopfile.Options
	// Cluster, when set, adds the Loops of a cluster, read as the viewer.
	Cluster *Cluster
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// User names who answers a local run's approval on the page (the
	// person who started looprun ui).
	User string
	// AllowedHosts are the host names, besides localhost and IP
	// addresses, that requests may name (an Ingress's, a Service's).
	AllowedHosts []string

	mu sync.Mutex
	// runs follows each run's event log, by name.
	runs map[string]*follower
	// streams is how many event streams are open (MaxStreams at most).
	streams int
	// watch shares one file watcher among the local streams.
	watch dirWatch
}

// follower reads one run's event log as it grows: a local run's file, or
// a cluster Loop's segments (the run and segment it read last).
type follower struct {
	mu sync.Mutex
	d  *digester

	uid     types.UID
	runID   string
	segment int32
}

// PageSize is how many timeline rows a page holds at most.
const PageSize = 200

// Handler serves the front end at / and the API under /api/:
//
//	GET /api/loops                          the runs: {loops, problems}
//	GET /api/loops/local/NAME               a run's graph and status
//	GET /api/loops/local/NAME/timeline      its state visits, newest first (?before=SEQ&limit=N)
//	GET /api/loops/local/NAME/stream        server-sent events: "update" when the run changes
//	POST /api/loops/local/NAME/approval     answer the approval it waits for: {"approve": bool, "message": "..."}
//	GET /api/loops/cluster/NS/NAME[/...]    the same for a Loop of the cluster (with Cluster set), and
//	GET /api/loops/cluster/NS/NAME/states/STATE/pod   the Pod the state ran in last, and its log's tail
//
// Answering an approval is the one request that changes anything; it is
// taken only from this machine (see answerableFrom).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/loops", s.list)
	mux.HandleFunc("GET /api/loops/local/{name}", s.detail)
	mux.HandleFunc("GET /api/loops/local/{name}/timeline", s.timeline)
	mux.HandleFunc("GET /api/loops/local/{name}/stream", s.stream)
	mux.HandleFunc("POST /api/loops/local/{name}/approval", s.answer)
	if s.Cluster != nil {
		mux.HandleFunc("GET /api/loops/cluster/{ns}/{name}", s.clusterDetail)
		mux.HandleFunc("GET /api/loops/cluster/{ns}/{name}/timeline", s.clusterTimeline)
		mux.HandleFunc("GET /api/loops/cluster/{ns}/{name}/stream", s.clusterStream)
		mux.HandleFunc("POST /api/loops/cluster/{ns}/{name}/approval", s.clusterAnswer)
		if s.Cluster.Pods != nil {
			mux.HandleFunc("GET /api/loops/cluster/{ns}/{name}/states/{state}/pod", s.clusterPodLog)
		}
	}
	static, _ := fs.Sub(dist, "dist")
	files := http.FileServerFS(static)
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		if _, err := fs.Stat(static, "index.html"); err != nil {
			http.Error(w, "the front end was not built into this binary (make ui)", http.StatusNotFound)
			return
		}
		if !strings.HasPrefix(r.URL.Path, "/assets/") {
			r.URL.Path = "/" // the app routes the rest itself
		}
		files.ServeHTTP(w, r)
	})
	return s.guard(mux)
}

// guard keeps the page to itself: no frames, no other origins, and no
// request through a host name it does not answer to. Every request is
// checked, not only answers: a page of another site that made its own DNS
// name point at this machine (DNS rebinding) would otherwise read the
// runs, and with a kubeconfig the cluster's Loops and Pod logs, as the
// viewer.
func (s *Server) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		if !s.knownHost(r.Host) {
			http.Error(w, fmt.Sprintf("looprun ui answers at localhost or an IP address, not %q (--allow-host NAME adds a name)", r.Host), http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// knownHost says whether a request's Host may reach the view: an IP
// address (what no other site's DNS name can be), localhost, or a name
// given with AllowedHosts.
func (s *Server) knownHost(hostport string) bool {
	host := strings.TrimSuffix(strings.ToLower(hostOf(hostport)), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") || net.ParseIP(strings.Trim(host, "[]")) != nil {
		return true
	}
	for _, h := range s.AllowedHosts {
		if strings.EqualFold(strings.TrimSuffix(h, "."), host) {
			return true
		}
	}
	return false
}

func (s *Server) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

// List is the list page: the runs, and what could not be read.
type List struct {
	Loops    []Summary `json:"loops"`
	Problems []string  `json:"problems,omitempty"`
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	states, unreadable, err := localrun.ListStates(s.LoopsDir)
	if err != nil {
		httpError(w, err)
		return
	}
	res := List{Loops: []Summary{}}
	for _, u := range unreadable {
		res.Problems = append(res.Problems, u.Error())
	}
	out := []Summary{}
	for _, f := range states {
		run, err := f.RunState()
		if err != nil {
			continue
		}
		out = append(out, summary(f.LoopName, run))
		s.warm(f.LoopName, run.LastSeq)
	}
	if s.Cluster != nil {
		loops, err := s.Cluster.list(r.Context())
		if err != nil {
			res.Problems = append(res.Problems, err.Error())
		}
		out = append(out, loops...)
	}
	slices.SortFunc(out, func(a, b Summary) int { return b.Updated.Compare(a.Updated) })
	res.Loops = out
	writeJSON(w, res)
}

func summary(name string, run *v1alpha1.RunState) Summary {
	sm := Summary{Source: "local", Name: name, Phase: string(run.Phase), State: run.CurrentState, Iteration: run.Iteration}
	if run.StartedAt != nil {
		sm.Started = run.StartedAt.Time
	}
	if run.UpdatedAt != nil {
		sm.Updated = run.UpdatedAt.Time
	}
	return sm
}

// open reads a local run, its state and its loop, and what its event log
// says (read on from where it was read last).
func (s *Server) open(name string) (*localrun.Saved, digested, error) {
	opts := s.Files
	opts.LoopsDir = s.LoopsDir
	saved, err := localrun.OpenWith(opts, name)
	if err != nil {
		return nil, digested{}, err
	}
	dg, err := s.follow(saved.Store, saved.Run.LastSeq)
	return saved, dg, err
}

// followRun is what the local run's event log says, read on from where it
// was read last; unlike open it reads neither the loop file nor the whole
// state (a timeline page needs neither).
func (s *Server) followRun(name string) (digested, error) {
	store, err := localrun.NewStore(s.LoopsDir, name)
	if err != nil {
		return digested{}, err
	}
	sf, err := store.Load()
	if err != nil {
		return digested{}, err
	}
	return s.follow(store, sf.LastSeq)
}

// digested is a copy of what a digester found.
type digested struct {
	visits  []Visit
	last    map[string]Last
	entered map[string]int
	rewinds []Rewind
}

// follow reads the run's event log from where it was read last: a log
// that is shorter, or a run that is behind what was read (a new run), is
// read again from the start, and so is one where a rewind comes that was
// not known (what it abandoned is left out).
func (s *Server) follow(store *localrun.Store, lastSeq int64) (digested, error) {
	f := s.follower(store.Name())
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.d == nil || lastSeq < f.d.lastSeq || fileSize(store.EventsPath()) < f.d.offset {
		f.d = newDigester()
	}
	d := f.d
	off, err := eventlog.ReadFrom(store.EventsPath(), d.offset, d.add)
	if err == nil && d.stale {
		d = d.reread()
		f.d = d
		off, err = eventlog.ReadFrom(store.EventsPath(), 0, d.add)
	}
	d.offset = off
	return d.digested(), err
}

// maxFollowers bounds the runs and Loops followed at once: past it, one
// followed before is forgotten (read again from its start if shown again).
const maxFollowers = 512

// follower is the run's follower; fresh is true when it was just made.
func (s *Server) followerOf(name string) (f *follower, fresh bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs == nil {
		s.runs = map[string]*follower{}
	}
	if f = s.runs[name]; f == nil {
		for other := range s.runs {
			if len(s.runs) < maxFollowers {
				break
			}
			delete(s.runs, other)
		}
		f = &follower{}
		s.runs[name] = f
		fresh = true
	}
	return f, fresh
}

func (s *Server) follower(name string) *follower {
	f, _ := s.followerOf(name)
	return f
}

// warm starts reading the event log of a run not read yet, in the
// background, so that its page opens at once.
func (s *Server) warm(name string, lastSeq int64) {
	if _, fresh := s.followerOf(name); !fresh {
		return
	}
	store, err := localrun.NewStore(s.LoopsDir, name)
	if err != nil {
		return
	}
	go func() { _, _ = s.follow(store, lastSeq) }()
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func (s *Server) detail(w http.ResponseWriter, r *http.Request) {
	saved, dg, err := s.open(r.PathValue("name"))
	if err != nil {
		httpError(w, err)
		return
	}
	d := s.describeRun(&saved.Loop.Loop.Spec, saved.Run, summary(saved.Store.Name(), saved.Run), dg)
	if d.Approval != nil {
		d.Approval.Who = "whoever runs looprun on this machine as the run's owner"
		if d.Approval.CanAnswer = answerableFrom(r) == nil; d.Approval.CanAnswer && s.User != "" {
			d.Approval.Who += fmt.Sprintf(": you (%s)", s.User)
		}
	}
	writeJSON(w, d)
}

// answer approves or rejects what a local run waits for, as looprun
// approve and reject do (the answer file the run reads).
func (s *Server) answer(w http.ResponseWriter, r *http.Request) {
	req, err := readAnswer(w, r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	store, err := localrun.NewStore(s.LoopsDir, r.PathValue("name"))
	if err != nil {
		httpError(w, err)
		return
	}
	ans, err := store.WriteAnswer(req.Approve, s.User, req.Message, req.target(), s.now())
	if errors.Is(err, localrun.ErrNoApprovalWaiting) || errors.Is(err, localrun.ErrStaleAnswer) || errors.Is(err, localrun.ErrAnswered) {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	if err != nil {
		httpError(w, err)
		return
	}
	writeJSON(w, Answered{State: ans.State, Iteration: ans.Iteration, Approved: ans.Approved})
}

// answerRequest is the body of an approval's answer: the answer, and the
// approval it answers (as the page showed it: a stale page answers
// nothing).
type answerRequest struct {
	Approve   bool   `json:"approve"`
	Message   string `json:"message"`
	Run       string `json:"run"`
	State     string `json:"state"`
	Iteration int32  `json:"iteration"`
}

// target is the approval the answer names.
func (a answerRequest) target() *v1alpha1.ApprovalTarget {
	return &v1alpha1.ApprovalTarget{RunID: a.Run, State: a.State, Iteration: a.Iteration}
}

// readAnswer reads an answer that answerableFrom lets through.
func readAnswer(w http.ResponseWriter, r *http.Request) (answerRequest, error) {
	var req answerRequest
	if err := answerableFrom(r); err != nil {
		return req, err
	}
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 16<<10))
	// A body sent slowly holds the handler no longer than this.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(answerReadTimeout))
	dec.DisallowUnknownFields()
	const form = `an answer is JSON {"approve": true|false, "message": "...", "run": RUN, "state": STATE, "iteration": N}`
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("%s: %w", form, err)
	}
	if req.Run == "" || req.State == "" {
		return req, fmt.Errorf("%s: it names the approval it answers", form)
	}
	return req, nil
}

// answerReadTimeout bounds the reading of an answer's body (a variable
// for the test of a slow one).
var answerReadTimeout = 10 * time.Second

// AnswerHeader must be on an answer: a page of another site cannot send it
// without the browser asking first (a CORS preflight, never allowed here).
const AnswerHeader = "X-Looprun-Answer"

// answerableFrom says why r may not answer an approval, or nil: an answer
// comes from this machine (a loopback peer, through a loopback host name,
// so that no other site reaches it by a DNS name of its own), as JSON with
// AnswerHeader set (so that no other site's page can send it).
func answerableFrom(r *http.Request) error {
	if !loopback(r.RemoteAddr) {
		return errors.New("approvals are answered on the page only from this machine (looprun approve answers from anywhere)")
	}
	if !loopbackHost(r.Host) {
		return fmt.Errorf("approvals are answered on the page only at a localhost address, not %q", r.Host)
	}
	if r.Method == http.MethodPost && (r.Header.Get(AnswerHeader) == "" || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json")) {
		return fmt.Errorf("an answer is sent by the page, as JSON with the header %s", AnswerHeader)
	}
	return nil
}

func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func loopbackHost(hostport string) bool {
	host := hostOf(hostport)
	return host == "localhost" || loopback(strings.Trim(host, "[]"))
}

// hostOf is the host of a Host header, with or without its port.
func hostOf(hostport string) string {
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		return host
	}
	return hostport
}

// describeRun is a run's page.
func (s *Server) describeRun(spec *v1alpha1.LoopSpec, run *v1alpha1.RunState, sm Summary, dg digested) Detail {
	last, entered := dg.last, dg.entered
	nodes, edges := graph(spec, run, entered)
	if last == nil {
		last = map[string]Last{}
	}
	d := Detail{Summary: sm, Nodes: nodes, Edges: edges, MaxIterations: spec.GetMaxIterations(),
		TerminatedBy: string(run.TerminatedBy), Message: run.Message, LastSeq: run.LastSeq, States: last,
		ExitHook: exitHookOf(spec, run), Rewinds: dg.rewinds}
	end := s.now()
	if run.Phase.IsFinished() && run.UpdatedAt != nil {
		end = run.UpdatedAt.Time
	}
	d.ElapsedMs = executor.Elapsed(run, end).Milliseconds()
	if spec.Timeout != nil {
		d.TimeoutMs = spec.Timeout.Milliseconds()
	}
	if u := run.Usage; u != nil {
		d.Usage = &Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CostUSD: pricing.MicroToUSD(u.CostMicroUSD)}
		if b := spec.Budget; b != nil && b.MaxCostUSD != "" {
			if v, err := strconv.ParseFloat(b.MaxCostUSD, 64); err == nil {
				d.Usage.MaxCostUSD = v
			}
		}
	}
	if a := run.Action; a != nil && run.Phase == v1alpha1.PhaseRunning {
		if st, ok := spec.States[a.State]; ok && st.Approval != nil {
			d.Approval = &Approval{Run: run.RunID, State: a.State, Iteration: a.Iteration, Message: askedOf(a, last[a.State]),
				Command: fmt.Sprintf("looprun approve %s   (or: looprun reject %s)", d.Name, d.Name)}
		}
	}
	return d
}

// askedOf is the question an approval in flight asked, its templates
// expanded as the CLI prints it: the run's record of the wait, else the
// approval_requested event of the visit (a state written without the
// record). Never the state's template: it is not what was asked.
func askedOf(a *v1alpha1.ActionStatus, last Last) string {
	if a.Approval != nil {
		return a.Approval.Message
	}
	if last.Iteration == a.Iteration {
		return last.Question
	}
	return ""
}

func (s *Server) timeline(w http.ResponseWriter, r *http.Request) {
	dg, err := s.followRun(r.PathValue("name"))
	if err != nil {
		httpError(w, err)
		return
	}
	writeJSON(w, pageOf(dg.visits, r))
}

// pageOf is the page of visits a request asks for: ?before=SEQ&limit=N
// (at most PageSize).
func pageOf(visits []Visit, r *http.Request) Page {
	before, _ := strconv.ParseInt(r.URL.Query().Get("before"), 10, 64)
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	if limit <= 0 || limit > PageSize {
		limit = PageSize
	}
	return page(visits, before, limit)
}

// Page is a page of the timeline, newest first; Before asks for the next.
type Page struct {
	Visits []Visit `json:"visits"`
	Total  int     `json:"total"`
	Before int64   `json:"before,omitempty"`
}

// page is up to limit visits older than before (0: the newest), newest first.
func page(visits []Visit, before int64, limit int) Page {
	end := len(visits)
	if before > 0 {
		end, _ = slices.BinarySearchFunc(visits, before, func(v Visit, seq int64) int { return cmp.Compare(v.Seq, seq) })
	}
	start := max(end-limit, 0)
	out := append([]Visit{}, visits[start:end]...) // [] for a run not started, not null
	slices.Reverse(out)
	p := Page{Visits: out, Total: len(visits)}
	if start > 0 {
		p.Before = visits[start].Seq
	}
	return p
}

// stream sends "update" (the run's last event number and phase) when the
// run's files change, from file notifications: nothing is polled.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	store, err := localrun.NewStore(s.LoopsDir, name)
	if err != nil {
		httpError(w, err)
		return
	}
	events, ok := newEventStream(w)
	if !ok {
		return
	}
	done, ok := s.openStream(w)
	if !ok {
		return
	}
	defer done()
	sub, err := s.watch.subscribe(filepath.Dir(store.StatePath()), filepath.Base(store.StatePath()), filepath.Base(store.EventsPath()))
	if err != nil {
		httpError(w, err)
		return
	}
	defer s.watch.unsubscribe(sub)
	events.open()
	// A state file caught between a save's steps sends nothing: the save's
	// next notification does.
	send := func() bool {
		sf, err := store.Load()
		if err != nil {
			return true
		}
		hook := ""
		if sf.ExitHook != nil {
			hook = sf.ExitHook.Phase
		}
		return events.update(sf.LastSeq, sf.Status, sf.CurrentState, hook)
	}
	if !send() {
		return
	}
	// Notifications come in bursts (a save writes, renames, syncs): one
	// update per burst.
	var burst <-chan time.Time
	keepAlive := time.NewTicker(keepAliveEvery)
	defer keepAlive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-sub.gone:
			return // the page reconnects
		case <-sub.changed:
			if burst == nil {
				burst = time.After(50 * time.Millisecond)
			}
		case <-burst:
			burst = nil
			if !send() {
				return
			}
		case <-keepAlive.C:
			if !events.keepAlive() {
				return
			}
		}
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

func httpError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	if errors.Is(err, os.ErrNotExist) {
		code = http.StatusNotFound
	} else if strings.Contains(err.Error(), "name") {
		code = http.StatusBadRequest
	}
	http.Error(w, err.Error(), code)
}

// Serve serves h at addr until ctx ends, telling ready the URL it serves.
func Serve(ctx context.Context, addr string, h http.Handler, ready func(url string)) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ln, err := listen(addr)
	if err != nil {
		return err
	}
	ready("http://" + ln.Addr().String() + "/")
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
