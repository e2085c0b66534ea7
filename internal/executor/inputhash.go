package executor

import (
	"crypto/sha256"
	"encoding/hex"
)

// InputHash is the input_hash a runner gives a run (and each sub-loop)
// whose context variable input is text, unless input_hash is set: the
// first 12 hex digits of the input's SHA-256, as little-loops derives it.
func InputHash(input any) (string, bool) {
	s, ok := input.(string)
	if !ok {
		return "", false
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:12], true
}
