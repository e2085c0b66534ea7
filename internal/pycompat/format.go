package pycompat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
)

// Repr is Python's repr() of a decoded JSON value: a Dict's keys in their
// order, a map's sorted.
func Repr(v any) string {
	switch t := v.(type) {
	case nil:
		return "None"
	case bool:
		if t {
			return "True"
		}
		return "False"
	case string:
		return quote(t)
	case json.Number:
		return t.String()
	case int, int32, int64:
		return fmt.Sprintf("%d", t)
	case float64:
		return FormatFloat(t)
	case []any:
		parts := make([]string, len(t))
		for i, e := range t {
			parts[i] = Repr(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *Dict:
		if t == nil {
			return "None"
		}
		parts := make([]string, 0, len(t.keys))
		for _, k := range t.keys {
			parts = append(parts, quote(k)+": "+Repr(t.vals[k]))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case map[string]any:
		parts := make([]string, 0, len(t))
		for _, k := range slices.Sorted(maps.Keys(t)) {
			parts = append(parts, quote(k)+": "+Repr(t[k]))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return string(b)
}

// quote is Python's repr() of a string: single quotes, unless the string
// holds a single quote and no double one.
func quote(s string) string {
	q := byte('\'')
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == rune(q):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// FormatFloat writes f as Python's repr() does: the shortest digits that read
// back, ".0" on whole numbers, an exponent from 1e16 up and below 1e-4.
func FormatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	if abs := math.Abs(f); abs != 0 && (abs >= 1e16 || abs < 1e-4) {
		return strconv.FormatFloat(f, 'e', -1, 64)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

// Str is the text Python's str() gives a decoded scalar (a YAML key that
// is not text, for one): None, True, False, numbers as written.
func Str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case json.Number:
		return string(x)
	}
	return fmt.Sprint(v)
}

// JSONDumps is v as Python's json.dumps writes it (how little-loops hands
// params to mcp-call): ", " and ": " between items, non-ASCII as \u
// escapes. A Dict's keys are written in their order, a map's sorted.
func JSONDumps(v any) string {
	var b strings.Builder
	jsonDumps(&b, v)
	return b.String()
}

func jsonDumps(b *strings.Builder, v any) {
	switch x := v.(type) {
	case *Dict:
		if x == nil {
			b.WriteString("null")
			return
		}
		b.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			jsonDumps(b, k)
			b.WriteString(": ")
			jsonDumps(b, x.vals[k])
		}
		b.WriteByte('}')
	case map[string]any:
		b.WriteByte('{')
		for i, k := range slices.Sorted(maps.Keys(x)) {
			if i > 0 {
				b.WriteString(", ")
			}
			jsonDumps(b, k)
			b.WriteString(": ")
			jsonDumps(b, x[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			jsonDumps(b, e)
		}
		b.WriteByte(']')
	case string:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(x)
		for _, r := range strings.TrimSuffix(buf.String(), "\n") {
			if r < 0x80 {
				b.WriteRune(r)
				continue
			}
			for _, u := range utf16.Encode([]rune{r}) {
				fmt.Fprintf(b, "\\u%04x", u)
			}
		}
	default:
		raw, _ := json.Marshal(x) // numbers (json.Number), booleans, null
		b.Write(raw)
	}
}
