// Package pricing turns the tokens an agent used into dollars. looprun
// computes cost itself, from a price table, rather than trusting the figure
// an agent CLI prints (wrong behind a proxy or with negotiated rates).
package pricing

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/looprun/looprun/internal/agentstream"
)

// Rates are the prices of one model in US dollars per million tokens.
type Rates struct {
	Input         float64 `json:"input"`
	Output        float64 `json:"output"`
	CacheRead     float64 `json:"cacheRead"`
	CacheCreation float64 `json:"cacheCreation"`
}

// Table prices models by name.
type Table struct {
	// Models maps a model name to its rates. A model named with a suffix
	// (a date: claude-haiku-4-5-20251001) takes the rates of the longest
	// name it begins with.
	Models map[string]Rates `json:"models"`
}

// Default is the table looprun starts from: Anthropic's published list
// prices for its current and recent Claude models.
func Default() *Table {
	opus := Rates{Input: 15, Output: 75, CacheRead: 1.5, CacheCreation: 18.75}
	sonnet := Rates{Input: 3, Output: 15, CacheRead: 0.3, CacheCreation: 3.75}
	haiku := Rates{Input: 0.8, Output: 4, CacheRead: 0.08, CacheCreation: 1}
	return &Table{Models: map[string]Rates{
		"claude-fable-5":    {Input: 10, Output: 50, CacheRead: 1, CacheCreation: 12.5},
		"claude-opus-4-8":   {Input: 5, Output: 25, CacheRead: 0.5, CacheCreation: 6.25},
		"claude-sonnet-5":   sonnet,
		"claude-opus-4-7":   opus,
		"claude-opus-4-6":   opus,
		"claude-opus-4-5":   opus,
		"claude-sonnet-4-6": sonnet,
		"claude-sonnet-4-5": sonnet,
		"claude-haiku-4-5":  haiku,
		"claude-sonnet-3-7": sonnet,
		"claude-haiku-3-5":  haiku,
	}}
}

// Load reads a table from a YAML or JSON file ({models: {NAME: {input,
// output, cacheRead, cacheCreation}}}) over the defaults: a model it
// names replaces the default's rates.
func Load(path string) (*Table, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(b)
}

// Parse is Load of the file's content.
func Parse(b []byte) (*Table, error) {
	var over Table
	if err := yaml.UnmarshalStrict(b, &over); err != nil {
		return nil, fmt.Errorf("price table: %w", err)
	}
	t := Default()
	for name, r := range over.Models {
		if name == "" {
			return nil, fmt.Errorf("price table: a model without a name")
		}
		for what, v := range map[string]float64{"input": r.Input, "output": r.Output, "cacheRead": r.CacheRead, "cacheCreation": r.CacheCreation} {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("price table: model %s: %s is %v; a price is a number of dollars, 0 or more", name, what, v)
			}
		}
		t.Models[name] = r
	}
	return t, nil
}

// Rates finds the rates of model: its own, else those of the longest name
// it begins with followed by a dash.
func (t *Table) Rates(model string) (Rates, bool) {
	_, r, ok := t.Match(model)
	return r, ok
}

// Match is Rates with the name in the table that priced model (a bounded
// set of names, fit for a metric label; model itself comes from an agent).
func (t *Table) Match(model string) (string, Rates, bool) {
	if t == nil || model == "" {
		return "", Rates{}, false
	}
	if r, ok := t.Models[model]; ok {
		return model, r, true
	}
	names := make([]string, 0, len(t.Models))
	for name := range t.Models {
		if strings.HasPrefix(model, name+"-") {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "", Rates{}, false
	}
	longest := slices.MaxFunc(names, func(a, b string) int { return len(a) - len(b) })
	return longest, t.Models[longest], true
}

// CostMicroUSD is what u cost in millionths of a dollar, false when the
// model is not in the table.
func (t *Table) CostMicroUSD(u agentstream.Usage) (int64, bool) {
	r, ok := t.Rates(u.Model)
	if !ok {
		return 0, false
	}
	// Rates are per million tokens: tokens × rate is micro-dollars.
	micro := float64(u.InputTokens)*r.Input + float64(u.OutputTokens)*r.Output +
		float64(u.CacheReadTokens)*r.CacheRead + float64(u.CacheCreationTokens)*r.CacheCreation
	if micro >= math.MaxInt64 {
		return math.MaxInt64, true // never wrapped to a negative, free cost
	}
	return int64(math.Round(micro)), true
}
