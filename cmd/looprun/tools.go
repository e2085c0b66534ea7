package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/localrun"
	"github.com/looprun/looprun/internal/loopfile"
)

func newValidateCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE|NAME",
		Short: "Check a loop file; every problem names its state and field",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			// Every problem of the file comes at once, one a line.
			lf, err := loadLoop(args[0], g, cmd.ErrOrStderr(), false)
			if problems := (*loopfile.Problems)(nil); errors.As(err, &problems) {
				for _, w := range problems.Warnings {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s: %s\n", problems.Path, w)
				}
				fmt.Fprintln(out, problems.Error())
				return &exitError{code: 1, msg: fmt.Sprintf("%s: %d error(s)", args[0], len(problems.List))}
			}
			if err != nil {
				return &exitError{code: 1, msg: err.Error()}
			}
			var errs field.ErrorList
			if err := loopfile.CheckSubLoops(lf, g.fileOptions()); err != nil {
				fmt.Fprintln(out, err)
				errs = append(errs, field.Invalid(nil, "", err.Error()))
			}
			for _, w := range executor.ShellWarnings(&lf.Loop.Spec) {
				field, msg, _ := strings.Cut(w, ": ")
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s: %s\n", args[0], lf.Locate(field, msg))
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
		Use:   "convert FILE|NAME",
		Short: "Print a loop file as a Loop manifest, after the LoopTemplates of the loops it runs as sub-loops",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			lf, err := loadLoop(args[0], g, cmd.ErrOrStderr(), false)
			if err != nil {
				return err
			}
			loop, templates, err := forCluster(lf, g, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, t := range templates {
				b, err := loopfile.TemplateYAML(t)
				if err != nil {
					return err
				}
				if _, err := fmt.Fprintf(out, "%s---\n", b); err != nil {
					return err
				}
			}
			b, err := loopfile.ManifestYAML(loop)
			if err != nil {
				return err
			}
			_, err = out.Write(b)
			return err
		},
	}
}

// forCluster is lf as a cluster runs it: its Loop, whose loop: states
// name LoopTemplates, and the templates of the loops it runs as
// sub-loops, however deep; it warns of the ones it cannot follow.
func forCluster(lf *loopfile.File, g *globals, stderr io.Writer) (*v1alpha1.Loop, []*v1alpha1.LoopTemplate, error) {
	loop, err := loopfile.ClusterLoop(lf)
	if err != nil {
		return nil, nil, err
	}
	templates, skipped, err := loopfile.Templates(lf, g.fileOptions())
	for _, s := range skipped {
		fmt.Fprintf(stderr, "warning: %s\n", s)
	}
	return loop, templates, err
}

