package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/history"
	"github.com/looprun/looprun/internal/localrun"
	"github.com/looprun/looprun/internal/safefile"
	"github.com/looprun/looprun/internal/transfer"
)

func newSuspendCommand(k *kube) *cobra.Command {
	return &cobra.Command{
		Use:   "suspend NAME",
		Short: "Pause a Loop between states (spec.suspend: true)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, _ := k.loopTarget(args[0], true)
			return k.setSuspend(cmd.Context(), cmd.OutOrStdout(), name, true)
		},
	}
}

func (k *kube) setSuspend(ctx context.Context, out io.Writer, name string, suspend bool) error {
	loop, err := k.getLoop(ctx, name)
	if err != nil {
		return err
	}
	if run := loop.Status.RunState; run.Phase.IsFinished() {
		return fmt.Errorf("loop/%s has ended (phase %s, terminated by %s in state %s): suspend and resume act on a running Loop; "+
			"to go on from where it ended, rewind it (looprun rewind %s --iteration N) or fork it (looprun fork %s)",
			name, run.Phase, cmp.Or(string(run.TerminatedBy), "-"), run.CurrentState, name, name)
	}
	if loop.Spec.Suspend == suspend {
		state := "not suspended: nothing changed (resume loop/NAME unsuspends a Loop; resume NAME, without loop/, continues a local run)"
		if suspend {
			state = "already suspended: nothing changed"
		}
		_, err = fmt.Fprintf(out, "loop/%s is %s\n", name, state)
		return err
	}
	patch := client.MergeFrom(loop.DeepCopy())
	loop.Spec.Suspend = suspend
	if err := k.c.Patch(ctx, loop, patch); err != nil {
		return err
	}
	verb := "resumed"
	if suspend {
		verb = "suspended"
	}
	_, err = fmt.Fprintf(out, "loop/%s %s\n", name, verb)
	return err
}

func newStopCommand(k *kube) *cobra.Command {
	return &cobra.Command{
		Use:   "stop NAME",
		Short: "End a running Loop at once (phase Interrupted, terminatedBy stopped)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, _ := k.loopTarget(args[0], true)
			if err := k.request(cmd.Context(), name, v1alpha1.StopRequest); err != nil {
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "loop/%s stop requested\n", name)
			return err
		},
	}
}

func newForkCommand(k *kube) *cobra.Command {
	var iteration int32
	cmd := &cobra.Command{
		Use:   "fork NAME NEW-NAME",
		Short: "Start a new Loop from a checkpoint of another (spec.resumeFrom)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, _ := k.loopTarget(args[0], true)
			src, err := k.getLoop(cmd.Context(), name)
			if err != nil {
				return err
			}
			var it *int32
			if cmd.Flags().Changed("iteration") {
				it = &iteration
			}
			cp, _, err := configmaps.FindCheckpoint(cmd.Context(), k.c, src, it)
			if err != nil {
				return &exitError{code: 1, msg: fmt.Sprintf("cannot fork %s: %v", name, err)}
			}
			fork := &v1alpha1.Loop{
				ObjectMeta: metav1.ObjectMeta{Name: args[1], Namespace: k.ns, Labels: src.Labels},
				Spec:       *src.Spec.DeepCopy(),
			}
			fork.Spec.ResumeFrom = &v1alpha1.ResumeFrom{Loop: name, Iteration: &cp.Iteration}
			fork.Spec.Suspend = false
			if err := k.c.Create(cmd.Context(), fork); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "loop/%s created from loop/%s at iteration %d (state %s)\n", fork.Name, name, cp.Iteration, cp.State)
			return err
		},
	}
	cmd.Flags().Int32Var(&iteration, "iteration", 0, "the checkpoint to start from (default: the newest)")
	return cmd
}

func newRewindCommand(g *globals, k *kube) *cobra.Command {
	var (
		iteration int32
		local     bool
		file      string
	)
	cmd := &cobra.Command{
		Use:   "rewind NAME",
		Short: "Take a run back to one of its checkpoints and go on from there",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var it *int32
			if cmd.Flags().Changed("iteration") {
				it = &iteration
			}
			name, cluster := k.localOrLoop(args[0], local)
			if !cluster {
				return rewindLocal(cmd, g, name, it, file)
			}
			loop, err := k.getLoop(cmd.Context(), name)
			if err != nil {
				return err
			}
			cp, _, err := configmaps.FindCheckpoint(cmd.Context(), k.c, loop, it)
			if err != nil {
				return &exitError{code: 1, msg: fmt.Sprintf("cannot rewind %s: %v", name, err)}
			}
			if err := k.request(cmd.Context(), name, func(nonce string) string { return v1alpha1.RewindRequest(cp.Iteration, nonce) }); err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "loop/%s rewinding to iteration %d (state %s)\n", name, cp.Iteration, cp.State)
			return err
		},
	}
	cmd.Flags().Int32Var(&iteration, "iteration", 0, "the checkpoint to go back to (default: the newest)")
	cmd.Flags().BoolVar(&local, "local", false, "rewind the local run (under --loops-dir)")
	cmd.Flags().StringVarP(&file, "file", "f", "", "with --local: the loop file, when the state file cannot say")
	return cmd
}

