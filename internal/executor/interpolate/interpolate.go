// Package interpolate expands ${namespace.path} templates in actions, route
// targets and evaluator fields.
//
// Syntax: ${ns.path} is replaced by the value; ${ns.path:default=TEXT} uses
// TEXT when the value cannot be resolved; ${ns.path?} uses the empty string;
// ${ns.path:shell} quotes the value for bash. $${ is a literal ${, so bash's own
// ${VAR:-x} can be written $${VAR:-x}. Namespaces: context, captured, prev, param,
// result, state, loop and env.
package interpolate

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/looprun/looprun/internal/pycompat"
)

// Error is a template that cannot be expanded. Var is the reference as written.
type Error struct {
	Var    string
	Reason string
}

func (e *Error) Error() string {
	if e.Var == "" {
		return e.Reason
	}
	return fmt.Sprintf("${%s}: %s", e.Var, e.Reason)
}

const (
	suffixDefault = ":default="
	suffixShell   = ":shell"
	suffixOpt     = "?"
	escape        = "$${"
)

// ref is one parsed ${...} reference.
type ref struct {
	raw       string // text between the braces
	namespace string
	path      []string
	def       *string
	optional  bool
	shell     bool
}

// parseRef parses the text between ${ and }.
func parseRef(raw string) (ref, error) {
	r := ref{raw: raw}
	body := raw
	if i := strings.Index(body, suffixDefault); i >= 0 {
		d := body[i+len(suffixDefault):]
		body = body[:i]
		if strings.HasSuffix(body, suffixOpt) || strings.HasSuffix(body, suffixShell) {
			return r, &Error{Var: raw, Reason: "ambiguous suffix: use only one of :default=, ? and :shell"}
		}
		r.def = &d
	} else if strings.HasSuffix(body, suffixOpt) {
		body = strings.TrimSuffix(body, suffixOpt)
		r.optional = true
	} else if strings.HasSuffix(body, suffixShell) {
		body = strings.TrimSuffix(body, suffixShell)
		r.shell = true
	}
	if strings.Contains(body, ":-") {
		return r, &Error{Var: raw, Reason: "bash-style default is not supported: write ${ns.path:default=VALUE}, or $${VAR:-x} for a bash variable"}
	}
	if body == "messages" { // the whole messages log
		r.namespace, r.path = body, []string{""}
		return r, nil
	}
	ns, path, ok := strings.Cut(body, ".")
	if !ok || ns == "" || path == "" {
		return r, &Error{Var: raw, Reason: "a reference needs a namespace and a path, as in ${context.name}"}
	}
	if !knownNamespace(ns) {
		return r, &Error{Var: raw, Reason: fmt.Sprintf("unknown namespace %q (context, captured, prev, result, state, loop, env, param, messages)", ns)}
	}
	r.namespace = ns
	r.path = strings.Split(path, ".")
	if ns == "messages" {
		r.path = []string{path} // last(N) may not be split
		return r, nil
	}
	for _, p := range r.path {
		if p == "" {
			return r, &Error{Var: raw, Reason: "empty path segment"}
		}
	}
	return r, nil
}

func knownNamespace(ns string) bool {
	switch ns {
	case "context", "captured", "prev", "result", "state", "loop", "run", "env", "param", "messages":
		return true
	}
	return false
}

// scan walks a template, calling lit for literal text and onRef for each
// reference. It returns the first error from parsing or from onRef.
func scan(tmpl string, lit func(string), onRef func(ref) error) error {
	for len(tmpl) > 0 {
		i := strings.Index(tmpl, "${")
		if i < 0 {
			lit(tmpl)
			return nil
		}
		if i > 0 && tmpl[i-1] == '$' {
			// $${ escapes a literal ${.
			lit(tmpl[:i-1])
			lit("${")
			tmpl = tmpl[i+2:]
			continue
		}
		end := strings.IndexByte(tmpl[i+2:], '}')
		if end <= 0 {
			// No closing brace, or ${}: not a reference.
			lit(tmpl[:i+2])
			tmpl = tmpl[i+2:]
			continue
		}
		lit(tmpl[:i])
		r, err := parseRef(tmpl[i+2 : i+2+end])
		if err != nil {
			return err
		}
		if err := onRef(r); err != nil {
			return err
		}
		tmpl = tmpl[i+2+end+1:]
	}
	return nil
}

// Check reports a syntax error in a template without resolving anything.
func Check(tmpl string) error {
	return scan(tmpl, func(string) {}, func(ref) error { return nil })
}

// Ref is a reference found in a template.
type Ref struct {
	Namespace string
	Path      []string
	// Guarded is true when the reference has a default or is optional.
	Guarded bool
	// Shell is true for ${ns.path:shell}, quoted for a shell.
	Shell bool
}

// References lists the references of a template (nil on a syntax error).
func References(tmpl string) []Ref {
	var out []Ref
	err := scan(tmpl, func(string) {}, func(r ref) error {
		out = append(out, Ref{Namespace: r.namespace, Path: r.path, Guarded: r.def != nil || r.optional, Shell: r.shell})
		return nil
	})
	if err != nil {
		return nil
	}
	return out
}

// HasReferences reports whether s contains a ${...} reference.
func HasReferences(s string) bool {
	return strings.Contains(s, "${")
}

// Expand replaces every reference in tmpl with its value from vars.
func Expand(tmpl string, vars *Vars) (string, error) {
	if !strings.Contains(tmpl, "${") {
		return tmpl, nil
	}
	var b strings.Builder
	err := scan(tmpl, func(s string) { b.WriteString(s) }, func(r ref) error {
		v, err := vars.resolve(r.namespace, r.path)
		if err != nil {
			switch {
			case r.def != nil:
				b.WriteString(*r.def)
				return nil
			case r.optional:
				return nil
			}
			return &Error{Var: r.raw, Reason: err.Error()}
		}
		if v == nil {
			return nil // no value: nothing, quoted or not
		}
		s := Render(v)
		if r.shell {
			s = ShellQuote(s)
		}
		b.WriteString(s)
		return nil
	})
	if err != nil {
		return "", err
	}
	return b.String(), nil
}

// Render turns a resolved value into text as little-loops does (Python's
// str()): strings as they are, nil as the empty string, numbers as written
// (2.0 stays 2.0), booleans True and False, lists and objects as Python
// prints them ([1, 'a'], {'k': True}; an object's keys in the order it
// was written, a pycompat.Dict's, or sorted, a map's).
func Render(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return t
	}
	return pycompat.Repr(v)
}

// ShellQuote quotes s so bash reads it as one word.
func ShellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, c := range s {
		if !isShellSafe(c) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

func isShellSafe(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("@%+=:,./-_", c)
}

// IsName reports whether s can be one segment of a template path, as a
// context variable's name is: letters, digits, '_' and '-' (a '.' would
// split it, so ${context.a.b} could never read a variable "a.b").
func IsName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !unicode.IsLetter(c) && !unicode.IsDigit(c) && c != '_' && c != '-' || c > unicode.MaxASCII {
			return false
		}
	}
	return true
}
