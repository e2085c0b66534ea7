package main

import (
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
	"time"

	"github.com/spf13/cobra"
	"k8s.io/utils/ptr"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/gitws"
	"github.com/looprun/looprun/internal/localrun"
	"github.com/looprun/looprun/internal/loopfile"
	"github.com/looprun/looprun/internal/pricing"
	"github.com/looprun/looprun/internal/runner/local"
	"github.com/looprun/looprun/internal/tracing"
)

// localRun is a run on this machine as looprun run and resume prepare it:
// their flags, the loop, its locked store, the driver; the commands only
// parse their arguments.
type localRun struct {
	g     *globals
	flags runFlags
	// input is run's INPUT argument; nil for none.
	input *string
}

// start runs the loop file (a path, or a NAME under --loops-dir) from its
// initial state.
func (o *localRun) start(cmd *cobra.Command, nameOrPath string) error {
	g, f := o.g, &o.flags
	lf, err := loadLoop(nameOrPath, g, cmd.ErrOrStderr(), f.quiet)
	if err != nil {
		return err
	}
	// The name names the run's files: one that is not a name is refused
	// before anything is made.
	store, unlock, err := lockStore(g, lf.Loop.Name)
	if err != nil {
		return err
	}
	defer unlock()
	spec := &lf.Loop.Spec
	if o.input != nil {
		setInput(spec, lf.InputKey, *o.input)
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
	if err := o.prepare(lf, nameOrPath, runID); err != nil {
		return err
	}
	d, closeLogs, err := newDriver(g, store, lf.Path, lf, cmd, f, nil)
	if err != nil {
		return err
	}
	defer closeLogs()
	started = true
	return o.drive(cmd, d, lf, lf.Loop.Name, func(ctx context.Context) (*v1alpha1.RunState, error) {
		return d.Start(ctx, runID)
	})
}

// prepare gives a new run its context (run_dir, input_hash, max_steps;
// with --clone, its checkout's repo_dir) and checks it can start: every
// variable it needs is set, its sub-loops are found, its run_dir is made.
func (o *localRun) prepare(lf *loopfile.File, nameOrPath, runID string) error {
	spec := &lf.Loop.Spec
	runDir, err := setRunContext(spec, o.g.loopsDir, runID)
	if err != nil {
		return err
	}
	if o.flags.clone { // named before the loop is checked against its context
		src, err := cloneSource(spec)
		if err != nil {
			return err
		}
		markClone(spec, src, filepath.Join(runDir, v1alpha1.CheckoutDir))
	}
	if lf.LittleLoops() {
		loopfile.SeedThresholds(spec)
	}
	if err := preflight(lf, runHow(nameOrPath)); err != nil {
		return err
	}
	if err := loopfile.CheckSubLoops(lf, o.g.fileOptions()); err != nil {
		return err
	}
	return makeRunDir(runDir)
}

// resume continues the saved local run called name.
func (o *localRun) resume(cmd *cobra.Command, k *kube, name string) error {
	g, f := o.g, &o.flags
	saved, err := localrun.OpenWith(g.fileOptions(), name)
	if errors.Is(err, os.ErrNotExist) {
		return k.noLocalRun(cmd.Context(), "nothing to resume", g.loopsDir, name)
	}
	if err != nil {
		return err
	}
	lf, run := saved.Loop, saved.Run
	printWarnings(cmd.ErrOrStderr(), saved.State.LoopFile, lf, f.quiet)
	if err := f.apply(&lf.Loop.Spec); err != nil {
		return err
	}
	lf.Loop.Name = name
	store, unlock, err := lockStore(g, name)
	if err != nil {
		return err
	}
	defer unlock()
	d, closeLogs, err := newDriver(g, store, saved.State.LoopFile, lf, cmd, f, run)
	if err != nil {
		return err
	}
	defer closeLogs()
	return o.drive(cmd, d, lf, name, func(ctx context.Context) (*v1alpha1.RunState, error) {
		err := d.Resume(ctx, run)
		if errors.Is(err, localrun.ErrNothingToResume) {
			return nil, &exitError{code: 1, msg: err.Error()}
		}
		return run, err
	})
}

// drive runs the driver until the run ends or a stop signal comes, then
// says what became of its push, prints its cost table and turns its end
// into the exit code.
func (o *localRun) drive(cmd *cobra.Command, d *localrun.Driver, lf *loopfile.File, name string, run func(context.Context) (*v1alpha1.RunState, error)) error {
	var err error
	if d.MaxCost, err = o.flags.maxCostMicro(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), stopSignals...)
	defer stop()
	state, err := run(ctx)
	if err != nil {
		return err
	}
	if err := pushOutcome(&lf.Loop.Spec, state, cmd.ErrOrStderr()); err != nil {
		return err
	}
	o.flags.report(cmd, d)
	return outcome(state, name, lf.LittleLoops(), &lf.Loop.Spec)
}

