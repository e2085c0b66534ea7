package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/localrun"
	"github.com/looprun/looprun/internal/pricing"
)

func newStatusCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show the saved state of a loop's run",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := localStore(g, args[0])
			if err != nil {
				return err
			}
			sf, err := store.Load()
			if errors.Is(err, os.ErrNotExist) {
				return &exitError{code: 1, msg: fmt.Sprintf("no run of %q in %s", args[0], g.loopsDir)}
			}
			if err != nil {
				return err
			}
			if output == "json" {
				b, err := json.MarshalIndent(sf, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(cmd.OutOrStdout(), string(b))
				return err
			}
			return printStatus(cmd.OutOrStdout(), sf, func() string { return pausedHint(g, args[0]) }, time.Now())
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json for the state file")
	return cmd
}

// printStatus describes a local run from its state file; paused says how
// a run paused on its budget goes on.
func printStatus(out io.Writer, sf *localrun.StateFile, paused func() string, now time.Time) error {
	w := newFields(out, "")
	row := func(k string, v any) { w.field(k, "%s", printable(fmt.Sprint(v))) }
	row("Loop", sf.LoopName)
	row("Status", sf.Status)
	row("State", sf.CurrentState)
	row("Iteration", sf.Iteration)
	if sf.TerminatedBy != "" {
		row("Terminated by", sf.TerminatedBy)
	}
	if sf.Error != "" {
		row("Error", sf.Error)
	}
	if sf.LastResult != nil {
		row("Last verdict", sf.LastResult.Verdict)
	}
	if a := sf.ActiveAction; a != nil {
		row("Action in flight", fmt.Sprintf("%s (iteration %d)", a.State, a.Iteration))
	}
	timeRows(row, sf, now)
	if len(sf.Captured) > 0 {
		row("Captured", strings.Join(slices.Sorted(maps.Keys(sf.Captured)), ", "))
	}
	if u := sf.Usage.Status(); u != nil {
		row("Usage", describeUsage(&u.UsageTotals))
		for _, name := range slices.Sorted(maps.Keys(u.States)) {
			t := u.States[name]
			row("  "+name, describeUsage(&t))
		}
	}
	if h, err := sf.ExitHook.Status(); err == nil && h != nil {
		row("Exit hook", describeExitHook(h))
	}
	if b := sf.Budget.Status(); b != nil && b.RunMaxCostMicroUSD != nil {
		row("Budget", fmt.Sprintf("$%s (--max-cost)", pricing.FormatUSD(*b.RunMaxCostMicroUSD)))
	}
	if b := sf.Budget.Status(); b != nil && b.Exceeded != "" && sf.Status == localrun.StatusPaused {
		row("Paused", b.Exceeded+" ("+paused()+")")
	}
	return w.flush()
}

// timeRows are a local run's times: when it started and was last saved,
// and for how long it ran.
func timeRows(row func(string, any), sf *localrun.StateFile, now time.Time) {
	row("Started", whenText(sf.StartedAt, now))
	row("Updated", whenText(sf.UpdatedAt, now))
	if run, err := sf.RunState(); err == nil && run.StartedAt != nil {
		end := now
		if sf.Status != localrun.StatusRunning && run.UpdatedAt != nil {
			end = run.UpdatedAt.Time
		}
		row("Running time", span(executor.Elapsed(run, end)))
	}
}

func newListCommand(g *globals) *cobra.Command {
	var running bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the loops with a saved run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			states, unreadable, err := localrun.ListStates(g.loopsDir)
			if err != nil {
				return err
			}
			if running {
				states = slices.DeleteFunc(states, func(s *localrun.StateFile) bool { return s.Status != localrun.StatusRunning })
			}
			if err := printRuns(cmd.OutOrStdout(), states, unreadable, time.Now()); err != nil {
				return err
			}
			// An unreadable state file is listed too, and the command
			// fails after the list, naming each (as ls does).
			if len(unreadable) > 0 {
				msgs := make([]string, len(unreadable))
				for i, u := range unreadable {
					msgs[i] = u.Error()
				}
				return &exitError{code: 1, msg: strings.Join(msgs, "\n")}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&running, "running", false, "only runs still running")
	return cmd
}

// printRuns lists local runs by name, then the state files it could not
// read.
func printRuns(out io.Writer, states []*localrun.StateFile, unreadable []*localrun.UnreadableError, now time.Time) error {
	w := newTable(out, "NAME", "STATUS", "STATE", "ITERATION", "UPDATED")
	slices.SortFunc(states, func(a, b *localrun.StateFile) int { return strings.Compare(a.LoopName, b.LoopName) })
	for _, s := range states {
		w.row(printable(s.LoopName), printable(s.Status), printable(s.CurrentState), s.Iteration, printable(ageText(s.UpdatedAt, now)))
	}
	for _, u := range unreadable {
		w.row(printable(strings.TrimSuffix(filepath.Base(u.Path), ".state.json")), "unreadable", "-", "-", "-")
	}
	return w.flush()
}

