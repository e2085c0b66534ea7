package agentstream

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/looprun/looprun/internal/pycompat"
	"github.com/looprun/looprun/internal/safefile"
)

// MessagesFile is the file of a run's run_dir where each message a state
// appends to the run's messages log (append_to_messages) is written, one
// JSON row per message, as little-loops writes it.
const MessagesFile = "messages.jsonl"

// MessageRow is one row of MessagesFile: the message State appended in
// the run's Iteration (for a sub-loop's state, the iteration of the top
// run, as little-loops counts it).
type MessageRow struct {
	Iteration int32
	State     string
	Message   string
	Time      time.Time
}

// Encode writes the row as little-loops does (Python's json.dumps, its
// keys in little-loops' order), with a newline.
func (r MessageRow) Encode() string {
	var b strings.Builder
	b.WriteString(`{"iteration": `)
	b.WriteString(pycompat.JSONDumps(int64(r.Iteration)))
	b.WriteString(`, "state": `)
	b.WriteString(pycompat.JSONDumps(r.State))
	b.WriteString(`, "message": `)
	b.WriteString(pycompat.JSONDumps(r.Message))
	b.WriteString(`, "timestamp": `)
	b.WriteString(pycompat.JSONDumps(PythonISOTime(r.Time)))
	b.WriteString("}\n")
	return b.String()
}

// AppendMessages appends the rows to runDir's MessagesFile (made if
// missing); a link in its place is refused. Like UsageFile it is not
// synced: the messages are kept durably in the run's events and state.
func AppendMessages(runDir string, rows []MessageRow) error {
	if len(rows) == 0 {
		return nil
	}
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return err
	}
	f, err := safefile.OpenFile(filepath.Join(runDir, MessagesFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(r.Encode())
	}
	if _, err := f.WriteString(b.String()); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
