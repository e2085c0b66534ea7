// Command looprun runs loops: locally with no cluster (run, resume, status,
// list, history, validate, simulate, convert, prune), and in a cluster
// (get, describe, watch, logs, history, checkpoints, suspend, resume, stop,
// fork, rewind, export, import, apply). Linked as kubectl-loop it is the
// kubectl plugin "kubectl loop".
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/spf13/cobra"

	"github.com/looprun/looprun/internal/loopfile"
)

// ExitPaused is the exit code of a local run paused on its budget.
const ExitPaused = 3

// exitError carries a process exit code out of a command.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// globals are the flags every command shares.
type globals struct {
	loopsDir    string
	libraryPath string
}

// fileOptions say where loop files and what they refer to are looked up:
// --loops-dir, --library-path, then the bundled loops of an installed
// little-loops, as ll-loop looks.
func (g *globals) fileOptions() loopfile.Options {
	return loopfile.Options{LoopsDir: g.loopsDir, LibraryPath: filepath.SplitList(g.libraryPath), Bundled: bundledLoops, NotFound: noBundledLoops}
}

// bundledLoops finds an installed little-loops' bundled loops once a
// process, when a name or reference is not found before them.
var bundledLoops = sync.OnceValue(loopfile.FindBundled)

// noBundledLoops says, after a name or reference found nowhere, how to
// make little-loops' bundled loops and libraries found.
const noBundledLoops = "no installed little-loops was found for its bundled loops and lib/ " +
	"(neither the ll-loop on PATH nor python3 imports little_loops, and ~/.local has none): " +
	"give --library-path DIR or set LOOPRUN_LIBRARY_PATH=DIR, DIR being the loops directory of " +
	"its little_loops package (python3 -c 'import little_loops, os; print(os.path.dirname(little_loops.__file__))' prints the package's)"

func newRootCommand(k *kube) *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "looprun",
		Short: "Run loops: state machines that act, judge the result and route until done",
		Long: "Run loops: state machines that act, judge the result and route until done, on this\n" +
			"machine (a run saved under --loops-dir) or as Loops in a Kubernetes cluster (the\n" +
			"kubeconfig and flags as kubectl's). Where a command takes both, loop/NAME always names\n" +
			"a Loop in the cluster; what a bare NAME names is said in each group's title.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	if k.plugin {
		root.Use = "loop"
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl loop"}
	}
	root.PersistentFlags().StringVar(&g.loopsDir, "loops-dir", ".loops", "directory of named loops and of run state (.running/)")
	root.PersistentFlags().StringVar(&g.libraryPath, "library-path", os.Getenv("LOOPRUN_LIBRARY_PATH"),
		"more directories of loops and libraries, searched after --loops-dir, separated by ':' (default $LOOPRUN_LIBRARY_PATH); after them, as ll-loop, the bundled loops and lib/ of the little_loops package that the ll-loop on PATH or python3 imports")
	k.bind(root)
	root.PersistentPreRun = func(*cobra.Command, []string) { k.loopsDir = g.loopsDir }
	for _, grp := range helpGroups(k.plugin) {
		root.AddGroup(&cobra.Group{ID: grp.id, Title: grp.title})
	}
	resume := newResumeCommand(g, k)
	for _, grp := range []struct {
		id   string
		cmds []*cobra.Command
	}{
		{groupLocal, []*cobra.Command{
			newRunCommand(g), newStatusCommand(g), newListCommand(g), newValidateCommand(g),
			newSimulateCommand(g), newConvertCommand(g), newPruneCommand(g),
		}},
		{groupCluster, []*cobra.Command{
			newGetCommand(k), newDescribeCommand(k), newWatchCommand(k), newLogsCommand(k), newSuspendCommand(k),
			newStopCommand(k), newForkCommand(k), newApplyCommand(g, k), newBudgetCommand(k),
		}},
		{groupLocalFirst, []*cobra.Command{
			resume, newHistoryCommand(g, k), newApprovalCommand(g, k, true), newApprovalCommand(g, k, false),
		}},
		{groupClusterFirst, []*cobra.Command{
			newCheckpointsCommand(g, k), newRewindCommand(g, k), newExportCommand(g, k), newImportCommand(g, k),
		}},
		{groupBoth, []*cobra.Command{newUICommand(g, k)}},
	} {
		for _, c := range grp.cmds {
			c.GroupID = helpGroupOf(grp.id, k.plugin)
			root.AddCommand(c)
		}
	}
	root.AddCommand(newVersionCommand(k))
	return root
}

func main() {
	k := &kube{plugin: filepath.Base(os.Args[0]) == "kubectl-loop"}
	os.Exit(execute(k, os.Args[1:], os.Stdout, os.Stderr))
}

// execute runs the command line and returns the exit code: 0 completed,
// 2 ended in a failure state, 1 anything else.
func execute(k *kube, args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(k)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(stderr, ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "error:", err)
	return 1
}
