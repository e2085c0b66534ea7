package pycompat

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// IsSpace is Python's idea of white space (str.isspace, and \s in its
// patterns): Unicode's, plus the ASCII separators \x1c to \x1f. It looks
// nothing up: the signal scanner calls it on every byte of an output.
func IsSpace(r rune) bool {
	switch {
	case r == ' ' || r >= '\t' && r <= '\r' || r >= 0x1c && r <= 0x1f:
		return true
	case r < 0x80:
		return false
	}
	switch r {
	case 0x85, 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// Strip is Python's str.strip(): s without white space at either end.
func Strip(s string) string { return strings.TrimFunc(s, IsSpace) }

// decimalDigit is the ASCII digit of a Unicode decimal digit (category Nd):
// such digits come in runs of ten, zero first, so the value is the
// distance from the start of the run, modulo ten.
func decimalDigit(r rune) (byte, bool) {
	if r < 0x80 {
		return "0123456789"[max(0, min(9, r-'0'))], r >= '0' && r <= '9'
	}
	if !unicode.IsDigit(r) {
		return 0, false
	}
	start := r
	for unicode.IsDigit(start - 1) {
		start--
	}
	return "0123456789"[(r-start)%10], true
}

// ParseFloat reads s as Python's float() does: surrounding white space
// is ignored; inf, infinity and nan in any case, signed or not; digits of
// any script; an underscore between two digits; a value past the range of
// a double is an infinity. Hexadecimal is refused, as float() refuses it.
func ParseFloat(s string) (float64, bool) {
	s = Strip(s)
	var b strings.Builder
	for _, r := range s {
		switch d, ok := decimalDigit(r); {
		case ok:
			b.WriteByte(d)
		case r < 0x80:
			b.WriteRune(r)
		default:
			return 0, false
		}
	}
	t := b.String()
	body := strings.TrimLeft(t, "+-")
	if len(t)-len(body) > 1 {
		return 0, false
	}
	neg := strings.HasPrefix(t, "-")
	switch strings.ToLower(body) {
	case "inf", "infinity":
		if neg {
			return math.Inf(-1), true
		}
		return math.Inf(1), true
	case "nan":
		return math.NaN(), true
	}
	clean, ok := decimal(body)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(clean, 64)
	if err != nil && !isRange(err) {
		return 0, false
	}
	if neg {
		f = -f
	}
	return f, true
}

func isRange(err error) bool { return errors.Is(err, strconv.ErrRange) }

// decimal checks s against the decimal syntax of float() (digits with
// single underscores between them, an optional fraction and exponent) and
// returns it without the underscores.
func decimal(s string) (string, bool) {
	var out strings.Builder
	i := 0
	digits := func() int {
		n := 0
		for i < len(s) {
			c := s[i]
			switch {
			case c >= '0' && c <= '9':
				out.WriteByte(c)
				n++
				i++
			case c == '_' && n > 0 && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
				i++
			default:
				return n
			}
		}
		return n
	}
	whole := digits()
	frac := 0
	if i < len(s) && s[i] == '.' {
		out.WriteByte('.')
		i++
		frac = digits()
	}
	if whole+frac == 0 {
		return "", false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		out.WriteByte('e')
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			out.WriteByte(s[i])
			i++
		}
		if digits() == 0 {
			return "", false
		}
	}
	return out.String(), i == len(s)
}
