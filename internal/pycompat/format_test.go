package pycompat

import (
	"encoding/json"
	"math"
	"testing"
)

// JSONDumps writes what Python's json.dumps writes: its spacing, sorted keys,
// non-ASCII as \u escapes (a pair for a character past the BMP).
func TestPyJSON(t *testing.T) {
	v := map[string]any{"b": []any{json.Number("1"), true, nil}, "a": "é 😀 <x>"}
	if got, want := JSONDumps(v), `{"a": "\u00e9 \ud83d\ude00 <x>", "b": [1, true, null]}`; got != want {
		t.Errorf("JSONDumps = %s, want %s", got, want)
	}
}

// Repr, Str and FormatFloat print what Python prints.
func TestReprStr(t *testing.T) {
	v := map[string]any{"s": "it's", "q": `a"b'c`, "f": 1e16, "g": 0.5, "n": nil, "b": true, "l": []any{json.Number("3"), "\n"}}
	if got, want := Repr(v), `{'b': True, 'f': 1e+16, 'g': 0.5, 'l': [3, '\n'], 'n': None, 'q': 'a"b\'c', 's': "it's"}`; got != want {
		t.Errorf("Repr = %s, want %s", got, want)
	}
	for _, tc := range []struct {
		in   any
		want string
	}{{nil, "None"}, {false, "False"}, {json.Number("1.0"), "1.0"}, {"x", "x"}} {
		if got := Str(tc.in); got != tc.want {
			t.Errorf("Str(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for f, want := range map[float64]string{2: "2.0", 1e-5: "1e-05", 123.25: "123.25", math.Inf(-1): "-inf"} {
		if got := FormatFloat(f); got != want {
			t.Errorf("FormatFloat(%v) = %s, want %s", f, got, want)
		}
	}
}
