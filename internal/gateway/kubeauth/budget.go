package kubeauth

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/gateway"
	"github.com/looprun/looprun/internal/gateway/ledger"
	"github.com/looprun/looprun/internal/pricing"
)

type budget struct {
	c client.Reader
}

// NewBudget checks a step's Loop's budget before each call: what the run
// recorded in its status, plus what the step's calls used so far, against
// spec.budget (and the run's own --max-cost), as the executor checks it
// before a state. c reads Loops (the gateway's cache).
//
// prices is the table the gateway prices calls with; the step's spend
// reaches Check priced already (ledger.Totals), so Check itself needs no
// prices.
//
// A child Loop (a sub-loop state's) needs nothing more: its parent clamps
// the child's spec.budget to what the parent has left when it makes it
// (executor.subLoopBudget and ClampBudget, internal/executor/subloop_budget.go;
// a child without a budget takes the parent's rest whole), so the child's
// own spec.budget bounds its calls, and its spend is added to the parent's
// when it ends (addChildUsage).
func NewBudget(c client.Reader, prices *pricing.Table) gateway.Budget {
	return &budget{c: c}
}

// Check implements gateway.Budget.
func (b *budget) Check(ctx context.Context, step ledger.Step, stepSpent ledger.Totals) error {
	loop := &v1alpha1.Loop{}
	if err := b.c.Get(ctx, client.ObjectKey{Namespace: step.Namespace, Name: step.Loop}, loop); err != nil {
		if apierrors.IsNotFound(err) {
			return forbidden("the Loop %s/%s is gone", step.Namespace, step.Loop)
		}
		return fmt.Errorf("reading Loop %s/%s: %w", step.Namespace, step.Loop, err)
	}
	if loop.UID != step.LoopUID {
		return forbidden("the Loop %s/%s is gone (a Loop of its name was made again)", step.Namespace, step.Loop)
	}
	raise := fmt.Sprintf("looprun budget loop/%s -n %s", loop.Name, loop.Namespace)
	if loop.Status.Phase == v1alpha1.PhasePaused {
		return fmt.Errorf("%w: Loop %s/%s is paused: %s; to go on, raise its budget with %s --add USD (or --add-tokens N)",
			gateway.ErrBudgetSpent, loop.Namespace, loop.Name, executor.PausedWhy(&loop.Status.RunState), raise)
	}
	why := executor.BudgetExceeded(&loop.Spec, &loop.Status.RunState, stepSpent.CostMicroUSD, stepSpent.Usage.Tokens())
	if why == "" {
		return nil
	}
	flag := "--add USD"
	if strings.HasPrefix(why, "used ") { // the token limit (executor's limits.exceeded)
		flag = "--add-tokens N"
	}
	return fmt.Errorf("%w: Loop %s/%s %s (this step's calls: $%s, %d tokens); to go on, raise its budget with %s %s",
		gateway.ErrBudgetSpent, loop.Namespace, loop.Name, why,
		pricing.FormatUSD(stepSpent.CostMicroUSD), stepSpent.Usage.Tokens(), raise, flag)
}
