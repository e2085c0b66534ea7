package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// printable renders s, which may hold what an action printed, for a
// terminal: control characters (C0, DEL and C1: ESC, BEL, CSI, a newline
// too), bidirectional-text controls and bytes that are not UTF-8 are
// shown escaped, Go style (\x1b, \u009b), so that no event can move the
// cursor, set the window title or reorder what is shown.
func printable(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func needsEscape(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			return true
		}
		i += size
	}
	return false
}
