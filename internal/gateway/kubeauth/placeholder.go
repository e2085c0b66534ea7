// Package kubeauth is the model gateway's identity and budget in a
// cluster. This file only holds the constructors' signatures so that
// cmd/gateway builds on this branch; the package itself lands separately
// and replaces it.
package kubeauth

import (
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/internal/gateway"
	"github.com/looprun/looprun/internal/pricing"
)

// NewAuthenticator maps a Pod-bound token of audience to its Loop's step
// (operator is the looprun manager's "namespace:serviceaccount").
func NewAuthenticator(c client.Reader, tr authenticationv1client.TokenReviewInterface, audience string, operator string) gateway.Authenticator {
	return nil
}

// NewBudget checks a Loop's budget before a call.
func NewBudget(c client.Reader, prices *pricing.Table) gateway.Budget {
	return nil
}
