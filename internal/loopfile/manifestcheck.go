package loopfile

import (
	"encoding"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// A manifest is checked against the Go types it becomes before it is
// decoded, so that a misspelt or misplaced field is named by its full path
// and its line: the strict decoder that follows only says "unknown field".
// Like the API server (and unlike encoding/json), a field's name must match
// in case.

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// fieldChecker walks a manifest's YAML beside the type it decodes into.
type fieldChecker struct {
	kind string // Loop or LoopTemplate
	errs []string
}

// checkManifestFields lists the fields of doc (a YAML document node) that
// a t (Loop or LoopTemplate) has no place for, and the values of the wrong
// shape (a mapping where a list goes), each with its line and path.
func checkManifestFields(doc *yaml.Node, t reflect.Type, kind string) []string {
	c := &fieldChecker{kind: kind}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		c.check(doc.Content[0], t, "[0]") // as checkYAML names the top
	}
	return c.errs
}

func (c *fieldChecker) fail(n *yaml.Node, path, format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf("line %d: %s: %s", n.Line, trimPath(path), fmt.Sprintf(format, args...)))
}

func (c *fieldChecker) check(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // null is every type's zero value
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if opaque(t) {
		return // decodes itself: a duration, free JSON, an int or string
	}
	switch t.Kind() {
	case reflect.Struct:
		c.checkStruct(n, t, path)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			c.fail(n, path, "must be a mapping")
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			c.check(n.Content[i+1], t.Elem(), path+"."+n.Content[i].Value)
		}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return // bytes are written as a base64 string
		}
		if n.Kind != yaml.SequenceNode {
			c.fail(n, path, "must be a list")
			return
		}
		for i, item := range n.Content {
			c.check(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Interface:
	default:
		if n.Kind != yaml.ScalarNode {
			c.fail(n, path, "must be a %s, not a %s", scalarName(t.Kind()), nodeName(n))
		}
	}
}

// checkStruct checks the fields of a mapping that decodes into struct t.
func (c *fieldChecker) checkStruct(n *yaml.Node, t reflect.Type, path string) {
	fields := jsonFields(t)
	if n.Kind != yaml.MappingNode {
		c.fail(n, path, "must be a mapping%s", misplacedFieldHint(path, t.Name(), fields))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == "<<" {
			continue // a merge key: its mappings are checked where they are written
		}
		p := path + "." + k.Value
		if f, ok := fields[k.Value]; ok {
			c.check(v, f, p)
			continue
		}
		c.fail(k, p, "%s", c.unknownField(k.Value, path, fields))
	}
}

// unknownField says why name has no place in the struct at path.
func (c *fieldChecker) unknownField(name, path string, fields map[string]reflect.Type) string {
	if name == "parameters" && c.kind == "Loop" && trimPath(path) == "spec" {
		return "a Loop takes no parameters: parameters are declared on a LoopTemplate (kind: LoopTemplate), " +
			"the loop other loops run as a sub-loop, and bound by the calling state's with"
	}
	return "unknown field" + didYouMean(name, slices.Sorted(maps.Keys(fields)))
}

// misplacedFieldHint explains a value where a mapping goes whose key is
// itself one of the mapping's fields: a state's next written at the
// indentation of the state names (spec.states.next: done).
func misplacedFieldHint(path, typeName string, fields map[string]reflect.Type) string {
	if _, name, _ := cutLast(trimPath(path)); fields[name] != nil {
		return fmt.Sprintf(" (a %s); %s is a field of a %s: is it indented a level too little? Indent it under the entry above", typeName, name, typeName)
	}
	return ""
}

// cutLast splits a dotted path at its last dot.
func cutLast(p string) (string, string, bool) {
	i := strings.LastIndexByte(p, '.')
	if i < 0 {
		return "", p, false
	}
	return p[:i], p[i+1:], true
}

// opaque reports whether t decodes itself from JSON (metav1.Duration,
// apiextensionsv1.JSON, intstr.IntOrString, metav1.Time).
func opaque(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return t.Implements(jsonUnmarshaler) || pt.Implements(jsonUnmarshaler) || pt.Implements(textUnmarshaler)
}

// jsonFields are the fields of struct t by their JSON names, the fields of
// inlined (embedded) structs among them.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" && opts == "" {
			continue
		}
		ft := f.Type
		if f.Anonymous && name == "" || strings.Contains(","+opts+",", ",inline,") {
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					if _, ok := out[k]; !ok {
						out[k] = v
					}
				}
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		out[name] = ft
	}
	return out
}

func scalarName(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Float32, reflect.Float64:
		return "number"
	}
	return "whole number"
}

func nodeName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	return "value"
}
