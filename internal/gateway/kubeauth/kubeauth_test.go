package kubeauth

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/kubernetes"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/gateway"
	"github.com/looprun/looprun/internal/gateway/ledger"
	"github.com/looprun/looprun/internal/pricing"
	"github.com/looprun/looprun/test/fixture"
)

const audience = "looprun-gateway"

const testLoop = `
apiVersion: looprun.io/v1alpha1
kind: Loop
spec:
  initial: work
  states:
    work: {action: "echo work", next: done}
    done: {terminal: true}
`

// countingReviews counts the TokenReviews the authenticator asks for.
type countingReviews struct {
	authenticationv1client.TokenReviewInterface
	n atomic.Int64
}

func (c *countingReviews) Create(ctx context.Context, tr *authenticationv1.TokenReview, o metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	c.n.Add(1)
	return c.TokenReviewInterface.Create(ctx, tr, o)
}

// cluster is an envtest API server with what the tests make in it.
type cluster struct {
	t   *testing.T
	ctx context.Context
	c   client.Client
	cs  kubernetes.Interface
}

func (k *cluster) create(o client.Object) {
	k.t.Helper()
	if err := k.c.Create(k.ctx, o); err != nil {
		k.t.Fatal(err)
	}
}

func (k *cluster) loop(ns, name string, budget *v1alpha1.Budget) *v1alpha1.Loop {
	k.t.Helper()
	loop := &v1alpha1.Loop{}
	if err := yaml.Unmarshal([]byte(testLoop), loop); err != nil {
		k.t.Fatal(err)
	}
	loop.Namespace, loop.Name, loop.Spec.Budget = ns, name, budget
	k.create(loop)
	return loop
}

// pod makes an action Pod controlled by owner (none when nil), run by
// service account "runner".
func (k *cluster) pod(ns, name string, owner *v1alpha1.Loop) *corev1.Pod {
	k.t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{ServiceAccountName: "runner", AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "agent", Image: "agent"}}}}
	if owner != nil {
		pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, v1alpha1.GroupVersion.WithKind("Loop"))}
	}
	k.create(pod)
	return pod
}

// step records in loop's status that its action in flight runs in pod
// (none when nil), as the operator does.
func (k *cluster) step(loop *v1alpha1.Loop, pod *corev1.Pod, state string, iteration int32) {
	k.t.Helper()
	fresh := &v1alpha1.Loop{}
	if err := k.c.Get(k.ctx, client.ObjectKeyFromObject(loop), fresh); err != nil {
		k.t.Fatal(err)
	}
	fresh.Status.RunID, fresh.Status.Phase = "run-"+loop.Name, v1alpha1.PhaseRunning
	fresh.Status.CurrentState, fresh.Status.Iteration = state, iteration
	fresh.Status.Action = nil
	if pod != nil {
		fresh.Status.Action = &v1alpha1.ActionStatus{State: state, Iteration: iteration, Agent: true,
			Pod: pod.Name, PodUID: string(pod.UID)}
	}
	if err := k.c.Status().Update(k.ctx, fresh); err != nil {
		k.t.Fatal(err)
	}
}

// token is a token of service account ns/sa for audiences (the API
// server's when none), bound to pod when given.
func (k *cluster) token(ns, sa string, pod *corev1.Pod, audiences ...string) string {
	k.t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: audiences}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := k.cs.CoreV1().ServiceAccounts(ns).CreateToken(k.ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	return tr.Status.Token
}

func wantStep(t *testing.T, got *gateway.Caller, err error, loop *v1alpha1.Loop, pod *corev1.Pod, state string, iteration int32) {
	t.Helper()
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
	want := ledger.Step{Namespace: loop.Namespace, Loop: loop.Name, LoopUID: loop.UID, Pod: pod.Name, PodUID: pod.UID,
		Run: "run-" + loop.Name, Iteration: iteration, State: state}
	if got.Operator || got.Step != want {
		t.Fatalf("caller = %+v, want step %+v", *got, want)
	}
}

func wantErr(t *testing.T, got *gateway.Caller, err, want error, token string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("caller %+v, error %v; want an error wrapping %v", got, err, want)
	}
	if token != "" && strings.Contains(err.Error(), token) {
		t.Fatalf("the error shows the token: %v", err)
	}
}

