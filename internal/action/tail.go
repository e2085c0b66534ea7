package action

import "unicode/utf8"

// Tail returns the last max bytes of s, cut at a character boundary.
func Tail(s string, max int) string {
	if max <= 0 || len(s) <= max {
		return s
	}
	s = s[len(s)-max:]
	for i := 0; i < utf8.UTFMax && i < len(s); i++ {
		if utf8.RuneStart(s[i]) {
			return s[i:]
		}
	}
	if len(s) < utf8.UTFMax {
		return "" // only the end of a character fits
	}
	return s // not UTF-8: keep the bytes
}
