package localrun

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/looprun/looprun/internal/executor"
)

// At a terminal, an approval state asks there; the answer typed wins, or
// the answer file another shell wrote, whichever comes first.
func TestTerminalApprover(t *testing.T) {
	dir := t.TempDir()
	lines := make(chan string, 4)
	var out strings.Builder
	term := &Terminal{Lines: lines, Out: &out, User: "alice"}
	file := &fileApprover{path: filepath.Join(dir, "x.answer.json"), clock: realClock{}, poll: 10 * time.Millisecond}
	a := &terminalApprover{term: term, file: file}
	req := &executor.ApprovalRequest{State: "ship", Iteration: 3, Message: "ship it?"}
	lines <- "maybe"
	lines <- "y"
	ans, err := a.Await(context.Background(), req)
	if err != nil || ans == nil || !ans.Approved || ans.By != "alice" {
		t.Fatalf("typed y: %+v, %v", ans, err)
	}
	if n := strings.Count(out.String(), "State ship (iteration 3) asks: ship it?"); n != 2 {
		t.Errorf("asked %d times (once, and again after an answer it did not understand):\n%s", n, out.String())
	}
	lines <- "no"
	if ans, _ := a.Await(context.Background(), req); ans == nil || ans.Approved {
		t.Fatalf("typed no: %+v", ans)
	}
	// Nothing typed: looprun approve from another shell answers.
	store := &Store{dir: dir, name: "x"}
	file.path = store.AnswerPath()
	go func() {
		time.Sleep(50 * time.Millisecond)
		writeAnswerFile(t, store.AnswerPath(), `{"state":"ship","iteration":3,"approved":false,"by":"bob"}`)
	}()
	ans, err = a.Await(context.Background(), req)
	if err != nil || ans == nil || ans.Approved || ans.By != "bob" {
		t.Fatalf("answered from another shell: %+v, %v", ans, err)
	}
	// A deadline passes with no answer: nil.
	req.Deadline = time.Now().Add(30 * time.Millisecond)
	if ans, err := a.Await(context.Background(), req); ans != nil || err != nil {
		t.Fatalf("past the deadline: %+v, %v", ans, err)
	}
}

// writeAnswerFile puts an answer file in place whole, as looprun approve
// does: a reader polling for it never claims it empty or half written.
func writeAnswerFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Error(err)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Error(err)
	}
}
