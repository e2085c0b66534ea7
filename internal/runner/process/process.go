// Package process supervises the process of one action. The local runner
// (looprun run, the operator's --allow-local-actions) and the in-pod
// wrapper (cmd/entrypoint) both run actions through Run, so an action's
// exit code, timeout, output tails and verdict do not depend on where it
// ran.
//
// The command runs in its own process group, killed as a whole at the
// timeout, on cancellation, and when the command itself ends (whatever it
// left in the background goes with it). Its output goes to the caller's
// writers as it comes (the run's log files, the container log); the
// supervisor keeps only bounded tails in memory, and judges the complete
// stdout line by line for the evaluators that need it, so an action that
// prints a gigabyte costs neither memory nor a different verdict.
package process

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/action"
	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/executor/evaluate"
)

// Windows of output kept in memory.
const (
	// DefaultOutputWindow is how much of stdout's end evaluators read,
	// besides what they learn line by line.
	DefaultOutputWindow = 1 << 20
	// DefaultStderrWindow is how much of stderr's end is kept.
	DefaultStderrWindow = 64 << 10
	// ExitCannotStart is the exit code of a command that could not start.
	ExitCannotStart = 127
	// drainGrace bounds the wait for output once the group is killed: a
	// process that left the group may hold the pipes open for ever.
	drainGrace = 2 * time.Second
)

// Spec is one action's process.
type Spec struct {
	// Argv is the command and its arguments.
	Argv []string
	// Dir is the working directory; empty means the current one.
	Dir string
	// Env is the environment; nil means the current one.
	Env []string
	// Timeout kills the process group and ends with exit code
	// evaluate.ExitTimeout; 0 means none.
	Timeout time.Duration
	// IdleTimeout does the same when the command prints nothing, on
	// stdout or stderr, for this long; 0 means none.
	IdleTimeout time.Duration
	// Evaluate is the state's evaluator with its templates expanded; a
	// deterministic one gives the Result its verdict, over the complete stdout.
	Evaluate *v1alpha1.Evaluate
	// Stdout and Stderr receive the complete output as it comes. A write
	// error does not stop the action: the tails and the verdict go on.
	Stdout, Stderr io.Writer
	// OwnFiles says Stdout and Stderr are two regular files of this run
	// alone, open for reading and appending (a local run's output logs):
	// the command writes into them directly, and the supervisor reads back
	// what it wrote.
	OwnFiles bool
	// Signals are forwarded to the process group.
	Signals <-chan os.Signal
	// OutputWindow and StderrWindow bound the tails kept (defaults above).
	OutputWindow, StderrWindow int
	// Started, when set, is called with the process group id once the
	// command's process exists.
	Started func(pgid int)
	// Ready, when set, holds the command back until it returns: the
	// command's process is started (so starting it overlaps with whatever
	// Ready waits for), gets the read end of a pipe as file descriptor 3,
	// and must read one line from it before it does anything (GatedShell
	// writes such a command). Ready is told the process group. A nil error
	// sends the line; an error kills the process group unrun and is the
	// Result's stderr, exit code 127.
	Ready func(pgid int) error
	// AgentStream says the command is an agent CLI printing stream-json
	// (agentstream): Stdout, the tail and the verdict get the assistant's
	// text, and the Result its usage. The output then comes through pipes.
	AgentStream bool
	// AgentCalls says the AgentStream is several agent calls, one after
	// another (a learning gate): the Result has each call's usage too.
	AgentCalls bool
}

// Result is how the process ended.
type Result struct {
	// ExitCode is the command's: 127 when it could not start,
	// evaluate.ExitTimeout after the timeout, -N when killed by signal N.
	ExitCode        int
	Duration        time.Duration
	Stdout, Stderr  string
	StdoutTruncated bool
	StderrTruncated bool
	TimedOut        bool
	// IdledOut: the command printed nothing for IdleTimeout and was
	// killed (TimedOut is set too).
	IdledOut bool
	// CannotStart says why the command could not start ("" if it did).
	CannotStart string
	// Verdict is the deterministic evaluator's, over the complete stdout;
	// nil without one.
	Verdict *evaluate.Result
	// Signal is the signal (FATAL_ERROR:, ...) in the complete stdout; nil
	// for none.
	Signal *action.Signal
	// Usage is what an AgentStream command reported it used; nil when it
	// reported nothing (a CLI printing plain text).
	Usage *agentstream.Usage
	// CallUsages is the usage of each call of an AgentCalls command that
	// reported one, in order; Usage is their sum.
	CallUsages []agentstream.Usage
	// ResultSeen: an AgentStream command's stream came to its result
	// record.
	ResultSeen bool
	// CallSlots is, for an AgentCalls command, what each of its agent
	// calls (each begun by an action.LearningCallMark line) reported, nil
	// for nothing.
	CallSlots []*agentstream.Usage
}

