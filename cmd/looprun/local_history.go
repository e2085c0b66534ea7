package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/looprun/looprun/internal/localrun"
)

// localStore is the store of a local run named on the command line.
func localStore(g *globals, name string) (*localrun.Store, error) {
	s, err := localrun.NewStore(g.loopsDir, name)
	if err != nil {
		return nil, &exitError{code: 1, msg: err.Error()}
	}
	return s, nil
}

func newPruneCommand(g *globals) *cobra.Command {
	var (
		olderThan string
		dryRun    bool
	)
	cmd := &cobra.Command{
		Use:   "prune --older-than AGE",
		Short: "Delete local runs (state, events, checkpoints, logs) not updated for AGE, e.g. 7d or 12h",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := parseAge(olderThan)
			if err != nil {
				return err
			}
			pruned, err := localrun.Prune(g.loopsDir, time.Now().Add(-d), dryRun)
			out := cmd.OutOrStdout()
			w := newFields(out, "")
			verb := "deleted"
			if dryRun {
				verb = "would delete"
			}
			for _, p := range pruned {
				w.row(verb+" "+p.Name, fmt.Sprintf("(%s, updated %s)", p.Status, p.Updated.UTC().Format(time.RFC3339)), fmt.Sprintf("%d files", len(p.Files)))
			}
			if ferr := w.flush(); err == nil {
				err = ferr
			}
			if len(pruned) == 0 {
				fmt.Fprintf(out, "no local run in %s is older than %s\n", g.loopsDir, olderThan)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&olderThan, "older-than", "", "age: a number of days (7d) or a Go duration (12h, 30m)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only list what would be deleted")
	_ = cmd.MarkFlagRequired("older-than")
	return cmd
}

// parseAge reads 7d as seven days, anything else as a Go duration.
func parseAge(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("--older-than %q: want a number of days (7d) or a duration (12h)", s)
		}
		return time.Duration(n * 24 * float64(time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("--older-than %q: want a number of days (7d) or a duration (12h)", s)
	}
	return d, nil
}
