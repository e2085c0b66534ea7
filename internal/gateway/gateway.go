// Package gateway is looprun's model gateway: a reverse proxy in front of
// the model API (Anthropic's Messages API) that agent Pods call instead of
// the API itself. It holds the only copy of the real key, takes from each
// Pod a credential bound to that Pod (a projected service-account token of
// the gateway's audience), counts what each call used from the upstream's
// responses into the step's ledger (internal/gateway/ledger) before the
// end of the response reaches the agent, and refuses a call once the Loop's
// budget is spent.
package gateway

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/types"

	"github.com/looprun/looprun/internal/gateway/ledger"
)

// Caller is who a call is for.
type Caller struct {
	// Step is the Loop's step whose Pod made the call.
	ledger.Step
	// Operator marks the operator's own calls (the LLM judge) for the
	// Loop of Step: budget-checked, not written to a ledger (the operator
	// counts them from the response it gets).
	Operator bool
}

// Authenticator maps a call's credential (the x-api-key header, or the
// bearer token of Authorization) to the step it is for. It fails with an
// error wrapping ErrUnauthenticated (the credential is no good: 401) or
// ErrForbidden (good, but its Pod runs no step of a Loop now: 403).
// loopHeader is the x-looprun-loop header ("namespace/name"), read only
// for the operator's own identity.
type Authenticator interface {
	Authenticate(ctx context.Context, credential, loopHeader string) (*Caller, error)
}

// Budget says whether the Loop of a step may make one more call, given
// what the step's calls used so far (not yet in the Loop's status). It
// fails with an error wrapping ErrBudgetSpent when it may not.
type Budget interface {
	Check(ctx context.Context, step ledger.Step, stepSpent ledger.Totals) error
}

// Ledger keeps the steps' calls (ledger.Store in a cluster).
type Ledger interface {
	Record(ctx context.Context, step ledger.Step, c ledger.Call) error
	Read(ctx context.Context, podUID types.UID) (*ledger.Ledger, error)
}

// The errors an Authenticator and a Budget fail with.
var (
	ErrUnauthenticated = errors.New("unauthenticated")
	ErrForbidden       = errors.New("forbidden")
	ErrBudgetSpent     = errors.New("budget spent")
)
