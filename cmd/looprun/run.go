package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/llm"
	"github.com/looprun/looprun/internal/localrun"
	"github.com/looprun/looprun/internal/loopfile"
	"github.com/looprun/looprun/internal/pricing"
	"github.com/looprun/looprun/internal/runner/local"
	"github.com/looprun/looprun/internal/tracing"
)

// runFlags are the flags of run and resume.
type runFlags struct {
	set           []string
	context       []string
	maxIterations int32
	// maxIterationsSet says whether --max-iterations was given.
	maxIterationsSet func() bool
	quiet            bool
	// verbose shows whole actions and all of their output.
	verbose bool
	// maxCost is --max-cost, the run's own cost ceiling in dollars.
	maxCost string
	// costOutputJSON is --cost-output-json: where the per-state cost
	// table goes, as ll-loop writes it.
	costOutputJSON string
	// model, effort and llmModel are ll-loop's --model (agent actions
	// whose state names none), --effort and --llm-model (the judge).
	model, effort, llmModel string
	// clone is --clone: the run works in a checkout of its own.
	clone bool
}

// bind adds the flags. Loop variables are --set KEY=VALUE; run, which
// never talks to a cluster, also takes little-loops' --context KEY=VALUE
// for them, where resume's --context stays kubectl's (the kubeconfig
// context of resume loop/NAME).
func (f *runFlags) bind(cmd *cobra.Command, contextAlias bool) {
	cmd.Flags().StringArrayVar(&f.set, "set", nil, "set a context variable, KEY=VALUE (repeatable)")
	if contextAlias {
		cmd.Flags().StringArrayVar(&f.context, "context", nil, "the same as --set (little-loops' spelling)")
		cmd.Flags().BoolVar(&f.clone, "clone", false, "work in a checkout of the run's own under its run_dir (${context.repo_dir}): of spec.runner.workspace.git, else of the current directory's repository")
	}
	cmd.Flags().Int32Var(&f.maxIterations, "max-iterations", 0, "cap on state executions (overrides the loop's; at least 1)")
	f.maxIterationsSet = func() bool { return cmd.Flags().Changed("max-iterations") }
	cmd.Flags().BoolVarP(&f.quiet, "quiet", "q", false, "print nothing but errors")
	cmd.Flags().BoolVarP(&f.verbose, "verbose", "v", false, "show whole actions and all they print (else the first line, and 40 lines of output a step)")
	cmd.Flags().StringVar(&f.maxCost, "max-cost", "", "the most this run may spend on agents and the judge, in US dollars (a paused run goes on when resumed with a higher one)")
	cmd.Flags().StringVar(&f.costOutputJSON, "cost-output-json", "", "write the per-state cost table here as JSON when the run ends (ll-loop's shape)")
	cmd.Flags().StringVar(&f.model, "model", "", "the model of agent actions whose state names none (spec.agent.model)")
	cmd.Flags().StringVar(&f.effort, "effort", "", "the reasoning effort of agent actions whose state names none (spec.agent.effort)")
	cmd.Flags().StringVar(&f.llmModel, "llm-model", "", "the LLM judge's model (spec.llm.model)")
}

// maxCostMicro is --max-cost in millionths of a dollar, nil when not given.
func (f *runFlags) maxCostMicro() (*int64, error) {
	if f.maxCost == "" {
		return nil, nil
	}
	micro, err := pricing.ParseUSD(f.maxCost)
	if err != nil {
		return nil, fmt.Errorf("--max-cost: %w", err)
	}
	return &micro, nil
}

// report prints the per-state cost table of the run's usage.jsonl, as
// ll-loop does at the end of a run, and writes it to --cost-output-json.
// A run whose agents reported nothing has no table. A table that cannot
// be written is said, not fatal: the run's own outcome stands.
func (f *runFlags) report(cmd *cobra.Command, d *localrun.Driver) {
	dir := d.Machine.RunDir()
	if dir == "" {
		return
	}
	rep, err := pricing.ReadReport(filepath.Join(dir, agentstream.UsageFile), d.Machine.Prices())
	if err != nil || len(rep.States) == 0 {
		return
	}
	if !f.quiet {
		_, _ = fmt.Fprint(cmd.OutOrStdout(), "\n"+rep.Table())
	}
	if f.costOutputJSON == "" {
		return
	}
	err = os.MkdirAll(filepath.Dir(f.costOutputJSON), 0o755)
	if err == nil {
		err = os.WriteFile(f.costOutputJSON, []byte(rep.JSON()), 0o644)
	}
	if err != nil {
		_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "looprun: --cost-output-json: %v\n", err)
	}
}

