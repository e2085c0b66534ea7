package loopfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/looprun/looprun/internal/pycompat"
)

// A little-loops file is read by PyYAML (safe_load, YAML 1.1), and what a
// plain scalar means follows its resolvers, not YAML 1.2's nor those of
// Kubernetes' YAML library: n and y are words (n: 3 is the key n), yes/no
// and on/off are booleans, 0777 is octal, 1e3 without a dot is text.

var (
	pyInt   = regexp.MustCompile(`^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$`)
	pyFloat = regexp.MustCompile(`^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$`)
	pyNull  = map[string]bool{"": true, "~": true, "null": true, "Null": true, "NULL": true}
)

// decodePyYAML decodes one YAML document into plain values as PyYAML
// reads it: numbers become json.Number (a float keeps a dot or an
// exponent), booleans, nil, strings, []any and map[string]any (a key that
// is not text becomes the text Python would print for it). order, when
// not nil, learns the order of each mapping's keys as PyYAML builds its
// dict.
func decodePyYAML(data []byte, order keyOrder) (any, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	if doc.Kind == 0 {
		return nil, nil
	}
	d := &pyDecoder{order: order}
	return d.value(&doc, 0)
}

// Bounds on what aliases may expand to: a billion laughs is refused, not
// built.
const (
	maxAliasDepth = 64
	maxValues     = 1 << 20
)

// pyDecoder counts the values it builds, and notes the order of the keys
// of the mappings.
type pyDecoder struct {
	values int
	order  keyOrder
}

func (d *pyDecoder) value(n *yaml.Node, depth int) (any, error) {
	if depth > maxAliasDepth {
		return nil, errors.New("YAML aliases nest too deep")
	}
	if d.values++; d.values > maxValues {
		return nil, fmt.Errorf("the YAML expands to more than %d values (aliases of aliases?)", maxValues)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return d.value(n.Content[0], depth)
	case yaml.AliasNode:
		return d.value(n.Alias, depth+1)
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := d.value(c, depth)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		return d.mapping(n, depth)
	case yaml.ScalarNode:
		return pyScalar(n)
	}
	return nil, fmt.Errorf("line %d: unexpected YAML node", n.Line)
}

// pyMapping decodes a mapping; merge keys (<<) bring in the keys of the
// mappings they name that the mapping does not set itself.
//
// The keys are in the order PyYAML gives its dict: the merged mappings'
// first (the last named first), then the mapping's own; a key set again
// keeps its first place.
func (d *pyDecoder) mapping(n *yaml.Node, depth int) (map[string]any, error) {
	out := map[string]any{}
	var merged []map[string]any
	var own []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Value == "<<" && k.Style == 0 {
			m, err := d.mergeSources(v, depth)
			if err != nil {
				return nil, err
			}
			merged = append(merged, m...)
			continue
		}
		key, err := d.value(k, depth)
		if err != nil {
			return nil, err
		}
		val, err := d.value(v, depth)
		if err != nil {
			return nil, err
		}
		out[pycompat.Str(key)] = val
		own = append(own, pycompat.Str(key))
	}
	for _, m := range merged {
		for k, v := range m {
			if _, ok := out[k]; !ok {
				out[k] = v
			}
		}
	}
	if d.order != nil {
		var keys []string
		for _, m := range slices.Backward(merged) {
			keys = append(keys, d.order.keys(m)...)
		}
		d.order.note(out, append(keys, own...)) // keys keeps the first of each
	}
	return out, nil
}

func (d *pyDecoder) mergeSources(v *yaml.Node, depth int) ([]map[string]any, error) {
	src, err := d.value(v, depth)
	if err != nil {
		return nil, err
	}
	switch s := src.(type) {
	case map[string]any:
		return []map[string]any{s}, nil
	case []any:
		var out []map[string]any
		for _, e := range s {
			m, ok := e.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("line %d: a merge key (<<) takes mappings", v.Line)
			}
			out = append(out, m)
		}
		return out, nil
	}
	return nil, fmt.Errorf("line %d: a merge key (<<) takes mappings", v.Line)
}

func pyScalar(n *yaml.Node) (any, error) {
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return n.Value, nil // quoted or a block: text
	}
	if n.Style&yaml.TaggedStyle != 0 && n.Tag != "!!int" && n.Tag != "!!float" && n.Tag != "!!bool" && n.Tag != "!!null" {
		return n.Value, nil // !!str, or a tag of its own: text
	}
	s := n.Value
	switch {
	case pyNull[s]:
		return nil, nil
	case pyYAMLBools[s]:
		switch strings.ToLower(s) {
		case "yes", "true", "on":
			return true, nil
		}
		return false, nil
	case pyInt.MatchString(s):
		return pyIntValue(s)
	case pyFloat.MatchString(s):
		return pyFloatValue(s), nil
	}
	return s, nil
}

// pyIntValue is the decimal of an int as PyYAML reads it: underscores
// ignored, 0b binary, 0x hex, a leading 0 octal, a:b:c base 60.
func pyIntValue(s string) (any, error) {
	s = strings.ReplaceAll(s, "_", "")
	sign := ""
	if s[0] == '-' || s[0] == '+' {
		if s[0] == '-' {
			sign = "-"
		}
		s = s[1:]
	}
	v := new(big.Int)
	var ok bool
	switch {
	case strings.Contains(s, ":"):
		ok = true
		for _, part := range strings.Split(s, ":") {
			d, err := strconv.ParseInt(part, 10, 64)
			if err != nil {
				ok = false
				break
			}
			v.Mul(v, big.NewInt(60))
			v.Add(v, big.NewInt(d))
		}
	case strings.HasPrefix(s, "0b"):
		_, ok = v.SetString(s[2:], 2)
	case strings.HasPrefix(s, "0x"):
		_, ok = v.SetString(s[2:], 16)
	case len(s) > 1 && s[0] == '0':
		_, ok = v.SetString(s[1:], 8)
	default:
		_, ok = v.SetString(s, 10)
	}
	if !ok {
		return sign + s, nil // cannot happen for what pyInt matched; keep the text
	}
	return json.Number(sign + v.String()), nil
}

// pyFloatValue is a float as PyYAML reads it, written as Python prints it
// (2.0, 0.5, 1e+20); infinities and NaN, which JSON cannot hold, stay text.
func pyFloatValue(s string) any {
	t := strings.ReplaceAll(s, "_", "")
	lower := strings.ToLower(t)
	switch {
	case strings.HasSuffix(lower, ".inf"):
		if strings.HasPrefix(t, "-") {
			return "-inf"
		}
		return "inf"
	case lower == ".nan":
		return "nan"
	}
	var f float64
	if strings.Contains(t, ":") {
		sign := 1.0
		if t[0] == '-' || t[0] == '+' {
			if t[0] == '-' {
				sign = -1
			}
			t = t[1:]
		}
		parts := strings.Split(t, ":")
		for _, p := range parts {
			d, err := strconv.ParseFloat(p, 64)
			if err != nil {
				return s
			}
			f = f*60 + d
		}
		f *= sign
	} else {
		var err error
		if f, err = strconv.ParseFloat(t, 64); err != nil {
			return s
		}
	}
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return s
	}
	return json.Number(pycompat.FormatFloat(f))
}
