package main

import (
	"fmt"
	"time"
)

// ago says how long before now t was, as people say it: "just now",
// "42s ago", "3m ago", "5h ago", "2d ago"; "-" for no time.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// whenText is an RFC 3339 time of a state file as "2006-01-02 15:04:05 UTC
// (3m ago)"; the text as it is when it is not a time.
func whenText(s string, now time.Time) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC") + " (" + ago(t, now) + ")"
}

// agoText is an RFC 3339 time of a state file as ago says it.
func agoText(s string, now time.Time) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return ago(t, now)
}