func rewindLocal(cmd *cobra.Command, g *globals, name string, it *int32, file string) error {
	store, err := localStore(g, name)
	if err != nil {
		return err
	}
	if file == "" {
		var err error
		if file, err = localrun.LoopFile(g.loopsDir, name); err != nil {
			return fmt.Errorf("which loop file does %q run? say it with --file (%w)", name, err)
		}
	}
	lf, err := loadLoop(file, g, cmd.ErrOrStderr(), true)
	if err != nil {
		return err
	}
	m, err := executor.New(name, &lf.Loop.Spec, executor.Options{})
	if err != nil {
		return fmt.Errorf("%s: invalid loop: %w", file, err)
	}
	run, err := store.Rewind(m, it, file, nil, time.Now())
	if err != nil {
		return &exitError{code: 1, msg: err.Error()}
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s rewound to iteration %d (state %s); continue with: looprun resume %s\n", name, run.Iteration, run.CurrentState, name)
	return err
}

func newExportCommand(g *globals, k *kube) *cobra.Command {
	var (
		local  bool
		output string
	)
	cmd := &cobra.Command{
		Use:   "export NAME",
		Short: "Write a run (Loop, event log, checkpoints) as one checked JSON document",
		Long: "Export a Loop from the cluster (NAME or loop/NAME), or a local run with --local, as one\n" +
			"versioned JSON document with a SHA-256 checksum; looprun import recreates and continues it.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, cluster := k.localOrLoop(args[0], local)
			var run *history.Run
			var err error
			if cluster {
				if _, err := k.getLoop(cmd.Context(), name); err != nil {
					return err
				}
				run, err = transfer.ExportCluster(cmd.Context(), k.c, k.key(name), k.clock())
			} else {
				run, err = transfer.ExportLocal(g.loopsDir, name, k.clock())
			}
			if err != nil {
				return err
			}
			if output == "" || output == "-" {
				return history.WriteExport(cmd.OutOrStdout(), run)
			}
			f, err := os.Create(output)
			if err != nil {
				return err
			}
			return errors.Join(history.WriteExport(f, run), f.Close())
		},
	}
	cmd.Flags().BoolVar(&local, "local", false, "export the local run NAME (under --loops-dir)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "write to this file instead of stdout")
	return cmd
}

func newImportCommand(g *globals, k *kube) *cobra.Command {
	var (
		local, overwrite bool
		name             string
	)
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Recreate an exported run in a namespace (or locally, --local) and continue it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in := cmd.InOrStdin()
			if args[0] != "-" {
				f, err := safefile.Open(args[0])
				if err != nil {
					return &exitError{code: 1, msg: err.Error()}
				}
				defer f.Close()
				in = f
			}
			run, err := history.ReadExport(in)
			if err != nil {
				return &exitError{code: 1, msg: fmt.Sprintf("%s: %v", args[0], err)}
			}
			if name == "" {
				name = run.Loop.Name
			}
			out := cmd.OutOrStdout()
			if local {
				store, err := transfer.ImportLocal(g.loopsDir, run, name, overwrite, k.clock())
				if err != nil {
					return err
				}
				st := run.Loop.Status
				next := "continue with: looprun resume " + name
				if st.Phase == v1alpha1.PhaseCompleted || st.Phase == v1alpha1.PhaseFailed {
					// resume would find nothing to do.
					next = fmt.Sprintf("the run has ended (%s), so there is nothing to resume: looprun status %s shows it, looprun rewind %s --iteration N runs it again from a checkpoint",
						strings.ToLower(string(st.Phase)), name, name)
				}
				_, err = fmt.Fprintf(out, "%s imported into %s at iteration %d (state %s); %s\n", name, store.StatePath(), st.Iteration, st.CurrentState, next)
				return err
			}
			if err := k.connect(); err != nil {
				return err
			}
			loop, err := transfer.ImportCluster(cmd.Context(), k.c, k.scheme, run, k.key(name), k.clock())
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(out, "loop/%s imported into namespace %s at iteration %d (state %s, %s)\n", loop.Name, loop.Namespace, loop.Status.Iteration, loop.Status.CurrentState, loop.Status.Phase)
			return err
		},
	}
	cmd.Flags().BoolVar(&local, "local", false, "import as a local run (under --loops-dir)")
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "with --local: replace a local run of the same name")
	cmd.Flags().StringVar(&name, "name", "", "the name to import under (default: the exported one)")
	return cmd
}
