package executor

import "testing"

func TestUniversalNewlines(t *testing.T) {
	for in, want := range map[string]string{
		"one\r\ntwo\rthree\r\n": "one\ntwo\nthree\n",
		"\r\r\n":                "\n\n",
		"plain\n":               "plain\n",
		"":                      "",
	} {
		if got := universalNewlines(in); got != want {
			t.Errorf("universalNewlines(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFailureType(t *testing.T) {
	for _, c := range []struct {
		text       string
		code       int
		resultSeen bool
		want       string
	}{
		{"", 143, true, "infra_retry"},
		{"429 Too Many Requests", 1, false, "transient"},
		{"connection refused", 3, false, "transient"},
		{"401 but timed out", 1, false, "transient"},
		{"401 and the context window", 1, false, "non_recoverable"},
		{"API Error: overloaded", 1, false, "transient"},
		{"bash: foo: command not found", 127, false, "transient"},
		{"Killed", 137, false, "transient"},
		{"skilled at failing", 1, false, "real"},
		{"assertion failed", 1, false, "real"},
	} {
		if got := failureType(c.text, c.code, c.resultSeen); got != c.want {
			t.Errorf("failureType(%q, %d) = %q, want %q", c.text, c.code, got, c.want)
		}
	}
}
