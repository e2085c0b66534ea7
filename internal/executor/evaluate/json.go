package evaluate

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/interpolate"
)

// LookupPath follows a dot-separated path (optional leading dot, integer
// segments index lists) through a decoded JSON value.
func LookupPath(doc any, path string) (any, bool) {
	path = strings.TrimPrefix(path, ".")
	if path == "" {
		return doc, true
	}
	return interpolate.Walk(doc, strings.Split(path, "."))
}

// decodeJSON reads JSON as Python's json module does: numbers as written
// (json.Number), and the words NaN, Infinity and -Infinity as numbers.
func decodeJSON(s string) (any, error) {
	s, nan := pyJSONConstants(s)
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("extra data after the JSON value")
	}
	if nan != "" {
		v = withNaN(v, json.Number(nan))
	}
	return v, nil
}

// pyJSONConstants writes the NaN, Infinity and -Infinity outside the
// strings of s as numbers JSON can hold: an infinity as a number past the
// range of a double (which reads as one), NaN as a number that is not in s
// (returned, "" when s has no NaN) for withNaN to replace.
func pyJSONConstants(s string) (string, string) {
	if !strings.Contains(s, "NaN") && !strings.Contains(s, "Infinity") {
		return s, ""
	}
	nan := "0e-31415926535"
	for strings.Contains(s, nan) {
		nan += "9"
	}
	var b strings.Builder
	found := false
	inString := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inString:
			if c == '\\' && i+1 < len(s) {
				b.WriteByte(c)
				i++
				c = s[i]
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case strings.HasPrefix(s[i:], "NaN"):
			b.WriteString(nan)
			i += len("NaN") - 1
			found = true
			continue
		case strings.HasPrefix(s[i:], "Infinity"):
			b.WriteString("1e999999")
			i += len("Infinity") - 1
			continue
		case strings.HasPrefix(s[i:], "-Infinity"):
			b.WriteString("-1e999999")
			i += len("-Infinity") - 1
			continue
		}
		b.WriteByte(c)
	}
	if !found {
		nan = ""
	}
	return b.String(), nan
}

// withNaN is v with the number nan replaced by NaN.
func withNaN(v any, nan json.Number) any {
	switch t := v.(type) {
	case json.Number:
		if t == nan {
			return math.NaN()
		}
	case []any:
		for i := range t {
			t[i] = withNaN(t[i], nan)
		}
	case map[string]any:
		for k := range t {
			t[k] = withNaN(t[k], nan)
		}
	}
	return v
}

// detailValue is a decoded JSON value as a verdict's details hold it: the
// numbers JSON cannot hold (NaN, the infinities) as Python prints them.
func detailValue(v any) any {
	switch t := v.(type) {
	case float64:
		return detailNumber(t)
	case json.Number:
		if f, err := t.Float64(); err != nil && math.IsInf(f, 0) {
			return detailNumber(f)
		}
	case []any:
		out := make([]any, len(t))
		for i := range t {
			out[i] = detailValue(t[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(t))
		for k := range t {
			out[k] = detailValue(t[k])
		}
		return out
	}
	return v
}

// pyNumber is a JSON number as Python holds it: an integer exactly, a
// float as the nearest double (an infinity past its range). Python compares
// an int with an int, or with a float, exactly; so does cmp.
type pyNumber struct {
	r   *big.Rat
	inf int  // -1 or +1 for an infinity; r is nil then
	nan bool // NaN; r is nil then
}

// cmp orders two numbers that are not NaN.
func (a pyNumber) cmp(b pyNumber) int {
	if a.inf != 0 || b.inf != 0 {
		return cmp.Compare(a.inf, b.inf)
	}
	return a.r.Cmp(b.r)
}

// compare applies op to a and b as Python does: NaN is equal to nothing,
// and neither less nor greater than anything.
func (a pyNumber) compare(op string, b pyNumber) (bool, error) {
	if a.nan || b.nan {
		if _, err := compareOrder(op, 0); err != nil {
			return false, err
		}
		return opName(op) == "ne", nil
	}
	return compareOrder(op, a.cmp(b))
}

// asNumber reads a JSON number as little-loops does: Python counts true
// and false as the numbers 1 and 0.
func asNumber(v any) (pyNumber, bool) {
	switch n := v.(type) {
	case json.Number:
		s := n.String()
		if !strings.ContainsAny(s, ".eE") {
			i, ok := new(big.Int).SetString(s, 10)
			return pyNumber{r: new(big.Rat).SetInt(i)}, ok
		}
		f, err := strconv.ParseFloat(s, 64)
		switch {
		case math.IsInf(f, 0):
			return pyNumber{inf: int(math.Copysign(1, f))}, true
		case err != nil:
			return pyNumber{}, false
		}
		return pyNumber{r: new(big.Rat).SetFloat64(f)}, true
	case float64: // NaN (withNaN)
		if math.IsNaN(n) {
			return pyNumber{nan: true}, true
		}
		return pyNumber{r: new(big.Rat).SetFloat64(n)}, true
	case bool:
		if n {
			return pyNumber{r: big.NewRat(1, 1)}, true
		}
		return pyNumber{r: new(big.Rat)}, true
	}
	return pyNumber{}, false
}

// pyEqual is Python's == on decoded JSON: numbers (true and false among
// them) equal by value, so 1 == 1.0 == true, in lists and objects too.
func pyEqual(a, b any) bool {
	if x, ok := asNumber(a); ok {
		y, ok := asNumber(b)
		return ok && !x.nan && !y.nan && x.cmp(y) == 0
	}
	switch x := a.(type) {
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !pyEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !pyEqual(v, w) {
				return false
			}
		}
		return true
	}
	return a == b // strings and null
}

func outputJSON(cfg *v1alpha1.Evaluate, in Input) Result {
	doc, err := decodeJSON(in.Output)
	if err != nil {
		return errorResult("output is not JSON: %v", err)
	}
	value, ok := LookupPath(doc, cfg.Path)
	if !ok {
		return errorResult("path %q not found in the output", cfg.Path)
	}
	if cfg.Target == nil {
		return errorResult("target is not set")
	}
	target, err := decodeJSON(string(bytes.TrimSpace(cfg.Target.Raw)))
	if err != nil {
		return errorResult("target is not JSON: %v", err)
	}
	if s, isStr := target.(string); isStr && strings.Contains(s, "${") {
		if s, err = in.expand(s); err != nil {
			return errorResult("cannot resolve target: %v", err)
		}
		target = s
	}
	details := map[string]any{"value": detailValue(value), "path": cfg.Path, "target": detailValue(target), "operator": opName(cfg.Operator)}
	a, aNum := asNumber(value)
	b, bNum := asNumber(target)
	if aNum && bNum {
		ok, err := a.compare(cfg.Operator, b)
		if err != nil {
			return errorResult("%v", err)
		}
		return Result{Verdict: boolVerdict(ok), Details: details}
	}
	equal := pyEqual(value, target)
	switch opName(cfg.Operator) {
	case "eq":
		return Result{Verdict: boolVerdict(equal), Details: details}
	case "ne":
		return Result{Verdict: boolVerdict(!equal), Details: details}
	}
	return errorResult("operator %q needs two numbers", cfg.Operator)
}
