package loopfile

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The typed values of a little-loops file: each reader names the field it
// reads in its error.

func (r *reader) str(m map[string]any, k, fp string) string {
	switch v := m[k].(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	case nil:
		return ""
	}
	r.fail("%s: must be a string, not %s", fp, shown(m[k]))
	return ""
}

func (r *reader) strings(m map[string]any, k, fp string) []string {
	list, ok := m[k].([]any)
	if !ok {
		r.fail("%s: must be a list of strings", fp)
		return nil
	}
	out := make([]string, 0, len(list))
	for i := range list {
		out = append(out, r.str(map[string]any{"v": list[i]}, "v", fmt.Sprintf("%s[%d]", fp, i)))
	}
	return out
}

func (r *reader) boolean(m map[string]any, k, fp string) bool {
	b, ok := m[k].(bool)
	if !ok {
		r.fail("%s: must be true or false, not %s", fp, shown(m[k]))
	}
	return b
}

func (r *reader) number(m map[string]any, k, fp string) float64 {
	n, ok := m[k].(json.Number)
	if !ok {
		r.fail("%s: must be a number, not %s", fp, shown(m[k]))
		return 0
	}
	f, err := n.Float64()
	if err != nil {
		r.fail("%s: %v", fp, err)
	}
	return f
}

func (r *reader) int32p(m map[string]any, k, fp string) *int32 {
	if _, ok := m[k].(json.Number); !ok {
		r.fail("%s: must be a whole number, not %s", fp, shown(m[k]))
		return nil
	}
	f := r.number(m, k, fp)
	if f != math.Trunc(f) || f > math.MaxInt32 || f < math.MinInt32 {
		r.fail("%s: must be a whole number", fp)
		return nil
	}
	i := int32(f)
	return &i
}

// duration reads seconds (little-loops) or a Go duration string ("90s").
func (r *reader) duration(m map[string]any, k, fp string) *metav1.Duration {
	switch v := m[k].(type) {
	case nil:
		return nil
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			r.fail("%s: %v", fp, err)
			return nil
		}
		return &metav1.Duration{Duration: time.Duration(f * float64(time.Second))}
	case string:
		d, err := time.ParseDuration(v)
		if err != nil {
			r.fail("%s: must be seconds or a duration such as 90s, 5m or 1h30m, not %q", fp, v)
			return nil
		}
		return &metav1.Duration{Duration: d}
	}
	r.fail("%s: must be seconds or a duration such as 90s, not %s", fp, shown(m[k]))
	return nil
}

// shown is a value as a message quotes it: a string quoted, a mapping or a
// list named, anything else as written.
func shown(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("%q", v)
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case nil:
		return "empty"
	}
	return fmt.Sprint(v)
}
