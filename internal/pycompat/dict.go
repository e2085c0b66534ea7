package pycompat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
)

// Dict is a mapping that keeps its keys in the order they were first set,
// as a Python dict does: little-loops prints a mapping of a loop file (or
// of JSON) in the order it was written, and so do Repr and JSONDumps. Set
// a key again and its value changes, its place does not.
type Dict struct {
	keys []string
	vals map[string]any
}

// NewDict returns an empty Dict with room for n keys.
func NewDict(n int) *Dict {
	return &Dict{keys: make([]string, 0, n), vals: make(map[string]any, n)}
}

// Set sets key k to v.
func (d *Dict) Set(k string, v any) {
	if _, ok := d.vals[k]; !ok {
		d.keys = append(d.keys, k)
	}
	d.vals[k] = v
}

// Get returns the value of k, and whether d has it.
func (d *Dict) Get(k string) (any, bool) {
	if d == nil {
		return nil, false
	}
	v, ok := d.vals[k]
	return v, ok
}

// Keys returns the keys in their order.
func (d *Dict) Keys() []string {
	if d == nil {
		return nil
	}
	return slices.Clone(d.keys)
}

// Len is the number of keys.
func (d *Dict) Len() int {
	if d == nil {
		return 0
	}
	return len(d.keys)
}

// Map returns the values by key, their order lost.
func (d *Dict) Map() map[string]any {
	if d == nil {
		return nil
	}
	return maps.Clone(d.vals)
}

// MarshalJSON writes the keys in their order (<, > and & as they are:
// the encoder that asked escapes them if it escapes HTML).
func (d *Dict) MarshalJSON() ([]byte, error) {
	if d == nil {
		return []byte("null"), nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	b.WriteByte('{')
	for i, k := range d.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := enc.Encode(k); err != nil {
			return nil, err
		}
		b.Truncate(b.Len() - 1) // Encode's newline
		b.WriteByte(':')
		if err := enc.Encode(d.vals[k]); err != nil {
			return nil, err
		}
		b.Truncate(b.Len() - 1)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads an object, its keys in their order (objects within
// it become Dicts too).
func (d *Dict) UnmarshalJSON(data []byte) error {
	v, err := DecodeJSON(data)
	if err != nil {
		return err
	}
	got, ok := v.(*Dict)
	if !ok {
		return errors.New("not a JSON object")
	}
	*d = *got
	return nil
}

// DecodeJSON decodes one JSON value as Python's json.loads does, but for
// numbers, which stay as written (json.Number): objects become Dicts in
// the order of their keys (a repeated key keeps its first place and its
// last value), arrays []any.
func DecodeJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("invalid JSON: something after the value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := NewDict(0)
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("invalid JSON: object key %v", kt)
				}
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				d.Set(k, v)
			}
			if _, err := dec.Token(); err != nil { // }
				return nil, err
			}
			return d, nil
		case '[':
			list := []any{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			if _, err := dec.Token(); err != nil { // ]
				return nil, err
			}
			return list, nil
		}
		return nil, fmt.Errorf("invalid JSON: unexpected %v", t)
	}
	return tok, nil // string, json.Number, bool or nil
}

// Plain is v with its Dicts made maps (their order lost), however deep,
// for code that reads values as encoding/json decodes them.
func Plain(v any) any {
	switch t := v.(type) {
	case *Dict:
		if t == nil {
			return nil
		}
		m := make(map[string]any, len(t.keys))
		for k, e := range t.vals {
			m[k] = Plain(e)
		}
		return m
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = Plain(e)
		}
		return out
	}
	return v
}

// String is d as Python prints it (Repr).
func (d *Dict) String() string { return Repr(d) }
