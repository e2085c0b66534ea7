package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/loopfile"
	"github.com/looprun/looprun/internal/pricing"
)

// progress tells on a terminal what a loop does, as ll-loop does: a
// header, per state "[n/max] state (elapsed) -> action", what the action
// prints as it prints it (indented, capped per step), the verdict and why,
// where the loop goes, and a closing line. A sub-loop's lines are indented
// by its depth. Colour and marks only on a terminal.
type progress struct {
	mu      sync.Mutex
	w       io.Writer
	style   style
	verbose bool
	header  header
	// out is the run's stdout log, tailed while a top-level action runs
	// (nil: nothing is tailed).
	out *os.File
	// stream shows the output of the action in progress as it comes (the
	// log tailed, or its Pod's log followed); nil: none.
	stream outputStream
	// inAction says a top-level action started and has not completed.
	inAction bool
	// start is when the run (or this resume of it) began; open says a
	// state's line waits for its action.
	start time.Time
	// before is the run's running time before this resume (Observe).
	before time.Duration
	open   bool
	// iteration of the state in progress, by depth.
	iteration map[string]any
	// lastVerdict is the run's last verdict (depth 0), to say which one
	// no route took (executor.EndWhyOf).
	lastVerdict string
	// maxLines is how many lines of an action's output are shown.
	maxLines int
	// seq is the number of the last event shown: an event read twice (a
	// log read again after an import) is shown once.
	seq int64
	// restarted is the action last shown as run again (depth/state/
	// iteration), until the next step.
	restarted string
}

// header is what the first lines say about the run.
type header struct {
	loop    string
	spec    *v1alpha1.LoopSpec
	context map[string]any
	// littleLoops names the caps as little-loops does (max steps, max
	// iterations: run's -n and --max-iterations).
	littleLoops bool
}

// defaultMaxLines is how many lines of one action's output are shown
// (-v: all of them).
const defaultMaxLines = 40

func newProgress(w io.Writer, st style, verbose bool, h header, out *os.File) *progress {
	p := &progress{w: w, style: st, verbose: verbose, header: h, out: out, iteration: map[string]any{}, maxLines: defaultMaxLines}
	if verbose {
		p.maxLines = 0
	}
	return p
}

// print shows the events.
// Observe implements executor.Observer: the progress display of a run.
// The run's time before this resume counts in its summary.
func (p *progress) Observe(run *v1alpha1.RunState, events []executor.Event) {
	p.before = time.Duration(max(run.AccumulatedMs, 0)) * time.Millisecond
	p.print(events)
}

func (p *progress) print(events []executor.Event) {
	for _, e := range events {
		if e.Seq > 0 {
			if e.Seq <= p.seq {
				continue
			}
			p.seq = e.Seq
		}
		p.event(e)
	}
}

// println writes one line; no escape sequence of what an action printed
// reaches the terminal.
func (p *progress) println(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.writeLocked(line)
}

func (p *progress) writeLocked(line string) {
	if p.open {
		fmt.Fprintln(p.w)
		p.open = false
	}
	fmt.Fprintln(p.w, line)
}

func (p *progress) event(e executor.Event) {
	n := max(executor.DepthOf(e), 0)
	depth := strconv.Itoa(n)
	indent := strings.Repeat("  ", min(n, 16))
	pad := indent + "       "
	s := p.style
	switch e.Type {
	case executor.EventLoopStart, executor.EventLoopResume:
		p.begin(e, n, indent)
	case executor.EventActionRestarted:
		// The action cut off runs again: its state's line, as entered;
		// once, however many times in a row the log says so.
		r := executor.RestartedOf(e)
		again := fmt.Sprint(depth, "/", r.State, "/", r.Iteration)
		if again == p.restarted {
			return
		}
		p.restarted = again
		p.iteration[depth] = r.Iteration
		p.stateLine(e, r.State, r.Iteration, n, indent)
		p.actionLine(r.Action, false, n, indent)
		p.println(pad + s.dim("(again: it was cut off)"))
	case executor.EventStateEnter:
		p.restarted = ""
		enter := executor.StateEnterOf(e)
		p.iteration[depth] = enter.Iteration
		p.stateLine(e, enter.State, enter.Iteration, n, indent)
	case executor.EventActionStart:
		a := executor.ActionStartOf(e)
		p.actionLine(a.Action, a.IsPrompt, n, indent)
	case executor.EventActionComplete:
		p.restarted = ""
		p.completed(executor.ActionCompleteOf(e), n, pad)
	case executor.EventActionError:
		p.println(pad + s.warn("error: "+executor.ActionErrorOf(e).Error))
	case executor.EventEvaluate:
		ev := executor.EvaluateOf(e)
		if n == 0 {
			p.lastVerdict = ev.Verdict
		}
		p.verdictLine(ev, pad)
	case executor.EventRoute:
		r := executor.RouteOf(e)
		if r.Reason != "" {
			// A move of its own (a maintain loop's restart) from a
			// terminal state, which has no state_enter of its own but
			// counts as a step: its line, so that no step number is
			// missing, then the move.
			if r.Reason == "maintain" {
				it, _ := p.iteration[depth].(int32)
				it++
				p.iteration[depth] = it
				p.stateLine(e, r.From, it, n, indent)
				p.println(fmt.Sprintf("%s%s-> %s %s", pad, s.mark("↻ ", ""), s.bold(printable(r.To)), s.dim("("+r.Reason+")")))
				return
			}
			p.println(fmt.Sprintf("%s%s%s -> %s %s", pad, s.mark("↻ ", ""), r.From, s.bold(printable(r.To)), s.dim("("+r.Reason+")")))
			return
		}
		p.println(fmt.Sprintf("%s%s %s", pad, s.dim("->"), s.bold(printable(r.To))))
	default:
		if line, ok := p.note(e, pad, indent); ok {
			p.println(line)
		}
	}
}