// ActionResult is the result as the executor takes it.
func (r Result) ActionResult() action.Result {
	return action.Result{
		Output: r.Stdout, Stderr: r.Stderr, ExitCode: r.ExitCode, Duration: r.Duration,
		OutputTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated, Verdict: r.Verdict,
		Signal: r.Signal, SignalScanned: true, Usage: r.Usage, ResultSeen: r.ResultSeen, CallUsages: r.CallSlots, TimedOut: r.TimedOut, IdledOut: r.IdledOut,
	}
}

// Run runs the command and waits for it. It never fails: whatever happens
// is in the Result.
//
// With OwnFiles (a local run's output logs), the command writes straight
// into them and the supervisor reads back what it wrote: no byte passes
// through this process while the action runs. Otherwise (the container
// log) the output comes through pipes. Either way the tails and the
// verdict are the same.
func Run(ctx context.Context, s Spec) Result {
	out := newTail(cmp.Or(max(s.OutputWindow, 0), DefaultOutputWindow))
	errs := newTail(cmp.Or(max(s.StderrWindow, 0), DefaultStderrWindow))
	lines := newLineJudge(s.Evaluate)
	signals := &action.SignalScanner{}
	stdout := &fanout{sinks: []io.Writer{writerOr(s.Stdout), out, lines, signals}}
	// An agent's stderr is kept until its turn ends (its result record),
	// as little-loops stops reading the agent there: cut is closed then.
	cut := &cutWriter{w: errs}
	stderr := &fanout{sinks: []io.Writer{writerOr(s.Stderr), cut}}
	var files *outputFiles
	var agent *agentstream.Decoder
	var streamErr *os.File // an agent's stderr, written by the agent into its own file
	var streamErrEnd atomic.Int64
	streamErrEnd.Store(-1)
	if s.AgentStream {
		agent, streamErr = agentDecoder(s, stdout, stderr, cut, &streamErrEnd)
		stdout = &fanout{sinks: []io.Writer{agent}}
	} else if s.OwnFiles {
		files = ownFiles(s.Stdout, s.Stderr)
	}
	var idle *idleWatch
	if s.IdleTimeout > 0 {
		idle = newIdleWatch(s.IdleTimeout)
		if files != nil {
			idle.sizes = func() int64 { return fileSize(files.out) + fileSize(files.err) }
		} else { // every byte the command prints passes here first
			stdout = &fanout{sinks: []io.Writer{idle, stdout}}
			stderr = &fanout{sinks: []io.Writer{idle, stderr}}
		}
	}

	start := time.Now()
	res := Result{}
	var err error
	switch {
	case files != nil:
		err = files.run(ctx, s, idle, &res, out, errs, lines, signals)
	case streamErr != nil:
		// The agent writes its stderr into the file; its tail is read
		// back once it ended.
		errStart := fileSize(streamErr)
		err = runPiped(ctx, s, idle, &res, stdout, nil, streamErr)
		end := streamErrEnd.Load()
		if end < 0 {
			end = fileSize(streamErr)
		}
		readRange(streamErr, errStart, end, errs, nil, nil)
	default:
		err = runPiped(ctx, s, idle, &res, stdout, stderr, nil)
	}
	if err != nil {
		res.CannotStart = fmt.Sprintf("cannot start %s: %v", first(s.Argv), err)
		fmt.Fprintln(stderr, res.CannotStart)
		res.ExitCode = ExitCannotStart
	}
	switch {
	case res.IdledOut:
		res.ExitCode = evaluate.ExitTimeout
		_, _ = io.WriteString(stderr, action.IdleNotice(s.IdleTimeout))
	case res.TimedOut:
		res.ExitCode = evaluate.ExitTimeout
		_, _ = io.WriteString(stderr, action.TimeoutNotice(s.Timeout))
	}
	if agent != nil {
		res.takeAgent(agent, s.AgentCalls)
	}
	lines.flush()
	res.Duration = time.Since(start)
	res.Stdout, res.StdoutTruncated = out.String(), out.truncated()
	res.Stderr, res.StderrTruncated = errs.String(), errs.truncated()
	res.Signal = signals.Signal()
	if e := s.Evaluate; e != nil && evaluate.IsDeterministic(e.Type) {
		in := evaluate.Input{Output: res.Stdout, ExitCode: res.ExitCode}
		if res.StdoutTruncated {
			// Only the tail is kept: what was seen line by line in the
			// rest counts too. Whole, the output is searched as a whole,
			// so that ^ and $ mean what they mean in Python.
			in.Streamed = lines.facts()
		}
		v := evaluate.Deterministic(e, in)
		res.Verdict = &v
	}
	return res
}

