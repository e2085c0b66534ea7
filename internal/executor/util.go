package executor

import (
	"encoding/json"
	"fmt"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/looprun/looprun/internal/pycompat"
)

type apiextensionsJSON = apiextensionsv1.JSON

// decodeJSONValue decodes a value of the spec (context, with, params):
// numbers as written, objects as pycompat.Dicts, which keep the order of
// their keys as little-loops prints them.
func decodeJSONValue(raw []byte) (any, error) {
	return pycompat.DecodeJSON(raw)
}

// preview is the end of an action's output for its action_complete event,
// as little-loops shows it: at most n bytes, surrounding white space
// stripped ("" when nothing is left: the event has null).
func preview(s string, n int) string {
	return strings.TrimSpace(Tail(s, n))
}

// trimOutput removes the trailing newlines of an action's output.
func trimOutput(s string) string {
	return strings.TrimRight(s, "\r\n")
}

// detailsJSON encodes evaluator details for the run state.
func detailsJSON(d map[string]any) *apiextensionsv1.JSON {
	if len(d) == 0 {
		return nil
	}
	b, err := json.Marshal(d)
	if err != nil {
		b = []byte(fmt.Sprintf(`{"error":%q}`, err.Error()))
	}
	if len(b) > MaxDetailsBytes {
		b = shrinkDetails(d)
	}
	return &apiextensionsv1.JSON{Raw: b}
}

// exitCode32 stores an exit code; real exit codes fit easily.
func exitCode32(code int) int32 {
	const lim = 1 << 30
	return int32(max(-lim, min(lim, code)))
}

// shrinkDetails renders details within MaxDetailsBytes: each value longer
// than its share is cut to its tail, as text, and marked.
func shrinkDetails(d map[string]any) []byte {
	share := MaxDetailsBytes / (len(d) + 1)
	out := make(map[string]any, len(d)+1)
	for k, v := range d {
		b, err := json.Marshal(v)
		if err == nil && len(b) <= share {
			out[k] = v
			continue
		}
		s, ok := v.(string)
		if !ok {
			s = string(b)
		}
		out[k] = Tail(s, share/2)
	}
	out["details_truncated"] = true
	b, err := json.Marshal(out)
	if err != nil || len(b) > MaxDetailsBytes {
		return []byte(`{"details_truncated":true}`)
	}
	return b
}
