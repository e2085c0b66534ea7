package main

import (
	"testing"
	"time"
)

func TestAgo(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		before time.Duration
		want   string
	}{
		{0, "just now"}, {42 * time.Second, "42s ago"}, {3*time.Minute + 59*time.Second, "3m ago"},
		{5 * time.Hour, "5h ago"}, {47 * time.Hour, "47h ago"}, {72 * time.Hour, "3d ago"},
	} {
		if got := ago(now.Add(-tc.before), now); got != tc.want {
			t.Errorf("ago(-%v) = %q, want %q", tc.before, got, tc.want)
		}
	}
	if got := whenText("2026-11-26T11:56:59.5Z", now); got != "2026-11-26 11:56:59 UTC (3m ago)" {
		t.Errorf("whenText = %q", got)
	}
	if got := agoText("not a time", now); got != "not a time" {
		t.Errorf("agoText = %q", got)
	}
}
