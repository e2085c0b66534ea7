package executor

import (
	"cmp"
	"fmt"
	"path"
	"strconv"
	"strings"
	"unicode"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/action"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/executor/interpolate"
	"github.com/looprun/looprun/internal/pycompat"
)

// The events of a learning state, as little-loops writes them.
const (
	EventLearningTargetStale    = "learning_target_stale"
	EventLearningExploreInvoked = "learning_explore_invoked"
	EventLearningTargetProven   = "learning_target_proven"
	EventLearningTargetRefuted  = "learning_target_refuted"
	EventLearningBlocked        = "learning_blocked"
	EventLearningComplete       = "learning_complete"
)

// VerdictBlocked is a learning state's verdict when a target is refuted or
// stays unproven, if the state routes it (else failure).
const VerdictBlocked = "blocked"

// learningMark starts the lines the gate prints about its progress, for
// people to read; the verdict reads the marks file (learningMarks) instead.
// Its explore line starts as action.LearningCallMark says, by which the
// runner tells the agent calls apart.
const learningMark = "looprun-learning:"

// learningMarks is the file a learning gate writes its marks into, one a
// line: in the run's run_dir (which the runner makes before the action),
// else in .ll. The gate writes it through a descriptor the agent it runs
// does not get, and the state's probe (learningProbe) reads it back once
// the gate ended: whatever the agent or a target's record prints goes to
// the output, which decides nothing, so no text can forge the verdict.
func learningMarks(vars *interpolate.Vars) string {
	dir, _ := vars.Context["run_dir"].(string)
	if dir == "" {
		dir = ".ll"
	}
	return path.Join(dir, ".looprun-learning")
}

// learningProbe reads a learning gate's marks and removes them.
func learningProbe(vars *interpolate.Vars) string {
	f := interpolate.ShellQuote(learningMarks(vars))
	return "cat -- " + f + " && rm -f -- " + f
}

// learningGate is what a learning state's gate does: the targets it
// proves, in order (learning.targetsCSV expanded and split at commas, else
// learning.targets), and how many times it explores each at most.
func learningGate(st *v1alpha1.State, vars *interpolate.Vars) (*LearningGate, error) {
	l := st.Learning
	targets := l.Targets
	if l.TargetsCSV != "" {
		csv, err := interpolate.Expand(l.TargetsCSV, vars)
		if err != nil {
			return nil, fmt.Errorf("learning.targetsCSV: %w", err)
		}
		targets = nil
		for _, t := range strings.Split(csv, ",") {
			if t = strings.TrimSpace(t); t != "" {
				targets = append(targets, t)
			}
		}
	}
	retries := int64(v1alpha1.DefaultLearningMaxRetries)
	if l.MaxRetries != nil {
		retries = int64(*l.MaxRetries)
	}
	if l.MaxRetriesExpr != "" {
		x, err := interpolate.Expand(l.MaxRetriesExpr, vars)
		if err != nil {
			return nil, fmt.Errorf("learning.maxRetriesExpr: %w", err)
		}
		if retries, err = strconv.ParseInt(strings.TrimSpace(x), 10, 32); err != nil {
			return nil, fmt.Errorf("learning.maxRetriesExpr: %q is not a whole number", x)
		}
	}
	return &LearningGate{Targets: targets, MaxRetries: int(retries)}, nil
}

