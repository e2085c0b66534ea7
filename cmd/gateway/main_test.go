package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseFlags(t *testing.T) {
	base := map[string]string{"POD_NAMESPACE": "looprun-system", "ANTHROPIC_API_KEY": "sk-x"}
	s, err := parseFlags(nil, env(base))
	if err != nil {
		t.Fatal(err)
	}
	if w, err := parseFlags([]string{"--watch-namespaces", " team-a,,team-b "}, env(base)); err != nil || strings.Join(w.watchNamespaces, "|") != "team-a|team-b" {
		t.Errorf("--watch-namespaces: %v, %v", w, err)
	}
	if s.watchNamespaces != nil {
		t.Errorf("watched namespaces by default: %v", s.watchNamespaces)
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

// TestDrainOnShutdown: on SIGTERM (ctx done) a call in flight finishes
// within the grace period, new connections are refused; past the grace
// period a call still in flight is cut off (its context ends) and waited
// for while it records.
func TestDrainOnShutdown(t *testing.T) {
	started := make(chan struct{}, 2)
	var cutOff atomic.Bool
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		f := w.(http.Flusher)
		for i := range 5 {
			if r.URL.Path == "/forever" {
				<-r.Context().Done()
				time.Sleep(50 * time.Millisecond) // the cut-off call's record
				cutOff.Store(true)
				return
			}
			_, _ = fmt.Fprintf(w, "event: ping\ndata: %d\n\n", i)
			f.Flush()
			time.Sleep(60 * time.Millisecond)
		}
	})
	for _, c := range []struct {
		path  string
		grace time.Duration
	}{{"/stream", 5 * time.Second}, {"/forever", 100 * time.Millisecond}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- serve(ctx, &settings{shutdownGrace: c.grace}, ln, nil, h, nil, logr.Discard()) }()
		url := "http://" + ln.Addr().String() + c.path
		body := make(chan string, 1)
		go func() {
			resp, err := http.Get(url)
			if err != nil {
				body <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			body <- string(b)
		}()
		<-started
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		got := <-body
		switch c.path {
		case "/stream":
			if strings.Count(got, "event: ping") != 5 {
				t.Errorf("the stream in flight was not let finish: %q", got)
			}
		case "/forever":
			if !cutOff.Load() {
				t.Error("serve returned before the cut-off call finished")
			}
		}
		if _, err := http.Get(url); err == nil {
			t.Errorf("%s: a new call was taken after the shutdown", c.path)
		}
	}
}
