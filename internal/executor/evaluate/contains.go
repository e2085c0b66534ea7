package evaluate

import (
	"regexp"
	"strings"

	"github.com/looprun/looprun/api/v1alpha1"
)

// Match reports whether pattern occurs in text: as a regular expression, or as
// plain text when the pattern does not compile.
func Match(pattern, text string) bool {
	if re, err := regexp.Compile(pattern); err == nil {
		return re.MatchString(text)
	}
	return strings.Contains(text, pattern)
}

func outputContains(cfg *v1alpha1.Evaluate, in Input) Result {
	matched := Match(cfg.Pattern, in.Output) || (in.Streamed != nil && in.Streamed.PatternMatched)
	ok := matched != cfg.Negate
	details := map[string]any{"matched": matched, "pattern": cfg.Pattern, "negate": cfg.Negate}
	if !ok && !cfg.Negate {
		for _, p := range cfg.ErrorPatterns {
			if p != "" && strings.Contains(in.Output, p) {
				details["error_pattern"] = p
				return Result{Verdict: v1alpha1.VerdictError, Details: details}
			}
		}
	}
	return Result{Verdict: boolVerdict(ok), Details: details}
}