func newHistoryCommand(g *globals, k *kube) *cobra.Command {
	var (
		tail   int
		output string
		types  []string
		state  string
	)
	cmd := &cobra.Command{
		Use:   "history NAME | loop/NAME",
		Short: "Show the event log of a local run, or of a Loop (loop/NAME)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, cluster := k.loopTarget(args[0], false)
			var events []executor.Event
			var err error
			if cluster {
				var loop *v1alpha1.Loop
				if loop, err = k.getLoop(cmd.Context(), name); err != nil {
					return err
				}
				events, err = configmaps.Read(cmd.Context(), k.c, loop)
			} else {
				if !localRunExists(g.loopsDir, name) {
					return k.noLocalRun(cmd.Context(), "no history", g.loopsDir, name)
				}
				var store *localrun.Store
				if store, err = localStore(g, name); err != nil {
					return err
				}
				events, err = eventlog.Read(store.EventsPath())
			}
			if err != nil {
				return err
			}
			if len(events) == 0 {
				return &exitError{code: 1, msg: fmt.Sprintf("no events for %q", args[0])}
			}
			if err := knownTypes(types, events); err != nil {
				return err
			}
			when := sinceStart(events[0].Time)
			events = eventlog.Filter(events, types, state)
			if tail > 0 && len(events) > tail {
				events = events[len(events)-tail:]
			}
			out := cmd.OutOrStdout()
			for _, e := range events {
				if output == "json" {
					b, err := json.Marshal(e)
					if err != nil {
						return err
					}
					fmt.Fprintln(out, string(b))
					continue
				}
				fmt.Fprintln(out, eventLine(e, when(e.Time)))
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&tail, "tail", 0, "show only the last N events")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json for JSONL")
	cmd.Flags().StringSliceVar(&types, "type", nil, "only events of these types (route, action_complete, ...; repeatable)")
	cmd.Flags().StringVar(&state, "state", "", "only events about this state (entered, run, routed from or to)")
	return cmd
}

// knownTypes checks the types history is asked for: each one the engine
// writes, or one the log holds (a little-loops log may hold others). A
// misspelt type is an error, not an empty answer.
func knownTypes(types []string, events []executor.Event) error {
	known := map[string]bool{localrun.EventWorktreeAttached: true, localrun.EventWorktreeDetached: true, localrun.EventWorktreeError: true}
	for _, t := range executor.EventTypes {
		known[t] = true
	}
	for _, e := range events {
		known[e.Type] = true
	}
	for _, t := range types {
		if !known[t] {
			return &exitError{code: 1, msg: fmt.Sprintf("--type %q: no such event type (known: %s)", t, strings.Join(slices.Sorted(maps.Keys(known)), ", "))}
		}
	}
	return nil
}

// compact renders a value on one short line.
func compact(v any) string {
	var s string
	switch t := v.(type) {
	case string:
		s = t
	default:
		b, _ := json.Marshal(t)
		s = string(b)
	}
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	if strings.ContainsAny(s, " \t\n\r\"") {
		s = fmt.Sprintf("%q", s) // one line, each newline \n once
	}
	return s
}

// describeUsage says what agent calls used and cost, for people.
func describeUsage(t *v1alpha1.UsageTotals) string {
	tokens := t.Tokens()
	s := fmt.Sprintf("%d agent call(s), %d tokens (input %d, output %d, cache read %d, cache write %d)",
		t.Calls, tokens, t.InputTokens, t.OutputTokens, t.CacheReadTokens, t.CacheCreationTokens)
	priced := t.Calls - t.UnpricedCalls
	if priced > 0 {
		s += fmt.Sprintf(", $%.4f", pricing.MicroToUSD(t.CostMicroUSD))
	}
	if t.UnpricedCalls > 0 {
		s += fmt.Sprintf(", %d call(s) of a model without a price", t.UnpricedCalls)
	}
	if t.CLICostMicroUSD > 0 {
		s += fmt.Sprintf(" (the agent CLI said $%.4f)", pricing.MicroToUSD(t.CLICostMicroUSD))
	}
	if t.Model != "" {
		s += ", model " + t.Model
	}
	return s
}

// pausedHint says how a paused local run goes on, as run says it when it
// pauses: which limit to raise (its loop's spec.budget, or --max-cost).
func pausedHint(g *globals, name string) string {
	saved, err := localrun.OpenWith(g.fileOptions(), name)
	if err != nil {
		return fmt.Sprintf("go on with: looprun resume %s --max-cost USD", name)
	}
	return resumeHint(&saved.Loop.Loop.Spec, saved.Run, name)
}