// agentDecoder decodes an agent's stream (its stdout) into stdout, its
// result errors into stderr. With a local run's own log files (and no idle
// timeout), stderr goes straight into its file instead (one pipe and one
// copy fewer per step), the decoder's [result] lines join it there, and
// streamErr is that file, whose tail is read back afterwards up to end
// (where it was when the turn ended). The turn's end closes cut.
func agentDecoder(s Spec, stdout, stderr io.Writer, cut *cutWriter, end *atomic.Int64) (agent *agentstream.Decoder, streamErr *os.File) {
	decoderErr := stderr
	if f := ownFiles(s.Stdout, s.Stderr); f != nil && s.OwnFiles && s.IdleTimeout <= 0 {
		streamErr, decoderErr = f.err, f.err
	}
	agent = agentstream.New(stdout, decoderErr)
	agent.Calls = s.AgentCalls
	if s.AgentCalls {
		agent.CallMark = []byte(action.LearningCallMark)
	}
	agent.OnEnd = func() {
		cut.close()
		if streamErr != nil {
			end.Store(fileSize(streamErr))
		}
	}
	return agent, streamErr
}

// takeAgent keeps what the agent's stream said it used, and whether its
// turn ended.
func (r *Result) takeAgent(agent *agentstream.Decoder, calls bool) {
	agent.Flush()
	r.Usage = agent.Usage()
	r.CallUsages = agent.CallUsages()
	r.ResultSeen = agent.ResultSeen()
	if calls {
		r.CallSlots = agent.CallSlots()
	}
}

// runPiped runs the command with its stdout through a pipe, and its
// stderr through one too, or straight into errFile when given (the
// caller reads that back).
func runPiped(ctx context.Context, s Spec, idle *idleWatch, res *Result, stdout, stderr io.Writer, errFile *os.File) error {
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	pipes, errTo := &outputPipes{out: outR}, errFile
	if errFile == nil {
		errR, errW, err := os.Pipe()
		if err != nil {
			closeAll(outR, outW)
			return err
		}
		pipes.err, errTo = errR, errW
	}
	cmd, err := startCommand(s, outW, errTo)
	closeAll(outW) // the command holds its own copies
	if errFile == nil {
		closeAll(errTo)
	}
	if err != nil {
		closeAll(pipes.out, pipes.err)
		return err
	}
	drained := pipes.drain(stdout, stderr)
	res.TimedOut, res.IdledOut = supervise(ctx, cmd, s.Timeout, idle, s.Signals)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever it left behind
	pipes.wait(drained)
	res.ExitCode = exitCode(cmd.ProcessState)
	return nil
}

// outputFiles are a local run's output logs, written by the command itself.
type outputFiles struct{ out, err *os.File }

// ownFiles returns the output files when both sinks are distinct regular
// files; nil otherwise (the output then goes through pipes).
func ownFiles(stdout, stderr io.Writer) *outputFiles {
	o, ok1 := stdout.(*os.File)
	e, ok2 := stderr.(*os.File)
	if !ok1 || !ok2 {
		return nil
	}
	so, err1 := o.Stat()
	se, err2 := e.Stat()
	if err1 != nil || err2 != nil || !so.Mode().IsRegular() || !se.Mode().IsRegular() || os.SameFile(so, se) {
		return nil
	}
	return &outputFiles{out: o, err: e}
}

