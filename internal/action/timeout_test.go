package action

import (
	"testing"
	"time"
)

func TestWithoutTimeoutNotice(t *testing.T) {
	for in, want := range map[string]string{
		"oops\n" + TimeoutNotice(90*time.Second):          "oops\n",
		IdleNotice(time.Second):                           "",
		"oops\n":                                          "oops\n",
		"action timed out after 2s\n":                     "action timed out after 2s\n",
		TimeoutNotice(time.Second) + "printed after it\n": TimeoutNotice(time.Second) + "printed after it\n",
	} {
		if got := WithoutTimeoutNotice(in); got != want {
			t.Errorf("WithoutTimeoutNotice(%q) = %q, want %q", in, got, want)
		}
	}
}
