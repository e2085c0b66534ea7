package loopfile

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
)

// Problems are all the problems of a loop file, found at once: each starts
// with its line when the file has one, then the path of what it is about
// as the file spells it (states.test.on_no in a little-loops file,
// spec.states.test.onFailure in a manifest).
type Problems struct {
	// Path is the file ("" when read from bytes).
	Path string
	List []string
	// Warnings are the file's warnings, found as it was read.
	Warnings []string
}

// Error is one problem a line, each after the file's path.
func (p *Problems) Error() string {
	if p.Path == "" {
		return strings.Join(p.List, "\n")
	}
	return p.Path + ": " + strings.Join(p.List, "\n"+p.Path+": ")
}

// specProblems are the problems executor.Validate (ValidateLittleLoops for
// a little-loops file) finds in spec, said as the file says them; a
// problem at, inside or around one of the failed paths (fields already
// reported and left out) is not said again.
func specProblems(spec *v1alpha1.LoopSpec, format Format, lines map[string]int, failed []string) []string {
	states := slices.Sorted(maps.Keys(spec.States))
	var out []string
	validate := executor.Validate
	if format == FormatLittleLoops {
		validate = executor.ValidateLittleLoops
	}
	for _, e := range validate(spec) {
		segs := fieldSegments(e.Field)
		var path string
		if format == FormatLittleLoops {
			path = littleLoopsPath(segs[1:], lines)
		} else {
			path = strings.Join(segs, ".")
		}
		if slices.ContainsFunc(failed, func(f string) bool { return within(path, f) || within(f, path) }) {
			continue
		}
		body := plainBody(e)
		if e.Type == field.ErrorTypeNotFound {
			// Every name executor.Validate looks up is a state's.
			name := fmt.Sprint(e.BadValue)
			if lines[statesPath(format)+"."+name] > 0 {
				continue // a state written, left out for its own problem
			}
			body = fmt.Sprintf("no state is called %q%s", name, didYouMean(name, states))
		}
		out = append(out, locate(lines, path, body))
	}
	slices.SortStableFunc(out, byLine)
	return out
}

// plainBody says what is wrong in words, as the file's other problems are
// said, not in the API's terms ("Required value", "Unsupported value").
func plainBody(e *field.Error) string {
	bad := func() string {
		if s, ok := e.BadValue.(string); ok {
			return strconv.Quote(s)
		}
		return fmt.Sprint(e.BadValue)
	}
	switch e.Type {
	case field.ErrorTypeRequired:
		if e.Detail != "" {
			return e.Detail
		}
		return "required"
	case field.ErrorTypeNotSupported:
		if supported, ok := strings.CutPrefix(e.Detail, "supported values: "); ok {
			return fmt.Sprintf("must be one of %s, not %s", supported, bad())
		}
		return "not supported: " + bad()
	case field.ErrorTypeInvalid:
		if v := bad(); e.Detail != "" && len(v) <= 40 && !strings.ContainsAny(v, "\n") && !strings.Contains(e.Detail, v) {
			return fmt.Sprintf("%s, not %s", e.Detail, v)
		} else if e.Detail != "" {
			return e.Detail
		}
		return "not valid: " + bad()
	case field.ErrorTypeDuplicate:
		return fmt.Sprintf("%s is given more than once", bad())
	case field.ErrorTypeForbidden:
		if e.Detail != "" {
			return e.Detail
		}
		return "not allowed here"
	}
	return e.ErrorBody()
}

// parentPath is the path of the mapping p is in ("" at the top).
func parentPath(p string) string {
	parent, _ := cutLast(p)
	return parent
}

// statesPath is where a file of format keeps its states.
func statesPath(format Format) string {
	if format == FormatLittleLoops {
		return "states"
	}
	return "spec.states"
}

// within reports whether path is p or inside it.
func within(path, p string) bool {
	return path == p || strings.HasPrefix(path, p+".")
}

// locate is "line N: path: body", the line the nearest the file has of
// path and the mappings around it; without one, "path: body".
func locate(lines map[string]int, path, body string) string {
	for p := path; p != ""; p = parentPath(p) {
		if l := lines[p]; l > 0 {
			return fmt.Sprintf("line %d: %s: %s", l, path, body)
		}
	}
	return path + ": " + body
}

