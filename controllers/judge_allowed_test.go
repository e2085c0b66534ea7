package controllers

import "testing"

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
