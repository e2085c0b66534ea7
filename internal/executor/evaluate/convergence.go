package evaluate

import (
	"errors"
	"math"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/looprun/looprun/api/v1alpha1"
)

func convergence(cfg *v1alpha1.Evaluate, in Input) Result {
	current, err := parseNumber(in.Output)
	if err != nil {
		return errorResult("cannot read the output as a number: %v", err)
	}
	// As little-loops: a target text that does not read as a number is an
	// error verdict, a tolerance one is 0; a list or a mapping ends its
	// run (Broken).
	target, err := numberValue(cfg.Target, in)
	if err != nil {
		r := errorResult("cannot resolve target: %v", err)
		r.Broken = errors.Is(err, errNotText)
		return r
	}
	tolerance := 0.0
	if cfg.Tolerance != nil {
		t, err := numberValue(cfg.Tolerance, in)
		switch {
		case errors.Is(err, errNotText):
			r := errorResult("cannot resolve tolerance: %v", err)
			r.Broken = true
			return r
		case err == nil:
			tolerance = t
		}
	}
	var previous *float64
	if cfg.Previous != "" {
		if s, err := in.expand(cfg.Previous); err == nil {
			if p, err := parseNumber(s); err == nil {
				previous = &p
			}
		}
	}
	direction := cfg.Direction
	if direction == "" {
		direction = "minimize"
	}
	details := map[string]any{"current": detailNumber(current), "target": detailNumber(target), "direction": direction, "previous": nil, "delta": nil}
	if previous != nil {
		details["previous"] = detailNumber(*previous)
	}
	if math.Abs(current-target) <= tolerance {
		details["delta"] = 0.0
		return Result{Verdict: v1alpha1.VerdictTarget, Details: details}
	}
	if previous == nil {
		return Result{Verdict: v1alpha1.VerdictProgress, Details: details}
	}
	delta := current - *previous
	details["delta"] = detailNumber(delta)
	if (direction == "maximize" && delta > 0) || (direction != "maximize" && delta < 0) {
		return Result{Verdict: v1alpha1.VerdictProgress, Details: details}
	}
	return Result{Verdict: v1alpha1.VerdictStall, Details: details}
}

func classify(cfg *v1alpha1.Evaluate, in Input) Result {
	var lines []string
	for _, l := range strings.Split(in.Output, "\n") {
		if t := strings.TrimSpace(l); t != "" {
			lines = append(lines, t)
		}
	}
	idx, label := len(lines)-1, "last"
	if cfg.Line != nil {
		switch {
		case cfg.Line.Type == intstr.Int:
			idx, label = cfg.Line.IntValue(), cfg.Line.String()
			if idx < 0 {
				idx += len(lines)
			}
		case cfg.Line.StrVal == "first":
			idx, label = 0, "first"
		}
	}
	verdict := ""
	if idx >= 0 && idx < len(lines) {
		verdict = lines[idx]
	}
	return Result{Verdict: v1alpha1.CanonicalVerdict(verdict), Details: map[string]any{"line": label, "lines": len(lines)}, Word: literalWord(verdict)}
}

// literalWord is verdict when it is the word success or failure itself
// (Result.Word), else "".
func literalWord(verdict string) string {
	if verdict == v1alpha1.VerdictSuccess || verdict == v1alpha1.VerdictFailure {
		return verdict
	}
	return ""
}