var lineOf = regexp.MustCompile(`^line (\d+): `)

// byLine orders problems by their line; those without one go last.
func byLine(a, b string) int {
	la, lb := lineNumber(a), lineNumber(b)
	switch {
	case la == lb:
		return 0
	case la == 0:
		return 1
	case lb == 0:
		return -1
	}
	return la - lb
}

func lineNumber(msg string) int {
	m := lineOf.FindStringSubmatch(msg)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1]) // the pattern makes it a number
	return n
}

// failedPath is the path a problem message is about ("line 3: a.b: ..."
// is about a.b).
func failedPath(msg string) string {
	msg = lineOf.ReplaceAllString(msg, "")
	p, _, _ := strings.Cut(msg, ": ")
	return p
}

// fieldSegments splits a field path (spec.states[test].route[yes]) into
// its names (spec, states, test, route, yes).
func fieldSegments(p string) []string {
	var segs []string
	for _, part := range strings.Split(p, ".") {
		for part != "" {
			i := strings.IndexByte(part, '[')
			if i < 0 {
				segs = append(segs, part)
				break
			}
			if i > 0 {
				segs = append(segs, part[:i])
			}
			j := strings.IndexByte(part[i:], ']')
			if j < 0 {
				segs = append(segs, part[i+1:])
				break
			}
			segs = append(segs, part[i+1:i+j])
			part = part[i+j+1:]
		}
	}
	return segs
}

// littleLoopsTopLevel are the little-loops keys of the spec fields whose
// names differ from their snake_case.
var littleLoopsTopLevel = map[string]string{
	"maxIterations": "max_steps", "onMaxIterations": "on_max_steps",
	"maxPasses": "max_iterations", "onMaxPasses": "on_max_iterations",
}

// littleLoopsRateLimit are the state keys of a state's rateLimit fields.
var littleLoopsRateLimit = map[string]string{
	"onExhausted": "on_rate_limit_exhausted", "maxRetries": "max_rate_limit_retries",
	"longWaitLadder": "rate_limit_long_wait_ladder",
}

// littleLoopsPath is the path, as a little-loops file spells it, of the
// spec field whose path below spec is segs: the key the file has where
// little-loops has more than one (on_no or on_failure, route.no or on_no).
func littleLoopsPath(segs []string, lines map[string]int) string {
	var out []string
	// pick is the first of keys the file has at out, else the first.
	pick := func(keys ...string) string {
		for _, k := range keys {
			if lines[strings.Join(append(slices.Clone(out), k), ".")] > 0 {
				return k
			}
		}
		return keys[0]
	}
	for i := 0; i < len(segs); i++ {
		s := segs[i]
		switch {
		case i > 0 && slices.Contains([]string{"states", "with", "context"}, segs[i-1]):
			out = append(out, s) // a name
		case i == 0 && littleLoopsTopLevel[s] != "":
			out = append(out, littleLoopsTopLevel[s])
		case s == "onSuccess":
			out = append(out, pick("on_yes", "on_success"))
		case s == "onFailure":
			out = append(out, pick("on_no", "on_failure"))
		case s == "route" && i+1 < len(segs):
			i++
			out = append(out, routeKey(strings.Join(out, "."), segs[i], lines))
		case s == "rateLimit" && i+1 < len(segs) && littleLoopsRateLimit[segs[i+1]] != "":
			i++ // a state's rate-limit keys are its own in little-loops
			out = append(out, littleLoopsRateLimit[segs[i]])
		default:
			out = append(out, snakeCase(s))
		}
	}
	return strings.Join(out, ".")
}

// routeKey is the key, below the state at state, that routes verdict v:
// route.K or on_K for a K that means v, as the file writes it.
func routeKey(state, v string, lines map[string]int) string {
	for _, prefix := range []string{"route.", "on_"} {
		for _, p := range slices.Sorted(maps.Keys(lines)) {
			k, ok := strings.CutPrefix(p, state+"."+prefix)
			if ok && !strings.Contains(k, ".") && v1alpha1.CanonicalVerdict(k) == v {
				return prefix + k
			}
		}
	}
	return "route." + v
}

// snakeCase is a camelCase name in snake_case (maxRetries: max_retries).
func snakeCase(s string) string {
	var b strings.Builder
	for i, c := range s {
		if c >= 'A' && c <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	return b.String()
}
