// Command looprun runs loops: locally with no cluster (run, resume, status,
// list, history, validate, simulate, convert).
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// exitError carries a process exit code out of a command.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// globals are the flags every command shares.
type globals struct {
	loopsDir string
}

func newRootCommand() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "looprun",
		Short:         "Run loops: state machines that act, judge the result and route until done",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.loopsDir, "loops-dir", ".loops", "directory of named loops and of run state (.running/)")
	root.AddCommand(
		newRunCommand(g), newResumeCommand(g), newStatusCommand(g), newListCommand(g),
		newHistoryCommand(g), newValidateCommand(g), newSimulateCommand(g), newConvertCommand(g),
	)
	return root
}

func main() {
	os.Exit(execute(os.Args[1:]))
}

// execute runs the command line and returns the exit code: 0 completed,
// 2 ended in a failure state, 1 anything else.
func execute(args []string) int {
	root := newRootCommand()
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(os.Stderr, ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(os.Stderr, "error:", err)
	return 1
}
