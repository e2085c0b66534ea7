package evaluate

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dlclark/regexp2"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/pycompat"
)

// MatchBudget bounds the searches of a pattern for one verdict, however many
// they are (one per line of a streamed output): a pattern that backtracks
// without end (Python's re would too) gives an error verdict, not a hang.
const MatchBudget = 5 * time.Second

// Pattern is output_contains' pattern as little-loops reads it: a regular
// expression in Python's re syntax (lookarounds, backreferences, named
// groups), or plain text when it does not compile.
type Pattern struct {
	re      *regexp2.Regexp
	literal string
}

// CompilePattern compiles a pattern once for many searches.
func CompilePattern(pattern string) Pattern {
	expr, err := pycompat.TranslateRegex(pattern)
	if err != nil {
		return Pattern{literal: pattern}
	}
	re, err := regexp2.Compile(expr, regexp2.None)
	if err != nil {
		return Pattern{literal: pattern}
	}
	re.MatchTimeout = MatchBudget
	return Pattern{re: re}
}

// Match reports whether the pattern occurs in text; an error when the
// search took longer than MatchBudget.
func (p Pattern) Match(text string) (bool, error) {
	return p.MatchWithin(text, MatchBudget)
}

// MatchWithin is Match with the search given up after limit. It sets the
// compiled pattern's limit: calls on one Pattern must not run at once.
func (p Pattern) MatchWithin(text string, limit time.Duration) (bool, error) {
	if p.re == nil {
		return strings.Contains(text, p.literal), nil
	}
	p.re.MatchTimeout = max(limit, time.Millisecond)
	ok, err := p.re.MatchString(text)
	if err != nil {
		return false, fmt.Errorf("pattern %q: %w", p.re.String(), err)
	}
	return ok, nil
}

// Match reports whether pattern occurs in text: as a regular expression, or as
// plain text when the pattern does not compile.
func Match(pattern, text string) (bool, error) {
	return CompilePattern(pattern).Match(text)
}

// ErrPatternTimeout says a search of output_contains' pattern gave up.
var ErrPatternTimeout = errors.New("the pattern search took too long")

func outputContains(cfg *v1alpha1.Evaluate, in Input) Result {
	matched, err := Match(cfg.Pattern, in.Output)
	if err == nil && in.Streamed != nil && in.Streamed.PatternError != "" {
		err = errors.New(in.Streamed.PatternError)
	}
	if err != nil {
		return errorResult("%v: %v", ErrPatternTimeout, err)
	}
	matched = matched || (in.Streamed != nil && in.Streamed.PatternMatched)
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
