package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/baseurl"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/llm"
	"github.com/looprun/looprun/internal/runner"
	"github.com/looprun/looprun/internal/runner/judge"
	"github.com/looprun/looprun/internal/runner/pod"
)

// Judges gives each Loop its LLM judge, by the operator's rules (see
// docs/operations.md, "What a Loop author can reach"):
//   - the operator's own key goes only to the operator's own endpoint;
//   - a Loop that names another endpoint (spec.llm.baseURL) must be allowed
//     by AllowedBaseURLs, and must bring its own key (apiKeySecretRef);
//   - the Secret a Loop names is read as the Loop's service account
//     (impersonation), so RBAC decides, as for its author; never as the
//     operator's own.
//
// Calls run in the background (internal/runner/judge), never inside a
// reconcile.
type Judges struct {
	// OperatorKey and OperatorBaseURL are the operator's own
	// (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL; an empty URL is the API's).
	OperatorKey, OperatorBaseURL string
	// AllowedBaseURLs are the endpoints a Loop may send its judge calls to
	// (--llm-allowed-base-urls): a Loop's baseURL must be at or under one
	// (see internal/baseurl).
	AllowedBaseURLs []string
	// OperatorNamespace and OperatorServiceAccount are the operator's own
	// identity, as which no Secret is read for a Loop.
	OperatorNamespace, OperatorServiceAccount string
	// Config reads the Secrets a Loop names, impersonating its service
	// account; nil reads none.
	Config *rest.Config
	// Runner runs the calls.
	Runner *judge.Runner
}

// judgeFor builds the Loop's judge, or one that answers every question
// with why there is none. It runs in the background, as part of a call.
func (j *Judges) judgeFor(ctx context.Context, loop *v1alpha1.Loop) evaluate.Judge {
	spec := loop.Spec.LLM
	if spec != nil && spec.Via == v1alpha1.JudgeViaCLI {
		// The CLI runs with a person's own login: there is none in the
		// operator, and a tenant's command must not run in it.
		return errJudge("spec.llm.via: cli asks the agent CLI with your own login, in local runs only; in a cluster the judge uses the API (spec.llm.via: api, with spec.llm.apiKeySecretRef or the operator's key)")
	}
	key, baseURL := j.OperatorKey, j.OperatorBaseURL
	if spec != nil && spec.BaseURL != "" {
		if !j.allowed(spec.BaseURL) {
			return errJudge(fmt.Sprintf("spec.llm.baseURL %q is not allowed by the operator (--llm-allowed-base-urls)", spec.BaseURL))
		}
		if spec.APIKeySecretRef == nil {
			return errJudge("a Loop that sets spec.llm.baseURL brings its own key: set spec.llm.apiKeySecretRef (the operator's key goes only to its own endpoint)")
		}
		baseURL = spec.BaseURL
	}
	if spec != nil && spec.APIKeySecretRef != nil {
		var err error
		if key, err = j.readKeyRetrying(ctx, loop); err != nil {
			return errJudge(err.Error())
		}
	}
	if key == "" {
		return errJudge("no LLM judge: set spec.llm.apiKeySecretRef, or ANTHROPIC_API_KEY in the operator's environment")
	}
	return llm.New(llm.Config{APIKey: key, BaseURL: baseURL, Model: spec.GetModel(), MaxTokens: int64(spec.GetMaxTokens()), Timeout: spec.GetTimeout()})
}

// keyRetry is how long the first wait is before a key read the API server
// failed to answer is tried again (doubling, up to 5 s).
var keyRetry = 100 * time.Millisecond

