package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/looprun/looprun/internal/executor"
)

// TestLocalCapturesAreNotCutToTheClusterBound: a run on a laptop keeps a
// captured output whole up to executor.LocalCaptureBytes, not the 4 KiB a
// Loop's status keeps; past it, the tail is kept and capture_truncated says
// how much.
func TestLocalCapturesAreNotCutToTheClusterBound(t *testing.T) {
	for _, tc := range []struct {
		n    int // bytes of a's, then a newline and "tail"
		kept int
	}{
		{n: 10000, kept: 10005},
		{n: 400 << 10, kept: executor.LocalCaptureBytes},
	} {
		dir := t.TempDir()
		write(t, dir, "big.yaml", `name: big
initial: make
states:
  make:
    action: "head -c `+strconv.Itoa(tc.n)+` /dev/zero | tr '\\0' a; echo; echo tail"
    capture: big
    next: done
  done:
    terminal: true
`)
		if r := looprun(t, dir, "run", "-q", "big.yaml"); r.code != 0 {
			t.Fatalf("%d bytes: exit %d\n%s", tc.n, r.code, r.stderr)
		}
		data, err := os.ReadFile(filepath.Join(dir, ".loops", ".running", "big.state.json"))
		if err != nil {
			t.Fatal(err)
		}
		var state struct {
			Captured map[string]struct {
				Output string `json:"output"`
			} `json:"captured"`
		}
		if err := json.Unmarshal(data, &state); err != nil {
			t.Fatal(err)
		}
		got := state.Captured["big"].Output
		if len(got) != tc.kept || !strings.HasSuffix(got, "a\ntail") {
			t.Errorf("%d bytes of output: the capture keeps %d bytes (ending %q), want %d ending in the output's tail", tc.n, len(got), got[max(0, len(got)-8):], tc.kept)
		}
		r := looprun(t, dir, "history", "big", "--type", "capture_truncated")
		if truncated := tc.kept < tc.n; truncated != (r.code == 0 && strings.Contains(r.stdout, "kept_bytes="+strconv.Itoa(tc.kept))) {
			t.Errorf("%d bytes of output: capture_truncated events:\n%s%s", tc.n, r.stdout, r.stderr)
		}
	}
}
