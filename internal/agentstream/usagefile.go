package agentstream

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/looprun/looprun/internal/pycompat"
	"github.com/looprun/looprun/internal/safefile"
)

// UsageFile is the file of a run's run_dir where each agent action's usage
// is appended, one JSON row per action, as little-loops writes it.
const UsageFile = "usage.jsonl"

// UsageRow is one row of UsageFile.
type UsageRow struct {
	Iteration int32
	State     string
	// Prompt says the action was an agent prompt (action_type "prompt");
	// otherwise a command that ran the agent ("shell_or_mcp").
	Prompt bool
	Usage  Usage
	Time   time.Time
}

// UnknownModel is the model of a row whose agent did not say which
// answered, as little-loops writes it.
const UnknownModel = "unknown"

// Encode writes the row as little-loops does (Python's json.dumps, its
// keys in little-loops' order), with a newline: the flat keys, then the
// same four counts under their OpenTelemetry GenAI names
// (gen_ai.usage.*), which little-loops adds to every row.
func (r UsageRow) Encode() string {
	actionType := "shell_or_mcp"
	if r.Prompt {
		actionType = "prompt"
	}
	model := r.Usage.Model
	if model == "" {
		model = UnknownModel
	}
	u := r.Usage
	fields := []struct {
		key   string
		value any
	}{
		{"iteration", int64(r.Iteration)}, {"state", r.State}, {"action_type", actionType},
		{"input_tokens", u.InputTokens}, {"output_tokens", u.OutputTokens},
		{"cache_read_tokens", u.CacheReadTokens}, {"cache_creation_tokens", u.CacheCreationTokens},
		{"model", model}, {"timestamp", PythonISOTime(r.Time)},
		{"gen_ai.usage.input_tokens", u.InputTokens}, {"gen_ai.usage.output_tokens", u.OutputTokens},
		{"gen_ai.usage.cache_read.input_tokens", u.CacheReadTokens},
		{"gen_ai.usage.cache_creation.input_tokens", u.CacheCreationTokens},
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pycompat.JSONDumps(f.key))
		b.WriteString(": ")
		b.WriteString(pycompat.JSONDumps(f.value))
	}
	b.WriteString("}\n")
	return b.String()
}

// PythonISOTime is t as Python's datetime.now(UTC).isoformat() writes it:
// microseconds unless there are none, and +00:00.
func PythonISOTime(t time.Time) string {
	t = t.UTC().Truncate(time.Microsecond)
	if t.Nanosecond() == 0 {
		return t.Format("2006-01-02T15:04:05+00:00")
	}
	return t.Format("2006-01-02T15:04:05.000000+00:00")
}

// AppendUsage appends the row to runDir's UsageFile (made if missing); a
// link in its place is refused. It is not synced, as little-loops does not
// sync it: the usage is kept durably in the action_complete event and the
// state file's totals, and a sync per agent step cost more than the whole
// stream parse (bench/RESULTS.md).
func AppendUsage(runDir string, r UsageRow) error {
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return err
	}
	f, err := safefile.OpenFile(filepath.Join(runDir, UsageFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(r.Encode()); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
