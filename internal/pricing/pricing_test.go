package pricing

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/looprun/looprun/internal/agentstream"
)

func TestCost(t *testing.T) {
	tab := Default()
	u := agentstream.Usage{InputTokens: 1000, OutputTokens: 2000, CacheReadTokens: 10000, CacheCreationTokens: 100, Model: "claude-sonnet-4-6"}
	// 1000×3 + 2000×15 + 10000×0.3 + 100×3.75 micro-dollars.
	if got, ok := tab.CostMicroUSD(u); !ok || got != 36375 {
		t.Errorf("cost %d %v, want 36375", got, ok)
	}
	u.Model = "claude-haiku-4-5-20251001" // a dated name takes its family's rates
	if got, ok := tab.CostMicroUSD(u); !ok || got != 1000*0.8+2000*4+10000*0.08+100*1 {
		t.Errorf("dated model: %d %v", got, ok)
	}
	for _, m := range []string{"", "gpt-5", "claude-haiku-4-50"} {
		u.Model = m
		if _, ok := tab.CostMicroUSD(u); ok {
			t.Errorf("model %q priced", m)
		}
	}
}

func TestLoadOverDefaults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prices.yaml")
	if err := os.WriteFile(path, []byte("models:\n  claude-sonnet-4-6: {input: 1, output: 2}\n  in-house: {input: 0.5, output: 0.5, cacheRead: 0, cacheCreation: 0}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tab, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := tab.Rates("claude-sonnet-4-6"); r.Input != 1 || r.Output != 2 || r.CacheRead != 0 {
		t.Errorf("overridden %+v", r)
	}
	if _, ok := tab.Rates("in-house"); !ok {
		t.Error("an added model is not priced")
	}
	if _, ok := tab.Rates("claude-opus-4-8"); !ok {
		t.Error("the defaults are gone")
	}
	for _, bad := range []string{"models: {x: {input: -1}}", "models: {x: {inptu: 1}}", "modles: {}", `models: {"": {input: 1}}`} {
		if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), "price table") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

func TestMatchNamesTheTableEntry(t *testing.T) {
	tab := Default()
	for model, want := range map[string]string{"claude-haiku-4-5-20251001": "claude-haiku-4-5", "claude-opus-4-8": "claude-opus-4-8", "claude-opus-4-8-x-y": "claude-opus-4-8", "evil\n": ""} {
		if got, _, _ := tab.Match(model); got != want {
			t.Errorf("Match(%q) = %q, want %q", model, got, want)
		}
	}
}

func TestUSDRoundTrip(t *testing.T) {
	for in, want := range map[string]int64{"5": 5_000_000, "2.50": 2_500_000, "0.000001": 1, "12.345678": 12_345_678} {
		got, err := ParseUSD(in)
		if err != nil || got != want {
			t.Errorf("ParseUSD(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "1.2345678", "five", ".5", "1e3", "+2"} {
		if _, err := ParseUSD(bad); err == nil {
			t.Errorf("ParseUSD(%q) gave no error", bad)
		}
	}
	for micro, want := range map[int64]string{5_000_000: "5.00", 2_500_000: "2.50", 1: "0.000001", 12_345_600: "12.3456"} {
		if got := FormatUSD(micro); got != want {
			t.Errorf("FormatUSD(%d) = %q; want %q", micro, got, want)
		}
	}
}

// A cost past what an int64 holds is the largest, never wrapped to a
// negative (free) one.
func TestCostDoesNotWrap(t *testing.T) {
	tbl, err := Parse([]byte("models: {dear: {input: 1e12, output: 1e12}}"))
	if err != nil {
		t.Fatal(err)
	}
	c, ok := tbl.CostMicroUSD(agentstream.Usage{InputTokens: 1 << 40, OutputTokens: 1 << 40, Model: "dear"})
	if !ok || c != math.MaxInt64 {
		t.Fatalf("cost %d %v", c, ok)
	}
}
