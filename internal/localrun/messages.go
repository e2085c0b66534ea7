package localrun

import (
	"fmt"
	"io"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/executor"
)

// MessagesLog is the Observer of a local run that writes each message a
// state appends to the run's messages log (a messages_append event) into
// runDir's messages.jsonl, as little-loops does: the run's iteration, the
// state that appended it, the message and when. A sub-loop's messages,
// whose events reach the top run's driver, go into the top run's file
// with its iteration. An empty runDir writes nothing; a file that cannot
// be written is said on warn.
func MessagesLog(runDir string, warn io.Writer) executor.Observer {
	return executor.ObserverFunc(func(run *v1alpha1.RunState, evs []executor.Event) {
		if runDir == "" {
			return
		}
		var rows []agentstream.MessageRow
		for _, e := range evs {
			if e.Type != executor.EventMessagesAppend {
				continue
			}
			m := executor.MessagesAppendOf(e)
			rows = append(rows, agentstream.MessageRow{Iteration: run.Iteration, State: m.State, Message: m.Message, Time: e.Time})
		}
		if err := agentstream.AppendMessages(runDir, rows); err != nil && warn != nil {
			fmt.Fprintf(warn, "looprun: %s: %v\n", agentstream.MessagesFile, err)
		}
	})
}
