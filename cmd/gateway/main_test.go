package main

import (
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseFlags(t *testing.T) {
	base := map[string]string{"POD_NAMESPACE": "looprun-system", "ANTHROPIC_API_KEY": "sk-x"}
	s, err := parseFlags(nil, env(base))
	if err != nil {
		t.Fatal(err)
	}
	if s.upstream.String() != DefaultUpstream || s.apiKey != "sk-x" || s.ledgerNamespace != "looprun-system" || s.audience != "looprun-gateway" {
		t.Errorf("defaults: %+v", s)
	}
	for _, c := range []struct {
		args    []string
		env     map[string]string
		wantErr string
	}{
		{[]string{"--upstream", "https://evil.example"}, base, "not in --allowed-upstreams"},
		{[]string{"--upstream", "https://api.anthropic.com.evil.example"}, base, "not in --allowed-upstreams"},
		{[]string{"--upstream", "http://api.anthropic.com"}, base, "not in --allowed-upstreams"},
		{[]string{"--upstream", "https://proxy.internal/anthropic/", "--allowed-upstreams", "https://api.anthropic.com,https://proxy.internal/anthropic"}, base, ""},
		{[]string{"--upstream", "https://API.anthropic.com/"}, base, ""},
		{nil, map[string]string{"POD_NAMESPACE": "x"}, "no upstream key"},
		{[]string{"--api-key-file", "/var/run/key"}, map[string]string{"POD_NAMESPACE": "x"}, ""},
		{nil, map[string]string{"ANTHROPIC_API_KEY": "k"}, "no ledger namespace"},
		{[]string{"--operator-service-account", "looprun-system"}, base, "NAMESPACE:NAME"},
		{[]string{"--operator-service-account", "looprun-system:looprun-manager"}, base, ""},
	} {
		_, err := parseFlags(c.args, env(c.env))
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%v: error %v, want %q", c.args, err, c.wantErr)
		}
	}
}
