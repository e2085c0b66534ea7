package pycompat

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// ErrNotPython says a pattern does not compile in Python's re: little-loops
// then looks for it as plain text.
var ErrNotPython = errors.New("not a Python regular expression")

// pyEscapes are the letters Python's re knows after a backslash outside a
// character class; any other letter is an error there.
const pyEscapes = "abfnrtvABZdDsSwWxuUN"

// TranslateRegex writes a pattern in Python's re syntax (3.11) as the
// backtracking engine (.NET syntax) reads it with the same meaning:
// (?P<name>...) and (?P=name) as named groups; \Z, the end of the text in
// Python, as \z; possessive quantifiers (a++, a*+, a?+, a{2}+) as atomic
// groups; {,n} as {0,n}. What Python refuses is ErrNotPython: an escape
// Python does not know (\z, \k, \p, \G), a (?<name> or (?'name' group, a
// flag group such as (?i) after the start.
func TranslateRegex(p string) (string, error) {
	t := &pyTranslator{p: p, atom: -1, verbose: isFlagGroup(p) && strings.Contains(p[:strings.IndexByte(p, ')')], "x")}
	for ; t.i < len(p); t.i++ {
		if err := t.step(); err != nil {
			return "", err
		}
	}
	if len(t.groups) > 0 {
		return "", ErrNotPython
	}
	return t.out.String(), nil
}

// pyTranslator writes a Python pattern for the engine, one piece a step.
type pyTranslator struct {
	p      string
	i      int // the byte of p this step reads
	out    strings.Builder
	groups []int // where each open group starts in out
	atom   int   // where the last atom starts in out; -1: none
	// verbose is (?x) at the start: white space is no atom and a # starts
	// a comment to the end of the line.
	verbose bool
}

func (t *pyTranslator) step() error {
	switch c := t.p[t.i]; {
	case t.verbose && strings.IndexByte(" \t\n\r\v\f", c) >= 0:
		t.out.WriteByte(c)
	case t.verbose && c == '#':
		end := strings.IndexByte(t.p[t.i:], '\n')
		if end < 0 {
			end = len(t.p) - t.i
		}
		t.out.WriteString(t.p[t.i : t.i+end])
		t.i += end - 1
	default:
		return t.piece(c)
	}
	return nil
}

func (t *pyTranslator) piece(c byte) error {
	switch c {
	case '\\':
		return t.escape()
	case '[':
		end := classEnd(t.p, t.i)
		if end < 0 {
			return ErrNotPython
		}
		t.atom = t.out.Len()
		t.out.WriteString(t.p[t.i : end+1])
		t.i = end
	case '(':
		return t.group()
	case ')':
		if len(t.groups) == 0 {
			return ErrNotPython
		}
		t.atom = t.groups[len(t.groups)-1]
		t.groups = t.groups[:len(t.groups)-1]
		t.out.WriteByte(c)
	case '*', '+', '?', '{':
		t.quantify()
	default:
		t.atom = t.out.Len()
		t.out.WriteByte(c)
	}
	return nil
}

func (t *pyTranslator) escape() error {
	if t.i+1 >= len(t.p) {
		return ErrNotPython
	}
	e := t.p[t.i+1]
	if isASCIILetter(e) && !strings.ContainsRune(pyEscapes, rune(e)) {
		return ErrNotPython
	}
	t.atom = t.out.Len()
	switch e {
	case 'Z':
		t.out.WriteString(`\z`)
	case 'U': // \UXXXXXXXX, a code point the engine has no escape for
		n, err := strconv.ParseUint(t.p[t.i+2:min(t.i+10, len(t.p))], 16, 32)
		if err != nil || t.i+10 > len(t.p) || n > unicode.MaxRune {
			return ErrNotPython
		}
		t.out.WriteString(regexp.QuoteMeta(string(rune(n))))
		t.i += 8
	default:
		t.out.WriteString(t.p[t.i : t.i+2])
	}
	t.i++
	return nil
}

func (t *pyTranslator) group() error {
	rest := t.p[t.i:]
	switch {
	case strings.HasPrefix(rest, "(?P<"):
		t.groups = append(t.groups, t.out.Len())
		t.out.WriteString("(?<")
		t.i += len("(?P<") - 1
	case strings.HasPrefix(rest, "(?P="):
		j := strings.IndexByte(rest, ')')
		if j < 0 {
			return ErrNotPython
		}
		t.atom = t.out.Len()
		t.out.WriteString(`\k<` + rest[len("(?P="):j] + ">")
		t.i += j
	case strings.HasPrefix(rest, "(?<") && !strings.HasPrefix(rest, "(?<=") && !strings.HasPrefix(rest, "(?<!"),
		strings.HasPrefix(rest, "(?'"):
		return ErrNotPython
	case t.i > 0 && isFlagGroup(rest):
		return ErrNotPython // Python 3.11: global flags not at the start
	default:
		t.groups = append(t.groups, t.out.Len())
		t.out.WriteByte('(')
	}
	return nil
}

// quantify writes the quantifier at t.i; a possessive one wraps the atom it
// repeats in an atomic group.
func (t *pyTranslator) quantify() {
	q, n := quantifier(t.p[t.i:])
	if n == 0 { // a { that starts no repeat is a literal
		t.atom = t.out.Len()
		t.out.WriteByte(t.p[t.i])
		return
	}
	t.i += n - 1
	next := byte(0)
	if t.i+1 < len(t.p) {
		next = t.p[t.i+1]
	}
	switch {
	case next == '+' && t.atom >= 0:
		s := t.out.String()
		t.out.Reset()
		t.out.WriteString(s[:t.atom] + "(?>" + s[t.atom:] + q + ")")
		t.i++
	case next == '?': // lazy
		t.out.WriteString(q + "?")
		t.i++
	default:
		t.out.WriteString(q)
	}
	t.atom = -1
}

func isASCIILetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// isFlagGroup reports whether s starts with a group of global flags, (?i)
// or (?aiLmsux), which Python 3.11 allows only at the start.
func isFlagGroup(s string) bool {
	if !strings.HasPrefix(s, "(?") {
		return false
	}
	j := 2
	for j < len(s) && strings.IndexByte("aiLmsux", s[j]) >= 0 {
		j++
	}
	return j > 2 && j < len(s) && s[j] == ')'
}

// classEnd is the index of the ] that closes the character class opening
// at p[i], or -1: a ] first in the class (or after ^) is a literal.
func classEnd(p string, i int) int {
	j := i + 1
	if j < len(p) && p[j] == '^' {
		j++
	}
	if j < len(p) && p[j] == ']' {
		j++
	}
	for ; j < len(p); j++ {
		switch p[j] {
		case '\\':
			j++
		case ']':
			return j
		}
	}
	return -1
}

// quantifier reads the quantifier at the start of s: *, +, ?, {m}, {m,},
// {,n} or {m,n}, written for the engine ({,n} as {0,n}), and how many bytes
// it took; 0 when s starts with a { that is a literal.
func quantifier(s string) (string, int) {
	if s[0] != '{' {
		return s[:1], 1
	}
	end := strings.IndexByte(s, '}')
	if end < 0 {
		return "", 0
	}
	body := s[1:end]
	lo, hi, comma := strings.Cut(body, ",")
	if !allDigits(lo) || !allDigits(hi) || lo == "" && (!comma || hi == "") {
		return "", 0
	}
	if lo == "" {
		lo = "0"
	}
	if comma {
		return "{" + lo + "," + hi + "}", end + 1
	}
	return "{" + lo + "}", end + 1
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
