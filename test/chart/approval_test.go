package chart

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/test/fixture"
)

// The chart's approval policy, on a real API server, with impersonated
// users: an approval is admitted only from a user holding the verb
// approve on the Loop who names themself as the API server knows them;
// other requests on the Loop are not its business.
func TestApprovalPolicy(t *testing.T) {
	cfg, admin := fixture.Start(t, true)
	ctx := context.Background()
	m := render(t)
	for _, kind := range []string{"ClusterRole", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		for _, o := range m.all(kind) {
			if kind == "ClusterRole" && !strings.HasSuffix(o.GetName(), "-approver") {
				continue
			}
			if err := admin.Create(ctx, o.DeepCopy()); err != nil {
				t.Fatalf("%s %s: %v", kind, o.GetName(), err)
			}
		}
	}
	ns := "team-a"
	mustCreate := func(o client.Object) {
		t.Helper()
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	mustCreate(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	// bob may edit Loops, not approve them; alice is an approver.
	mustCreate(&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "loop-editor", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"looprun.io"}, Resources: []string{"loops"}, Verbs: []string{"get", "patch", "update"}}}})
	mustCreate(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "editors", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "loop-editor"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "bob"}}})
	mustCreate(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "approvers", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "looprun-approver"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "alice"}}})
	mustCreate(&v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Name: "gated", Namespace: ns}, Spec: v1alpha1.LoopSpec{Initial: "ask",
		States: map[string]v1alpha1.State{"ask": {Approval: &v1alpha1.Approval{Message: "ship it?"}, OnSuccess: "done"}, "done": {Terminal: true}}}})

	as := func(user string) client.Client {
		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{UserName: user}
		cl, err := client.New(c, client.Options{Scheme: fixture.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	answer := func(c client.Client, request, by string) error {
		ann := map[string]any{v1alpha1.RequestAnnotation: request, v1alpha1.ApprovedByAnnotation: by}
		if by == "" {
			ann[v1alpha1.ApprovedByAnnotation] = nil
		}
		patch := map[string]any{"metadata": map[string]any{"annotations": ann}}
		return c.Patch(ctx, &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Name: "gated", Namespace: ns}}, client.RawPatch(types.MergePatchType, mustJSON(t, patch)))
	}
	bob, alice := as("bob"), as("alice")
	// The policy takes a moment to be in force once created. Each try is
	// a new request (a new nonce): a request admitted before the policy
	// was in force, sent again unchanged, is no answer the policy looks at
	// (it judges new requests only), so it would be admitted forever.
	deadline := time.Now().Add(2 * time.Minute)
	for try := 1; ; try++ {
		err := answer(bob, fmt.Sprintf("approve@1-%d", try), "bob")
		if err != nil && strings.Contains(err.Error(), "bob may not approve or reject loop gated") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a user without the verb approve answered: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := answer(alice, "approve@2", "bob"); err == nil || !strings.Contains(err.Error(), "set the annotation looprun.io/approved-by to alice") {
		t.Errorf("an approver naming someone else: %v", err)
	}
	if err := answer(alice, "reject@3", ""); err == nil {
		t.Error("an approval naming nobody was admitted")
	}
	if err := answer(alice, "approve@4", "alice"); err != nil {
		t.Fatalf("an approver naming themself: %v", err)
	}
	// A stop request is not an approval: bob may still make it, as long
	// as he leaves the approver's name alone.
	if err := answer(bob, "stop@5", "alice"); err != nil {
		t.Errorf("a stop request by an editor: %v", err)
	}
	if err := answer(bob, "stop@6", "bob"); err == nil {
		t.Error("an editor rewrote who approved")
	}
	// What the policy lets bob write is never read as an answer by the
	// operator (which would credit it to alice, who approved last).
	for i, req := range []string{" approve@7", "\u00a0approve@8", "\u2003reject@9", "\tapprove:x@10", "\napprove", "Approve@11", "\u200bapprove@12"} {
		err := answer(bob, req, "alice")
		if err != nil {
			continue // refused: not an answer either
		}
		if verb, _, perr := v1alpha1.ParseRequest(req); perr == nil && (verb == v1alpha1.RequestApprove || verb == v1alpha1.RequestReject) {
			t.Errorf("try %d: bob's %q was admitted and the operator reads it as %s", i, req, verb)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// make deploy installs the same policy as the chart.
func TestKustomizeApprovalPolicyMatchesChart(t *testing.T) {
	chart := one[map[string]any](t, render(t), "ValidatingAdmissionPolicy", "-approvals")
	kust := one[map[string]any](t, kustomize(t, "registry.example/looprun:v1"), "ValidatingAdmissionPolicy", "-approvals")
	if a, b := mustJSON(t, (*chart)["spec"]), mustJSON(t, (*kust)["spec"]); string(a) != string(b) {
		t.Errorf("the chart's approval policy differs from config/approval's:\n%s\n%s", a, b)
	}
	kb := one[map[string]any](t, kustomize(t, "registry.example/looprun:v1"), "ValidatingAdmissionPolicyBinding", "-approvals")
	if name := (*kb)["spec"].(map[string]any)["policyName"]; name != "looprun-approvals" {
		t.Errorf("config/approval's binding names policy %v", name)
	}
}