// learningScript is the shell action of a learning state: the gate runs
// where actions run, since the registry is a directory of the workspace.
// For each target it reads .ll/learning-tests/SLUG.md (the status in its
// front matter; proven when it has none), explores a missing or stale one
// with the agent up to maxRetries times, and marks each thing it did in
// the marks file (learningMarks), also printed (an explore call's mark
// before it, and its exit code and milliseconds after); the last mark says
// how the gate ended.
func learningScript(spec *v1alpha1.LoopSpec, st *v1alpha1.State, vars *interpolate.Vars) (string, error) {
	gate, err := learningGate(st, vars)
	if err != nil {
		return "", err
	}
	targets, retries := gate.Targets, gate.MaxRetries
	agent := make([]string, 0, len(spec.GetAgentCommand()))
	for _, w := range spec.GetAgentCommand() {
		agent = append(agent, interpolate.ShellQuote(w))
	}
	quoted := make([]string, 0, 2*len(targets))
	for _, t := range targets {
		if strings.ContainsAny(t, "\r\n") {
			return "", fmt.Errorf("learning target %q has a line break", t)
		}
		quoted = append(quoted, interpolate.ShellQuote(LearningSlug(t)), interpolate.ShellQuote(t))
	}
	marks := learningMarks(vars)
	var b strings.Builder
	fmt.Fprintf(&b, `mkdir -p -- %s && exec 3>%s || exit 1
mark() { printf '%%s\n' "$*" >&3; printf '%s %%s\n' "$*"; }
ms() { d=$(date +%%s%%3N 2>/dev/null); case $d in ''|*[!0-9]*) echo 0 ;; *) echo "$d" ;; esac; }
record() {
  f=.ll/learning-tests/$1.md
  if [ ! -f "$f" ] || [ "$(head -n 1 "$f")" != "---" ] || [ "$(sed -n '2,$p' "$f" | grep -c '^---$')" = 0 ]; then echo missing; return; fi
  s=$(sed -n '2,/^---$/p' "$f" | sed -n 's/^status:[[:space:]]*//p' | head -n 1 | sed -e 's/[[:space:]]*$//' -e "s/^[\"']//" -e "s/[\"']$//")
  echo "${s:-proven}"
}
max=%d
set -- %s
while [ "$#" -gt 0 ]; do
  slug=$1 t=$2
  shift 2
  n=0
  while :; do
    s=$(record "$slug")
    case $s in missing|stale) ;; *) break ;; esac
    if [ "$n" -ge "$max" ]; then mark blocked retries_exhausted "$t"; exit 0; fi
    mark stale "$s" "$t"
    n=$((n + 1))
    mark explore "$n" "$t"
    t0=$(ms)
    %s "/ll:explore-api $t" </dev/null 3>&-
    rc=$?
    mark explored "$rc" "$(($(ms) - t0))" "$t"
  done
  if [ "$s" = refuted ]; then mark refuted "$t"; mark blocked refuted "$t"; exit 0; fi
  mark proven "$t"
done
mark complete
`, interpolate.ShellQuote(path.Dir(marks)), interpolate.ShellQuote(marks), learningMark, retries, strings.Join(quoted, " "), strings.Join(agent, " "))
	return b.String(), nil
}

// learningVerdict reads the marks a learning gate wrote (the probe's
// output, see learningMarks), records them as little-loops' learning
// events, and gives the gate's verdict. The action's output is not read: a
// gate that did not end well, or left no marks, has not decided. The gate
// ends right after its one complete or blocked mark, so such a mark
// before the last line was not the gate's: nothing is decided then either.
func (t *turn) learningVerdict(st *v1alpha1.State, res *ActionResult) evaluate.Result {
	state := t.run.CurrentState
	exit := 0
	if res != nil {
		exit = res.ExitCode
	}
	undecided := func(why string) evaluate.Result {
		return evaluate.Result{Verdict: v1alpha1.VerdictError, Details: map[string]any{"exit_code": exit, "error": why}}
	}
	p := probeOf(res)
	if exit != 0 || p == nil || p.ExitCode != 0 {
		return undecided("the learning gate ended before it decided")
	}
	lines := strings.Split(strings.TrimSuffix(p.Output, "\n"), "\n")
	for _, line := range lines[:len(lines)-1] {
		if what, _, _ := strings.Cut(line, " "); what == "complete" || what == "blocked" {
			return undecided("the learning gate's marks have an end before their last line: something other than the gate wrote them")
		}
	}
	var targets []string
	calls := learningCalls{outputs: exploreOutputs(res.Output)}
	for _, line := range lines {
		if strings.HasPrefix(line, "explored ") {
			calls.total++
		}
	}
	for _, line := range lines {
		what, rest, _ := strings.Cut(line, " ")
		switch what {
		case "stale":
			cause, target, _ := strings.Cut(rest, " ")
			t.emit(EventLearningTargetStale, LearningTargetStaleEvent{State: state, Target: target, Cause: cause}.Data())
		case "explore":
			n, target, _ := strings.Cut(rest, " ")
			attempt, _ := strconv.Atoi(n)
			t.emit(EventLearningExploreInvoked, LearningExploreInvokedEvent{State: state, Target: target, Attempt: attempt}.Data())
		case "explored":
			t.exploreCall(st, res, &calls, rest)
		case "proven":
			targets = append(targets, rest)
			t.emit(EventLearningTargetProven, LearningTargetEvent{State: state, Target: rest}.Data())
		case "refuted":
			t.emit(EventLearningTargetRefuted, LearningTargetEvent{State: state, Target: rest}.Data())
		case "blocked":
			reason, target, _ := strings.Cut(rest, " ")
			t.emit(EventLearningBlocked, LearningBlockedEvent{State: state, Target: target, Reason: reason}.Data())
			verdict := v1alpha1.VerdictFailure
			if _, ok := st.Route[VerdictBlocked]; ok {
				verdict = VerdictBlocked
			}
			return evaluate.Result{Verdict: verdict, Details: map[string]any{"target": target, "reason": reason}}
		case "complete":
			if targets == nil {
				targets = []string{}
			}
			t.emit(EventLearningComplete, LearningCompleteEvent{State: state, Targets: targets}.Data())
			return evaluate.Result{Verdict: v1alpha1.VerdictSuccess, Details: map[string]any{"targets": targets}}
		}
	}
	return undecided("the learning gate ended before it decided")
}

