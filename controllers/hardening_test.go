package controllers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
)

// A sink that redirects is a sink that refused: its events never go where
// the redirect points.
func TestCloudEventsSinkDoesNotFollowRedirects(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL, http.StatusTemporaryRedirect)
	}))
	defer sink.Close()
	s := NewCloudEventSink(sink.URL, 1)
	s.Tries, s.Backoff = 2, time.Millisecond
	s.deliver(context.Background(), cloudEvent{typ: "io.looprun.loop.started", id: "1", data: map[string]any{}})
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the redirect was followed %d times", n)
	}
}

// An Event's note longer than the API server takes is cut, not lost (an
// approval's long question, a long error).
func TestEventNoteIsCut(t *testing.T) {
	long := strings.Repeat("é", 2000)
	got := eventNote("ship " + long + "?")
	if len(got) > maxEventNote || !utf8.ValidString(got) || !strings.HasSuffix(got, "…(cut)") || !strings.HasPrefix(got, "ship é") {
		t.Fatalf("cut note of %d bytes: %q…", len(got), got[:20])
	}
	if short := "state ask waits"; eventNote(short) != short {
		t.Fatal("a short note changed")
	}
}
