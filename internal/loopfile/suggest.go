package loopfile

import (
	"fmt"
	"strings"
)

// closest is the candidate nearest to word when it is near enough to be
// what was meant (a letter or two off, or only the case differs); "" when
// none is.
func closest(word string, candidates []string) string {
	best, bestDist := "", 0
	for _, c := range candidates {
		if c == word {
			continue
		}
		d := editDistance(strings.ToLower(word), strings.ToLower(c))
		if best == "" || d < bestDist || d == bestDist && c < best {
			best, bestDist = c, d
		}
	}
	// One edit in three letters, at most two: nxet is next, but yes is
	// not no.
	if best == "" || bestDist > min(2, max(1, len(word)/3)) {
		return ""
	}
	return best
}

// didYouMean is " (did you mean X?)" for the candidate closest to word, or "".
func didYouMean(word string, candidates []string) string {
	if c := closest(word, candidates); c != "" {
		return fmt.Sprintf(" (did you mean %s?)", c)
	}
	return ""
}

// editDistance is the Damerau-Levenshtein distance of a and b (a swap of
// two neighbouring letters is one edit).
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
