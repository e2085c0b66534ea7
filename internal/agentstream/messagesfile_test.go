package agentstream

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestMessageRowAsLittleLoopsWritesIt(t *testing.T) {
	at := time.Date(2026, 11, 26, 13, 5, 6, 0, time.UTC)
	row := MessageRow{Iteration: 2, State: "s", Message: "a \"b\"\né", Time: at}
	want := `{"iteration": 2, "state": "s", "message": "a \"b\"\n\u00e9", "timestamp": "2026-11-26T13:05:06+00:00"}` + "\n"
	if got := row.Encode(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	dir := filepath.Join(t.TempDir(), "runs", "r")
	if err := AppendMessages(dir, []MessageRow{row, row}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, MessagesFile)); err != nil || string(b) != want+want {
		t.Errorf("%s: %q %v", MessagesFile, b, err)
	}
}