// run runs the command writing into the files, then reads back what it
// wrote: the tails, and every line for the line judge.
func (f *outputFiles) run(ctx context.Context, s Spec, idle *idleWatch, res *Result, out, errs *tail, lines *lineJudge, signals io.Writer) error {
	outStart, errStart := fileSize(f.out), fileSize(f.err)
	cmd, err := startCommand(s, f.out, f.err)
	if err != nil {
		return err
	}
	res.TimedOut, res.IdledOut = supervise(ctx, cmd, s.Timeout, idle, s.Signals)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever it left behind
	res.ExitCode = exitCode(cmd.ProcessState)
	readBack(f.out, outStart, out, lines, signals)
	readBack(f.err, errStart, errs, nil, nil)
	return nil
}

// readBack feeds what was written to f after start to the tail (its end
// only), and to the line judge (when it needs lines) and the signal
// scanner (when given) all of it, in bounded chunks.
func readBack(f *os.File, start int64, t *tail, lines *lineJudge, signals io.Writer) {
	readRange(f, start, fileSize(f), t, lines, signals)
}

// readRange is readBack of what was written to f between start and end.
func readRange(f *os.File, start, end int64, t *tail, lines *lineJudge, signals io.Writer) {
	if end <= start {
		return
	}
	from := start
	if (lines == nil || !lines.active()) && signals == nil {
		from = max(start, end-int64(t.max))
		t.total += from - start // what the tail skipped counts as written
	}
	sinks := []io.Writer{t}
	if lines != nil {
		sinks = append(sinks, lines)
	}
	if signals != nil {
		sinks = append(sinks, signals)
	}
	_, _ = io.Copy(&fanout{sinks: sinks}, io.NewSectionReader(f, from, end-from))
}

func fileSize(f *os.File) int64 {
	st, err := f.Stat()
	if err != nil {
		return 0
	}
	return st.Size()
}

// outputPipes are the read ends of the command's stdout and stderr.
type outputPipes struct{ out, err *os.File }

// startCommand starts the command in its own process group, its output
// into the files given. The command dies with this process, should it be
// killed outright.
func startCommand(s Spec, stdout, stderr *os.File) (*exec.Cmd, error) {
	if len(s.Argv) == 0 {
		return nil, errors.New("no command to run")
	}
	cmd := command(s.Argv)
	cmd.Dir, cmd.Env = s.Dir, s.Env
	if f := devNull(); f != nil {
		cmd.Stdin = f
	}
	// Files, not writers: exec starts no copying of its own, so Wait
	// returns when the command ends, not when the last holder of its
	// output does.
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var gate *os.File
	if s.Ready != nil {
		r, w, err := gatePipe()
		if err != nil {
			return nil, err
		}
		cmd.ExtraFiles, gate = []*os.File{r}, w
		defer closeAll(r)
	}
	if err := cmd.Start(); err != nil {
		closeAll(gate)
		forgetPath(s.Argv[0])
		return nil, err
	}
	if s.Started != nil {
		s.Started(cmd.Process.Pid)
	}
	if gate != nil {
		err := s.Ready(cmd.Process.Pid)
		if err == nil {
			// EPIPE: the command ended without waiting (a shell that could
			// not parse the script); its own end tells what happened.
			_, _ = gate.Write([]byte("\n"))
		}
		closeAll(gate)
		if err != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			return nil, err
		}
	}
	return cmd, nil
}

// lookPaths caches where the programs actions run were found in PATH (a
// local run starts bash hundreds of times; a search stats every PATH
// entry). A program that fails to start is looked up again next time.
var lookPaths sync.Map // "PATH\x00name" -> path

// command is exec.Command with PATH searches cached.
func command(argv []string) *exec.Cmd {
	name := argv[0]
	if strings.ContainsRune(name, '/') {
		return exec.Command(name, argv[1:]...)
	}
	key := pathKey(name)
	if p, ok := lookPaths.Load(key); ok {
		cmd := exec.Command(p.(string), argv[1:]...)
		cmd.Args[0] = name
		return cmd
	}
	cmd := exec.Command(name, argv[1:]...)
	if cmd.Err == nil && filepath.IsAbs(cmd.Path) {
		lookPaths.Store(key, cmd.Path)
	}
	return cmd
}

