package evaluate

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/pycompat"
)

// Operators lists the comparison operators.
var Operators = []string{"eq", "ne", "lt", "le", "gt", "ge"}

// compare applies op to two floats as Python does: NaN is equal to
// nothing, not even itself, and neither less nor greater than anything.
func compare(op string, a, b float64) (bool, error) {
	switch op {
	case "", "eq":
		return a == b, nil
	case "ne":
		return a != b, nil
	case "lt":
		return a < b, nil
	case "le":
		return a <= b, nil
	case "gt":
		return a > b, nil
	case "ge":
		return a >= b, nil
	}
	return false, fmt.Errorf("unknown operator %q", op)
}

// compareOrder applies op to the order of two values (c as cmp.Compare
// gives it).
func compareOrder(op string, c int) (bool, error) {
	switch op {
	case "", "eq":
		return c == 0, nil
	case "ne":
		return c != 0, nil
	case "lt":
		return c < 0, nil
	case "le":
		return c <= 0, nil
	case "gt":
		return c > 0, nil
	case "ge":
		return c >= 0, nil
	}
	return false, fmt.Errorf("unknown operator %q", op)
}

func opName(op string) string {
	if op == "" {
		return "eq"
	}
	return op
}

// parseNumber reads a number as little-loops reads one, with Python's
// float() (pycompat.ParseFloat): inf and nan are numbers too.
func parseNumber(s string) (float64, error) {
	f, ok := pycompat.ParseFloat(s)
	if !ok {
		return 0, fmt.Errorf("%q is not a number", truncate(pycompat.Strip(s), 80))
	}
	return f, nil
}

// errNotText says a number field holds neither a number nor text (a
// list, a mapping): Python's float() raises TypeError for it.
var errNotText = errors.New("is neither a number nor a template")

// numberValue reads a number or a template from a JSON field as
// little-loops reads it, with Python's float(): a number, a boolean (true
// is 1), or text, its templates expanded, that reads as a number. Any
// other value is errNotText.
func numberValue(j *apiextensionsv1.JSON, in Input) (float64, error) {
	if j == nil || len(j.Raw) == 0 {
		return 0, fmt.Errorf("not set")
	}
	var v any
	if err := json.Unmarshal(j.Raw, &v); err != nil {
		return 0, err
	}
	switch t := v.(type) {
	case float64:
		return t, nil
	case bool:
		if t {
			return 1, nil
		}
		return 0, nil
	case string:
		s, err := in.expand(t)
		if err != nil {
			return 0, err
		}
		return parseNumber(s)
	}
	return 0, fmt.Errorf("%s %w", string(j.Raw), errNotText)
}

// BrokenReason words, as ll-loop does when its run ends there, why an
// evaluator whose result is Broken could not judge: its number fields as
// the loop file writes them (cfg, its templates not expanded).
func BrokenReason(cfg *v1alpha1.Evaluate) string {
	raw := func(j *apiextensionsv1.JSON) (any, bool) {
		var v any
		if j == nil || json.Unmarshal(j.Raw, &v) != nil {
			return nil, false
		}
		return v, true
	}
	if cfg.Type == v1alpha1.EvalOutputNumeric {
		if s, ok := mustText(raw(cfg.Target)); ok {
			return "output_numeric target must be numeric, got: " + pycompat.Repr(s)
		}
	}
	for _, j := range []*apiextensionsv1.JSON{cfg.Target, cfg.Tolerance} {
		if v, ok := raw(j); ok && !numberLike(v) {
			return "float() argument must be a string or a real number, not '" + pyType(v) + "'"
		}
	}
	return "the evaluator's target cannot be read as a number"
}

// mustText is v when it is text.
func mustText(v any, ok bool) (string, bool) {
	s, isText := v.(string)
	return s, ok && isText
}

// numberLike reports whether Python's float() takes v without a TypeError.
func numberLike(v any) bool {
	switch v.(type) {
	case float64, bool, string:
		return true
	}
	return false
}

// pyType is the name of the Python type of a decoded JSON value.
func pyType(v any) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case []any:
		return "list"
	case map[string]any:
		return "dict"
	}
	return fmt.Sprintf("%T", v)
}

// keyPattern finds KEY = NUMBER as little-loops does: any Unicode white
// space around the "=", a signed number whose whole part may be left out
// (+5, .5, 1e3).
func keyPattern(key string) *regexp.Regexp {
	const space = `[\t\n\v\f\r\x1c-\x1f\x{85}\p{Z}]*`
	return regexp.MustCompile(regexp.QuoteMeta(key) + space + "=" + space + `([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)`)
}

// KeyMatcher finds "KEY = NUMBER" in text, for output_numeric with a key.
type KeyMatcher struct{ re *regexp.Regexp }

// NewKeyMatcher compiles the matcher of key.
func NewKeyMatcher(key string) KeyMatcher { return KeyMatcher{re: keyPattern(key)} }

// Last returns the number of the last match in text.
func (k KeyMatcher) Last(text string) (string, bool) {
	m := k.re.FindAllStringSubmatch(text, -1)
	if len(m) == 0 {
		return "", false
	}
	return m[len(m)-1][1], true
}

// LastKeyValue returns the number of the last "KEY = NUMBER" in text.
func LastKeyValue(key, text string) (string, bool) { return NewKeyMatcher(key).Last(text) }

func outputNumeric(cfg *v1alpha1.Evaluate, in Input) Result {
	// The target first, as little-loops reads it before the output: one
	// it cannot read ends its run (Broken).
	target, err := numberValue(cfg.Target, in)
	if err != nil {
		r := errorResult("cannot resolve target: %v", err)
		r.Broken = true
		return r
	}
	text := in.Output
	if cfg.Key != "" {
		// What was streamed saw every line; the tail only the end.
		v, ok := LastKeyValue(cfg.Key, in.Output)
		if s := in.Streamed; s != nil {
			v, ok = s.KeyValue, s.KeyFound
		}
		if !ok {
			return errorResult("no %q = NUMBER in the output", cfg.Key)
		}
		text = v
	}
	value, err := parseNumber(text)
	if err != nil {
		return errorResult("cannot read the output as a number: %v", err)
	}
	ok, err := compare(cfg.Operator, value, target)
	if err != nil {
		return errorResult("%v", err)
	}
	return Result{Verdict: boolVerdict(ok), Details: map[string]any{"value": detailNumber(value), "target": detailNumber(target), "operator": opName(cfg.Operator)}}
}

// detailNumber is a number as a verdict's details hold it: an infinity or
// NaN, which JSON cannot hold, as Python prints it (inf, -inf, nan).
func detailNumber(f float64) any {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return pycompat.FormatFloat(f)
	}
	return f
}

// truncate is the first n bytes of s (headOf) and "..." when it was cut.
func truncate(s string, n int) string {
	if h := headOf(s, n); len(h) < len(s) {
		return h + "..."
	}
	return s
}
