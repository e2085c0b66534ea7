package pricing

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseUSD reads a dollar amount written as a decimal ("5", "2.50", at
// most six decimals) into millionths of a dollar.
func ParseUSD(s string) (int64, error) {
	whole, frac, _ := strings.Cut(strings.TrimSpace(s), ".")
	if whole == "" || len(whole) > 12 || len(frac) > 6 || strings.ContainsAny(whole+frac, "+-") {
		return 0, fmt.Errorf("%q is not a dollar amount (a decimal such as 5 or 2.50, at most six decimals)", s)
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a dollar amount (a decimal such as 5 or 2.50, at most six decimals)", s)
	}
	var f int64
	if frac != "" {
		if f, err = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64); err != nil {
			return 0, fmt.Errorf("%q is not a dollar amount (a decimal such as 5 or 2.50, at most six decimals)", s)
		}
	}
	return w*1_000_000 + f, nil
}

// FormatUSD writes millionths of a dollar as a decimal with no trailing
// zeros past the cents ("5.00", "0.123456"), as ParseUSD reads it.
func FormatUSD(micro int64) string {
	neg := ""
	if micro < 0 {
		neg, micro = "-", -micro
	}
	s := fmt.Sprintf("%s%d.%06d", neg, micro/1_000_000, micro%1_000_000)
	for strings.HasSuffix(s, "0") && len(s)-strings.IndexByte(s, '.') > 3 {
		s = s[:len(s)-1]
	}
	return s
}

// MicroToUSD is millionths of a dollar as a float, for event data and
// command lines that want a number.
func MicroToUSD(micro int64) float64 {
	return float64(micro) / 1e6
}
