package executor

import (
	"crypto/md5" //nolint:gosec // a key for counters, as little-loops derives it; not security
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strconv"
	"strings"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/executor/interpolate"
)

// isStall reports whether t is one of the stall evaluators.
func isStall(t v1alpha1.EvaluatorType) bool {
	switch t {
	case v1alpha1.EvalDiffStall, v1alpha1.EvalScoreStall, v1alpha1.EvalOpenQuestionStall, v1alpha1.EvalActionStall:
		return true
	}
	return false
}

// probe is the shell command a state's evaluator needs run where its
// action runs (a learning gate's without one: reading its marks); "" for
// none.
func probe(st *v1alpha1.State, vars *interpolate.Vars) string {
	e := st.Evaluate
	if e == nil {
		if st.Learning != nil {
			return learningProbe(vars)
		}
		return ""
	}
	switch e.Type {
	case v1alpha1.EvalDiffStall:
		cmd := "git diff --stat"
		if len(e.Scope) > 0 {
			quoted := make([]string, len(e.Scope))
			for i, p := range e.Scope {
				quoted[i] = interpolate.ShellQuote(p)
			}
			cmd += " -- " + strings.Join(quoted, " ")
		}
		return cmd
	case v1alpha1.EvalScoreStall, v1alpha1.EvalOpenQuestionStall:
		path, err := interpolate.Expand(historyFile(e), vars)
		if err != nil {
			return ""
		}
		return "cat -- " + interpolate.ShellQuote(path)
	}
	return ""
}

func historyFile(e *v1alpha1.Evaluate) string {
	switch {
	case e.HistoryFile != "":
		return e.HistoryFile
	case e.Type == v1alpha1.EvalOpenQuestionStall:
		return "${context.run_dir}/.open_questions_history"
	}
	return "${context.run_dir}/.score_history"
}

// stallKey names a stall counter as little-loops names its files: by
// evaluator and what it watches, so states watching the same share it.
func stallKey(kind string, parts []string) string {
	s := append([]string(nil), parts...)
	sort.Strings(s)
	joined := strings.Join(s, "|")
	if len(parts) == 0 {
		joined = "_root_"
	}
	sum := md5.Sum([]byte(joined)) //nolint:gosec // see import
	return kind + ":" + hex.EncodeToString(sum[:])[:12]
}

// evaluateStall judges a stall evaluator. It ignores the action's exit
// code, as little-loops does.
func (t *turn) evaluateStall(cfg *v1alpha1.Evaluate, res *ActionResult) evaluate.Result {
	maxStall := int32(1)
	if cfg.MaxStall != nil {
		maxStall = *cfg.MaxStall
	}
	switch cfg.Type {
	case v1alpha1.EvalActionStall:
		return t.actionStall(cfg)
	case v1alpha1.EvalDiffStall:
		p := probeOf(res)
		if p == nil {
			return evaluate.Result{Verdict: v1alpha1.VerdictError, Details: map[string]any{"error": "diff_stall: the runner did not run git diff"}}
		}
		if p.ExitCode != 0 {
			return evaluate.Result{Verdict: v1alpha1.VerdictError, Details: map[string]any{"error": "git diff failed: " + Tail(p.Stderr, 200)}}
		}
		count, changed := t.counter(stallKey("diff_stall", cfg.Scope), p.SHA256)
		return stallVerdict(count, maxStall, map[string]any{"stall_count": count, "max_stall": maxStall, "diff_changed": changed})
	}
	p := probeOf(res)
	raw := ""
	if p != nil && p.ExitCode == 0 {
		raw = p.Output // a missing file is no history yet
	}
	lowerIsBetter := cfg.Type == v1alpha1.EvalOpenQuestionStall
	epsilon := 0.5 // for open_question_stall too: little-loops gives both its evaluate default
	if cfg.Epsilon != nil {
		epsilon = *cfg.Epsilon
	}
	return plateau(raw, maxStall, epsilon, lowerIsBetter)
}

