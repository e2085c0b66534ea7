package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// keepAliveEvery is how often an idle event stream says it is there, so
// that proxies between the page and the server keep it open.
const keepAliveEvery = 30 * time.Second

// eventStream writes server-sent events to one client.
type eventStream struct {
	w http.ResponseWriter
	f http.Flusher
}

// newEventStream is the stream of w; false (and an error answered) when w
// cannot stream.
func newEventStream(w http.ResponseWriter) (*eventStream, bool) {
	f, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported", http.StatusInternalServerError)
		return nil, false
	}
	return &eventStream{w: w, f: f}, true
}

// open sends the stream's headers.
func (e *eventStream) open() {
	e.w.Header().Set("Content-Type", "text/event-stream")
	e.w.Header().Set("Cache-Control", "no-store")
	e.f.Flush()
}

// update sends "update" with a run's last event number, phase and state,
// and where its exit hook is (it ends after the run's last event); false
// when the client is gone.
func (e *eventStream) update(lastSeq int64, phase, state, exitHook any) bool {
	b, _ := json.Marshal(map[string]any{"lastSeq": lastSeq, "phase": phase, "state": state, "exitHook": exitHook})
	return e.write(fmt.Sprintf("event: update\ndata: %s\n\n", b))
}

// keepAlive sends a comment line; false when the client is gone.
func (e *eventStream) keepAlive() bool { return e.write(": keep-alive\n\n") }

func (e *eventStream) write(s string) bool {
	if _, err := fmt.Fprint(e.w, s); err != nil {
		return false
	}
	e.f.Flush()
	return true
}