// TestAgainstAPIServer maps real tokens, made by a kube-apiserver, to
// steps, and refuses those of every other Pod, step and audience.
func TestAgainstAPIServer(t *testing.T) {
	cfg, c := fixture.Start(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := &cluster{t: t, ctx: ctx, c: c, cs: kubernetes.NewForConfigOrDie(cfg)}
	for _, ns := range []string{"team-a", "team-b", "looprun-system"} {
		k.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		k.create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "runner"}})
	}
	k.create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "looprun-system", Name: "manager"}})
	reviews := &countingReviews{TokenReviewInterface: k.cs.AuthenticationV1().TokenReviews()}
	auth := quick(NewAuthenticator(c, reviews, audience, "looprun-system:manager"))
	fresh := func() gateway.Authenticator {
		return quick(NewAuthenticator(c, k.cs.AuthenticationV1().TokenReviews(), audience, "looprun-system:manager"))
	}

	loopA, loopB, loopC := k.loop("team-a", "a", nil), k.loop("team-a", "b", nil), k.loop("team-b", "c", nil)
	podA, podB, podC := k.pod("team-a", "a-work-1", loopA), k.pod("team-a", "b-work-1", loopB), k.pod("team-b", "c-work-1", loopC)
	k.step(loopA, podA, "work", 1)
	k.step(loopB, podB, "work", 3)
	k.step(loopC, podC, "work", 2)
	tokA, tokB, tokC := k.token("team-a", "runner", podA, audience), k.token("team-a", "runner", podB, audience), k.token("team-b", "runner", podC, audience)

	t.Run("the API server names the Pod of a bound token", func(t *testing.T) {
		tr, err := k.cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: tokA, Audiences: []string{audience}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u := tr.Status.User
		if !tr.Status.Authenticated || u.Username != "system:serviceaccount:team-a:runner" ||
			one(u.Extra[serviceaccount.PodNameKey]) != podA.Name || one(u.Extra[serviceaccount.PodUIDKey]) != string(podA.UID) {
			t.Fatalf("review = %+v", tr.Status)
		}
	})

	t.Run("a Pod's token maps to its Loop's step", func(t *testing.T) {
		got, err := auth.Authenticate(ctx, tokA, "")
		wantStep(t, got, err, loopA, podA, "work", 1)
		got, err = auth.Authenticate(ctx, tokC, "")
		wantStep(t, got, err, loopC, podC, "work", 2)
	})

	t.Run("calls reuse the token's review", func(t *testing.T) {
		before := reviews.n.Load()
		for range 5 {
			got, err := auth.Authenticate(ctx, tokA, "")
			wantStep(t, got, err, loopA, podA, "work", 1)
		}
		if n := reviews.n.Load() - before; n != 0 {
			t.Fatalf("%d TokenReviews for a token reviewed already", n)
		}
	})

	t.Run("another Loop's Pod maps only to its own Loop", func(t *testing.T) {
		// Same namespace: B's token, even naming A in the header.
		got, err := auth.Authenticate(ctx, tokB, "team-a/a")
		wantStep(t, got, err, loopB, podB, "work", 3)
		// Another namespace.
		got, err = auth.Authenticate(ctx, tokC, "team-a/a")
		wantStep(t, got, err, loopC, podC, "work", 2)
	})

	t.Run("the API server's audience is refused", func(t *testing.T) {
		tok := k.token("team-a", "runner", podA)
		got, err := auth.Authenticate(ctx, tok, "")
		wantErr(t, got, err, gateway.ErrUnauthenticated, tok)
	})

	// An agent that takes its gateway token to the API server gets nothing:
	// the API server does not accept the gateway's audience.
	t.Run("the API server refuses a gateway token", func(t *testing.T) {
		asAgent := rest.AnonymousClientConfig(cfg)
		asAgent.BearerToken = tokA
		_, err := kubernetes.NewForConfigOrDie(asAgent).CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{})
		if !apierrors.IsUnauthorized(err) {
			t.Fatalf("the API server took a gateway token: %v", err)
		}
	})

	t.Run("another audience is refused", func(t *testing.T) {
		tok := k.token("team-a", "runner", podA, "something-else")
		got, err := auth.Authenticate(ctx, tok, "")
		wantErr(t, got, err, gateway.ErrUnauthenticated, tok)
	})

	t.Run("a token bound to no Pod is refused", func(t *testing.T) {
		tok := k.token("team-a", "runner", nil, audience)
		got, err := auth.Authenticate(ctx, tok, "team-a/a")
		wantErr(t, got, err, gateway.ErrUnauthenticated, tok)
	})

	t.Run("garbage is refused", func(t *testing.T) {
		for _, tok := range []string{"", "garbage", "a.b.c", tokA[:len(tokA)-4] + "AAAA"} {
			got, err := auth.Authenticate(ctx, tok, "team-a/a")
			wantErr(t, got, err, gateway.ErrUnauthenticated, tok)
		}
	})

	t.Run("labels and annotations a tenant writes change nothing", func(t *testing.T) {
		pod := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(podA), pod); err != nil {
			t.Fatal(err)
		}
		claim := map[string]string{"looprun.io/loop": "b", "looprun.io/loop-uid": string(loopB.UID),
			"looprun.io/state": "other", "looprun.io/iteration": "3"}
		pod.Labels, pod.Annotations = claim, claim
		if err := c.Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		for _, a := range []gateway.Authenticator{auth, fresh()} {
			got, err := a.Authenticate(ctx, tokA, "team-a/b")
			wantStep(t, got, err, loopA, podA, "work", 1)
		}
	})

	t.Run("a Pod claiming a Loop in its ownerReference is not its step", func(t *testing.T) {
		intruder := k.pod("team-a", "intruder", loopA) // the tenant may make Pods
		tok := k.token("team-a", "runner", intruder, audience)
		got, err := auth.Authenticate(ctx, tok, "")
		wantErr(t, got, err, gateway.ErrForbidden, tok)
		// B's Pod rewritten to be controlled by A.
		pod := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(podB), pod); err != nil {
			t.Fatal(err)
		}
		pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(loopA, v1alpha1.GroupVersion.WithKind("Loop"))}
		if err := c.Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		got, err = fresh().Authenticate(ctx, tokB, "")
		wantErr(t, got, err, gateway.ErrForbidden, tokB)
		// A Pod of no Loop.
		stray := k.pod("team-a", "stray", nil)
		tok = k.token("team-a", "runner", stray, audience)
		got, err = auth.Authenticate(ctx, tok, "")
		wantErr(t, got, err, gateway.ErrForbidden, tok)
	})

	// The operator names a step's Pod in the status write after it made
	// it; an agent quick to call waits for that write, then goes on.
	t.Run("a call before the status names its Pod waits for it", func(t *testing.T) {
		loopD := k.loop("team-a", "d", nil)
		first, early := k.pod("team-a", "d-work-1", loopD), k.pod("team-a", "d-work-2", loopD)
		k.step(loopD, first, "work", 1)
		tok := k.token("team-a", "runner", early, audience)
		patient := NewAuthenticator(c, k.cs.AuthenticationV1().TokenReviews(), audience, "")
		patient.(*authenticator).settle = time.Minute
		type answer struct {
			got *gateway.Caller
			err error
		}
		done := make(chan answer, 1)
		go func() {
			got, err := patient.Authenticate(ctx, tok, "")
			done <- answer{got, err}
		}()
		time.Sleep(300 * time.Millisecond)
		select {
		case a := <-done:
			t.Fatalf("answered before the status named the Pod: %+v, %v", a.got, a.err)
		default:
		}
		k.step(loopD, early, "work", 2)
		a := <-done
		wantStep(t, a.got, a.err, loopD, early, "work", 2)
	})

	t.Run("a Pod whose step ended is refused", func(t *testing.T) {
		next := k.pod("team-a", "a-work-2", loopA)
		k.step(loopA, next, "work", 2) // the next step runs in another Pod
		got, err := auth.Authenticate(ctx, tokA, "")
		wantErr(t, got, err, gateway.ErrForbidden, tokA)
		tokNext := k.token("team-a", "runner", next, audience)
		got, err = auth.Authenticate(ctx, tokNext, "")
		wantStep(t, got, err, loopA, next, "work", 2)

		k.step(loopA, nil, "done", 3) // no action in flight
		for _, tok := range []string{tokA, tokNext} {
			got, err := auth.Authenticate(ctx, tok, "")
			wantErr(t, got, err, gateway.ErrForbidden, tok)
		}

		k.step(loopA, podA, "work", 1) // the run ended with an action recorded
		loop := &v1alpha1.Loop{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(loopA), loop); err != nil {
			t.Fatal(err)
		}
		loop.Status.Phase = v1alpha1.PhaseCompleted
		if err := c.Status().Update(ctx, loop); err != nil {
			t.Fatal(err)
		}
		got, err = auth.Authenticate(ctx, tokA, "")
		wantErr(t, got, err, gateway.ErrForbidden, tokA)
	})

	t.Run("a Pod made again under the same name refuses the old token", func(t *testing.T) {
		loop := k.loop("team-a", "r", nil)
		old := k.pod("team-a", "r-work-1", loop)
		k.step(loop, old, "work", 1)
		tokOld := k.token("team-a", "runner", old, audience)
		got, err := auth.Authenticate(ctx, tokOld, "")
		wantStep(t, got, err, loop, old, "work", 1)

		if err := c.Delete(ctx, old, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
		pod := k.pod("team-a", "r-work-1", loop)
		if pod.UID == old.UID {
			t.Fatal("the Pod made again has the same uid")
		}
		k.step(loop, pod, "work", 1)
		// Its review remembered, the step's Pod is no longer the token's.
		got, err = auth.Authenticate(ctx, tokOld, "")
		if !errors.Is(err, gateway.ErrForbidden) && !errors.Is(err, gateway.ErrUnauthenticated) {
			t.Fatalf("caller %+v, error %v; want refused", got, err)
		}
		// Reviewed again, the token is no good.
		got, err = fresh().Authenticate(ctx, tokOld, "")
		wantErr(t, got, err, gateway.ErrUnauthenticated, tokOld)
		tokNew := k.token("team-a", "runner", pod, audience)
		got, err = auth.Authenticate(ctx, tokNew, "")
		wantStep(t, got, err, loop, pod, "work", 1)
	})

	t.Run("a Loop made again under the same name is not the Pod's", func(t *testing.T) {
		loop := k.loop("team-a", "s", nil)
		pod := k.pod("team-a", "s-work-1", loop)
		tok := k.token("team-a", "runner", pod, audience)
		if err := c.Delete(ctx, loop); err != nil {
			t.Fatal(err)
		}
		again := k.loop("team-a", "s", nil)
		k.step(again, pod, "work", 1) // even were its status to name the Pod
		got, err := auth.Authenticate(ctx, tok, "")
		wantErr(t, got, err, gateway.ErrForbidden, tok)
	})

	t.Run("the operator names its Loop", func(t *testing.T) {
		tok := k.token("looprun-system", "manager", nil, audience)
		got, err := auth.Authenticate(ctx, tok, "team-b/c")
		if err != nil {
			t.Fatal(err)
		}
		want := ledger.Step{Namespace: "team-b", Loop: "c", LoopUID: loopC.UID, Run: "run-c", Iteration: 2, State: "work"}
		if !got.Operator || got.Step != want {
			t.Fatalf("caller = %+v, want the operator's call for %+v", *got, want)
		}
		for _, header := range []string{"", "c", "team-b/", "team-b/nope", "team-b/c/d"} {
			got, err := auth.Authenticate(ctx, tok, header)
			wantErr(t, got, err, gateway.ErrForbidden, tok)
		}
		// Not the operator where none is named.
		none := quick(NewAuthenticator(c, k.cs.AuthenticationV1().TokenReviews(), audience, ""))
		got, err = none.Authenticate(ctx, tok, "team-b/c")
		wantErr(t, got, err, gateway.ErrUnauthenticated, tok)
		// Another service account of the operator's namespace is not it.
		other := k.token("looprun-system", "runner", nil, audience)
		got, err = auth.Authenticate(ctx, other, "team-b/c")
		wantErr(t, got, err, gateway.ErrUnauthenticated, other)
		// The operator's token of the API server's audience is refused.
		apiTok := k.token("looprun-system", "manager", nil)
		got, err = auth.Authenticate(ctx, apiTok, "team-b/c")
		wantErr(t, got, err, gateway.ErrUnauthenticated, apiTok)
	})

	t.Run("budget", func(t *testing.T) { testBudget(t, k) })
}