// begin prints the header of a run (or of a sub-loop, one line).
func (p *progress) begin(e executor.Event, depth int, indent string) {
	loop, resumed := executor.LoopStartOf(e).Loop, executor.LoopResumeOf(e)
	if depth > 0 {
		verb := "started"
		if e.Type == executor.EventLoopResume {
			verb = "resumed in " + resumed.FromState
		}
		p.println(fmt.Sprintf("%s%sloop %s %s", indent, p.style.mark("↳ ", ""), loop, verb))
		return
	}
	p.start = e.Time
	p.mu.Lock()
	defer p.mu.Unlock()
	if e.Type == executor.EventLoopResume {
		p.iteration["0"] = resumed.Iteration
		p.writeLocked(fmt.Sprintf("Resuming loop: %s in %s at iteration %d", p.style.bold(loop), resumed.FromState, resumed.Iteration))
	} else {
		p.writeLocked("Running loop: " + p.style.bold(loop))
	}
	for _, l := range p.header.lines() {
		p.writeLocked("  " + printable(l))
	}
	p.writeLocked("")
}

// lines are the header's limits and context.
func (h header) lines() []string {
	if h.spec == nil {
		return nil
	}
	spec := h.spec
	steps, passes := "max iterations", "max passes"
	if h.littleLoops {
		steps, passes = "max steps", "max iterations"
	}
	out := []string{fmt.Sprintf("%s: %d", steps, spec.GetMaxIterations())}
	if spec.MaxPasses != nil {
		out = append(out, fmt.Sprintf("%s: %d", passes, *spec.MaxPasses))
	}
	if t := spec.GetTimeout(); t > 0 {
		out = append(out, "timeout: "+t.String())
	}
	if b := spec.Budget; b != nil {
		if b.MaxCostUSD != "" {
			out = append(out, "budget: $"+b.MaxCostUSD)
		}
		if b.MaxTokens != nil {
			out = append(out, fmt.Sprintf("budget: %d tokens", *b.MaxTokens))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(h.context)) {
		v := fmt.Sprint(h.context[k])
		dv, seeded := loopfile.Thresholds[k]
		if k == "run_dir" || seeded && fmt.Sprint(dv) == v || k == "max_steps" && v == strconv.Itoa(int(spec.GetMaxIterations())) ||
			k == "max_iterations" && spec.MaxPasses != nil && v == strconv.Itoa(int(*spec.MaxPasses)) {
			continue // the engine's own, not the loop's
		}
		if first, _, cut := strings.Cut(v, "\n"); cut {
			v = first + " …"
		}
		out = append(out, fmt.Sprintf("context.%s: %s", k, clip(v, 100)))
	}
	return out
}

// stateLine prints "[n/max] state (elapsed)"; the action, when there is
// one, ends the line.
func (p *progress) stateLine(e executor.Event, state string, iteration int32, depth int, indent string) {
	it := strconv.Itoa(int(iteration))
	if depth == 0 && p.header.spec != nil {
		it += "/" + strconv.Itoa(int(p.header.spec.GetMaxIterations()))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open {
		fmt.Fprintln(p.w)
	}
	fmt.Fprintf(p.w, "%s[%s] %s %s", indent, it, p.style.bold(printable(state)), p.style.dim("("+p.elapsed(e.Time)+")"))
	p.open = true
}

// actionLine ends the state's line with the action's first line, and
// starts showing what it prints.
func (p *progress) actionLine(action string, prompt bool, depth int, indent string) {
	action = strings.TrimSpace(action)
	var shown string
	switch first, _, multi := strings.Cut(action, "\n"); {
	case p.verbose:
		shown = action
	case prompt:
		shown = clip(first, 60)
	default:
		shown = clip(first, 100)
		if multi {
			shown += " …"
		}
	}
	mark := ""
	if prompt {
		mark = p.style.mark("✦ ", "(agent) ")
	}
	p.mu.Lock()
	arrow := " " + p.style.dim("->") + " "
	if !p.open {
		arrow = indent + "       " + p.style.mark("↺ ", "again: ") // a retry, under the state's line
	}
	lines := strings.Split(shown, "\n")
	fmt.Fprintf(p.w, "%s%s%s\n", arrow, mark, p.style.dim(printable(lines[0])))
	for _, l := range lines[1:] {
		fmt.Fprintf(p.w, "%s       %s\n", indent, p.style.dim(printable(l)))
	}
	p.open = false
	p.mu.Unlock()
	p.inAction = p.inAction || depth == 0
	if depth == 0 && p.out != nil {
		if t := startTail(p.out, indent+"       ", p.maxLines, p.println); t != nil {
			p.stream = t
		}
	}
}

// completed prints what the action printed (when it was not streamed),
// how long it took and how it ended.
func (p *progress) completed(a executor.ActionCompleteEvent, depth int, pad string) {
	s := p.style
	shown := false
	if depth == 0 {
		p.inAction = false
	}
	if p.stream != nil && depth == 0 {
		shown = p.stream.stop()
		p.stream = nil
	}
	if !shown {
		out := newLineCap(pad, p.maxLines, p.println)
		out.write(a.OutputPreview)
		out.close()
	}
	if a.ExitCode != 0 {
		// Why it failed is often only on stderr ("claude: not found").
		errs := strings.Split(strings.TrimRight(a.StderrPreview, "\n"), "\n")
		for _, l := range errs[max(len(errs)-5, 0):] {
			if strings.TrimSpace(l) != "" {
				p.println(pad + s.warn("stderr: "+printable(clip(l, 200))))
			}
		}
	}
	parts := []string{pad + s.dim("("+llDuration(time.Duration(a.DurationMs)*time.Millisecond)+")")}
	switch {
	case a.Failure != nil:
		parts = append(parts, s.warn(a.Failure.Reason+": "+a.Failure.Message))
	case a.ExitCode == 124:
		parts = append(parts, s.warn("timed out"))
	case a.ExitCode != 0:
		parts = append(parts, s.warn("exit: "+strconv.Itoa(a.ExitCode)))
	}
	if u := usageText(a.Usage); u != "" {
		parts = append(parts, s.dim(u))
	}
	p.println(strings.Join(parts, "  "))
}

// outputStream shows an action's output as it comes; stop ends it once
// the action ended and says whether it showed the output.
type outputStream interface {
	stop() (shown bool)
}

// streamFor is the stream of the action in progress, for a driver that
// follows it some other way (looprun watch follows its Pod's log); the
// lines go under the action's, capped as a local run's are.
func (p *progress) streamFor(start func(lines *lineCap) outputStream) {
	if p.stream == nil && p.inAction {
		p.stream = start(newLineCap("       ", p.maxLines, p.println))
	}
}

// usageText sums up an agent action's or a judge call's usage.
func usageText(u *executor.EventUsage) string {
	if u == nil {
		return ""
	}
	t := fmt.Sprintf("%d in, %d out", u.InputTokens, u.OutputTokens)
	if u.Priced {
		t += ", $" + pricing.FormatUSD(int64(u.CostUSD*1e6+0.5))
	}
	return t
}

// verdictLine prints the verdict and why.
func (p *progress) verdictLine(ev executor.EvaluateEvent, pad string) {
	s, d := p.style, ev.Details
	verdict := printable(ev.Verdict)
	good := false
	switch v1alpha1.CanonicalVerdict(verdict) {
	case v1alpha1.VerdictSuccess, "target", "progress", "approved":
		good = true
	}
	line := pad
	switch {
	case good && s.color:
		line += s.ok("✓ " + verdict)
	case s.color:
		line += s.warn("✗ " + verdict)
	default:
		line += "verdict: " + verdict
	}
	if why := verdictReason(d); why != "" {
		line += s.dim(" (" + printable(clip(why, 200)) + ")")
	}
	p.println(line)
	if r, ok := d["reason"].(string); ok && r != "" {
		p.println(pad + "  " + printable(clip(r, 300)))
	}
	if coerced, _ := d["evidence_coerced"].(bool); coerced {
		// The reason above is the judge's own, for the verdict it gave.
		p.println(pad + "  " + s.warn("counted as no: the judge quoted no output as its evidence"))
	}
}

// verdictReason says why an evaluator gave its verdict, from its details.
func verdictReason(d map[string]any) string {
	switch {
	case d["error"] != nil:
		return fmt.Sprint(d["error"])
	case d["operator"] != nil:
		return fmt.Sprintf("%v %v %v", d["value"], d["operator"], d["target"])
	case d["pattern"] != nil:
		found := "not found"
		if m, _ := d["matched"].(bool); m {
			found = "found"
		}
		return fmt.Sprintf("pattern %q %s", d["pattern"], found)
	case d["confidence"] != nil:
		return fmt.Sprintf("confidence %v", d["confidence"])
	case d["exit_code"] != nil:
		return fmt.Sprintf("exit code %v", d["exit_code"])
	case d["line"] != nil:
		return fmt.Sprintf("line %q", d["line"])
	}
	return ""
}

// note is the line of an event told in passing: retries, waits, limits,
// sub-loops, budgets, approvals, the end.
func (p *progress) note(e executor.Event, pad, indent string) (string, bool) {
	s := p.style
	switch e.Type {
	case executor.EventActionRetry:
		r := executor.RetryOf(e)
		return pad + s.warn(fmt.Sprintf("retry %d of %d in %s: %s", r.Retry, r.Limit, llDuration(time.Duration(r.DelayMs)*time.Millisecond), r.Reason)), true
	case executor.EventRateLimitWaiting:
		w := executor.RateLimitWaitingOf(e)
		return pad + s.warn(fmt.Sprintf("rate limited: %s try %d in %s", w.Tier, w.Attempt, llDuration(time.Duration(w.WaitSeconds*float64(time.Second))))), true
	case executor.EventAPIErrorRetry, executor.EventInfraRetry:
		r := executor.TransientRetryOf(e)
		return pad + s.warn(fmt.Sprintf("%s: try %d in %vs", strings.ReplaceAll(e.Type, "_", " "), r.Attempt, r.Backoff)), true
	case executor.EventSubLoopComplete:
		c := executor.SubLoopCompleteOf(e)
		if c.Lost || c.Error != "" {
			return fmt.Sprintf("%s%ssub-loop %s: %s", indent, s.mark("↲ ", ""), c.Loop, s.warn(c.Error)), true
		}
		return fmt.Sprintf("%s%ssub-loop %s ended: %s, verdict %s", indent, s.mark("↲ ", ""), c.Loop, c.TerminatedBy, c.Verdict), true
	case executor.EventApprovalRequested:
		return pad + s.warn(fmt.Sprintf("waiting for approval: %s (looprun approve or reject)", executor.ApprovalRequestedOf(e).Message)), true
	case executor.EventApprovalAnswered:
		a := executor.ApprovalAnsweredOf(e)
		line := pad + "answer: " + printable(a.Verdict)
		if a.By != "" {
			line += " by " + printable(a.By)
		}
		if a.Message != "" {
			line += s.dim(" (" + printable(clip(a.Message, 200)) + ")")
		}
		return line, true
	case executor.EventHandoffDetected:
		h := executor.HandoffDetectedOf(e)
		return fmt.Sprintf("%shandoff in %s: %s (looprun resume goes on)", indent, h.State, h.Continuation), true
	case executor.EventLoopComplete:
		return p.closing(e, indent)
	case executor.EventLoopRewind:
		r := executor.LoopRewindOf(e)
		return fmt.Sprintf("\n%s%s", indent, s.bold(fmt.Sprintf("Rewound from iteration %d (%s) to the checkpoint of iteration %d: on from state %s",
			r.FromIteration, printable(r.FromState), r.Iteration, printable(r.State)))), true
	case executor.EventLoopFork:
		f := executor.LoopForkOf(e)
		return fmt.Sprintf("%s%s", indent, s.dim(fmt.Sprintf("forked from %s at iteration %d: on from state %s",
			printable(f.Source), f.Iteration, printable(f.State)))), true
	case executor.EventActionError, executor.EventRetryExhausted, executor.EventCycleDetected, executor.EventStallDetected,
		executor.EventThrottleWarn, executor.EventThrottleHard, executor.EventThrottleStop,
		executor.EventRateLimitExhausted, executor.EventRateLimitStorm, executor.EventAPIErrorExhausted, executor.EventInfraRetryExhausted,
		executor.EventBudgetWarning, executor.EventBudgetExceeded, executor.EventBudgetResumed, executor.EventCostCeiling,
		executor.EventCaptureTruncated:
		return pad + s.warn(e.Type+": "+printable(fields(e.Data))), true
	}
	return "", false
}

// closing is the run's last line: where it ended, after how many
// iterations and how long, and what its agents used.
func (p *progress) closing(e executor.Event, indent string) (string, bool) {
	s, c := p.style, executor.LoopCompleteOf(e)
	if indent != "" {
		return "", false // a sub-loop's end is told by sub_loop_complete
	}
	line := fmt.Sprintf("Loop completed: %s (%d iterations, %s)", s.bold(printable(c.FinalState)), c.Iterations, p.elapsed(e.Time))
	if c.TerminatedBy != "terminal" || c.FailureTerminal {
		line = s.warn(fmt.Sprintf("Loop ended: %s in %s after %d iterations, %s", c.TerminatedBy, c.FinalState, c.Iterations, p.elapsed(e.Time)))
		if why := executor.EndWhyOf(c.Error, c.FinalState, p.lastVerdict); why != "" {
			line += "\n  " + s.warn(printable(why))
		}
	}
	return "\n" + line, true
}

// elapsed is the run's running time at t, as people read it: what ran
// before this resume, and since.
func (p *progress) elapsed(t time.Time) string {
	if p.start.IsZero() || t.Before(p.start) {
		return llDuration(p.before)
	}
	return llDuration(p.before + t.Sub(p.start))
}

// llDuration is d as ll-loop's progress lines print it: "0.2s", "12s",
// "3m 5s", "1h 2m". Only the progress of run and watch uses it (their
// output copies ll-loop's); everything else prints a duration with span.
func llDuration(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%.0fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
}

// fields writes event data as k=v, sorted, without the bookkeeping keys.
func fields(d map[string]any) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(d)) {
		if k == "depth" || k == "loop_name" {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s=%v", k, d[k]))
	}
	return strings.Join(parts, " ")
}

func clip(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}

// style colours text on a terminal (not with NO_COLOR), and leaves it
// plain elsewhere.
type style struct{ color bool }

// terminalStyle is the style of w: colour when it is a terminal and
// NO_COLOR is unset.
func terminalStyle(w io.Writer) style {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" {
		return style{}
	}
	return style{color: isTerminal(f)}
}

