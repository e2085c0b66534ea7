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
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/looprun/looprun/internal/approval"
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
			ans, err := store.WriteAnswer(approve, whoami(), message, nil, time.Now())
			if err != nil {
				return &exitError{code: 1, msg: err.Error()}
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: state %s (iteration %d) %s\n", name, ans.State, ans.Iteration, answered(approve))
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

// answerApproval writes an approve or reject request, with its message,
// on a Loop waiting for approval.
func (k *kube) answerApproval(ctx context.Context, out io.Writer, name string, approve bool, message string) error {
	loop, err := k.getLoop(ctx, name)
	if err != nil {
		return err
	}
	a, err := approval.Answer(ctx, k.c, loop, approve, message, nil, k.clock())
	if errors.Is(err, approval.ErrNotWaiting) || errors.Is(err, approval.ErrAnswered) {
		return &exitError{code: 1, msg: err.Error()}
	}
	if apierrors.IsConflict(err) {
		return &exitError{code: 1, msg: fmt.Sprintf("loop/%s changed while it was answered (another answer?): look again with looprun get loop/%s", name, name)}
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "loop/%s: state %s (iteration %d) %s\n", name, a.State, a.Iteration, answered(approve))
	return err
}

// answered is the verdict an answer gives, as a word.
func answered(approve bool) string {
	if approve {
		return "approved"
	}
	return "rejected"
}
