// Package proc lets tests wait: for the processes an action starts (its pid
// written, its end), for a file, or for any condition (Until). It waits on
// the state that proves the thing, polling, never for a fixed time.
package proc

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Alive reports whether pid runs (a zombie waiting for its reaper does not).
func Alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// WaitGone waits, 10 s at most, until pid no longer runs.
func WaitGone(t testing.TB, pid int) {
	t.Helper()
	waitFor(t, "process "+strconv.Itoa(pid)+" to end", func() bool { return !Alive(pid) })
}

// WaitPid waits, 10 s at most, until a pid is written to path, and returns it.
func WaitPid(t testing.TB, path string) int {
	t.Helper()
	var pid int
	waitFor(t, "a pid in "+path, func() bool {
		b, err := os.ReadFile(path)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	return pid
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Until(t, 10*time.Second, what, cond)
}

// Until polls cond until it holds, and fails the test when it does not
// within the given time; what says what was awaited.
func Until(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WaitFile waits, 10 s at most, until path exists.
func WaitFile(t testing.TB, path string) {
	t.Helper()
	waitFor(t, path+" to exist", func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
}
