package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/llm"
	"github.com/looprun/looprun/internal/localrun"
	"github.com/looprun/looprun/internal/loopfile"
	"github.com/looprun/looprun/internal/pricing"
	"github.com/looprun/looprun/internal/runner/local"
)

func newRunCommand(g *globals) *cobra.Command {
	o := &localRun{g: g}
	cmd := &cobra.Command{
		Use:   "run FILE|NAME [INPUT]",
		Short: "Run a loop here, saving its state under --loops-dir/.running",
		Long: "Run a loop file (a Loop manifest or a little-loops YAML file) in the current directory.\n" +
			"A NAME is looked up as --loops-dir/NAME.yaml. INPUT goes to the context variable the loop's\n" +
			"input_key names (default input); the run also gets run_dir, input_hash and max_steps.\n" +
			"As in ll-loop, -n/--max-steps caps state executions and --max-iterations the full passes of\n" +
			"a maintain: true loop. run never talks to a cluster: to run a loop in one, looprun apply\n" +
			"FILE --namespace NAMESPACE (there, -n is the namespace).\n" +
			"Exit code: 0 completed, 2 ended in a failure state, 3 paused on its budget (--max-cost,\n" +
			"spec.budget: resume it with a higher --max-cost), 1 otherwise.",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 2 {
				o.input = &args[1]
			}
			return o.start(cmd, args[0])
		},
	}
	o.flags.bind(cmd, true)
	return cmd
}

func newResumeCommand(g *globals, k *kube) *cobra.Command {
	o := &localRun{g: g}
	cmd := &cobra.Command{
		Use:   "resume NAME | loop/NAME",
		Short: "Continue a local run from where it stopped; loop/NAME: unsuspend a Loop",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if name, cluster := k.loopTarget(args[0], false); cluster {
				return k.setSuspend(cmd.Context(), cmd.OutOrStdout(), name, false)
			}
			return o.resume(cmd, k, args[0])
		},
	}
	// Its two forms are told apart as the help groups say what a bare NAME means.
	cmd.Long, cmd.Example = resumeHelp(k.plugin)
	o.flags.bind(cmd, false)
	return cmd
}

// stopSignals interrupt a local run: the action in flight is killed, the
// run saved as interrupted, and resume continues it. A closed terminal
// (SIGHUP) and SIGQUIT stop it the same way, never leaving the action
// running alone.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// stdinLines are the lines typed at the terminal, read once per process.
var stdinLines = sync.OnceValue(func() <-chan string {
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines
})

// terminal is the terminal an approval state asks at: stdin when it is
// one, else nil (only looprun approve answers).
func terminal(out io.Writer) *localrun.Terminal {
	if !isTerminal(os.Stdin) {
		return nil // a pipe, a file, /dev/null: no one to ask
	}
	return &localrun.Terminal{Lines: stdinLines(), Out: out, User: whoami()}
}

// inDir runs a sub-loop's actions in its worktree.
func inDir(r localrun.ActionRunner, dir string) localrun.ActionRunner {
	if lr, ok := r.(*local.Runner); ok {
		return lr.InDir(dir)
	}
	return r
}

// fileJudge is the LLM judge of a loop file's runs.
func fileJudge(lf *loopfile.File) evaluate.Judge { return newJudge(&lf.Loop.Spec) }

// newJudge returns the LLM judge: through the API with ANTHROPIC_API_KEY,
// else (or with spec.llm.via: cli) through the agent CLI's JSON mode with
// the user's own login, as ll-loop's judge runs; nil for via: api without
// a key.
func newJudge(spec *v1alpha1.LoopSpec) evaluate.Judge {
	key := os.Getenv("ANTHROPIC_API_KEY")
	via := v1alpha1.JudgeVia("")
	if spec.LLM != nil {
		via = spec.LLM.Via
	}
	switch {
	case via == v1alpha1.JudgeViaCLI || (via == "" && key == ""):
		return llm.CLIForSpec(spec)
	case key == "":
		return nil
	}
	return llm.ForSpec(spec.LLM, key, os.Getenv("ANTHROPIC_BASE_URL"))
}

// outcome turns a finished run into the exit code. spec is the loop a
// local run ran (nil: a cluster's Loop).
func outcome(run *v1alpha1.RunState, name string, littleLoops bool, spec *v1alpha1.LoopSpec) error {
	switch {
	case run.Phase == v1alpha1.PhaseCompleted:
		return nil
	case run.Phase == v1alpha1.PhasePaused:
		return &exitError{code: ExitPaused, msg: fmt.Sprintf("loop %s paused: %s; %s", name, executor.PausedWhy(run), resumeHint(spec, run, name))}
	case run.TerminatedBy == v1alpha1.TerminatedHandoff || run.TerminatedBy == v1alpha1.TerminatedInterrupted:
		return nil // paused by its action (CONTEXT_HANDOFF:, LOOP_STOP:), as ll-loop: resume goes on
	case executor.IsFailureTerminal(run):
		return &exitError{code: 2}
	case run.TerminatedBy == v1alpha1.TerminatedStopped:
		return &exitError{code: 1} // the progress's last line said it; the user stopped it
	}
	msg := fmt.Sprintf("loop %s ended: %s", name, executor.TerminationName(run.TerminatedBy, littleLoops))
	if why := executor.EndWhy(run); why != "" {
		msg += ": " + why
	}
	return &exitError{code: 1, msg: msg}
}

// resumeHint says how a paused run goes on: a cluster's Loop with looprun
// budget; a local run with resume --max-cost, unless its loop's own
// spec.budget is the limit it reached (the lower limit wins, so
// --max-cost cannot raise it).
func resumeHint(spec *v1alpha1.LoopSpec, run *v1alpha1.RunState, name string) string {
	if spec == nil {
		return fmt.Sprintf("go on with: looprun budget loop/%s --add USD", name)
	}
	flag := fmt.Sprintf("go on with: looprun resume %s --max-cost USD", name)
	b := spec.Budget
	if b == nil || b.MaxCostUSD == "" && b.MaxTokens == nil {
		return flag
	}
	if own, err := pricing.ParseUSD(b.MaxCostUSD); err == nil && b.MaxCostUSD != "" && b.MaxTokens == nil {
		if s := run.Budget; s != nil && s.RunMaxCostMicroUSD != nil && *s.RunMaxCostMicroUSD < own {
			return flag // the run's own ceiling is the lower one
		}
	}
	return fmt.Sprintf("its loop's spec.budget is the limit: raise it in the loop's file, then looprun resume %s", name)
}

// localOnly readies a command that never talks to a cluster to take -n as
// little-loops does (--max-steps): it gets a hidden --namespace of its own,
// with no shorthand and of no effect (as the cluster flags are to it), in
// place of the persistent --namespace/-n of the cluster commands.
func localOnly(cmd *cobra.Command) {
	cmd.Flags().String("namespace", "", "")
	_ = cmd.Flags().MarkHidden("namespace")
}
