package pycompat

import (
	"math"
	"testing"
	"unicode"
)

func TestParsePyFloat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"42", 42, true},
		{" 1_000 \n", 1000, true},
		{"1_0.2_5e1_0", 10.25e10, true},
		{"+.5", 0.5, true},
		{"5.", 5, true},
		{"-Infinity", math.Inf(-1), true},
		{"iNf", math.Inf(1), true},
		{"1e400", math.Inf(1), true},
		{"-1e400", math.Inf(-1), true},
		{"1e-400", 0, true},
		{"٤٢", 42, true},
		{"４２.５", 42.5, true},
		{"\u00a07\u3000", 7, true},
		{"\x1c7\x1f", 7, true},
		{"0x1p3", 0, false},
		{"0x10", 0, false},
		{"1__0", 0, false},
		{"_1", 0, false},
		{"1_", 0, false},
		{"1_.5", 0, false},
		{"1e", 0, false},
		{".", 0, false},
		{"--1", 0, false},
		{"1 0", 0, false},
		{"infinityy", 0, false},
		{"", 0, false},
		{"½", 0, false},
	} {
		got, ok := ParseFloat(tc.in)
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("ParseFloat(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	if f, ok := ParseFloat("-nan"); !ok || !math.IsNaN(f) {
		t.Errorf("ParseFloat(-nan) = %v, %v; want NaN", f, ok)
	}
}

// IsSpace, which looks nothing up, agrees with Unicode's white space and
// the four separators Python adds, on every code point.
func TestIsSpace(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if want := unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f; IsSpace(r) != want {
			t.Errorf("IsSpace(%U) = %v, want %v", r, !want, want)
		}
	}
}