func forgetPath(name string) { lookPaths.Delete(pathKey(name)) }

// pathKey names a search: the same name under another PATH is another one.
func pathKey(name string) string { return os.Getenv("PATH") + "\x00" + name }

// devNull is the actions' standard input, opened once.
var devNull = sync.OnceValue(func() *os.File {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return nil // exec opens its own
	}
	return f
})

// gatePipe is a pipe for Spec.Ready. Its ends stay blocking, out of the
// runtime's poller: the read end goes to the command, and the write end
// takes one byte.
func gatePipe() (r, w *os.File, err error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	return os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1"), nil
}

// GatedShell is the command that runs script with shell (SHELL -c SCRIPT)
// once Spec.Ready lets it: the shell waits for a line on file descriptor 3,
// closes it, and runs the script, on the same line so that the script's
// line numbers stay its own. Without the line (this process died first) it
// exits 125, the script unrun.
func GatedShell(shell, script string) []string {
	return []string{shell, "-c", "IFS= read -r _ <&3 || exit 125; exec 3<&-; " + script}
}

// GatedExec is GatedShell for a program and its arguments.
func GatedExec(argv []string) []string {
	return append([]string{"sh", "-c", `IFS= read -r _ <&3 || exit 125; exec 3<&-; exec "$0" "$@"`}, argv...)
}

// drain copies the pipes (err may be nil) to their writers until they
// close.
func (p *outputPipes) drain(stdout, stderr io.Writer) <-chan struct{} {
	var wg sync.WaitGroup
	for _, c := range []struct {
		r *os.File
		w io.Writer
	}{{p.out, stdout}, {p.err, stderr}} {
		if c.r == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = io.Copy(c.w, c.r)
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	return done
}

// wait waits until the output is read to its end, drainGrace at most (a
// process that escaped the group may keep the pipes open), and closes them.
func (p *outputPipes) wait(drained <-chan struct{}) {
	t := time.NewTimer(drainGrace)
	defer t.Stop()
	select {
	case <-drained:
	case <-t.C:
		closeAll(p.out, p.err) // the copies end
		<-drained
	}
	closeAll(p.out, p.err)
}

// supervise waits for the command, forwarding signals to its group and
// killing the group at the timeout or when ctx ends. It reports whether the
// timeout fired.
func supervise(ctx context.Context, cmd *exec.Cmd, timeout time.Duration, idle *idleWatch, signals <-chan os.Signal) (timedOut, idledOut bool) {
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	pid := cmd.Process.Pid
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	cancelled := ctx.Done()
	var idleTick <-chan time.Time
	if idle != nil {
		t := time.NewTicker(idle.tick())
		defer t.Stop()
		idleTick = t.C
	}
	for {
		select {
		case <-done:
			return timedOut, idledOut
		case <-idleTick:
			if idle.expired() {
				timedOut, idledOut, idleTick = true, true, nil
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		case sig := <-signals:
			if sig, ok := sig.(syscall.Signal); ok {
				_ = syscall.Kill(-pid, sig)
			}
		case <-deadline:
			timedOut, deadline = true, nil
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		case <-cancelled:
			cancelled = nil // kill once
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return ExitCannotStart
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -int(ws.Signal())
	}
	return ps.ExitCode()
}

// fanout writes to every sink, whatever one of them answers: a full disk
// under the output log must not stop the action or its verdict.
type fanout struct{ sinks []io.Writer }

// cutWriter writes to w until it is closed, then drops what comes.
type cutWriter struct {
	w      io.Writer
	closed atomic.Bool
}

func (c *cutWriter) Write(p []byte) (int, error) {
	if !c.closed.Load() {
		_, _ = c.w.Write(p)
	}
	return len(p), nil
}

func (c *cutWriter) close() { c.closed.Store(true) }

func (f *fanout) Write(p []byte) (int, error) {
	for _, w := range f.sinks {
		_, _ = w.Write(p)
	}
	return len(p), nil
}

func writerOr(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

func first(argv []string) string {
	if len(argv) == 0 {
		return "the action"
	}
	return argv[0]
}