func newSimulateCommand(g *globals) *cobra.Command {
	var (
		scenario, output  string
		maxSteps, maxIter int32
	)
	cmd := &cobra.Command{
		Use:   "simulate FILE|NAME",
		Short: "Walk a loop with scripted verdicts; no action runs",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(localrun.Scenarios, scenario) {
				return fmt.Errorf("--scenario %q: want one of %v", scenario, localrun.Scenarios)
			}
			if output != "" && output != "json" {
				return fmt.Errorf("--output %q: want json, or nothing for the walk as it goes", output)
			}
			lf, err := loadLoop(args[0], g, cmd.ErrOrStderr(), false)
			if err != nil {
				return err
			}
			spec := &lf.Loop.Spec
			capSimulation(spec, maxSteps, maxIter)
			if err := setSimulationContext(spec, g.loopsDir, lf.Loop.Name); err != nil {
				return err
			}
			if lf.LittleLoops() {
				loopfile.SeedThresholds(spec)
			}
			// ${env.NAME} reads the environment, as in a run and as ll-loop
			// simulate reads it.
			m, err := executor.New(lf.Loop.Name, spec, executor.Options{LittleLoops: lf.LittleLoops(), Env: os.LookupEnv})
			if err != nil {
				return fmt.Errorf("%s: invalid loop: %w", args[0], err)
			}
			out := cmd.OutOrStdout()
			if output == "json" {
				out = io.Discard // only the summary, at the end
			}
			// As ll-loop simulate: a banner, so that it is not taken for a
			// run, and a summary of the walk.
			st := terminalStyle(out)
			fmt.Fprintln(out, st.bold(fmt.Sprintf("=== SIMULATION: %s (scenario=%s): no action runs ===", lf.Loop.Name, scenario)))
			p := newProgress(out, st, false, header{loop: lf.Loop.Name, spec: spec, littleLoops: lf.LittleLoops()}, nil)
			var visited []string
			commands := 0
			sim := &localrun.Simulation{Machine: m, Scenario: scenario,
				Observers: []executor.Observer{executor.ObserverFunc(func(_ *v1alpha1.RunState, evs []executor.Event) {
					for _, e := range evs {
						if e.Type == executor.EventStateEnter && executor.DepthOf(e) == 0 {
							visited = append(visited, printable(executor.StateEnterOf(e).State))
						}
					}
					p.print(evs)
				})},
				WouldRun: func(a *executor.Action) {
					commands++
					p.println("       would run: " + printable(oneLine(a.Command)))
				}}
			run, err := sim.Run(cmd.Context())
			if err != nil {
				return err
			}
			summary := simulationSummary{
				Loop: lf.Loop.Name, Scenario: scenario, Entered: visited, FinalState: run.CurrentState,
				Iterations: run.Iteration, Commands: commands,
				TerminatedBy: executor.TerminationName(run.TerminatedBy, lf.LittleLoops()), Error: run.Message,
			}
			if err := summary.write(cmd.OutOrStdout(), output == "json"); err != nil {
				return err
			}
			return outcome(run, lf.Loop.Name, lf.LittleLoops(), spec)
		},
	}
	cmd.Flags().StringVar(&scenario, "scenario", "all-pass", "verdicts to script: all-pass, all-fail, all-error, first-fail, alternating (starting with a failure)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "json: print only the summary of the walk, as one JSON object")
	localOnly(cmd)
	cmd.Flags().Int32VarP(&maxSteps, "max-steps", "n", 0, "cap on state executions (default: the loop's; at most 20 without --max-iterations, as ll-loop)")
	cmd.Flags().Int32Var(&maxIter, "max-iterations", 0, "cap on full passes of a maintain: true loop (lifts the cap of 20 steps)")
	return cmd
}

// simulationSummary is what simulate -o json prints: the walk's summary.
// Entered are the states the walk entered, in order (the run's, not its
// sub-loops'), as ll-loop's "States visited" lists them: a terminal state
// the walk ended in is its final state, not entered.
type simulationSummary struct {
	Loop         string   `json:"loop"`
	Scenario     string   `json:"scenario"`
	Entered      []string `json:"states_visited"`
	FinalState   string   `json:"final_state"`
	Iterations   int32    `json:"iterations"`
	Commands     int      `json:"commands"`
	TerminatedBy string   `json:"terminated_by"`
	Error        string   `json:"error,omitempty"`
}

// write prints the summary: as ll-loop simulate ends its walk, where the
// final state is also among the states visited, or as JSON.
func (s simulationSummary) write(w io.Writer, asJSON bool) error {
	if asJSON {
		if s.Entered == nil {
			s.Entered = []string{}
		}
		b, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	visited := s.Entered
	if end := printable(s.FinalState); end != "" && (len(visited) == 0 || visited[len(visited)-1] != end) {
		visited = append(slices.Clip(visited), end) // a terminal state is reached, not entered
	}
	_, err := fmt.Fprintf(w, "\n=== Summary ===\nStates visited: %s\nIterations: %d\nWould have executed %d commands\nTerminated by: %s\n",
		strings.Join(visited, " → "), s.Iterations, s.Commands, s.TerminatedBy)
	return err
}

// capSimulation caps a walk as ll-loop simulate does: -n sets the step
// cap, and without --max-iterations (a cap on passes) the walk takes at
// most 20 steps whatever it is. No backoff is waited.
func capSimulation(spec *v1alpha1.LoopSpec, maxSteps, maxIter int32) {
	if maxSteps > 0 {
		spec.MaxIterations = &maxSteps
	}
	if maxIter > 0 {
		spec.MaxPasses = &maxIter
	} else if spec.GetMaxIterations() > 20 {
		spec.MaxIterations = ptr.To[int32](20)
	}
	spec.Backoff = nil
}

func oneLine(s string) string {
	if first, _, more := strings.Cut(s, "\n"); more {
		return first + " ..."
	}
	return s
}
