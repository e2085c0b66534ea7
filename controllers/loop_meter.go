package controllers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/looprun/looprun/internal/executor"
)

// LedgerSettle is how long the operator waits, at the end of a step, for
// the calls its ledger shows still open to be closed by the gateway.
var LedgerSettle = 2 * time.Second

const ledgerPoll = 100 * time.Millisecond

// metered gives an ended action that called the model through the model
// gateway its metered usage: what the gateway counted, in the step's
// ledger, from the model API's own answers (what the agent printed stays
// beside it, as reported). Without a gateway, or for an action that does
// not call the agent, the result is as the runner gave it. A ledger that
// cannot be read fails the reconcile (it is tried again): a step is never
// completed unbilled.
func (s *step) metered(ctx context.Context, a *executor.Action, res executor.ActionResult) (*executor.ActionResult, error) {
	run := &s.loop.Status.RunState
	if s.r.Ledger == nil || a == nil || (!a.Agent && !a.CallsAgent) || run.Action == nil || run.Action.PodUID == "" {
		return &res, nil
	}
	uid := types.UID(run.Action.PodUID)
	l, err := s.r.Ledger.Read(ctx, uid)
	// The gateway ships a call's record to the ledger just after the
	// answer ends (docs/gateway-protocol.md): a call still open here is
	// one whose end is on its way, or one cut off (which stays open). A
	// short wait lets the first kind arrive.
	for deadline := time.Now().Add(LedgerSettle); err == nil && l.Open() > 0 && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(ledgerPoll):
		}
		l, err = s.r.Ledger.Read(ctx, uid)
	}
	if err != nil {
		return nil, fmt.Errorf("read the usage the gateway metered for Pod %s: %w", run.Action.Pod, err)
	}
	t := l.Totals(s.m.Prices()) // the price table the engine prices with
	res.Metered = &executor.Metered{Usage: t.Usage, Calls: t.Calls, Unpriced: t.Unpriced, CostMicroUSD: t.CostMicroUSD}
	store := s.r.Ledger
	s.out.afterSave = append(s.out.afterSave, func() {
		// Counted and saved: the step's ledger goes. (One a call cut off
		// after this wrote again, the gateway drops once its step is over.)
		if err := store.Delete(context.WithoutCancel(ctx), uid); err != nil {
			log.FromContext(ctx).Error(err, "Dropping the usage ledgers of counted steps")
		}
	})
	return &res, nil
}
