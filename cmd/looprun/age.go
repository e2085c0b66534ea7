package main

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
)

// The times looprun prints, one function per meaning:
//
//   - age: how long ago something happened, as kubectl's AGE column says
//     it (apimachinery's duration.HumanDuration): get, describe, list,
//     status.
//   - span: how long something took, in one word ("6ms", "1.4s", "3m05s"):
//     history's offsets and durations, describe's and status's running
//     time.
//   - llDuration (progress.go): how long a step took, as ll-loop's progress
//     lines say it; only the progress of run and watch, which copy
//     ll-loop's output, use it.

// age renders how long ago t was, as kubectl does: "42s", "3m59s", "5h",
// "3d"; "<unknown>" for no time.
func age(t, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}

// ageText is an RFC 3339 time of a state file as age says it; the text as
// it is when it is not a time.
func ageText(s string, now time.Time) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return age(t, now)
}

// whenText is an RFC 3339 time of a state file as "2006-01-02 15:04:05 UTC
// (3m59s ago)"; the text as it is when it is not a time.
func whenText(s string, now time.Time) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC") + " (" + age(t, now) + " ago)"
}

// span is a duration in one word: "6ms", "1.4s", "12.0s", "3m05s", "1h02m".
func span(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", max(d, 0).Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", max(d, 0).Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// secondsSpan is span for a duration measured between times kept to the
// second (a Loop's status): under a second it says so, never "0ms".
func secondsSpan(d time.Duration) string {
	if d < time.Second {
		return "under 1s"
	}
	return span(d.Truncate(time.Second))
}
