package pricing

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/pycompat"
)

// StateCost is what one state's agent actions used, summed over the rows
// of a run's usage.jsonl.
type StateCost struct {
	State                                                           string
	Iterations                                                      int64
	InputTokens, OutputTokens, CacheReadTokens, CacheCreationTokens int64
	CostMicroUSD                                                    int64
	WallclockMs                                                     int64
	// Unpriced: a row's model is not in the price table; the cost then
	// reads n/a, as little-loops prints it.
	Unpriced bool
}

// Report is the per-state cost table of a run, as ll-loop prints it at
// the end of a run and writes it with --cost-output-json.
type Report struct {
	States []StateCost // in the order each state first appears
}

// ReadReport builds the report of the usage.jsonl at path with the price
// table t: rows that are not JSON objects are skipped, as ll-loop does. A
// missing file is an empty report.
func ReadReport(path string, t *Table) (*Report, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return &Report{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return report(f, t)
}

func report(r io.Reader, t *Table) (*Report, error) {
	rep := &Report{}
	index := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var row struct {
			State               *string `json:"state"`
			Model               *string `json:"model"`
			InputTokens         int64   `json:"input_tokens"`
			OutputTokens        int64   `json:"output_tokens"`
			CacheReadTokens     int64   `json:"cache_read_tokens"`
			CacheCreationTokens int64   `json:"cache_creation_tokens"`
			WallclockMs         int64   `json:"wallclock_ms"`
		}
		if json.Unmarshal(sc.Bytes(), &row) != nil {
			continue
		}
		state, model := "unknown", "unknown"
		if row.State != nil {
			state = *row.State
		}
		if row.Model != nil {
			model = *row.Model
		}
		i, ok := index[state]
		if !ok {
			i = len(rep.States)
			index[state] = i
			rep.States = append(rep.States, StateCost{State: state})
		}
		s := &rep.States[i]
		u := agentstream.Usage{InputTokens: row.InputTokens, OutputTokens: row.OutputTokens,
			CacheReadTokens: row.CacheReadTokens, CacheCreationTokens: row.CacheCreationTokens, Model: model}
		s.Iterations++
		s.InputTokens += u.InputTokens
		s.OutputTokens += u.OutputTokens
		s.CacheReadTokens += u.CacheReadTokens
		s.CacheCreationTokens += u.CacheCreationTokens
		s.WallclockMs += row.WallclockMs
		if micro, priced := t.CostMicroUSD(u); priced {
			s.CostMicroUSD += micro
		} else {
			s.Unpriced = true
		}
	}
	return rep, sc.Err()
}

// Table is the report as ll-loop prints it: one row per state, sorted.
func (r *Report) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-24s %5s %8s %8s %8s %10s\n", "state", "invoc", "input", "output", "cache", "est_cost")
	b.WriteString(strings.Repeat("-", 68) + "\n")
	states := slices.SortedFunc(slices.Values(r.States), func(a, b StateCost) int { return strings.Compare(a.State, b.State) })
	for _, s := range states {
		cost := fmt.Sprintf("$%.4f", MicroToUSD(s.CostMicroUSD))
		if s.Unpriced {
			cost = "n/a"
		}
		fmt.Fprintf(&b, "%-24s %5d %8d %8d %8d %10s\n", s.State, s.Iterations, s.InputTokens, s.OutputTokens,
			s.CacheReadTokens+s.CacheCreationTokens, cost)
	}
	return b.String()
}

// JSON is the report in ll-loop's stable shape (--cost-output-json), as
// Python's json.dumps(indent=2) writes it.
func (r *Report) JSON() string {
	var b strings.Builder
	b.WriteString("{\n  \"states\": [")
	var tot StateCost
	for i, s := range r.States {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n    {\n")
		writeFields(&b, "      ", []field{{"state", s.State}, {"iterations", s.Iterations}, {"input_tokens", s.InputTokens},
			{"output_tokens", s.OutputTokens}, {"cache_read_tokens", s.CacheReadTokens}, {"cache_creation_tokens", s.CacheCreationTokens},
			{"cost_usd", usd(s.CostMicroUSD)}, {"wallclock_ms", s.WallclockMs}})
		b.WriteString("    }")
		tot.Iterations += s.Iterations
		tot.InputTokens += s.InputTokens
		tot.OutputTokens += s.OutputTokens
		tot.CacheReadTokens += s.CacheReadTokens
		tot.CacheCreationTokens += s.CacheCreationTokens
		tot.WallclockMs += s.WallclockMs
		tot.CostMicroUSD += s.CostMicroUSD
		tot.Unpriced = tot.Unpriced || s.Unpriced
	}
	if len(r.States) > 0 {
		b.WriteString("\n  ")
	}
	b.WriteString("],\n  \"totals\": {\n")
	if tot.Unpriced {
		tot.CostMicroUSD = 0
	}
	writeFields(&b, "    ", []field{{"iterations", tot.Iterations}, {"input_tokens", tot.InputTokens}, {"output_tokens", tot.OutputTokens},
		{"cache_read_tokens", tot.CacheReadTokens}, {"cache_creation_tokens", tot.CacheCreationTokens}, {"wallclock_ms", tot.WallclockMs},
		{"cost_usd", usd(tot.CostMicroUSD)}, {"has_unknown_model", tot.Unpriced}})
	b.WriteString("  }\n}")
	return b.String()
}

// usd is a cost as Python writes a float (0.0, 0.036393).
type usd int64

type field struct {
	key   string
	value any
}

func writeFields(b *strings.Builder, indent string, fields []field) {
	for i, f := range fields {
		v := pycompat.JSONDumps(f.value)
		if c, ok := f.value.(usd); ok {
			v = pycompat.FormatFloat(MicroToUSD(int64(c)))
		}
		b.WriteString(indent + pycompat.JSONDumps(f.key) + ": " + v)
		if i < len(fields)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
}
