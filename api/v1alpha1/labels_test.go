package v1alpha1

import (
	"strings"
	"testing"
	"testing/quick"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestRequests(t *testing.T) {
	if got := StopRequest("42"); got != "stop@42" {
		t.Errorf("StopRequest = %q", got)
	}
	if got := RewindRequest(3, "n"); got != "rewind:3@n" {
		t.Errorf("RewindRequest = %q", got)
	}
	tests := []struct {
		in        string
		verb      string
		iteration int32 // -1: none
		err       string
	}{
		{"stop", RequestStop, -1, ""},
		{StopRequest("1700000000"), RequestStop, -1, ""},
		{" rewind:7 @x", RequestRewind, 7, ""},
		{RewindRequest(0, "n"), RequestRewind, 0, ""},
		{"rewind", RequestRewind, -1, ""},
		{"rewind:-1", RequestRewind, -1, `"-1" is not an iteration`},
		{"rewind:x@1", RequestRewind, -1, `"x" is not an iteration`},
		{"pause", "pause", -1, "unknown request"},
		{"approve@n", RequestApprove, -1, ""},
		{"reject \n@n", RequestReject, -1, ""},
		{" approve@n", "", -1, "must start the value"},
		{"\u00a0reject@n", "", -1, "must start the value"},
		{"\u2003approve", "", -1, "must start the value"},
		{"\tapprove:x@n", "", -1, "must start the value"},
		{"Approve@n", "Approve", -1, "unknown request"},
	}
	for _, tt := range tests {
		verb, iteration, err := ParseRequest(tt.in)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%q: error %v, want %q", tt.in, err, tt.err)
		case tt.err == "" && err != nil:
			t.Errorf("%q: %v", tt.in, err)
		case verb != tt.verb:
			t.Errorf("%q: verb %q", tt.in, verb)
		case tt.err == "" && tt.iteration < 0 && iteration != nil:
			t.Errorf("%q: iteration %d, want none", tt.in, *iteration)
		case tt.iteration >= 0 && (iteration == nil || *iteration != tt.iteration):
			t.Errorf("%q: iteration %v, want %d", tt.in, iteration, tt.iteration)
		}
	}
}

func TestLabelValue(t *testing.T) {
	for _, s := range []string{"fix", "check_lint", "a.b", strings.Repeat("x", 63), strings.Repeat("x", 200), "fix lint!", "-edge-", "ünïcode"} {
		v := LabelValue(s)
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("LabelValue(%q) = %q: %v", s, v, errs)
		}
		if len(validation.IsValidLabelValue(s)) == 0 && v != s {
			t.Errorf("a valid value changed: %q -> %q", s, v)
		}
	}
	if LabelValue("fix lint") == LabelValue("fix-lint") {
		t.Error("a sanitized value must not collide with the valid one")
	}
}

// The chart's approval policy checks who makes a request that starts with
// approve or reject (and only those): no other value may be read as an
// answer, or a user without the verb approve could answer, credited to
// whoever approved last.
func TestOnlyWhatThePolicyChecksIsAnAnswer(t *testing.T) {
	policyChecks := func(s string) bool {
		return strings.HasPrefix(s, RequestApprove) || strings.HasPrefix(s, RequestReject)
	}
	var tries []string
	for _, pre := range []string{"", " ", "\t", "\n", "\r", "\u00a0", "\u2003", "\u200b", "\ufeff", "\u3000", "x", "@"} {
		for _, verb := range []string{"approve", "reject", "stop", "rewind:1"} {
			for _, post := range []string{"", "@n", " @n", ":x@n", "\u00a0@n", "\n"} {
				tries = append(tries, pre+verb+post)
			}
		}
	}
	f := func(s string) bool {
		verb, _, err := ParseRequest(s)
		return err != nil || (verb != RequestApprove && verb != RequestReject) || policyChecks(s)
	}
	for _, s := range tries {
		if !f(s) {
			t.Errorf("%q is read as an answer the policy does not check", s)
		}
	}
	if err := quick.Check(func(pre, post string) bool { return f(pre+"approve"+post) && f(pre+"reject"+post) }, nil); err != nil {
		t.Error(err)
	}
}