// learningCalls is what a learning gate's verdict knows of its agent
// calls: how many there were, and the output of each (exploreOutputs).
type learningCalls struct {
	outputs []string
	total   int
	n       int // the calls recorded so far
}

// exploreCall records one of a learning gate's agent calls, from its
// "explored EXIT MS TARGET" mark, as little-loops records each: an
// action_start of the call's prompt, and its action_complete with the exit
// code, time, output and what it used, priced into the run's usage. The
// runner tells each call's usage (CallUsages); when it does not (a
// cluster's step), the gate's whole usage goes with its last call.
func (t *turn) exploreCall(st *v1alpha1.State, res *ActionResult, calls *learningCalls, mark string) {
	i := calls.n
	calls.n++
	rc, rest, _ := strings.Cut(mark, " ")
	ms, target, _ := strings.Cut(rest, " ")
	exit, _ := strconv.Atoi(rc)
	took, _ := strconv.ParseInt(ms, 10, 64)
	t.emit(EventActionStart, ActionStartEvent{Action: "/ll:explore-api " + target, IsPrompt: true}.Data())
	ev := ActionCompleteEvent{ExitCode: exit, DurationMs: max(took, 0), IsPrompt: true, Effort: cmp.Or(st.Effort, agentDefault(t.m.spec).Effort)}
	if i < len(calls.outputs) {
		ev.OutputPreview = preview(calls.outputs[i], min(previewBytes, t.m.opts.MaxCaptureBytes))
	}
	switch {
	case res.CallUsages != nil:
		if i < len(res.CallUsages) && res.CallUsages[i] != nil {
			t.reported(&ev, *res.CallUsages[i])
		}
	case calls.n < calls.total:
		// Not the last call: the gate's usage goes with that one.
	default:
		t.usedBy(&ev, res)
	}
	t.emit(EventActionComplete, ev.Data())
}

// exploreOutputs splits a learning gate's output into what each of its
// agent calls printed: the lines after a call's explore mark, up to the
// gate's next mark.
func exploreOutputs(output string) []string {
	var outs []string
	in := false
	var b strings.Builder
	flush := func() {
		if in {
			outs = append(outs, b.String())
		}
		b.Reset()
	}
	for _, line := range strings.SplitAfter(output, "\n") {
		if strings.HasPrefix(line, learningMark+" ") {
			flush()
			in = strings.HasPrefix(line, action.LearningCallMark)
			continue
		}
		if in {
			b.WriteString(line)
		}
	}
	flush()
	return outs
}

// LearningSlug is the file name (without .md) of a learning target's
// record, made as little-loops makes it: characters other than Unicode
// letters, digits, '_', white space and '-' dropped, each run of white
// space and '-' one '-', '-' trimmed from both ends, then lower case.
func LearningSlug(target string) string {
	var b strings.Builder
	dash := false
	for _, r := range target {
		switch {
		case r == '-' || pycompat.IsSpace(r):
			dash = true
			continue
		case r != '_' && !unicode.IsLetter(r) && !unicode.IsNumber(r):
			continue
		}
		if dash && b.Len() > 0 {
			b.WriteByte('-')
		}
		dash = false
		b.WriteRune(r)
	}
	return strings.ToLower(b.String())
}

// PlayLearningGate gives the marks a learning gate would write, playing it
// without running it (simulate): status gives a target's record status as
// the gate reads it (missing when there is none), and explore stands for
// one exploration of a missing or stale target, which changes no record.
// The marks are what the state's probe prints, which learningVerdict reads.
func PlayLearningGate(g *LearningGate, status func(slug string) string, explore func(target string, attempt int)) string {
	var b strings.Builder
	mark := func(words ...string) { b.WriteString(strings.Join(words, " ") + "\n") }
	for _, t := range g.Targets {
		slug := LearningSlug(t)
		s := status(slug)
		for n := 0; s == "missing" || s == "stale"; s = status(slug) {
			if n >= g.MaxRetries {
				mark("blocked", "retries_exhausted", t)
				return b.String()
			}
			mark("stale", s, t)
			n++
			mark("explore", strconv.Itoa(n), t)
			explore(t, n)
		}
		if s == "refuted" {
			mark("refuted", t)
			mark("blocked", "refuted", t)
			return b.String()
		}
		mark("proven", t)
	}
	mark("complete")
	return b.String()
}
