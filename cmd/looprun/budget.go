package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/pricing"
)

// budgetChange is what looprun budget changes in spec.budget.
type budgetChange struct {
	add, set  string // dollars
	addTokens int64
}

func newBudgetCommand(k *kube) *cobra.Command {
	var ch budgetChange
	cmd := &cobra.Command{
		Use:   "budget loop/NAME (--add USD | --set USD | --add-tokens N)",
		Short: "Raise a Loop's budget (spec.budget); a Loop paused on it goes on",
		Long: "Raise what a Loop may spend on agents and the LLM judge. --add adds dollars to\n" +
			"spec.budget.maxCostUSD, --set sets it, --add-tokens adds to maxTokens. A Loop paused\n" +
			"because its budget was spent goes on from where it stopped once the budget allows it.\n" +
			"A local run is given more with looprun resume NAME --max-cost USD.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, _ := k.loopTarget(args[0], true)
			return k.raiseBudget(cmd.Context(), cmd.OutOrStdout(), name, ch)
		},
	}
	cmd.Flags().StringVar(&ch.add, "add", "", "dollars to add to spec.budget.maxCostUSD")
	cmd.Flags().StringVar(&ch.set, "set", "", "the new spec.budget.maxCostUSD, in dollars")
	cmd.Flags().Int64Var(&ch.addTokens, "add-tokens", 0, "tokens to add to spec.budget.maxTokens")
	cmd.MarkFlagsMutuallyExclusive("add", "set")
	cmd.MarkFlagsOneRequired("add", "set", "add-tokens")
	return cmd
}

// apply changes b as ch says.
func (ch budgetChange) apply(b *v1alpha1.Budget) error {
	switch {
	case ch.set != "":
		micro, err := pricing.ParseUSD(ch.set)
		if err != nil {
			return fmt.Errorf("--set: %w", err)
		}
		b.MaxCostUSD = pricing.FormatUSD(micro)
	case ch.add != "":
		add, err := pricing.ParseUSD(ch.add)
		if err != nil {
			return fmt.Errorf("--add: %w", err)
		}
		if b.MaxCostUSD == "" {
			return errors.New("--add: the Loop has no spec.budget.maxCostUSD to add to; give one with --set")
		}
		now, err := pricing.ParseUSD(b.MaxCostUSD)
		if err != nil {
			return fmt.Errorf("spec.budget.maxCostUSD: %w", err)
		}
		b.MaxCostUSD = pricing.FormatUSD(now + add)
	}
	if ch.addTokens < 0 {
		return errors.New("--add-tokens: a budget is raised, not lowered (edit spec.budget to lower it)")
	}
	if ch.addTokens > 0 {
		if b.MaxTokens == nil {
			return errors.New("--add-tokens: the Loop has no spec.budget.maxTokens to add to; edit spec.budget to set one")
		}
		b.MaxTokens = ptr.To(*b.MaxTokens + ch.addTokens)
	}
	return nil
}

// raiseBudget patches the Loop's spec.budget, checked against the version
// read (two raises at once both count).
func (k *kube) raiseBudget(ctx context.Context, out io.Writer, name string, ch budgetChange) error {
	loop, err := k.getLoop(ctx, name)
	if err != nil {
		return err
	}
	if run := loop.Status.RunState; run.Phase.IsFinished() {
		return fmt.Errorf("loop/%s has ended (phase %s): its budget no longer matters; fork it (looprun fork %s) to go on", name, run.Phase, name)
	}
	patch := client.MergeFromWithOptions(loop.DeepCopy(), client.MergeFromWithOptimisticLock{})
	b := loop.Spec.Budget
	if b == nil {
		b = &v1alpha1.Budget{}
	}
	if err := ch.apply(b); err != nil {
		return err
	}
	loop.Spec.Budget = b
	if err := k.c.Patch(ctx, loop, patch); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "loop/%s budget: %s\n", name, budgetLine(b, loop.Status.Usage))
	return err
}

// describeBudget adds the Loop's budget, and why it paused on it, to
// looprun describe.
func describeBudget(row rowFunc, loop *v1alpha1.Loop) {
	if b := loop.Spec.Budget; b != nil {
		row("Budget", "%s", budgetLine(b, loop.Status.Usage))
	}
	if b := loop.Status.Budget; b != nil && b.Exceeded != "" && loop.Status.Phase == v1alpha1.PhasePaused {
		row("Paused", "%s (looprun budget loop/%s --add USD)", b.Exceeded, loop.Name)
	}
}

// budgetLine says a budget and what was spent of it.
func budgetLine(b *v1alpha1.Budget, u *v1alpha1.UsageStatus) string {
	var cost, tokens int64
	if u != nil {
		cost, tokens = u.CostMicroUSD, u.Tokens()
	}
	s := ""
	if b.MaxCostUSD != "" {
		s = fmt.Sprintf("$%s of $%s spent", pricing.FormatUSD(cost), b.MaxCostUSD)
	}
	if b.MaxTokens != nil {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%d of %d tokens used", tokens, *b.MaxTokens)
	}
	return s
}
