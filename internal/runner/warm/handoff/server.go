package handoff

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Limits of the server.
const (
	// MaxRunning is how many steps run at once (a run has one action in
	// flight; more is a confused or hostile caller).
	MaxRunning = 4
	// maxBody caps a request.
	maxBody = 1 << 20
	// maxWait caps a long poll.
	maxWait = 60 * time.Second
	// keepUncollected is how long a result nobody collected keeps the
	// server from idling out.
	keepUncollected = time.Hour
	// outputGrace is how long the copy of a step's output may run on after
	// its wrapper ended (something it left behind holds the pipe).
	outputGrace = 500 * time.Millisecond
	// stopGrace is how long a cancelled step's wrapper has before SIGKILL.
	stopGrace = 10 * time.Second
)

// ListenEnv names where the runner listens, when set (a stand-in node
// whose Pods share one network).
const ListenEnv = "LOOPRUN_RUNNER_LISTEN"

// Server runs a run's steps for the operator.
type Server struct {
	// Key signs and checks every request, answer and ledger line.
	Key []byte
	// Wrapper is the entrypoint binary each step runs under.
	Wrapper string
	// Env is the environment every step starts from (the Pod's, without
	// the key).
	Env []string
	// Ledger is the ledger file ("": none).
	Ledger string
	// IdleTimeout ends Serve when no step runs, nothing is left to
	// collect and no request came for this long (0: never).
	IdleTimeout time.Duration
	// Stdout and Stderr take the steps' output, framed per step.
	Stdout, Stderr io.Writer
	// ReapAll reaps every child, not just the steps' wrappers (the server
	// is its container's first process, and adopts what steps leave).
	ReapAll bool

	mu      sync.Mutex
	steps   map[string]*step
	last    time.Time
	closing bool
	ledgerF *os.File
	// ledgerBytes is what the ledger holds, about.
	ledgerBytes int
	reaped      map[int]chan syscall.WaitStatus
	outMu       sync.Mutex
	wg          sync.WaitGroup
	shutdown    chan struct{}
	// exitAsked is closed when the operator asks the runner to end.
	exitAsked chan struct{}
}

type step struct {
	status    Status
	done      chan struct{}
	proc      *os.Process
	collected bool
	// interrupted: stopped by the server's own end.
	interrupted bool
}

// ledgerLine is one line of the ledger: a step's status, signed.
type ledgerLine struct {
	Status
	Sig string `json:"sig"`
}

// Open loads the ledger: steps that were running when the server died are
// Lost, lines whose signature does not hold are dropped (and said).
func (s *Server) Open() error {
	s.steps = map[string]*step{}
	s.reaped = map[int]chan syscall.WaitStatus{}
	s.shutdown = make(chan struct{})
	s.exitAsked = make(chan struct{})
	s.last = time.Now()
	if s.Ledger == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(s.Ledger), 0o700); err != nil {
		return err
	}
	if f, err := os.Open(s.Ledger); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		n := 0
		for sc.Scan() {
			n++
			var l ledgerLine
			if json.Unmarshal(sc.Bytes(), &l) != nil || !stepID.MatchString(l.ID) || !verify(s.Key, l.Sig, "ledger", nil, l.body()) {
				fmt.Fprintf(s.Stderr, "runner: ledger line %d is not the runner's own: dropped\n", n)
				continue
			}
			st := &step{status: l.Status, done: make(chan struct{}), collected: l.Phase == Done && len(l.Result) == 0}
			if st.status.Phase == Running {
				st.status.Phase, st.status.Ended = Lost, time.Now()
			}
			close(st.done)
			s.steps[l.ID] = st
		}
		_ = f.Close()
	}
	f, err := os.OpenFile(s.Ledger, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	s.ledgerF = f
	if fi, err := f.Stat(); err == nil {
		s.ledgerBytes = int(fi.Size())
	}
	for _, st := range s.steps {
		if st.status.Phase == Lost {
			s.record(st.status)
		}
	}
	return nil
}

func (l ledgerLine) body() []byte {
	b, _ := json.Marshal(l.Status)
	return b
}

// ledgerCompactBytes is the ledger's size past which it is written again
// with one line a step.
const ledgerCompactBytes = 1 << 20

// line is a step's status as a signed ledger line.
func (s *Server) line(st Status) []byte {
	l := ledgerLine{Status: st}
	l.Sig = sign(s.Key, "ledger", nil, l.body())
	b, _ := json.Marshal(l)
	return append(b, '\n')
}

// record appends a step's status to the ledger (mu held); a ledger grown
// past ledgerCompactBytes is written again, each step's last status only.
func (s *Server) record(st Status) {
	if s.ledgerF == nil {
		return
	}
	b := s.line(st)
	if _, err := s.ledgerF.Write(b); err != nil {
		fmt.Fprintf(s.Stderr, "runner: ledger: %v\n", err)
	}
	if s.ledgerBytes += len(b); s.ledgerBytes > ledgerCompactBytes {
		if err := s.compact(); err != nil {
			fmt.Fprintf(s.Stderr, "runner: ledger: %v\n", err)
		}
	}
}

