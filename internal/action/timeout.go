package action

import (
	"fmt"
	"regexp"
	"time"
)

// TimeoutNotice is what looprun adds to the stderr of an action it
// stopped at its timeout d.
func TimeoutNotice(d time.Duration) string {
	return fmt.Sprintf("\naction timed out after %s\n", d)
}

// IdleNotice is what looprun adds to the stderr of an action it stopped
// because it printed nothing for d.
func IdleNotice(d time.Duration) string {
	return fmt.Sprintf("\naction printed nothing for %s and was stopped (idle timeout)\n", d)
}

var noticeRE = regexp.MustCompile(`\naction (?:timed out after \S+|printed nothing for \S+ and was stopped \(idle timeout\))\n\z`)

// WithoutTimeoutNotice is stderr without the TimeoutNotice or IdleNotice
// at its end: what the action itself printed.
func WithoutTimeoutNotice(stderr string) string {
	if loc := noticeRE.FindStringIndex(stderr); loc != nil {
		return stderr[:loc[0]]
	}
	return stderr
}
