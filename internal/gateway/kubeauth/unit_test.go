package kubeauth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/gateway"
	"github.com/looprun/looprun/test/fixture"
)

// fakeReviews answers every TokenReview with status (or err).
type fakeReviews struct {
	status authenticationv1.TokenReviewStatus
	err    error
	calls  int
}

func (f *fakeReviews) Create(_ context.Context, _ *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return &authenticationv1.TokenReview{Status: f.status}, nil
}

func podReview(podName, podUID string) authenticationv1.TokenReviewStatus {
	return authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{audience},
		User: authenticationv1.UserInfo{Username: "system:serviceaccount:team-a:runner", Extra: map[string]authenticationv1.ExtraValue{
			serviceaccount.PodNameKey: {podName}, serviceaccount.PodUIDKey: {podUID}}}}
}

// TestReviewAnswers refuses what a real API server would not answer for a
// token of the gateway's audience, should one answer it.
func TestReviewAnswers(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(fixture.Scheme()).Build()
	cases := map[string]authenticationv1.TokenReviewStatus{
		"not authenticated":  {Authenticated: false, Audiences: []string{audience}},
		"another audience":   {Authenticated: true, Audiences: []string{"https://kubernetes.default.svc"}, User: podReview("p", "u").User},
		"no audience":        {Authenticated: true, User: podReview("p", "u").User},
		"a person":           {Authenticated: true, Audiences: []string{audience}, User: authenticationv1.UserInfo{Username: "alice"}},
		"a node":             {Authenticated: true, Audiences: []string{audience}, User: authenticationv1.UserInfo{Username: "system:node:n1"}},
		"Pod without a name": podReview("", "u"),
		"two Pod uids": func() authenticationv1.TokenReviewStatus {
			s := podReview("p", "u")
			s.User.Extra[serviceaccount.PodUIDKey] = authenticationv1.ExtraValue{"u", "v"}
			return s
		}(),
	}
	for name, status := range cases {
		t.Run(name, func(t *testing.T) {
			a := quick(NewAuthenticator(c, &fakeReviews{status: status}, audience, ""))
			got, err := a.Authenticate(ctx, "secret-token", "team-a/a")
			wantErr(t, got, err, gateway.ErrUnauthenticated, "secret-token")
		})
	}
}

// TestReviewFails: the API server not answering is neither 401 nor 403,
// and the error never shows the token.
func TestReviewFails(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(fixture.Scheme()).Build()
	r := &fakeReviews{err: fmt.Errorf("review of secret-token: connection refused")}
	a := quick(NewAuthenticator(c, r, audience, ""))
	_, err := a.Authenticate(context.Background(), "secret-token", "")
	if err == nil || errors.Is(err, gateway.ErrUnauthenticated) || errors.Is(err, gateway.ErrForbidden) {
		t.Fatalf("error %v, want a failure of the review", err)
	}
	if strings.Contains(err.Error(), "secret-token") {
		t.Fatalf("the error shows the token: %v", err)
	}
}

// TestPodChecks: the token's Pod must be the one the API server bound it
// to, and controlled by a Loop of looprun's group.
func TestPodChecks(t *testing.T) {
	ctx := context.Background()
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "a", UID: "loop-uid"}}
	loop.Status.RunID, loop.Status.Phase = "run-1", v1alpha1.PhaseRunning
	loop.Status.Action = &v1alpha1.ActionStatus{State: "work", Iteration: 4, Pod: "p", PodUID: "pod-uid"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "p", UID: "pod-uid",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "looprun.io/v1alpha1", Kind: "Loop", Name: "a", UID: "loop-uid", Controller: ptr.To(true)}}}}
	build := func(pod *corev1.Pod) *authenticator {
		c := fake.NewClientBuilder().WithScheme(fixture.Scheme()).WithObjects(loop, pod).WithStatusSubresource(loop).Build()
		return quick(NewAuthenticator(c, &fakeReviews{status: podReview("p", "pod-uid")}, audience, "")).(*authenticator)
	}

	got, err := build(pod).Authenticate(ctx, "tok-7f3a", "")
	if err != nil || got.Loop != "a" || got.Iteration != 4 || got.PodUID != "pod-uid" {
		t.Fatalf("caller %+v, error %v", got, err)
	}

	other := pod.DeepCopy()
	other.UID = "another-pod"
	got, err = build(other).Authenticate(ctx, "tok-7f3a", "")
	wantErr(t, got, err, gateway.ErrUnauthenticated, "tok-7f3a")

	for _, ref := range []metav1.OwnerReference{
		{APIVersion: "evil.io/v1alpha1", Kind: "Loop", Name: "a", UID: "loop-uid", Controller: ptr.To(true)},
		{APIVersion: "looprun.io/v1alpha1", Kind: "LoopSchedule", Name: "a", UID: "loop-uid", Controller: ptr.To(true)},
		{APIVersion: "looprun.io/v1alpha1", Kind: "Loop", Name: "a", UID: "loop-uid"}, // not the controller
	} {
		p := pod.DeepCopy()
		p.OwnerReferences = []metav1.OwnerReference{ref}
		got, err = build(p).Authenticate(ctx, "tok-7f3a", "")
		wantErr(t, got, err, gateway.ErrForbidden, "tok-7f3a")
	}
}

// TestReviewCache: a review is remembered for reviewTTL, by the token's
// hash; a refusal is not remembered.
func TestReviewCache(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(fixture.Scheme()).Build()
	r := &fakeReviews{status: authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{audience},
		User: authenticationv1.UserInfo{Username: "system:serviceaccount:looprun-system:manager"}}}
	a := quick(NewAuthenticator(c, r, audience, "looprun-system:manager")).(*authenticator)
	now := time.Unix(1000, 0)
	a.reviews.now = func() time.Time { return now }

	for range 3 {
		_, _ = a.Authenticate(ctx, "tok-7f3a", "team-a/a")
	}
	if r.calls != 1 {
		t.Fatalf("%d reviews, want 1", r.calls)
	}
	now = now.Add(reviewTTL)
	_, _ = a.Authenticate(ctx, "tok-7f3a", "team-a/a")
	if r.calls != 2 {
		t.Fatalf("%d reviews after the ttl, want 2", r.calls)
	}

	r.status.Authenticated = false
	for range 2 {
		_, _ = a.Authenticate(ctx, "bad", "")
	}
	if r.calls != 4 {
		t.Fatalf("%d reviews, want a refusal asked again", r.calls)
	}
}

func TestTTLCacheBounded(t *testing.T) {
	now := time.Unix(0, 0)
	c := newTTLCache[int, int](time.Minute, 3, func() time.Time { return now })
	for i := range 10 {
		c.put(i, i)
		now = now.Add(time.Second)
	}
	if len(c.entries) != 3 {
		t.Fatalf("%d entries, want 3", len(c.entries))
	}
	for i := 7; i < 10; i++ { // the newest stay
		if v, ok := c.get(i); !ok || v != i {
			t.Fatalf("entry %d: %d, %v", i, v, ok)
		}
	}
	now = now.Add(time.Minute)
	if _, ok := c.get(9); ok {
		t.Fatal("an expired entry was returned")
	}
}

// quick makes refusals of a Pod its Loop does not name come at once (the
// calls of these tests do not race the operator's status write).
func quick(a gateway.Authenticator) gateway.Authenticator {
	a.(*authenticator).settle = 0
	return a
}
