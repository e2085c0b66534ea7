package loopfile

import (
	"encoding/json"
	"strings"

	"github.com/looprun/looprun/api/v1alpha1"
)

// Thresholds are the confidence-gate thresholds little-loops' runner puts
// into the context of every run and sub-loop of a little-loops file, each
// unless already set (by the loop's context, --context, with: or a
// passthrough parent). They are its configuration's defaults: looprun reads
// no ll-config, so a project that changed them sets them with --context.
var Thresholds = map[string]int{"readiness_threshold": 85, "outcome_threshold": 65}

// SeedThresholds sets the Thresholds spec's context lacks.
func SeedThresholds(spec *v1alpha1.LoopSpec) {
	for k, v := range Thresholds {
		if _, ok := spec.Context[k]; !ok {
			spec.SetContext(k, v)
		}
	}
}

// seedUsedThresholds is SeedThresholds for the thresholds spec reads
// (${context.readiness_threshold}): a cluster's operator gives no
// little-loops defaults, so a Loop or LoopTemplate made from a little-loops
// file carries the ones it reads.
func seedUsedThresholds(spec *v1alpha1.LoopSpec) {
	b, _ := json.Marshal(spec.States)
	for k, v := range Thresholds {
		if _, ok := spec.Context[k]; !ok && strings.Contains(string(b), "context."+k) {
			spec.SetContext(k, v)
		}
	}
}
