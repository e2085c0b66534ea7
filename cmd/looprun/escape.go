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
// cursor, set the window title or reorder what is shown. A tab is not
// escaped but expanded to the next tab stop (every 8 columns), as a
// terminal shows it: go test's lines keep their columns, and a table
// its.
func printable(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	col := 0 // of the text since the last newline
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		start := b.Len()
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
			start, col = b.Len(), 0
		case r == '\t':
			b.WriteString(strings.Repeat(" ", tabWidth-col%tabWidth))
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		col += utf8.RuneCountInString(b.String()[start:])
		i += size
	}
	return b.String()
}

// tabWidth is how far apart a terminal's tab stops are.
const tabWidth = 8

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
