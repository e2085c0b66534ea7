package pycompat

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
)

// search is re.search as little-loops calls it: a pattern Python refuses
// is looked for as plain text.
func search(pattern, text string) (bool, error) {
	expr, err := TranslateRegex(pattern)
	if errors.Is(err, ErrNotPython) {
		return strings.Contains(text, pattern), nil
	}
	if err != nil {
		return false, err
	}
	re, err := regexp2.Compile(expr, regexp2.None)
	if err != nil {
		return strings.Contains(text, pattern), nil
	}
	return re.MatchString(text)
}

// Patterns match as Python 3.11's re.search matches them (checked against
// Debian's python3); one that Python refuses is looked for as text.
func TestPythonPatterns(t *testing.T) {
	for _, tc := range []struct {
		pattern, text string
		want          bool
	}{
		{`done\Z`, "done\n", false},
		{`done\Z`, "done", true},
		{`done$`, "done\n", true},
		{`^a++b`, "aaab", true},
		{`^a++a`, "aaa", false},
		{`^a*+a`, "aaa", false},
		{`^a?+a`, "a", false},
		{`^(?:ab)++a`, "ababa", true},
		{`^(?:ab)++ab`, "abab", false},
		{`^[ab]{2}+b`, "abb", true},
		{`^a{1,3}+a`, "aaa", false},
		{`^a+?b`, "aab", true},
		{``, "anything", true},
		{`a\zb`, `xa\zb`, true}, // \z is no escape in 3.11: plain text
		{`\p{L}`, "a", false},
		{`(?<w>a)`, "a", false}, // .NET's named group is text in Python
		{`(?<=a)b`, "ab", true},
		{`(?P<w>\w+)-(?P=w)`, "ab-ab", true},
		{`^x{,2}y`, "xxy", true},
		{`^x{,2}y`, "xxxy", false},
		{`x{a}`, "x{a}", true},
		{`a(?i)b`, "a(?i)b", true}, // flags after the start: an error in 3.11
		{`(?i)AB`, "ab", true},
		{`[\]a]++]`, "]a]", false}, // the class takes the last ] too
		{`(?>a|ab)c`, "abc", false},
		{`a)`, "a)", true},
		{`\U0001F600+!`, "\U0001F600\U0001F600!", true},
		{`\U0000002a`, "*", true},
		{`\U1F600`, `\U1F600`, true},
		{"(?x) ^a ++ # takes all the a's (and \\z is no escape here)\n a", "aaa", false},
		{"(?x) ^a + # one or more\n b", "aab", true},
	} {
		got, err := search(tc.pattern, tc.text)
		if err != nil || got != tc.want {
			t.Errorf("%q in %q = %v, %v; want %v", tc.pattern, tc.text, got, err, tc.want)
		}
	}
}
