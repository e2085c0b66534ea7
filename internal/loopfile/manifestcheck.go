package loopfile

import (
	"encoding"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// failed are the paths of the fields in errs, and removed how many
	// of them were taken out of the document.
	failed  []string
	removed int
}

// checkManifestFields lists the fields of doc (a YAML document node) that
// a t (Loop or LoopTemplate) has no place for, and the values of the wrong
// shape (a mapping where a list goes) or type (a word where a number goes,
// a duration that does not parse), each with its line and path. It takes
// those fields out of doc, so that what is left decodes and can be checked
// further; failed are their paths.
func checkManifestFields(doc *yaml.Node, t reflect.Type, kind string) (errs, failed []string) {
	c := &fieldChecker{kind: kind}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		c.check(doc.Content[0], t, "[0]") // as checkYAML names the top
	}
	return c.errs, c.failed
}

func (c *fieldChecker) fail(n *yaml.Node, path, format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf("line %d: %s: %s", n.Line, trimPath(path), fmt.Sprintf(format, args...)))
	c.failed = append(c.failed, trimPath(path))
}

// prune takes the entry at i out of mapping n when checking its value
// found a problem that no entry further in was taken out for; it reports
// whether it did.
func (c *fieldChecker) prune(n *yaml.Node, i, errsBefore, removedBefore int) bool {
	if len(c.errs) == errsBefore || c.removed != removedBefore {
		return false
	}
	n.Content = append(n.Content[:i], n.Content[i+2:]...)
	c.removed++
	return true
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
		c.checkOpaque(n, t, path)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		c.checkStruct(n, t, path)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			c.fail(n, path, "must be a mapping")
			return
		}
		for i := 0; i+1 < len(n.Content); {
			e, r := len(c.errs), c.removed
			c.check(n.Content[i+1], t.Elem(), path+"."+n.Content[i].Value)
			if !c.prune(n, i, e, r) {
				i += 2
			}
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
		} else if !scalarFits(n, t.Kind()) {
			c.fail(n, path, "must be a %s, not %s", scalarName(t.Kind()), quoteNode(n))
		}
	}
}

var durationType = reflect.TypeFor[metav1.Duration]()

// checkOpaque checks a value that decodes itself: a duration must parse;
// free JSON, an int or string takes anything.
func (c *fieldChecker) checkOpaque(n *yaml.Node, t reflect.Type, path string) {
	if t != durationType {
		return
	}
	if _, err := time.ParseDuration(n.Value); n.Kind != yaml.ScalarNode || err != nil {
		c.fail(n, path, "must be a duration such as 90s, 5m or 1h30m, not %s", quoteNode(n))
	}
}

// scalarFits reports whether the scalar n decodes into a field of kind k:
// a whole number into an integer, a number into a float, a boolean into a
// bool (a string takes anything the YAML reader turns into one).
func scalarFits(n *yaml.Node, k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return n.Tag == "!!int"
	case reflect.Float32, reflect.Float64:
		return n.Tag == "!!int" || n.Tag == "!!float"
	case reflect.Bool:
		return n.Tag == "!!bool" || pyYAMLBools[n.Value]
	}
	return true
}

// quoteNode is a value as a message shows it: a scalar quoted, else what
// kind of node it is.
func quoteNode(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return strconv.Quote(n.Value)
	}
	return "a " + nodeName(n)
}

// checkStruct checks the fields of a mapping that decodes into struct t.
func (c *fieldChecker) checkStruct(n *yaml.Node, t reflect.Type, path string) {
	fields := jsonFields(t)
	if n.Kind != yaml.MappingNode {
		c.fail(n, path, "must be a mapping%s", misplacedFieldHint(path, t.Name(), fields))
		return
	}
	for i := 0; i+1 < len(n.Content); {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == "<<" {
			i += 2
			continue // a merge key: its mappings are checked where they are written
		}
		p := path + "." + k.Value
		e, r := len(c.errs), c.removed
		if f, ok := fields[k.Value]; ok {
			c.check(v, f, p)
		} else {
			c.fail(k, p, "%s", c.unknownField(k.Value, path, fields))
		}
		if !c.prune(n, i, e, r) {
			i += 2
		}
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
	if _, name := cutLast(trimPath(path)); fields[name] != nil {
		return fmt.Sprintf(" (a %s); %s is a field of a %s: is it indented a level too little? Indent it under the entry above", typeName, name, typeName)
	}
	return ""
}

// cutLast splits a dotted path at its last dot.
func cutLast(p string) (string, string) {
	i := strings.LastIndexByte(p, '.')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
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