// isTerminal reports whether f is a terminal (not only a character
// device: /dev/null is one too).
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

func (s style) paint(code, t string) string {
	if !s.color || t == "" {
		return t
	}
	return "\x1b[" + code + "m" + t + "\x1b[0m"
}

// mark is a terminal's mark, or its plain words elsewhere.
func (s style) mark(tty, plain string) string {
	if s.color {
		return s.dim(tty)
	}
	return plain
}

func (s style) bold(t string) string { return s.paint("1", t) }
func (s style) dim(t string) string  { return s.paint("2", t) }
func (s style) ok(t string) string   { return s.paint("32", t) }
func (s style) warn(t string) string { return s.paint("38;5;208", t) }

// exitHook shows the run's exit hook (spec.onExit): when it starts, and
// how it ended.
func (p *progress) exitHook(h *v1alpha1.ExitHookStatus) {
	s := p.style
	switch h.Phase {
	case v1alpha1.ExitHookRunning:
		action := ""
		if p.header.spec != nil && p.header.spec.OnExit != nil {
			first, _, _ := strings.Cut(strings.TrimSpace(p.header.spec.OnExit.Action), "\n")
			action = clip(first, 100)
		}
		p.println(fmt.Sprintf("on exit %s %s", s.dim("->"), s.dim(printable(action))))
	case v1alpha1.ExitHookSucceeded:
		p.println("  " + s.ok(s.mark("✓ ", "")+"exit hook done") + p.hookTime(h))
	default:
		code := int32(-1)
		if h.ExitCode != nil {
			code = *h.ExitCode
		}
		p.println("  " + s.warn(fmt.Sprintf("%sexit hook failed (exit %d): %s", s.mark("✗ ", ""), code, printable(h.Message))) + p.hookTime(h))
	}
}

func (p *progress) hookTime(h *v1alpha1.ExitHookStatus) string {
	if h.StartedAt == nil || h.FinishedAt == nil {
		return ""
	}
	return " " + p.style.dim("("+llDuration(h.FinishedAt.Sub(h.StartedAt.Time))+")")
}
