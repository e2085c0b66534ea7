package loopfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// pyYAMLBools are the plain words PyYAML (YAML 1.1, what little-loops
// reads files with) takes for booleans.
var pyYAMLBools = map[string]bool{
	"yes": true, "Yes": true, "YES": true, "no": true, "No": true, "NO": true,
	"true": true, "True": true, "TRUE": true, "false": true, "False": true, "FALSE": true,
	"on": true, "On": true, "ON": true, "off": true, "Off": true, "OFF": true,
}

// yaml11Bools are the plain words YAML 1.1 readers other than PyYAML
// (kubectl's among them) take for booleans besides pyYAMLBools.
var yaml11Bools = map[string]bool{"y": true, "Y": true, "n": true, "N": true}

// booleanKeyWarning is the warning for a mapping key k that a YAML reader of the
// file takes for a boolean (PyYAML for a little-loops file, kubectl's YAML
// 1.1 for a manifest) while looprun keeps the word; "" for any other key.
func booleanKeyWarning(k *yaml.Node, path string, manifest bool) string {
	if k.Kind != yaml.ScalarNode || k.Style != 0 {
		return ""
	}
	switch {
	case pyYAMLBools[k.Value]:
		return fmt.Sprintf("line %d: %s: the key %s is unquoted; PyYAML (little-loops) reads it as a boolean, looprun as the word %q: quote it ('%s')",
			k.Line, trimPath(path), k.Value, k.Value, k.Value)
	case manifest && yaml11Bools[k.Value]:
		return fmt.Sprintf("line %d: %s: the key %s is unquoted; kubectl and other YAML 1.1 readers read it as the boolean %t, looprun as the word %q: quote it ('%s')",
			k.Line, trimPath(path), k.Value, strings.EqualFold(k.Value, "y"), k.Value, k.Value)
	}
	return ""
}

// isManifest reports whether a document is a Kubernetes manifest (it has
// apiVersion or kind at the top), which kubectl reads as YAML 1.1.
func isManifest(doc *yaml.Node) bool {
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return false
	}
	top := doc.Content[0].Content
	for i := 0; i+1 < len(top); i += 2 {
		if top[i].Value == "apiVersion" || top[i].Value == "kind" {
			return true
		}
	}
	return false
}

// checkedYAML is a loop file's YAML, read and checked.
type checkedYAML struct {
	// data is the YAML to decode.
	data []byte
	// doc is the document as written (lines as in the file).
	doc      *yaml.Node
	warnings []string
	// lines are the lines of the document's keys and list items by path
	// (states.a.action, import[0]).
	lines map[string]int
}

// checkYAML reads a loop file's YAML strictly, before it is decoded: one
// document only, no key twice in a mapping. A key PyYAML would read as a
// boolean (an unquoted yes: or no: route key) is kept as the word written,
// which is what a loop means by it, with a warning.
func checkYAML(data []byte) (*checkedYAML, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the file is empty")
		}
		return nil, syntaxError(data, err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil && !emptyDocument(&extra):
		return nil, fmt.Errorf("line %d: a second YAML document: a loop file holds one loop (split it into files)", extra.Line)
	case err != nil && !errors.Is(err, io.EOF):
		return nil, syntaxError(data, err)
	}
	var warnings []string
	lines := map[string]int{}
	changed := false
	manifest := isManifest(&doc)
	var walk func(n *yaml.Node, path string) error
	walk = func(n *yaml.Node, path string) error {
		switch n.Kind {
		case yaml.DocumentNode, yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				if n.Kind == yaml.SequenceNode {
					lines[trimPath(p)] = c.Line
				}
				if err := walk(c, p); err != nil {
					return err
				}
			}
		case yaml.MappingNode:
			seen := map[string]int{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				if w := booleanKeyWarning(k, path, manifest); w != "" {
					warnings = append(warnings, w)
					k.Tag, k.Style, changed = "!!str", yaml.SingleQuotedStyle, true
				}
				if first, dup := seen[k.Value]; dup {
					return fmt.Errorf("line %d: %s: the key %s appears twice (first on line %d); YAML readers disagree on which one wins", k.Line, trimPath(path), k.Value, first)
				}
				seen[k.Value] = k.Line
				lines[trimPath(path+"."+k.Value)] = k.Line
				if err := walk(n.Content[i+1], path+"."+k.Value); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(&doc, ""); err != nil {
		return nil, err
	}
	c := &checkedYAML{data: data, doc: &doc, warnings: warnings, lines: lines}
	if changed {
		out, err := yaml.Marshal(&doc)
		if err != nil {
			return nil, err
		}
		c.data = out
	}
	return c, nil
}

func emptyDocument(n *yaml.Node) bool {
	return n.Kind == 0 || n.Kind == yaml.DocumentNode && (len(n.Content) == 0 || n.Content[0].Tag == "!!null")
}

func trimPath(p string) string {
	if p = strings.TrimPrefix(p, "[0]."); p == "" || p == "[0]" {
		return "the top level"
	}
	return p
}

var yamlErrorLine = regexp.MustCompile(`^yaml: (?:line \d+: )?`)

// syntaxError is the error for YAML that does not parse, at the line where
// it stops parsing. The YAML reader names the line where the mapping that
// failed began (line 3 for a key at a wrong indentation on line 7); the
// line meant is the first one whose text makes the file fail as it does.
func syntaxError(data []byte, err error) error {
	problem := yamlErrorLine.ReplaceAllString(err.Error(), "")
	lines := bytes.SplitAfter(data, []byte("\n"))
	fails := func(n int) bool { return yamlProblem(bytes.Join(lines[:n], nil)) == problem }
	if !fails(len(lines)) {
		return fmt.Errorf("not valid YAML: %w", err)
	}
	lo, hi := 1, len(lines) // fails(hi); find the first n that fails
	for lo < hi {
		if mid := (lo + hi) / 2; fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	text := strings.TrimRight(string(lines[lo-1]), "\r\n")
	msg := fmt.Sprintf("not valid YAML: line %d: %s", lo, problem)
	if indent := indentOf(text); problem == "did not find expected key" && !indentedAs(lines[:lo-1], indent) {
		spaces := "spaces"
		if indent == 1 {
			spaces = "space"
		}
		msg += fmt.Sprintf(": %q is indented %d %s, which lines up with no key above it: indent it as the keys of the mapping it belongs to", strings.TrimSpace(text), indent, spaces)
	}
	return errors.New(msg)
}

// indentedAs reports whether a line of lines that is neither blank nor a
// comment starts with indent spaces.
func indentedAs(lines [][]byte, indent int) bool {
	return slices.ContainsFunc(lines, func(l []byte) bool {
		t := strings.TrimSpace(string(l))
		return t != "" && !strings.HasPrefix(t, "#") && indentOf(string(l)) == indent
	})
}

// indentOf is how many spaces a line starts with.
func indentOf(line string) int {
	return len(line) - len(strings.TrimLeft(line, " "))
}

// yamlProblem is the problem of YAML that does not parse, without its
// line; "" when it parses.
func yamlProblem(data []byte) string {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return ""
		}
		if err != nil {
			return yamlErrorLine.ReplaceAllString(err.Error(), "")
		}
	}
}