// compact writes the ledger again with each step's status once (mu held).
func (s *Server) compact() error {
	var buf bytes.Buffer
	for _, st := range s.steps {
		buf.Write(s.line(st.status))
	}
	tmp := s.Ledger + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, s.Ledger); err != nil {
		return err
	}
	f, err := os.OpenFile(s.Ledger, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_ = s.ledgerF.Close()
	s.ledgerF, s.ledgerBytes = f, buf.Len()
	return nil
}

// Handler serves the protocol.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/steps/{id}", s.signed(s.put))
	mux.HandleFunc("GET /v1/steps/{id}", s.signed(s.get))
	mux.HandleFunc("POST /v1/steps/{id}/collected", s.signed(s.collect))
	mux.HandleFunc("DELETE /v1/steps/{id}", s.signed(s.cancel))
	mux.HandleFunc("POST /v1/steps/{id}/exit", s.signed(s.exit))
	return mux
}

type handler func(r *http.Request, id string, body []byte) (int, any)

// signed checks a request's signature and signs its answer.
func (s *Server) signed(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		at := r.Header.Get(headerTime)
		id := r.PathValue("id")
		code, answer := 0, any(nil)
		switch {
		case err != nil || len(body) > maxBody:
			code, answer = http.StatusRequestEntityTooLarge, "request too large"
		case !verify(s.Key, r.Header.Get(headerSignature), "request", requestFields(r.Method, r.URL.RequestURI(), at), body):
			// Not the operator: no answer it could use, and not signed.
			http.Error(w, "not signed with this runner's key", http.StatusUnauthorized)
			return
		case !stepID.MatchString(id):
			code, answer = http.StatusBadRequest, "not a step id"
		default:
			s.touch()
			code, answer = h(r, id, body)
		}
		b, _ := json.Marshal(answer)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(headerSignature, sign(s.Key, "answer", answerFields(r.Method, r.URL.RequestURI(), at, code), b))
		w.WriteHeader(code)
		_, _ = w.Write(b)
	}
}

func (s *Server) touch() {
	s.mu.Lock()
	s.last = time.Now()
	s.mu.Unlock()
}

// put starts a step, once: a step of a known id answers what it is.
func (s *Server) put(_ *http.Request, id string, body []byte) (int, any) {
	var in Step
	if err := json.Unmarshal(body, &in); err != nil || len(in.Args) == 0 {
		return http.StatusBadRequest, "not a step"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.steps[id]; ok && st.status.Phase != Lost {
		return http.StatusOK, st.status
	}
	// A new step, or one lost with an earlier server process, which the
	// operator runs again.
	if s.closing {
		return http.StatusServiceUnavailable, "the runner is stopping"
	}
	running := 0
	for _, st := range s.steps {
		if st.status.Phase == Running {
			running++
		}
	}
	if running >= MaxRunning {
		return http.StatusTooManyRequests, fmt.Sprintf("%d steps run already", running)
	}
	// A new step: the run has moved on, so whatever it had of the steps
	// before was collected.
	for _, st := range s.steps {
		st.collected = st.collected || st.status.Phase != Running
	}
	st := &step{status: Status{ID: id, Phase: Running, Started: time.Now()}, done: make(chan struct{})}
	s.steps[id] = st
	s.record(st.status)
	if err := s.start(id, st, in); err != nil {
		st.status.Phase, st.status.Ended, st.status.ExitCode = Done, time.Now(), -1
		st.status.NoResult = "the step's wrapper could not start: " + err.Error()
		close(st.done)
		s.record(st.status)
	}
	return http.StatusCreated, st.status
}

// step is the step of this id, nil for none.
func (s *Server) step(id string) *step {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.steps[id]
}

// get answers a step's status, waiting up to ?wait= for it to end.
func (s *Server) get(r *http.Request, id string, _ []byte) (int, any) {
	st := s.step(id)
	if st == nil {
		return http.StatusNotFound, "no such step"
	}
	if wait, err := time.ParseDuration(r.URL.Query().Get("wait")); err == nil && wait > 0 {
		t := time.NewTimer(min(wait, maxWait))
		select {
		case <-st.done:
		case <-t.C:
		case <-r.Context().Done():
		case <-s.shutdown:
		}
		t.Stop()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return http.StatusOK, st.status
}

// collect notes that the operator has a step's result.
func (s *Server) collect(_ *http.Request, id string, _ []byte) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.steps[id]; ok && st.status.Phase != Running {
		st.collected = true
		if len(st.status.Result) > 0 {
			// The operator keeps the result now: the runner keeps only
			// that the step ran (handed over again, it is answered, not
			// run), so a long run's results do not pile up in its memory
			// or its ledger.
			st.status.Result = nil
			s.record(st.status)
		}
	}
	return http.StatusOK, "collected"
}

// exit ends the runner once its run ended (the id is the run's last
// step): its Pod stays, ended, with its log.
func (s *Server) exit(_ *http.Request, _ string, _ []byte) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closing {
		s.closing = true
		close(s.exitAsked)
	}
	return http.StatusOK, "exiting"
}