func probeOf(res *ActionResult) *ProbeResult {
	if res == nil {
		return nil
	}
	return res.Probe
}

// counter moves the stall counter key on: reset when seen differs from
// what it saw last, one more when not. It returns the count and whether
// seen changed.
func (t *turn) counter(key, seen string) (int32, bool) {
	run := t.run
	if run.Stalls == nil {
		run.Stalls = map[string]v1alpha1.StallCounter{}
	}
	c, had := run.Stalls[key]
	if !had || c.Hash != seen {
		run.Stalls[key] = v1alpha1.StallCounter{Hash: seen}
		return 0, true
	}
	c.Count++
	run.Stalls[key] = c
	return c.Count, false
}

func stallVerdict(count, limit int32, details map[string]any) evaluate.Result {
	v := v1alpha1.VerdictSuccess
	if count >= limit {
		v = v1alpha1.VerdictFailure
	}
	return evaluate.Result{Verdict: v, Details: details}
}

// actionStall hashes the tracked values: the same maxRepeat times in a
// row is failure.
func (t *turn) actionStall(cfg *v1alpha1.Evaluate) evaluate.Result {
	track := cfg.Track
	if len(track) == 0 {
		track = []string{"action"}
	}
	maxRepeat := int32(2)
	if cfg.MaxRepeat != nil {
		maxRepeat = *cfg.MaxRepeat
	}
	vars := t.vars()
	parts := make([]string, len(track))
	for i, key := range track {
		parts[i] = key + "=" + t.trackedValue(key, vars)
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, "|")))
	count, changed := t.counter(stallKey("action_stall", track), hex.EncodeToString(sum[:]))
	return stallVerdict(count, maxRepeat, map[string]any{"stall_count": count, "max_repeat": maxRepeat, "hash_changed": changed, "tracked_keys": track})
}

// trackedValue resolves a tracked key: "action" is the state's action as
// expanded; a bare name is tried as context, captured, prev and result.
func (t *turn) trackedValue(key string, vars *interpolate.Vars) string {
	if key == "action" {
		if st, ok := t.m.spec.States[t.run.CurrentState]; ok {
			if s, err := interpolate.Expand(st.Action, vars); err == nil {
				return s
			}
		}
	}
	names := []string{key}
	if !strings.Contains(key, ".") {
		names = []string{"context." + key, "captured." + key, "prev." + key, "result." + key}
	}
	for _, n := range names {
		if s, err := interpolate.Expand("${"+n+"}", vars); err == nil {
			return s
		}
	}
	return ""
}

// plateau judges a history of numbers, one per line: the best so far
// must move by more than epsilon (up, or down when lower is better) to
// count as progress; maxStall rounds without are failure. Fewer than two
// numbers is success (too early to tell).
func plateau(raw string, maxStall int32, epsilon float64, lowerIsBetter bool) evaluate.Result {
	var xs []float64
	for _, line := range strings.Split(raw, "\n") {
		if f, err := strconv.ParseFloat(strings.TrimSpace(line), 64); err == nil {
			xs = append(xs, f)
		}
	}
	details := map[string]any{"max_stall": maxStall, "epsilon": epsilon, "rounds": len(xs)}
	if len(xs) < 2 {
		details["stall_count"] = int32(0)
		if len(xs) == 1 {
			details["best"] = xs[0]
		} else {
			details["best"] = nil
		}
		return evaluate.Result{Verdict: v1alpha1.VerdictSuccess, Details: details}
	}
	better := func(a, b float64) bool { return a > b } // a better than b
	if lowerIsBetter {
		better = func(a, b float64) bool { return a < b }
		epsilon = -epsilon
	}
	best, stall := xs[0], int32(0)
	for _, x := range xs[1:] {
		if better(x, best+epsilon) {
			best, stall = x, 0
			continue
		}
		if better(x, best) {
			best = x
		}
		stall++
	}
	details["stall_count"], details["best"] = stall, best
	return stallVerdict(stall, maxStall, details)
}
