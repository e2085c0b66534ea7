package baseurl

import "testing"

// A Loop's baseURL reaches only what the allow-list allows, however it is
// spelled: a path that a server reads as outside the allowed one is
// refused, the same endpoint spelled otherwise is allowed.
func TestAllowed(t *testing.T) {
	allowed := []string{"http://llm.internal/team-a/", "https://Gateway.example.com:443/v1"}
	cases := []struct {
		url     string
		allowed bool
		refused bool // Parse refuses it, whatever the list
	}{
		{url: "http://llm.internal/team-a/", allowed: true},
		{url: "http://llm.internal/team-a", allowed: true},
		{url: "http://llm.internal/team-a/v1/", allowed: true},
		{url: "HTTP://LLM.Internal:80/team-a/v1", allowed: true},
		{url: "http://llm.internal./team-a", allowed: true},
		{url: "http://llm.internal/team%2Da/", allowed: true},
		{url: "https://gateway.example.com/v1/messages", allowed: true},
		{url: "https://gateway.example.com:443/v1", allowed: true},

		// Not under an allowed URL.
		{url: "http://llm.internal/team-b/"},
		{url: "http://llm.internal/team-ab/"},
		{url: "http://llm.internal/"},
		{url: "http://llm.internal/TEAM-A/"},
		{url: "https://llm.internal/team-a/"},
		{url: "http://llm.internal:8080/team-a/"},
		{url: "http://llm.internal.evil/team-a/"},
		{url: "https://gateway.example.com/v10"},
		{url: "https://gateway.example.com:8443/v1"},

		// Dot segments, raw or encoded, any case.
		{url: "http://llm.internal/team-a/../operator/", refused: true},
		{url: "http://llm.internal/team-a/..", refused: true},
		{url: "http://llm.internal/team-a/./x", refused: true},
		{url: "http://llm.internal/team-a/%2e%2e/operator/", refused: true},
		{url: "http://llm.internal/team-a/%2E%2E/operator/", refused: true},
		{url: "http://llm.internal/team-a/.%2e/operator/", refused: true},
		{url: "http://llm.internal/team-a/%2e./operator/", refused: true},
		{url: "http://llm.internal/team-a/%2e/x", refused: true},
		{url: "http://llm.internal/team-a/..;x/operator/", refused: true},
		// Encoded slashes and backslashes, double encoding, backslashes.
		{url: "http://llm.internal/team-a%2f..%2foperator/", refused: true},
		{url: "http://llm.internal/team-a/..%2Foperator/", refused: true},
		{url: "http://llm.internal/team-a/%5c../operator", refused: true},
		{url: "http://llm.internal/team-a/%252e%252e/operator/", refused: true},
		{url: `http://llm.internal/team-a\..\operator\`, refused: true},
		{url: `http://llm.internal\@evil/team-a/`, refused: true},
		{url: "http://llm.internal/team-a//x", refused: true},
		{url: "http://llm.internal/team-a/%00/x", refused: true},
		// A user, a query, a fragment.
		{url: "http://evil@llm.internal/team-a/", refused: true},
		{url: "http://llm.internal:80@evil/team-a/", refused: true},
		{url: "http://llm.internal/team-a/?x=/../operator", refused: true},
		{url: "http://llm.internal/team-a/?", refused: true},
		{url: "http://llm.internal/team-a/#../operator", refused: true},
		// Not an http URL of a host.
		{url: "file:///etc/passwd", refused: true},
		{url: "http:llm.internal/team-a", refused: true},
		{url: "/team-a/", refused: true},
		{url: "http://llm.internal:99999/team-a", refused: true},
		{url: "http://llm%2einternal/team-a", refused: true},
	}
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			ok, err := Allowed(tc.url, allowed)
			if (err != nil) != tc.refused {
				t.Errorf("refused: %v, want %v", err, tc.refused)
			}
			if ok != tc.allowed {
				t.Errorf("allowed: %v, want %v", ok, tc.allowed)
			}
		})
	}
}

// An allowed URL that is itself not a plain base URL allows nothing.
func TestAllowedListIsParsedToo(t *testing.T) {
	for _, bad := range []string{"http://llm.internal/team-a/../", "http://u@llm.internal/", "llm.internal"} {
		if ok, _ := Allowed("http://llm.internal/team-a/", []string{bad}); ok {
			t.Errorf("allowed by %q", bad)
		}
	}
}
