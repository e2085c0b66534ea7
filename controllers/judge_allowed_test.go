package controllers

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
)

// A Loop's spec.llm.baseURL that reads as under an allowed endpoint but
// reaches another (dot segments, encoded slashes, a user, a query) is
// refused; the allowed endpoint, however spelled, is not.
func TestJudgesAllowedBaseURL(t *testing.T) {
	j := &Judges{AllowedBaseURLs: []string{"http://llm.internal/team-a/"}}
	for url, want := range map[string]bool{
		"http://llm.internal/team-a/":                 true,
		"http://LLM.internal:80/team-a/v1":            true,
		"http://llm.internal/team-a/../operator/":     false,
		"http://llm.internal/team-a/%2e%2e/operator/": false,
		"http://llm.internal/team-a/%2E%2E/operator/": false,
		"http://llm.internal/team-a/.%2e/operator/":   false,
		"http://llm.internal/team-a/..%2foperator/":   false,
		"http://llm.internal/team-a/?/../operator/":   false,
		"http://llm.internal/team-a/#/../operator/":   false,
		`http://llm.internal/team-a/..\operator/`:     false,
		"http://tenant:key@llm.internal/team-a/":      false,
		"http://llm.internal/team-b/":                 false,
	} {
		if got := j.allowed(url); got != want {
			t.Errorf("allowed(%q) = %v, want %v", url, got, want)
		}
	}
}

// A Loop in the operator's namespace that names no service account acts as
// "default": when that is the operator's own, the Secret it names is not
// read (the read would be the operator's, not the Loop's), and its judge
// says why.
func TestJudgeReadsNoSecretAsTheOperator(t *testing.T) {
	j := &Judges{Config: &rest.Config{Host: "http://127.0.0.1:1"}, OperatorNamespace: "looprun-system", OperatorServiceAccount: "default"}
	for _, rs := range []*v1alpha1.RunnerSpec{nil, {ServiceAccountName: "default"}} {
		loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: "looprun-system", Name: "l"}, Spec: v1alpha1.LoopSpec{
			Runner: rs, LLM: &v1alpha1.LLMSpec{APIKeySecretRef: &v1alpha1.SecretKeyRef{Name: "operator-secrets", Key: "key"}}}}
		res := j.judgeFor(context.Background(), loop).Judge(context.Background(), evaluate.JudgeRequest{})
		if msg, _ := res.Details["error"].(string); res.Verdict != v1alpha1.VerdictError || !strings.Contains(msg, "the operator's own service account") {
			t.Errorf("runner %+v: %s %v", rs, res.Verdict, res.Details)
		}
	}
}
