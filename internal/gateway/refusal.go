package gateway

import (
	"encoding/json"
	"net/http"
)

// apiError is the body of an error as the Messages API writes it, which
// the claude CLI and Anthropic's SDKs read.
type apiError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

func errorBody(errType, msg string) []byte {
	var e apiError
	e.Type = "error"
	e.Error.Type = errType
	e.Error.Message = "looprun gateway: " + msg
	b, _ := json.Marshal(e)
	return b
}

// refuse writes an Anthropic-shaped error. noRetry sets x-should-retry:
// false, which Anthropic's SDKs (and so the claude CLI) obey: without it
// the CLI retries a 401, 408, 409, 429 and 5xx about ten times over
// several minutes (see docs/gateway-protocol.md).
func refuse(w http.ResponseWriter, status int, errType, msg string, noRetry bool) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if noRetry {
		h.Set("X-Should-Retry", "false")
	} else {
		h.Set("X-Should-Retry", "true")
	}
	w.WriteHeader(status)
	_, _ = w.Write(errorBody(errType, msg))
}

// sseError is the error event the Messages API ends a broken stream with.
func sseError(errType, msg string) []byte {
	b := errorBody(errType, msg)
	out := make([]byte, 0, len(b)+32)
	out = append(out, "event: error\ndata: "...)
	out = append(out, b...)
	return append(out, "\n\n"...)
}