// readKeyRetrying reads the Loop's API key, trying again while the API
// server does not answer (restarting, overloaded, a timeout) until the
// call's context ends: only an answer (refused, absent, no such key) is
// the judge's error verdict, never the API server's absence.
func (j *Judges) readKeyRetrying(ctx context.Context, loop *v1alpha1.Loop) (string, error) {
	wait := keyRetry
	for {
		key, err := j.readKey(ctx, loop)
		if err == nil || !unanswered(err) {
			return key, err
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// unanswered says whether an API error is the API server's absence or
// distress rather than its answer about the Secret.
func unanswered(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		// Not an answer: the connection failed (refused, reset, a
		// timeout), unless it is one of readKey's own.
		var own *keyError
		return !errors.As(err, &own)
	}
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsUnexpectedServerError(err)
}

// keyError is readKey's own refusal: nothing to try again.
type keyError struct{ msg string }

func (e *keyError) Error() string { return e.msg }

func keyErrorf(format string, args ...any) error { return &keyError{fmt.Sprintf(format, args...)} }

// readKey reads the Loop's API key as the Loop's service account.
func (j *Judges) readKey(ctx context.Context, loop *v1alpha1.Loop) (string, error) {
	ref := loop.Spec.LLM.APIKeySecretRef
	if j.Config == nil {
		return "", keyErrorf("the API key in Secret %s cannot be read: the operator reads no Secrets", ref.Name)
	}
	sa := loop.Spec.GetServiceAccountName()
	if loop.ActsAs(j.OperatorNamespace, j.OperatorServiceAccount) {
		return "", keyErrorf("the API key in Secret %s is not read: %s", ref.Name, pod.OperatorServiceAccountMessage(loop))
	}
	cfg := rest.CopyConfig(j.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: serviceaccount.MakeUsername(loop.Namespace, sa)}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", keyErrorf("%v", err)
	}
	secret, err := cs.CoreV1().Secrets(loop.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("read the API key from Secret %s as service account %s: %w", ref.Name, sa, err)
	}
	key := string(secret.Data[ref.Key])
	if key == "" {
		return "", keyErrorf("secret %s has no key %q", ref.Name, ref.Key)
	}
	return key, nil
}

// allowed reports whether a Loop may send judge calls to u: at or under an
// allowed URL, compared as the server reads them; a URL whose path could
// read as another (dot segments, encoded slashes, a user, a query) never.
func (j *Judges) allowed(u string) bool {
	ok, _ := baseurl.Allowed(u, j.AllowedBaseURLs)
	return ok
}

// judged is res (a new result for a state without an action) with the LLM
// judge's answer to req; ok is false while the judge has not answered.
func (s *step) judged(req evaluate.JudgeRequest, res *executor.ActionResult) (*executor.ActionResult, bool) {
	answer, ok := s.judge(req)
	if !ok {
		s.out.health.judging = true
		return res, false
	}
	return executor.Judged(res, answer), true
}

// judge is the LLM judge's verdict on req once its call, run in the
// background, has ended (ok); until then the call starts, unless it runs
// already, and its end wakes the Loop. The answer is released once the
// step that used it is saved.
func (s *step) judge(req evaluate.JudgeRequest) (evaluate.Result, bool) {
	j := s.r.Judges
	if j == nil || j.Runner == nil {
		return evaluate.Result{Verdict: v1alpha1.VerdictError, Details: map[string]any{"error": "no LLM judge is configured in the operator"}}, true
	}
	key := judgeKey(s.loop, req)
	loop := s.loop.DeepCopy()
	res, ok := j.Runner.Ask(loop, key, lazyJudge(func(ctx context.Context) evaluate.Judge { return j.judgeFor(ctx, loop) }), req)
	if ok {
		s.out.afterSave = append(s.out.afterSave, func() { j.Runner.Release(key) })
	}
	return res, ok
}

// searched is res (a new result for a state without an action) with the
// verdict of a pattern search; ok is false while the search runs. It runs
// in the background as a judge call does, so that a pattern that
// backtracks costs its own Loop time, never a worker.
func (s *step) searched(q executor.Search, res *executor.ActionResult) (*executor.ActionResult, bool) {
	j := s.r.Judges
	if j == nil || j.Runner == nil {
		return executor.Searched(res, evaluate.Result{Verdict: v1alpha1.VerdictError,
			Details: map[string]any{"error": "the operator has no background runner for pattern searches"}}), true
	}
	key := requestKey(s.loop, "search", q)
	verdict, ok := j.Runner.Decide(s.loop, key, func(context.Context) evaluate.Result { return q.Verdict() })
	if !ok {
		s.out.health.searching = true
		return res, false
	}
	s.out.afterSave = append(s.out.afterSave, func() { j.Runner.Release(key) })
	return executor.Searched(res, verdict), true
}

// judgeKey names a question: the Loop, its run and iteration, and what is asked.
func judgeKey(loop *v1alpha1.Loop, req evaluate.JudgeRequest) string {
	return requestKey(loop, "judge", req)
}

// requestKey names a request of a kind made in the background for the
// Loop's current iteration: the same request has the same key.
func requestKey(loop *v1alpha1.Loop, kind string, req any) string {
	h := sha256.New()
	b, _ := json.Marshal(req)
	h.Write(b)
	return runner.ActionKey(loop, loop.Status.Iteration) + "/" + kind + "/" + hex.EncodeToString(h.Sum(nil)[:8])
}

// lazyJudge builds the judge when the call runs.
type lazyJudge func(ctx context.Context) evaluate.Judge

func (l lazyJudge) Judge(ctx context.Context, req evaluate.JudgeRequest) evaluate.Result {
	return l(ctx).Judge(ctx, req)
}

// errJudge answers every question with the same error.
type errJudge string

func (e errJudge) Judge(context.Context, evaluate.JudgeRequest) evaluate.Result {
	return evaluate.Result{Verdict: v1alpha1.VerdictError, Details: map[string]any{"error": string(e)}}
}
