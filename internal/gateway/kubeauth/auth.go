// Package kubeauth is the model gateway's identity and budget in a cluster:
// it maps a call's credential, a projected service-account token of the
// gateway's audience bound to an action Pod, to the step of the Loop that
// Pod runs, and checks the Loop's budget before each call.
//
// Nothing a tenant or the Pod can write is trusted: the Pod is named by the
// token (the API server's TokenReview), its Loop by its controller
// ownerReference, and the step by the Loop's status, which only the
// operator writes: the call is the Loop's only while status.action.podUID
// is the token's Pod.
package kubeauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/gateway"
	"github.com/looprun/looprun/internal/gateway/ledger"
)

// Caching. A TokenReview's answer is kept briefly, so that the calls of a
// streaming agent do not each cost one; what it says holds for a token
// until the token expires or its Pod is deleted, and the step it maps to
// is checked again on every call anyway. A Pod's owner is kept longer, by
// uid (a uid is never reused); it only says which Loop to ask.
const (
	reviewTTL   = 15 * time.Second
	reviewCache = 4096
	podTTL      = 5 * time.Minute
	podCache    = 4096
)

// review is what the gateway keeps of a TokenReview that authenticated:
// the service account and, for a Pod-bound token, its Pod.
type review struct {
	namespace, name string
	pod             string
	podUID          types.UID
}

// owner is what the gateway keeps of a Pod: its namespace, name, and the
// Loop its controller ownerReference names (name and uid; "" when none).
type owner struct {
	namespace, pod string
	loop           string
	loopUID        types.UID
}

type authenticator struct {
	c           client.Reader
	tr          authenticationv1client.TokenReviewInterface
	audience    string
	opNamespace string
	opName      string
	reviews     *ttlCache[[sha256.Size]byte, review]
	owners      *ttlCache[types.UID, owner]
	// settle is how long a call waits for its Loop's status to name its
	// Pod: the operator records the Pod of a step in the status write
	// after it made it, and the agent may call before that write (or
	// before the gateway's cache has it).
	settle time.Duration
}

// DefaultSettle is how long a call waits for its Loop's status to name
// its Pod before it is refused.
const DefaultSettle = 20 * time.Second

// NewAuthenticator maps a call's credential to its step: c reads Pods and
// Loops (the gateway's cache), tr reviews tokens, audience is the
// gateway's (the audience of the action Pods' projected tokens), and
// operator is the looprun manager's service account as
// "namespace:name" ("" when the operator makes no calls through the
// gateway), whose calls name their Loop in the x-looprun-loop header.
func NewAuthenticator(c client.Reader, tr authenticationv1client.TokenReviewInterface, audience string, operator string) gateway.Authenticator {
	a := &authenticator{c: c, tr: tr, audience: audience, settle: DefaultSettle,
		reviews: newTTLCache[[sha256.Size]byte, review](reviewTTL, reviewCache, time.Now),
		owners:  newTTLCache[types.UID, owner](podTTL, podCache, time.Now)}
	if ns, name, ok := strings.Cut(operator, ":"); ok && ns != "" && name != "" {
		a.opNamespace, a.opName = ns, name
	}
	return a
}

func unauthenticated(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{gateway.ErrUnauthenticated}, args...)...)
}

func forbidden(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{gateway.ErrForbidden}, args...)...)
}

// Authenticate implements gateway.Authenticator.
func (a *authenticator) Authenticate(ctx context.Context, credential, loopHeader string) (*gateway.Caller, error) {
	if credential == "" {
		return nil, unauthenticated("no credential: the gateway takes the Pod's service-account token of audience %q", a.audience)
	}
	r, err := a.review(ctx, credential)
	if err != nil {
		return nil, err
	}
	if a.opName != "" && r.namespace == a.opNamespace && r.name == a.opName {
		return a.operatorCall(ctx, loopHeader)
	}
	// Anyone else's x-looprun-loop is ignored: the step is the Pod's.
	if r.podUID == "" {
		return nil, unauthenticated("the token of service account %s/%s is not bound to a Pod: the gateway takes the projected token of an action Pod", r.namespace, r.name)
	}
	return a.podCall(ctx, r)
}

// review asks the API server who the token is, or remembers its answer.
// Only answers that authenticate are kept, keyed by the token's SHA-256.
func (a *authenticator) review(ctx context.Context, token string) (review, error) {
	key := sha256.Sum256([]byte(token))
	if r, ok := a.reviews.get(key); ok {
		return r, nil
	}
	tr, err := a.tr.Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{a.audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return review{}, fmt.Errorf("reviewing the caller's token: %w", scrubbed(err, token))
	}
	st := tr.Status
	if !st.Authenticated {
		return review{}, unauthenticated("the token is not valid for the model gateway (audience %q): it is expired, of another audience, or its Pod is gone", a.audience)
	}
	if !slices.Contains(st.Audiences, a.audience) {
		return review{}, unauthenticated("the token is not of the model gateway's audience %q", a.audience)
	}
	ns, name, err := serviceaccount.SplitUsername(st.User.Username)
	if err != nil {
		return review{}, unauthenticated("the token is not a service account's")
	}
	r := review{namespace: ns, name: name}
	if uid := one(st.User.Extra[serviceaccount.PodUIDKey]); uid != "" {
		r.podUID = types.UID(uid)
		r.pod = one(st.User.Extra[serviceaccount.PodNameKey])
		if r.pod == "" {
			return review{}, unauthenticated("the token is bound to a Pod the API server does not name")
		}
	}
	a.reviews.put(key, r)
	return r, nil
}

