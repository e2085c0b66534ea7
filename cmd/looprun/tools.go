package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/loopfile"
)

func newValidateCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a loop file; every problem names its state and field",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			lf, err := loadLoop(args[0], g, cmd.ErrOrStderr(), false)
			if err != nil {
				return &exitError{code: 1, msg: err.Error()}
			}
			errs := executor.Validate(&lf.Loop.Spec)
			for _, e := range errs {
				fmt.Fprintf(out, "%s: %s\n", args[0], e.Error())
			}
			if len(errs) > 0 {
				return &exitError{code: 1, msg: fmt.Sprintf("%s: %d error(s)", args[0], len(errs))}
			}
			fmt.Fprintf(out, "%s: loop %s is valid (%d states, %s)\n", args[0], lf.Loop.Name, len(lf.Loop.Spec.States), lf.Format)
			return nil
		},
	}
}

func newConvertCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "convert FILE",
		Short: "Print a loop file as a Loop manifest",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			lf, err := loadLoop(args[0], g, cmd.ErrOrStderr(), false)
			if err != nil {
				return err
			}
			b, err := loopfile.ManifestYAML(lf.Loop)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
}

// scripted answers every action with a verdict from a scenario; nothing runs.
type scripted struct {
	scenario string
	spec     *v1alpha1.LoopSpec
	n        int
}

var scenarios = []string{"all-pass", "all-fail", "first-fail", "alternating"}

func (s *scripted) pass() bool {
	defer func() { s.n++ }()
	switch s.scenario {
	case "all-fail":
		return false
	case "first-fail":
		return s.n > 0
	case "alternating":
		return s.n%2 == 0
	}
	return true
}

func (s *scripted) result(state string) *executor.ActionResult {
	st := s.spec.States[state]
	conv := st.Evaluate != nil && st.Evaluate.Type == v1alpha1.EvalConvergence
	verdict, code := v1alpha1.VerdictSuccess, 0
	switch pass := s.pass(); {
	case pass && conv:
		verdict = v1alpha1.VerdictTarget
	case !pass && conv:
		verdict, code = v1alpha1.VerdictProgress, 0
	case !pass:
		verdict, code = v1alpha1.VerdictFailure, 1
	}
	return &executor.ActionResult{ExitCode: code, Verdict: &evaluate.Result{Verdict: verdict, Details: map[string]any{"simulated": true}}}
}

func newSimulateCommand(g *globals) *cobra.Command {
	var (
		scenario string
		maxIter  int32
	)
	cmd := &cobra.Command{
		Use:   "simulate FILE",
		Short: "Walk a loop with scripted verdicts; no action runs",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			valid := false
			for _, s := range scenarios {
				valid = valid || s == scenario
			}
			if !valid {
				return fmt.Errorf("--scenario %q: want one of %v", scenario, scenarios)
			}
			lf, err := loadLoop(args[0], g, cmd.ErrOrStderr(), false)
			if err != nil {
				return err
			}
			spec := &lf.Loop.Spec
			if maxIter > 0 {
				spec.MaxIterations = &maxIter
			} else if spec.GetMaxIterations() > 20 {
				cap20 := int32(20)
				spec.MaxIterations = &cap20
			}
			spec.Backoff = nil
			m, err := executor.New(lf.Loop.Name, spec, executor.Options{})
			if err != nil {
				return fmt.Errorf("%s: invalid loop: %w", args[0], err)
			}
			script := &scripted{scenario: scenario, spec: spec}
			p := newProgress(cmd.OutOrStdout())
			run := &v1alpha1.RunState{}
			now := time.Unix(0, 0)
			p.print(m.Start(run, "simulate", now))
			for {
				step, evs := m.Plan(run, now)
				p.print(evs)
				var res *executor.ActionResult
				switch step.Kind {
				case executor.StepDone:
					return outcome(run, lf.Loop.Name)
				case executor.StepWait:
					now = step.WaitUntil
					continue
				case executor.StepAction:
					fmt.Fprintf(cmd.OutOrStdout(), "  would run: %s\n", oneLine(step.Action.Command))
					res = script.result(step.Action.State)
				case executor.StepEvaluate:
					if st := spec.States[run.CurrentState]; st.Evaluate != nil {
						res = script.result(run.CurrentState)
					}
				}
				p.print(m.Complete(context.Background(), run, res, now))
			}
		},
	}
	cmd.Flags().StringVar(&scenario, "scenario", "all-pass", "verdicts to script: all-pass, all-fail, first-fail, alternating")
	cmd.Flags().Int32Var(&maxIter, "max-iterations", 0, "cap on state executions (default: the loop's, at most 20)")
	return cmd
}

func oneLine(s string) string {
	for i, c := range s {
		if c == '\n' {
			return s[:i] + " ..."
		}
	}
	return s
}