// apply puts the flags into the spec.
func (f *runFlags) apply(spec *v1alpha1.LoopSpec) error {
	if err := setContext(spec, append(slices.Clone(f.context), f.set...)); err != nil {
		return err
	}
	switch {
	case f.maxIterations > 0:
		spec.MaxIterations = ptr.To(f.maxIterations)
	case f.maxIterationsSet != nil && f.maxIterationsSet():
		return fmt.Errorf("--max-iterations %d: a run takes at least one step (leave the flag out for the loop's own cap)", f.maxIterations)
	}
	if f.model != "" || f.effort != "" {
		if spec.Agent == nil {
			spec.Agent = &v1alpha1.AgentSpec{}
		}
		spec.Agent.Model = cmp.Or(f.model, spec.Agent.Model)
		spec.Agent.Effort = cmp.Or(f.effort, spec.Agent.Effort)
	}
	if f.llmModel != "" {
		if spec.LLM == nil {
			spec.LLM = &v1alpha1.LLMSpec{}
		}
		spec.LLM.Model = f.llmModel
	}
	return nil
}

func newRunCommand(g *globals) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run FILE|NAME [INPUT]",
		Short: "Run a loop here, saving its state under --loops-dir/.running",
		Long: "Run a loop file (a Loop manifest or a little-loops YAML file) in the current directory.\n" +
			"A NAME is looked up as --loops-dir/NAME.yaml. INPUT goes to the context variable the loop's\n" +
			"input_key names (default input); the run also gets run_dir, input_hash and max_steps.\n" +
			"Exit code: 0 completed, 2 ended in a failure state, 3 paused on its budget (--max-cost,\n" +
			"spec.budget: resume it with a higher --max-cost), 1 otherwise.",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			lf, err := loadLoop(args[0], g, cmd.ErrOrStderr(), f.quiet)
			if err != nil {
				return err
			}
			// The name names the run's files: one that is not a name
			// is refused before anything is made.
			store, unlock, err := lockStore(g, lf.Loop.Name)
			if err != nil {
				return err
			}
			defer unlock()
			spec := &lf.Loop.Spec
			if len(args) == 2 {
				setInput(spec, lf.InputKey, args[1])
			}
			if err := f.apply(spec); err != nil {
				return err
			}
			runID, release, err := reserveRunID(g.loopsDir, lf.Loop.Name, time.Now())
			if err != nil {
				return err
			}
			started := false
			defer func() {
				if !started {
					release()
				}
			}()
			runDir, err := setRunContext(spec, g.loopsDir, runID)
			if err != nil {
				return err
			}
			if f.clone { // named before the loop is checked against its context
				spec.SetContext("repo_dir", filepath.Join(runDir, v1alpha1.CheckoutDir))
			}
			if lf.LittleLoops() {
				loopfile.SeedThresholds(spec)
			}
			if err := preflight(lf, runHow(args[0])); err != nil {
				return err
			}
			if err := loopfile.CheckSubLoops(lf, g.fileOptions()); err != nil {
				return err
			}
			if err := makeRunDir(runDir); err != nil {
				return err
			}
			if f.clone {
				if _, _, err := cloneForRun(cmd.Context(), spec, runDir, cmd.ErrOrStderr()); err != nil {
					return err
				}
			}
			d, closeLogs, err := newDriver(g, store, lf.Path, lf, cmd, f, true)
			if err != nil {
				return err
			}
			defer closeLogs()
			if d.MaxCost, err = f.maxCostMicro(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), stopSignals...)
			defer stop()
			started = true
			run, err := d.Start(ctx, runID)
			if err != nil {
				return err
			}
			if err := pushClone(ctx, d, run, cmd.ErrOrStderr()); err != nil {
				return err
			}
			f.report(cmd, d)
			return outcome(run, lf.Loop.Name, lf.LittleLoops(), &lf.Loop.Spec)
		},
	}
	f.bind(cmd, true)
	return cmd
}

func newResumeCommand(g *globals, k *kube) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "resume NAME | loop/NAME",
		Short: "Continue a local run from where it stopped; loop/NAME: unsuspend a Loop",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if name, cluster := k.loopTarget(args[0], false); cluster {
				return k.setSuspend(cmd.Context(), cmd.OutOrStdout(), name, false)
			}
			saved, err := localrun.OpenWith(g.fileOptions(), args[0])
			if errors.Is(err, os.ErrNotExist) {
				return k.noLocalRun(cmd.Context(), "nothing to resume", g.loopsDir, args[0])
			}
			if err != nil {
				return err
			}
			lf, run := saved.Loop, saved.Run
			printWarnings(cmd.ErrOrStderr(), saved.State.LoopFile, lf, f.quiet)
			if err := f.apply(&lf.Loop.Spec); err != nil {
				return err
			}
			lf.Loop.Name = args[0]
			store, unlock, err := lockStore(g, args[0])
			if err != nil {
				return err
			}
			defer unlock()
			d, closeLogs, err := newDriver(g, store, saved.State.LoopFile, lf, cmd, f, false)
			if err != nil {
				return err
			}
			defer closeLogs()
			if d.MaxCost, err = f.maxCostMicro(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), stopSignals...)
			defer stop()
			if err := d.Resume(ctx, run); err != nil {
				if errors.Is(err, localrun.ErrNothingToResume) {
					return &exitError{code: 1, msg: err.Error()}
				}
				return err
			}
			if err := pushClone(ctx, d, run, cmd.ErrOrStderr()); err != nil {
				return err
			}
			f.report(cmd, d)
			return outcome(run, args[0], lf.LittleLoops(), &lf.Loop.Spec)
		},
	}
	f.bind(cmd, false)
	return cmd
}

