package loopfile

import (
	"strings"
	"testing"
	"time"

	"github.com/looprun/looprun/internal/executor"
)

// A state's retry_policy is read into its retryPolicy; a bad value is an
// error naming its path and line.
func TestRetryPolicy(t *testing.T) {
	doc := func(policy string) string {
		return "name: x\ninitial: a\nstates:\n  a:\n    action: ./deploy\n    retry_policy:\n      " + policy + "\n    on_retry_exhausted: done\n    next: done\n  done:\n    terminal: true\n"
	}
	f, err := Parse([]byte(doc("{limit: 3, backoff: 10, factor: 3, max_delay: 1m, exit_codes: [75, 124]}")), "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := f.Loop.Spec.States["a"].RetryPolicy
	if p == nil || p.Limit != 3 || p.Backoff.Duration != 10*time.Second || *p.Factor != 3 || p.MaxDelay.Duration != time.Minute ||
		len(p.ExitCodes) != 2 || p.ExitCodes[0] != 75 || p.ExitCodes[1] != 124 {
		t.Errorf("retryPolicy %+v", p)
	}
	for _, w := range f.Warnings {
		if strings.Contains(w, "retry_policy") {
			t.Errorf("warning %q", w)
		}
	}
	if errs := executor.Validate(&f.Loop.Spec); len(errs) > 0 {
		t.Errorf("does not validate: %v", errs.ToAggregate())
	}
	if f, err = Parse([]byte(doc("{limit: 1}")), "", Options{}); err != nil || f.Loop.Spec.States["a"].RetryPolicy.Backoff != nil {
		t.Errorf("limit alone: %v", err)
	}

	tests := []struct{ policy, want string }{
		{"3", "line 6: states.a.retry_policy: must be a mapping {limit, backoff, factor, max_delay, exit_codes}"},
		{"{backoff: 5}", "line 6: states.a.retry_policy: needs limit"},
		{"{limit: 0}", "states.a.retry_policy.limit: must be between 1 and 100 (how many times the action is run again), not 0"},
		{"{limit: 101}", "states.a.retry_policy.limit: must be between 1 and 100"},
		{"{limit: two}", `states.a.retry_policy.limit: must be a whole number, not "two"`},
		{"{limit: 2, factor: 1.5}", "states.a.retry_policy.factor: must be a whole number"},
		{"{limit: 2, factor: 11}", "states.a.retry_policy.factor: must be between 1 and 10, not 11"},
		{"{limit: 2, backoff: soon}", "states.a.retry_policy.backoff: must be seconds or a duration such as 90s"},
		{"{limit: 2, max_delay: -1}", "states.a.retry_policy.max_delay: must not be negative"},
		{"{limit: 2, exit_codes: 75}", "states.a.retry_policy.exit_codes: must be a list of exit codes"},
		{"{limit: 2, exit_codes: [75, x]}", `states.a.retry_policy.exit_codes[1]: must be a whole number, not "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			_, err := Parse([]byte(doc(tt.policy)), "", Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want %q", err, tt.want)
			}
		})
	}
	f, err = Parse([]byte(doc("{limit: 2, wobble: 1}")), "", Options{})
	if err != nil || !hasWarning(f, "line 7: states.a.retry_policy.wobble: unknown key; ignored") {
		t.Errorf("err %v, warnings %q", err, f.Warnings)
	}
}
