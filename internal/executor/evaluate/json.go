package evaluate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
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

func asNumber(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
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
	equal := reflect.DeepEqual(value, target)
	switch opName(cfg.Operator) {
	case "eq":
		return Result{Verdict: boolVerdict(equal), Details: details}
	case "ne":
		return Result{Verdict: boolVerdict(!equal), Details: details}
	}
	return errorResult("operator %q needs two numbers", cfg.Operator)
}