// cancel stops a running step: SIGTERM to its wrapper (which passes it to
// the step's processes), SIGKILL after stopGrace.
func (s *Server) cancel(_ *http.Request, id string, _ []byte) (int, any) {
	st := s.step(id)
	if st == nil {
		return http.StatusNotFound, "no such step"
	}
	s.stop(st)
	return http.StatusOK, "cancelled"
}

func (s *Server) stop(st *step) {
	if st.proc == nil {
		return
	}
	_ = st.proc.Signal(syscall.SIGTERM)
	go func() {
		t := time.NewTimer(stopGrace)
		defer t.Stop()
		select {
		case <-st.done:
		case <-t.C:
			_ = st.proc.Kill()
		}
	}()
}

// start runs a step's wrapper (mu held): its output goes to the server's,
// framed; its result comes back on a pipe no process of the step can write.
func (s *Server) start(id string, st *step, in Step) error {
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return err
	}
	resR, resW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW, errR, errW)
		return err
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		closeAll(outR, outW, errR, errW, resR, resW)
		return err
	}
	s.frame(fmt.Sprintf("%s step %s begin state=%s iteration=%d retry=%d\n", Marker, id, strconv.Quote(in.State), in.Iteration, in.Retry))
	argv := append([]string{s.Wrapper, "--result-fd", "3"}, in.Args...)
	proc, err := os.StartProcess(s.Wrapper, argv, &os.ProcAttr{
		Dir: in.Dir, Env: mergeEnv(s.Env, in.Env),
		Files: []*os.File{null, outW, errW, resW},
	})
	closeAll(null, outW, errW, resW)
	if err != nil {
		closeAll(outR, errR, resR)
		s.frame(fmt.Sprintf("%s step %s end noresult\n", Marker, id))
		return err
	}
	st.proc = proc
	exited := make(chan syscall.WaitStatus, 1)
	if s.ReapAll {
		s.reaped[proc.Pid] = exited
	} else {
		go func() {
			ps, err := proc.Wait()
			if err != nil {
				exited <- syscall.WaitStatus(255 << 8)
				return
			}
			exited <- ps.Sys().(syscall.WaitStatus)
		}()
	}
	s.wg.Add(1)
	go s.finish(id, st, proc, exited, outR, errR, resR)
	return nil
}

// finish collects a step's output and result once its wrapper ends.
func (s *Server) finish(id string, st *step, proc *os.Process, exited <-chan syscall.WaitStatus, outR, errR, resR *os.File) {
	defer s.wg.Done()
	var copies sync.WaitGroup
	writers := []*lineWriter{{w: s.Stdout, mu: &s.outMu, atStart: true}, {w: s.Stderr, mu: &s.outMu, atStart: true}}
	for i, r := range []*os.File{outR, errR} {
		copies.Add(1)
		go func() {
			defer copies.Done()
			_, _ = io.Copy(writers[i], r)
			writers[i].Flush()
		}()
	}
	var result bytes.Buffer
	resDone := make(chan struct{})
	go func() {
		_, _ = io.Copy(&result, io.LimitReader(resR, maxBody))
		close(resDone)
	}()
	ws := <-exited
	// What the step left behind may hold its output pipes: they are cut
	// off after a moment.
	copied := make(chan struct{})
	go func() { copies.Wait(); close(copied) }()
	select {
	case <-copied:
	case <-time.After(outputGrace):
		closeAll(outR, errR)
		<-copied
	}
	select {
	case <-resDone:
	case <-time.After(outputGrace):
		_ = resR.Close()
		<-resDone
	}
	closeAll(outR, errR, resR)
	code := ws.ExitStatus()
	if ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	for _, lw := range writers {
		lw.EndLine()
	}
	s.frame(fmt.Sprintf("%s step %s end exit=%d\n", Marker, id, code))

	s.mu.Lock()
	st.status.Phase, st.status.Ended, st.status.ExitCode = Done, time.Now(), code
	if st.interrupted {
		st.status.Phase = Lost
	}
	if json.Valid(result.Bytes()) && result.Len() > 0 {
		st.status.Result = json.RawMessage(bytes.Clone(result.Bytes()))
	} else {
		st.status.NoResult = fmt.Sprintf("the step's wrapper ended (exit code %d) without a result", code)
	}
	st.proc = nil
	s.last = time.Now()
	s.record(st.status)
	s.mu.Unlock()
	close(st.done)
	_ = proc.Release()
}

