package loopfile

import (
	"encoding/json"
	"reflect"
	"testing"
)

// Plain scalars mean what PyYAML (little-loops' reader) makes of them.
func TestDecodePyYAML(t *testing.T) {
	doc := `
n: 3
y: word
flags: [yes, No, on, OFF, true, False]
ints: [0777, 0x1F, 0b101, 1_000, -42, 1:30, 0]
floats: [2.0, .5, 1.0e+3, -1.5, 1_000.5]
text: [1e3, '123', "true", n, 12:30:00x, 2026-11-23]
nulls: [~, null, ]
base: &base {a: 1, b: 2}
merged:
  <<: *base
  b: 3
block: |
  yes
`
	v, err := decodePyYAML([]byte(doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	n := func(s string) json.Number { return json.Number(s) }
	want := map[string]any{
		"n":      n("3"),
		"y":      "word",
		"flags":  []any{true, false, true, false, true, false},
		"ints":   []any{n("511"), n("31"), n("5"), n("1000"), n("-42"), n("90"), n("0")},
		"floats": []any{n("2.0"), n("0.5"), n("1000.0"), n("-1.5"), n("1000.5")},
		"text":   []any{"1e3", "123", "true", "n", "12:30:00x", "2026-11-23"},
		"nulls":  []any{nil, nil},
		"base":   map[string]any{"a": n("1"), "b": n("2")},
		"merged": map[string]any{"a": n("1"), "b": n("3")},
		"block":  "yes\n",
	}
	if !reflect.DeepEqual(v, want) {
		got, _ := json.Marshal(v)
		exp, _ := json.Marshal(want)
		t.Errorf("decoded\n%s\nwant\n%s", got, exp)
	}
}

// Keys that are not text become the text Python prints for them.
func TestDecodePyYAMLKeys(t *testing.T) {
	v, err := decodePyYAML([]byte("1: a\ntrue: b\n~: c\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]any{"1": "a", "True": "b", "None": "c"}; !reflect.DeepEqual(v, want) {
		t.Errorf("%v", v)
	}
}
