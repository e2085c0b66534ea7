package interpolate

import "testing"

// ${messages} reads the run's messages log as little-loops does.
func TestMessages(t *testing.T) {
	v := &Vars{Messages: []string{"a", "b", "c"}}
	for tmpl, want := range map[string]string{
		"${messages}":           "a\nb\nc",
		"${messages.output}":    "a\nb\nc",
		"${messages.last(2)}":   "b\nc",
		"${messages.last(0)}":   "a\nb\nc",
		"${messages.last(9)}":   "a\nb\nc",
		"[${messages.summary}]": "[]",
	} {
		if got, err := Expand(tmpl, v); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", tmpl, got, err, want)
		}
	}
	if _, err := Expand("${messages.first}", v); err == nil {
		t.Error("${messages.first}: no error")
	}
	if got, err := Expand("${messages}", &Vars{}); err != nil || got != "" {
		t.Errorf("no messages: %q, %v", got, err)
	}
}
