// Package pod runs each action of a Loop as one Pod: the Pod's name follows
// from the Loop, its run and the iteration, so an action is created once and
// found again after any restart; the in-pod wrapper (cmd/entrypoint) reports
// the result in the container's termination message.
package pod

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/looprun/looprun/api/v1alpha1"
)

// maxNameLength keeps Pod names usable as host names.
const maxNameLength = validation.DNS1123LabelMaxLength

// Name is the Pod of a Loop's iteration in a run: LOOP-RUN-ITERATION, and
// LOOP-RUN-ITERATION-rN for its N-th retry; the Loop's name is shortened and
// suffixed with a hash of it when the whole would exceed 63 characters.
func Name(loop, run string, iteration, retry int32) string {
	suffix := fmt.Sprintf("-%s-%d", dnsLabel(run), iteration)
	if retry > 0 {
		suffix += fmt.Sprintf("-r%d", retry)
	}
	return withSuffix(loop, suffix)
}

// ExitName is the Pod of the exit hook of a run that ended at iteration:
// LOOP-RUN-ITERATION-exit, a name no step of the run takes.
func ExitName(loop, run string, iteration int32) string {
	return withSuffix(loop, fmt.Sprintf("-%s-%d-exit", dnsLabel(run), iteration))
}

// GitName is the Pod of a run's clone (LOOP-RUN-clone, once per run) or
// of its push at the end at iteration (LOOP-RUN-ITERATION-push).
func GitName(loop, run, op string, iteration int32) string {
	if op == "clone" {
		return withSuffix(loop, fmt.Sprintf("-%s-clone", dnsLabel(run)))
	}
	return withSuffix(loop, fmt.Sprintf("-%s-%d-%s", dnsLabel(run), iteration, op))
}

// withSuffix is the Loop's name and suffix, the name shortened as Name says.
func withSuffix(loop, suffix string) string {
	if len(loop)+len(suffix) <= maxNameLength {
		return loop + suffix
	}
	keep := maxNameLength - len(suffix) - 9
	return strings.TrimRight(loop[:keep], "-.") + "-" + v1alpha1.ShortHash(loop) + suffix
}

// dnsLabel makes a run id usable in a Pod name: lower case, and '-' for
// anything but letters and digits (a run moved from a laptop has an id like
// count-20261121T083506).
func dnsLabel(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, s)
}
