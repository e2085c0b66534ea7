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
