package main

import (
	"github.com/looprun/looprun/api/v1alpha1"
)

// setSimulationContext gives a simulated walk the context a run's runner
// gives it, so that a template naming ${context.run_dir} or
// ${context.input_hash} reads as it would in a run: run_dir is
// DIR/runs/NAME-simulate/ under the loops directory (nothing is made
// there), input_hash is that of the input. As in little-loops, a walk gets
// no max_steps variable. A loop's own run_dir stands, even "" (a
// parameter its caller sets): as nothing is made there, a walk needs none.
func setSimulationContext(spec *v1alpha1.LoopSpec, loopsDir, name string) error {
	return setDefaults(spec, loopsDir, name+"-simulate", true)
}
