package evaluate

import (
	"bytes"
	"encoding/json"
	"fmt"
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

func decodeJSON(s string) (any, error) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("extra data after the JSON value")
	}
	return v, nil
}

// asNumber reads a JSON number as little-loops does: Python counts true
// and false as the numbers 1 and 0.
func asNumber(v any) (float64, bool) {
	switch n := v.(type) {
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	case bool:
		if n {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// pyEqual is Python's == on decoded JSON: numbers (true and false among
// them) equal by value, so 1 == 1.0 == true, in lists and objects too.
func pyEqual(a, b any) bool {
	if x, ok := asNumber(a); ok {
		y, ok := asNumber(b)
		return ok && x == y
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
	details := map[string]any{"value": value, "path": cfg.Path, "target": target, "operator": opName(cfg.Operator)}
	a, aNum := asNumber(value)
	b, bNum := asNumber(target)
	if aNum && bNum {
		ok, err := compare(cfg.Operator, a, b)
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