// runFlags are the flags of run and resume.
type runFlags struct {
	set     []string
	context []string
	// maxSteps is --max-steps (-n on run): the cap on state executions,
	// little-loops' max_steps (spec.maxIterations).
	maxSteps int32
	// maxIterations is --max-iterations: the cap on full passes of a
	// maintain loop, little-loops' max_iterations (spec.maxPasses).
	maxIterations int32
	// changed says whether a flag was given.
	changed func(name string) bool
	quiet   bool
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
	if contextAlias {
		// run never talks to a cluster: -n is little-loops' --max-steps.
		localOnly(cmd)
		cmd.Flags().Int32VarP(&f.maxSteps, "max-steps", "n", 0, "cap on state executions, little-loops' max_steps (overrides the loop's; at least 1)")
	} else {
		// resume's -n stays the namespace of resume loop/NAME.
		cmd.Flags().Int32Var(&f.maxSteps, "max-steps", 0, "cap on state executions, little-loops' max_steps (overrides the loop's; at least 1)")
	}
	cmd.Flags().Int32Var(&f.maxIterations, "max-iterations", 0, "cap on full passes of a maintain: true loop, little-loops' max_iterations (overrides the loop's; at least 1); --max-steps caps state executions")
	f.changed = cmd.Flags().Changed
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
	case f.maxSteps > 0:
		spec.MaxIterations = ptr.To(f.maxSteps)
	case f.changed != nil && f.changed("max-steps"):
		return fmt.Errorf("--max-steps %d: a run takes at least one step (leave the flag out for the loop's own cap)", f.maxSteps)
	}
	switch {
	case f.maxIterations > 0:
		spec.MaxPasses = ptr.To(f.maxIterations)
	case f.changed != nil && f.changed("max-iterations"):
		return fmt.Errorf("--max-iterations %d: a run makes at least one pass (leave the flag out for the loop's own cap)", f.maxIterations)
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
	if lf.Notice != "" {
		fmt.Fprintf(stderr, "note: %s: %s\n", path, lf.Notice)
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
// fresh run (resumed nil) starts new output logs; a resumed one appends to
// them. The returned func closes the logs.
func newDriver(g *globals, store *localrun.Store, path string, lf *loopfile.File, cmd *cobra.Command, f *runFlags, resumed *v1alpha1.RunState) (*localrun.Driver, func(), error) {
	loop := lf.Loop
	ctxValues, err := executor.DecodeContext(loop.Spec.Context)
	if err != nil {
		return nil, nil, err
	}
	// A run made with --clone works in its checkout, made by its first step.
	checkout, clone, cloned := clonedRun(&loop.Spec, ctxValues, resumed)
	m, err := machine(lf, clone)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: invalid loop: %w", path, err)
	}
	outLog, errLog, err := store.OpenOutputs(resumed == nil)
	if err != nil {
		return nil, nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	runner := &local.Runner{Loop: loop.Name, Stdout: outLog, Stderr: errLog}
	if cloned {
		runner.Dir = checkout
	}
	d := &localrun.Driver{
		Machine:  m,
		Runner:   runner,
		Store:    store,
		LoopFile: abs,
		Context:  ctxValues,
		Judge:    newJudge(&loop.Spec),
		SubLoops: &localrun.SubLoops{Files: g.fileOptions(), NewMachine: newMachine, InDir: inDir, NewJudge: fileJudge, Model: f.model, Effort: f.effort},
	}
	tracer, err := tracing.New(cmd.Context(), "", "looprun")
	if err != nil {
		_ = outLog.Close()
		_ = errLog.Close()
		return nil, nil, err
	}
	d.Tracer, d.TraceParent = tracer, os.Getenv("TRACEPARENT")
	runDir := m.RunDir()
	if runDir != "" && !filepath.IsAbs(runDir) {
		runDir = filepath.Join(runner.Dir, runDir) // where the runner makes it
	}
	d.Observers = []executor.Observer{localrun.MessagesLog(runDir, errLog)}
	if !f.quiet {
		// Progress goes to stdout, as ll-loop prints it; questions and
		// warnings to stderr.
		out := cmd.OutOrStdout()
		p := newProgress(out, terminalStyle(out), f.verbose, header{loop: loop.Name, spec: &loop.Spec, context: ctxValues, littleLoops: lf.LittleLoops()}, outLog)
		d.Observers, d.OnExitHook = append(d.Observers, p), p.exitHook
		if cloned {
			d.OnGit = gitProgress(cmd.ErrOrStderr(), checkout, gitws.Redact(clone.URL))
		}
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

// newMachine builds the machine that runs a loop file here.
func newMachine(lf *loopfile.File) (*executor.Machine, error) { return machine(lf, nil) }

// machine builds the machine that runs a loop file here, in a checkout
// its first step clones from clone (nil: in the current directory).
func machine(lf *loopfile.File, clone *gitws.Op) (*executor.Machine, error) {
	prices, err := localPrices()
	if err != nil {
		return nil, err
	}
	return executor.New(lf.Loop.Name, &lf.Loop.Spec, executor.Options{Env: os.LookupEnv, LittleLoops: lf.LittleLoops(),
		MaxCaptureBytes: executor.LocalCaptureBytes, MaxCapturedBytes: executor.LocalCapturedBytes, Prices: prices, Clone: clone})
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
