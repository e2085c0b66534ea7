package loopfile

import (
	"bytes"
	"encoding/json"
	"maps"
	"reflect"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// keyOrder remembers the order in which a loop file wrote each mapping's
// keys (the reader works with maps, which forget it), for the values
// little-loops prints as written: ${context.NAME} of a mapping, an MCP
// call's params. A mapping is known by its map; the map is kept with its
// keys so that no other map can take its place while the file is read.
type keyOrder map[uintptr]orderedKeys

type orderedKeys struct {
	m    map[string]any
	keys []string
}

// note records that m's keys were written in the order keys.
func (o keyOrder) note(m map[string]any, keys []string) {
	if o != nil {
		o[reflect.ValueOf(m).Pointer()] = orderedKeys{m, keys}
	}
}

// keys are m's keys in the order they were written, then any the file
// did not write (sorted).
func (o keyOrder) keys(m map[string]any) []string {
	var out []string
	if e, ok := o[reflect.ValueOf(m).Pointer()]; ok {
		for _, k := range e.keys {
			if _, ok := m[k]; ok && !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	}
	if len(out) == len(m) {
		return out
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// merged is base overlaid with over, its keys in little-loops' order:
// base's, then those over adds (see deepMerge).
func (o keyOrder) merged(out, base, over map[string]any) {
	keys := o.keys(base)
	for _, k := range o.keys(over) {
		if _, ok := base[k]; !ok {
			keys = append(keys, k)
		}
	}
	o.note(out, keys)
}

// toJSON encodes v with its mappings' keys in the order the file wrote
// them.
func (o keyOrder) toJSON(v any) apiextensionsv1.JSON {
	var b bytes.Buffer
	if err := o.encode(&b, v); err != nil {
		return apiextensionsv1.JSON{Raw: []byte("null")}
	}
	return apiextensionsv1.JSON{Raw: b.Bytes()}
}

func (o keyOrder) encode(b *bytes.Buffer, v any) error {
	switch t := v.(type) {
	case map[string]any:
		b.WriteByte('{')
		for i, k := range o.keys(t) {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, err := json.Marshal(k)
			if err != nil {
				return err
			}
			b.Write(kb)
			b.WriteByte(':')
			if err := o.encode(b, t[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
		return nil
	case []any:
		b.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := o.encode(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
		return nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b.Write(raw)
	return nil
}
