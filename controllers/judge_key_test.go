package controllers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/looprun/looprun/api/v1alpha1"
)

// A judge's key read while the API server does not answer (restarting, 503,
// a refused connection) is tried again until the call's end: the API
// server's absence is not the judge's error verdict. An answer (forbidden,
// absent) is, at once.
func TestJudgeKeyReadOutlastsTheAPIServer(t *testing.T) {
	defer func(d time.Duration) { keyRetry = d }(keyRetry)
	keyRetry = time.Millisecond
	var calls atomic.Int32
	answer := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v1/namespaces/team/secrets/llm":
			if calls.Add(1) <= 3 {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"ServiceUnavailable","code":503}`))
				return
			}
			_, _ = w.Write([]byte(`{"kind":"Secret","apiVersion":"v1","metadata":{"name":"llm","namespace":"team"},"data":{"api-key":"a2V5"}}`))
		default:
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","message":"secrets \"other\" is forbidden","code":403}`))
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(answer))
	defer srv.Close()
	loop := func(secret string) *v1alpha1.Loop {
		return &v1alpha1.Loop{Spec: v1alpha1.LoopSpec{Runner: &v1alpha1.RunnerSpec{ServiceAccountName: "tenant"},
			LLM: &v1alpha1.LLMSpec{APIKeySecretRef: &v1alpha1.SecretKeyRef{Name: secret, Key: "api-key"}}}}
	}
	j := &Judges{Config: &rest.Config{Host: srv.URL}, OperatorNamespace: "looprun-system", OperatorServiceAccount: "looprun"}
	withNS := func(l *v1alpha1.Loop) *v1alpha1.Loop { l.Namespace = "team"; return l }

	key, err := j.readKeyRetrying(context.Background(), withNS(loop("llm")))
	if err != nil || key != "key" || calls.Load() != 4 {
		t.Fatalf("key %q, err %v after %d reads", key, err, calls.Load())
	}
	// Forbidden is an answer: no retry.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := j.readKeyRetrying(ctx, withNS(loop("other"))); err == nil || !strings.Contains(err.Error(), "forbidden") || time.Since(start) > time.Second {
		t.Fatalf("a forbidden read: %v after %s", err, time.Since(start))
	}
	// A server that never answers: tried until the call's context ends.
	srv.Close()
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := j.readKeyRetrying(ctx, withNS(loop("llm"))); err == nil || ctx.Err() == nil {
		t.Fatalf("an absent API server: %v (context %v)", err, ctx.Err())
	}
}