// frame writes a line of the server's own to the step log.
func (s *Server) frame(line string) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	_, _ = io.WriteString(s.Stdout, line)
}

// reap waits for every child of the server's process (ReapAll): a step's
// wrapper's status goes to its step, an adopted orphan is just reaped.
func (s *Server) reap(ctx context.Context) {
	sig := make(chan os.Signal, 16)
	signal.Notify(sig, syscall.SIGCHLD)
	defer signal.Stop(sig)
	for {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
			s.mu.Lock()
			ch, ok := s.reaped[pid]
			delete(s.reaped, pid)
			s.mu.Unlock()
			if ok {
				ch <- ws
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-sig:
		case <-time.After(time.Second):
		}
	}
}

// idle says whether the server has nothing to do and nothing to keep.
func (s *Server) idle(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.IdleTimeout <= 0 || now.Sub(s.last) < s.IdleTimeout {
		return false
	}
	for _, st := range s.steps {
		if st.status.Phase == Running || !st.collected && now.Sub(st.status.Ended) < keepUncollected {
			return false
		}
	}
	s.closing = true
	return true
}

// Serve serves on l until ctx ends or the server idles out, then stops
// what runs and waits for it.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.ReapAll {
		go s.reap(ctx)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err = <-errc:
			break loop
		case <-s.exitAsked:
			// Let the answer go out first.
			time.Sleep(50 * time.Millisecond)
			break loop
		case now := <-tick.C:
			if s.idle(now) {
				break loop
			}
		}
	}
	s.mu.Lock()
	s.closing = true
	for _, st := range s.steps {
		if st.status.Phase == Running {
			// Cut off by the runner's own end (its Pod deleted, say):
			// lost, not ended, so the operator runs it again.
			st.interrupted = true
			s.stop(st)
		}
	}
	s.mu.Unlock()
	close(s.shutdown)
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	s.wg.Wait()
	if s.ledgerF != nil {
		_ = s.ledgerF.Close()
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// ServeMain is `entrypoint serve`: a warm runner Pod's first process.
func ServeMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("entrypoint serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", cmp.Or(os.Getenv(ListenEnv), fmt.Sprintf(":%d", Port)), "address to listen on (default $"+ListenEnv+", else :7464)")
	ledger := fs.String("ledger", "/var/run/looprun-runner/ledger.jsonl", "the ledger of the steps, on the Pod's own volume")
	idle := fs.Duration("idle-timeout", 5*time.Minute, "exit when no step runs or waits to be collected for this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	key, err := ParseKey(os.Getenv(KeyEnv))
	if err != nil {
		fmt.Fprintf(stderr, "runner: $%s: %v\n", KeyEnv, err)
		return 2
	}
	// No process of a step may read the key: not from the environment it
	// inherits, nor from this process's (a non-dumpable process's /proc
	// files are root's, and no step may trace it).
	_ = os.Unsetenv(KeyEnv)
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintf(stderr, "runner: cannot hide the key from the steps: %v\n", err)
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return 1
	}
	s := &Server{Key: key, Wrapper: self, Env: os.Environ(), Ledger: *ledger, IdleTimeout: *idle,
		Stdout: stdout, Stderr: stderr, ReapAll: os.Getpid() == 1}
	if err := s.Open(); err != nil {
		fmt.Fprintf(stderr, "runner: ledger: %v\n", err)
		return 1
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fmt.Fprintf(stdout, "%s runner listening on %s\n", Marker, l.Addr())
	if err := s.Serve(ctx, l); err != nil {
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s runner stopped\n", Marker)
	return 0
}

// mergeEnv is base with over's variables set over it.
func mergeEnv(base, over []string) []string {
	out := make([]string, 0, len(base)+len(over))
	set := map[string]bool{}
	for _, kv := range over {
		name, _, _ := strings.Cut(kv, "=")
		set[name] = true
	}
	for _, kv := range base {
		if name, _, _ := strings.Cut(kv, "="); !set[name] && name != KeyEnv {
			out = append(out, kv)
		}
	}
	for _, kv := range over {
		if name, _, _ := strings.Cut(kv, "="); name != KeyEnv {
			out = append(out, kv)
		}
	}
	return out
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// ResultPipe is the wrapper's side of the result pipe (`--result-fd N`):
// no process the wrapper starts inherits it, and none can reopen it through
// the wrapper's /proc entries (the wrapper is made non-dumpable).
func ResultPipe(fd int) (*os.File, error) {
	if fd < 3 {
		return nil, fmt.Errorf("%d is not a descriptor beyond stdin, stdout and stderr", fd)
	}
	syscall.CloseOnExec(fd)
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "result"), nil
}
