package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
)

// newApprovalCommand answers the approval state a loop waits in: approve
// or reject, locally (the answer file a running looprun run reads) or in a
// cluster (loop/NAME: an approve or reject request on the Loop).
func newApprovalCommand(g *globals, k *kube, approve bool) *cobra.Command {
	verb, short := "reject", "Reject what an approval state asks (the loop goes on with the verdict rejected)"
	if approve {
		verb, short = "approve", "Approve what an approval state asks (the loop goes on with the verdict approved)"
	}
	var message string
	cmd := &cobra.Command{
		Use:   verb + " NAME|loop/NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, cluster := k.loopTarget(args[0], false)
			if cluster {
				return k.answerApproval(cmd.Context(), cmd.OutOrStdout(), name, approve, message)
			}
			if !localRunExists(g.loopsDir, name) {
				return k.noLocalRun(cmd.Context(), "nothing to "+verb, g.loopsDir, name)
			}
			store, err := localStore(g, name)
			if err != nil {
				return err
			}
			ans, err := store.WriteAnswer(approve, whoami(), message, time.Now())
			if err != nil {
				return &exitError{code: 1, msg: err.Error()}
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: state %s (iteration %d) %sd\n", name, ans.State, ans.Iteration, verb)
			return err
		},
	}
	cmd.Flags().StringVarP(&message, "message", "m", "", "why, for the event log")
	return cmd
}

// whoami names the person answering a local approval.
func whoami() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

// whoAmI is the user the API server authenticates this client as (a
// SelfSubjectReview, as kubectl auth whoami asks): the name an approval
// must carry for the chart's admission policy to admit it.
func (k *kube) whoAmI(ctx context.Context) (string, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := k.c.Create(ctx, review); err != nil {
		return "", fmt.Errorf("cannot learn who you are from the API server (SelfSubjectReview), which an approval names: %w", err)
	}
	if review.Status.UserInfo.Username == "" {
		return "", errors.New("the API server did not say who you are (SelfSubjectReview): an approval must name its author")
	}
	return review.Status.UserInfo.Username, nil
}

// answerApproval writes an approve or reject request, with its message,
// on a Loop waiting for approval.
func (k *kube) answerApproval(ctx context.Context, out io.Writer, name string, approve bool, message string) error {
	loop, err := k.getLoop(ctx, name)
	if err != nil {
		return err
	}
	a := loop.Status.Action
	if a == nil || a.Approval == nil || loop.Status.Phase.IsFinished() {
		return &exitError{code: 1, msg: fmt.Sprintf("loop/%s waits for no approval", name)}
	}
	me, err := k.whoAmI(ctx)
	if err != nil {
		return err
	}
	patch := client.MergeFrom(loop.DeepCopy())
	if loop.Annotations == nil {
		loop.Annotations = map[string]string{}
	}
	loop.Annotations[v1alpha1.ApprovalMessageAnnotation] = message
	loop.Annotations[v1alpha1.ApprovedByAnnotation] = me
	loop.Annotations[v1alpha1.RequestAnnotation] = v1alpha1.ApprovalRequest(approve, fmt.Sprint(k.clock().UnixNano()))
	if err := k.c.Patch(ctx, loop, patch); err != nil {
		return err
	}
	verb := "rejected"
	if approve {
		verb = "approved"
	}
	_, err = fmt.Fprintf(out, "loop/%s: state %s (iteration %d) %s\n", name, a.State, a.Iteration, verb)
	return err
}
