package pycompat

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// A Dict keeps the order its keys were written in, through JSON and in
// what Repr and JSONDumps write, as a Python dict does; a key set again
// keeps its place and takes the last value.
func TestDictKeepsOrder(t *testing.T) {
	v, err := DecodeJSON([]byte(`{"zulu": 1, "alpha": [3, {"y": true, "b": 2.5}], "mid": {"q": null, "a": "x"}, "zulu": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	d, ok := v.(*Dict)
	if !ok {
		t.Fatalf("decoded %T", v)
	}
	if got := d.Keys(); !reflect.DeepEqual(got, []string{"zulu", "alpha", "mid"}) {
		t.Errorf("keys %v", got)
	}
	if got, want := Repr(d), `{'zulu': 2, 'alpha': [3, {'y': True, 'b': 2.5}], 'mid': {'q': None, 'a': 'x'}}`; got != want {
		t.Errorf("Repr = %s, want %s", got, want)
	}
	if got, want := JSONDumps(d), `{"zulu": 2, "alpha": [3, {"y": true, "b": 2.5}], "mid": {"q": null, "a": "x"}}`; got != want {
		t.Errorf("JSONDumps = %s, want %s", got, want)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"zulu":2,"alpha":[3,{"y":true,"b":2.5}],"mid":{"q":null,"a":"x"}}`; string(b) != want {
		t.Errorf("json.Marshal = %s, want %s", b, want)
	}
	var back Dict
	if err := json.Unmarshal(b, &back); err != nil || Repr(&back) != Repr(d) {
		t.Errorf("read back %s (%v)", Repr(&back), err)
	}
	html := NewDict(1)
	html.Set("<k>", "a&b")
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(map[string]any{"d": html}); err != nil || buf.String() != `{"d":{"<k>":"a&b"}}`+"\n" {
		t.Errorf("encoded without HTML escapes: %s (%v)", buf.String(), err)
	}
	want := map[string]any{"zulu": json.Number("2"), "alpha": []any{json.Number("3"), map[string]any{"y": true, "b": json.Number("2.5")}},
		"mid": map[string]any{"q": nil, "a": "x"}}
	if got := Plain(d); !reflect.DeepEqual(got, want) {
		t.Errorf("Plain = %#v", got)
	}
	for _, bad := range []string{`{"a": 1} x`, `{"a"}`, `[1,`} {
		if _, err := DecodeJSON([]byte(bad)); err == nil {
			t.Errorf("DecodeJSON(%s) gave no error", bad)
		}
	}
}
