package executor

import (
	"errors"
	"fmt"

	"github.com/looprun/looprun/api/v1alpha1"
)

// ValidateRun checks a run state read from outside (a state file, an
// export, a checkpoint) against the loop it runs: counters are not
// negative, and the states it names exist. A run that fails it is refused,
// not resumed: a negative iteration would run past maxIterations.
func ValidateRun(spec *v1alpha1.LoopSpec, run *v1alpha1.RunState) error {
	var errs []error
	for name, v := range map[string]int64{
		"iteration": int64(run.Iteration), "passes (iteration_count)": int64(run.Passes), "retries": int64(run.Retries),
		"lastSeq": run.LastSeq, "accumulatedMs": run.AccumulatedMs,
	} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s is %d; it cannot be negative", name, v))
		}
	}
	for _, m := range []map[string]int32{run.EdgeRevisits, run.RetryCounts} {
		for k, v := range m {
			if v < 0 {
				errs = append(errs, fmt.Errorf("count %q is %d; it cannot be negative", k, v))
			}
		}
	}
	if run.CurrentState != "" {
		if _, ok := spec.States[run.CurrentState]; !ok {
			errs = append(errs, fmt.Errorf("current state %q is not a state of the loop", run.CurrentState))
		}
	}
	if a := run.Action; a != nil {
		switch st, ok := spec.States[a.State]; {
		case !ok:
			errs = append(errs, fmt.Errorf("the action in flight is of state %q, which is not a state of the loop", a.State))
		case st.Action == "" && st.Loop == "" && st.Approval == nil:
			errs = append(errs, fmt.Errorf("the action in flight is of state %q, which has no action", a.State))
		}
		if a.Iteration < 0 || a.Iteration > run.Iteration {
			errs = append(errs, fmt.Errorf("the action in flight has iteration %d, outside 0..%d", a.Iteration, run.Iteration))
		}
	}
	return errors.Join(errs...)
}