// stopSignals interrupt a local run: the action in flight is killed, the
// run saved as interrupted, and resume continues it. A closed terminal
// (SIGHUP) and SIGQUIT stop it the same way, never leaving the action
// running alone.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// loadLoop reads a loop file, given by path or by name (as run finds it:
// --loops-dir/NAME.yaml), and prints its warnings.
func loadLoop(nameOrPath string, g *globals, stderr io.Writer, quiet bool) (*loopfile.File, error) {
	path, err := loopfile.Resolve(nameOrPath, g.fileOptions())
	if err != nil {
		return nil, err
	}
	lf, err := loopfile.Load(path, g.fileOptions())
	if err != nil {
		return nil, err
	}
	printWarnings(stderr, path, lf, quiet)
	return lf, nil
}

func printWarnings(stderr io.Writer, path string, lf *loopfile.File, quiet bool) {
	if quiet {
		return
	}
	for _, w := range lf.Warnings {
		fmt.Fprintf(stderr, "warning: %s: %s\n", path, w)
	}
}

// lockStore is the store of the local run called name, locked: only this
// process runs the loop until unlock.
func lockStore(g *globals, name string) (*localrun.Store, func(), error) {
	store, err := localStore(g, name)
	if err != nil {
		return nil, nil, err
	}
	unlock, err := store.Lock()
	if err != nil {
		return nil, nil, err
	}
	return store, unlock, nil
}

// newDriver builds everything a local run needs in its (locked) store. A
// fresh run starts new output logs; a resumed one appends to them. The
// returned func closes the logs.
func newDriver(g *globals, store *localrun.Store, path string, lf *loopfile.File, cmd *cobra.Command, f *runFlags, fresh bool) (*localrun.Driver, func(), error) {
	loop := lf.Loop
	m, err := newMachine(lf)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: invalid loop: %w", path, err)
	}
	ctxValues, err := executor.DecodeContext(loop.Spec.Context)
	if err != nil {
		return nil, nil, err
	}
	outLog, errLog, err := store.OpenOutputs(fresh)
	if err != nil {
		return nil, nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	runner := &local.Runner{Loop: loop.Name, Stdout: outLog, Stderr: errLog}
	if dir, _, ok := clonedRun(ctxValues); ok {
		runner.Dir = dir // a run made with --clone works in its checkout
	}
	d := &localrun.Driver{
		Machine:  m,
		Runner:   runner,
		Store:    store,
		LoopFile: abs,
		Context:  ctxValues,
		Judge:    newJudge(&loop.Spec),
		SubLoops: &localrun.SubLoops{Files: g.fileOptions(), NewMachine: newMachine, InDir: inDir, NewJudge: fileJudge},
	}
	tracer, err := tracing.New(cmd.Context(), "", "looprun")
	if err != nil {
		_ = outLog.Close()
		_ = errLog.Close()
		return nil, nil, err
	}
	d.Tracer, d.TraceParent = tracer, os.Getenv("TRACEPARENT")
	if !f.quiet {
		// Progress goes to stdout, as ll-loop prints it; questions and
		// warnings to stderr.
		out := cmd.OutOrStdout()
		p := newProgress(out, terminalStyle(out), f.verbose, header{loop: loop.Name, spec: &loop.Spec, context: ctxValues}, outLog)
		d.OnEvents, d.OnExitHook = p.print, p.exitHook
		d.Terminal = terminal(cmd.ErrOrStderr())
	}
	return d, func() {
		_ = outLog.Close()
		_ = errLog.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tracer.Shutdown(ctx); err != nil {
			fmt.Fprintln(cmd.ErrOrStderr(), "warning: the run's spans were not all sent:", err)
		}
	}, nil
}

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
	fi, err := os.Stdin.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
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

// newMachine builds the machine that runs a loop file here.
func newMachine(lf *loopfile.File) (*executor.Machine, error) {
	prices, err := localPrices()
	if err != nil {
		return nil, err
	}
	return executor.New(lf.Loop.Name, &lf.Loop.Spec, executor.Options{Env: os.LookupEnv, LittleLoops: lf.LittleLoops(),
		MaxCaptureBytes: executor.LocalCaptureBytes, MaxCapturedBytes: executor.LocalCapturedBytes, Prices: prices})
}

// PricesEnv names a price table file (internal/pricing) that local runs
// use over the defaults to cost agent actions.
const PricesEnv = "LOOPRUN_PRICES"

// localPrices reads $LOOPRUN_PRICES once; nil (the defaults) when unset.
var localPrices = sync.OnceValues(func() (*pricing.Table, error) {
	path := os.Getenv(PricesEnv)
	if path == "" {
		return nil, nil
	}
	t, err := pricing.Load(path)
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", PricesEnv, err)
	}
	return t, nil
})

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
	}
	msg := fmt.Sprintf("loop %s ended: %s", name, executor.TerminationName(run.TerminatedBy, littleLoops))
	if run.Message != "" {
		msg += ": " + run.Message
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