// one is the value of an extra that has exactly one ("" otherwise).
func one(v authenticationv1.ExtraValue) string {
	if len(v) != 1 {
		return ""
	}
	return v[0]
}

// scrubbed keeps the token out of an error the agent may be shown.
func scrubbed(err error, token string) error {
	if msg := err.Error(); strings.Contains(msg, token) {
		return errors.New(strings.ReplaceAll(msg, token, "<token>"))
	}
	return err
}

// podCall maps a Pod-bound token to the step its Pod runs now.
func (a *authenticator) podCall(ctx context.Context, r review) (*gateway.Caller, error) {
	o, err := a.owner(ctx, r)
	if err != nil {
		return nil, err
	}
	if o.loop == "" {
		return nil, forbidden("Pod %s/%s is not an action Pod of a Loop", o.namespace, o.pod)
	}
	loop, err := a.stepOf(ctx, o, r.podUID)
	if err != nil {
		return nil, err
	}
	act := loop.Status.Action
	return &gateway.Caller{Step: ledger.Step{
		Namespace: loop.Namespace, Loop: loop.Name, LoopUID: loop.UID,
		Pod: o.pod, PodUID: r.podUID,
		Run: loop.Status.RunID, Iteration: act.Iteration, State: act.State,
	}}, nil
}

// stepOf is the Loop whose status names the token's Pod as its step in
// flight. A Pod is made before the status write that names it: a call
// that comes first waits, up to settle, for the status to name it; one of
// a Pod the status never names (its step ended, another step runs) is
// refused then.
func (a *authenticator) stepOf(ctx context.Context, o owner, podUID types.UID) (*v1alpha1.Loop, error) {
	deadline := time.Now().Add(a.settle)
	for {
		loop := &v1alpha1.Loop{}
		if err := a.c.Get(ctx, client.ObjectKey{Namespace: o.namespace, Name: o.loop}, loop); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, forbidden("the Loop %s/%s of Pod %s is gone", o.namespace, o.loop, o.pod)
			}
			return nil, fmt.Errorf("reading Loop %s/%s: %w", o.namespace, o.loop, err)
		}
		if loop.UID != o.loopUID {
			return nil, forbidden("the Loop %s/%s of Pod %s is gone (a Loop of its name was made again)", o.namespace, o.loop, o.pod)
		}
		act := loop.Status.Action
		if act != nil && types.UID(act.PodUID) == podUID && !loop.Status.Phase.IsFinished() {
			return loop, nil
		}
		if loop.Status.Phase.IsFinished() || !time.Now().Before(deadline) {
			return nil, forbidden("Pod %s runs no step of Loop %s/%s now (its step ended, or is not its step)", o.pod, o.namespace, o.loop)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// owner is the token's Pod and the Loop that controls it, read once per
// Pod uid. The Pod must be the one the token is bound to: same namespace
// as its service account, same name, same uid.
func (a *authenticator) owner(ctx context.Context, r review) (owner, error) {
	if o, ok := a.owners.get(r.podUID); ok {
		return o, nil
	}
	pod := &corev1.Pod{}
	if err := a.c.Get(ctx, client.ObjectKey{Namespace: r.namespace, Name: r.pod}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return owner{}, unauthenticated("the Pod %s/%s the token is bound to is gone", r.namespace, r.pod)
		}
		return owner{}, fmt.Errorf("reading Pod %s/%s: %w", r.namespace, r.pod, err)
	}
	if pod.UID != r.podUID {
		return owner{}, unauthenticated("the Pod %s/%s the token is bound to is gone (a Pod of its name was made again)", r.namespace, r.pod)
	}
	o := owner{namespace: pod.Namespace, pod: pod.Name}
	// The ownerReference only says which Loop to ask: whether the Pod is
	// that Loop's step is the Loop's status's word (status.action.podUID),
	// so a Pod whose owner a tenant rewrote gains nothing.
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "Loop" {
		if gv, err := schema.ParseGroupVersion(ref.APIVersion); err == nil && gv.Group == v1alpha1.GroupVersion.Group {
			o.loop, o.loopUID = ref.Name, ref.UID
		}
	}
	a.owners.put(r.podUID, o)
	return o, nil
}

// operatorCall is a call of the operator itself (the LLM judge) for the
// Loop its x-looprun-loop header names ("namespace/name").
func (a *authenticator) operatorCall(ctx context.Context, loopHeader string) (*gateway.Caller, error) {
	ns, name, ok := strings.Cut(loopHeader, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return nil, forbidden("the operator's calls name their Loop in the x-looprun-loop header as namespace/name")
	}
	loop := &v1alpha1.Loop{}
	if err := a.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, loop); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, forbidden("no Loop %s/%s", ns, name)
		}
		return nil, fmt.Errorf("reading Loop %s/%s: %w", ns, name, err)
	}
	st := ledger.Step{Namespace: loop.Namespace, Loop: loop.Name, LoopUID: loop.UID,
		Run: loop.Status.RunID, Iteration: loop.Status.Iteration, State: loop.Status.CurrentState}
	if act := loop.Status.Action; act != nil {
		st.Iteration, st.State = act.Iteration, act.State
	}
	return &gateway.Caller{Step: st, Operator: true}, nil
}
