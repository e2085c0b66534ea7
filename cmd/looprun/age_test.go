package main

import (
	"testing"
	"time"
)

func TestAge(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		before time.Duration
		want   string
	}{
		{0, "0s"}, {42 * time.Second, "42s"}, {3*time.Minute + 59*time.Second, "3m59s"},
		{5 * time.Hour, "5h"}, {47 * time.Hour, "47h"}, {72 * time.Hour, "3d"},
	} {
		if got := age(now.Add(-tc.before), now); got != tc.want {
			t.Errorf("age(-%v) = %q, want %q", tc.before, got, tc.want)
		}
	}
	if got := age(time.Time{}, now); got != "<unknown>" {
		t.Errorf("age(zero) = %q", got)
	}
	if got := whenText("2026-11-26T11:56:59.5Z", now); got != "2026-11-26 11:56:59 UTC (3m ago)" {
		t.Errorf("whenText = %q", got)
	}
	if got := ageText("2026-11-26T11:00:00Z", now); got != "60m" {
		t.Errorf("ageText = %q", got)
	}
	if got := ageText("not a time", now); got != "not a time" {
		t.Errorf("ageText = %q", got)
	}
}

func TestSpan(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0ms"}, {6 * time.Millisecond, "6ms"}, {1400 * time.Millisecond, "1.4s"},
		{3*time.Minute + 5*time.Second, "3m05s"}, {62 * time.Minute, "1h02m"},
	} {
		if got := span(tc.d); got != tc.want {
			t.Errorf("span(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// A Loop's times are kept to the second: a run shorter than that is said
// to be, not "0ms".
func TestSecondsSpan(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "under 1s", 900 * time.Millisecond: "under 1s",
		1500 * time.Millisecond: "1.0s", 83 * time.Second: "1m23s"} {
		if got := secondsSpan(d); got != want {
			t.Errorf("secondsSpan(%v) = %q, want %q", d, got, want)
		}
	}
}
