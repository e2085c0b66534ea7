package interpolate

import (
	"encoding/json"
	"testing"
)

// PyJSON writes what Python's json.dumps writes: its spacing, sorted keys,
// non-ASCII as \u escapes (a pair for a character past the BMP).
func TestPyJSON(t *testing.T) {
	v := map[string]any{"b": []any{json.Number("1"), true, nil}, "a": "é 😀 <x>"}
	if got, want := PyJSON(v), `{"a": "\u00e9 \ud83d\ude00 <x>", "b": [1, true, null]}`; got != want {
		t.Errorf("PyJSON = %s, want %s", got, want)
	}
}