func testBudget(t *testing.T, k *cluster) {
	ctx, c := k.ctx, k.c
	budget := NewBudget(c, pricing.Default())
	usage := func(loop *v1alpha1.Loop, u v1alpha1.UsageTotals, phase v1alpha1.Phase) {
		t.Helper()
		fresh := &v1alpha1.Loop{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(loop), fresh); err != nil {
			t.Fatal(err)
		}
		fresh.Status.Phase = phase
		fresh.Status.Usage = &v1alpha1.UsageStatus{UsageTotals: u}
		if err := c.Status().Update(ctx, fresh); err != nil {
			t.Fatal(err)
		}
	}
	step := func(loop *v1alpha1.Loop) ledger.Step {
		return ledger.Step{Namespace: loop.Namespace, Loop: loop.Name, LoopUID: loop.UID, Run: "run-1", State: "work"}
	}
	cost := func(micro int64) ledger.Totals {
		return ledger.Totals{Calls: 1, CostMicroUSD: micro, Usage: agentstream.Usage{Model: "claude-sonnet-4-5", InputTokens: 10}}
	}
	tokens := func(n int64) ledger.Totals {
		return ledger.Totals{Calls: 1, Usage: agentstream.Usage{Model: "claude-sonnet-4-5", InputTokens: n}}
	}

	byCost := k.loop("team-a", "by-cost", &v1alpha1.Budget{MaxCostUSD: "0.50"})
	usage(byCost, v1alpha1.UsageTotals{Calls: 2, InputTokens: 1000, CostMicroUSD: 400000}, v1alpha1.PhaseRunning)
	byTokens := k.loop("team-a", "by-tokens", &v1alpha1.Budget{MaxTokens: ptr.To[int64](1000)})
	usage(byTokens, v1alpha1.UsageTotals{Calls: 2, InputTokens: 500, OutputTokens: 100}, v1alpha1.PhaseRunning)
	free := k.loop("team-a", "free", nil)
	usage(free, v1alpha1.UsageTotals{Calls: 2, InputTokens: 1 << 40, CostMicroUSD: 1 << 40}, v1alpha1.PhaseRunning)

	t.Run("cost spent", func(t *testing.T) {
		err := budget.Check(ctx, step(byCost), cost(100000))
		if !errors.Is(err, gateway.ErrBudgetSpent) {
			t.Fatalf("error %v, want budget spent", err)
		}
		for _, s := range []string{"team-a/by-cost", "$0.5", "looprun budget loop/by-cost -n team-a --add USD"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("message %q does not say %q", err, s)
			}
		}
	})
	t.Run("cost under the budget", func(t *testing.T) {
		if err := budget.Check(ctx, step(byCost), cost(99999)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("tokens spent", func(t *testing.T) {
		err := budget.Check(ctx, step(byTokens), tokens(400))
		if !errors.Is(err, gateway.ErrBudgetSpent) {
			t.Fatalf("error %v, want budget spent", err)
		}
		for _, s := range []string{"team-a/by-tokens", "1000 of its 1000 tokens", "--add-tokens N"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("message %q does not say %q", err, s)
			}
		}
	})
	t.Run("tokens under the budget", func(t *testing.T) {
		if err := budget.Check(ctx, step(byTokens), tokens(399)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("no budget", func(t *testing.T) {
		if err := budget.Check(ctx, step(free), cost(1<<40)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("paused on its budget", func(t *testing.T) {
		usage(free, v1alpha1.UsageTotals{}, v1alpha1.PhasePaused)
		err := budget.Check(ctx, step(free), ledger.Totals{})
		if !errors.Is(err, gateway.ErrBudgetSpent) || !strings.Contains(err.Error(), "looprun budget loop/free") {
			t.Fatalf("error %v, want budget spent", err)
		}
	})
	t.Run("another Loop of the name", func(t *testing.T) {
		s := step(byCost)
		s.LoopUID = types.UID("not-" + string(s.LoopUID))
		if err := budget.Check(ctx, s, ledger.Totals{}); !errors.Is(err, gateway.ErrForbidden) {
			t.Fatalf("error %v, want forbidden", err)
		}
		s = step(byCost)
		s.Loop = "gone"
		if err := budget.Check(ctx, s, ledger.Totals{}); !errors.Is(err, gateway.ErrForbidden) {
			t.Fatalf("error %v, want forbidden", err)
		}
	})
}
