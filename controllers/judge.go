package controllers

import (
	"context"
	"fmt"
	"os"
	"sync"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/llm"
)

// judge returns the Loop's LLM judge, built only when a state asks for it.
func (r *LoopReconciler) judge(ctx context.Context, loop *v1alpha1.Loop) evaluate.Judge {
	if r.JudgeFor == nil {
		return nil
	}
	return &lazyJudge{get: func() evaluate.Judge { return r.JudgeFor(ctx, loop) }}
}

type lazyJudge struct {
	once sync.Once
	j    evaluate.Judge
	get  func() evaluate.Judge
}

func (l *lazyJudge) Judge(ctx context.Context, req evaluate.JudgeRequest) evaluate.Result {
	l.once.Do(func() { l.j = l.get() })
	if l.j == nil {
		return evaluate.Result{Verdict: v1alpha1.VerdictError, Details: map[string]any{
			"error": "no LLM judge: set spec.llm.apiKeySecretRef, or ANTHROPIC_API_KEY in the operator's environment",
		}}
	}
	return l.j.Judge(ctx, req)
}

// SecretJudges builds judges whose API key comes from the Loop's
// spec.llm.apiKeySecretRef, or else from the operator's ANTHROPIC_API_KEY.
// The key is read when a judge is first needed and never copied anywhere.
type SecretJudges struct {
	Reader ctrl.Reader
}

// JudgeFor implements LoopReconciler.JudgeFor.
func (s *SecretJudges) JudgeFor(ctx context.Context, loop *v1alpha1.Loop) evaluate.Judge {
	key := os.Getenv("ANTHROPIC_API_KEY")
	if ref := loop.Spec.LLM; ref != nil && ref.APIKeySecretRef != nil {
		secret := &corev1.Secret{}
		err := s.Reader.Get(ctx, ctrl.ObjectKey{Namespace: loop.Namespace, Name: ref.APIKeySecretRef.Name}, secret)
		if err != nil {
			return errJudge(fmt.Sprintf("read the API key from Secret %s: %v", ref.APIKeySecretRef.Name, err))
		}
		key = string(secret.Data[ref.APIKeySecretRef.Key])
		if key == "" {
			return errJudge(fmt.Sprintf("Secret %s has no key %q", ref.APIKeySecretRef.Name, ref.APIKeySecretRef.Key))
		}
	}
	if key == "" {
		return nil
	}
	return llm.ForSpec(loop.Spec.LLM, key, os.Getenv("ANTHROPIC_BASE_URL"))
}

// errJudge answers every question with the same error.
type errJudge string

func (e errJudge) Judge(context.Context, evaluate.JudgeRequest) evaluate.Result {
	return evaluate.Result{Verdict: v1alpha1.VerdictError, Details: map[string]any{"error": string(e)}}
}
