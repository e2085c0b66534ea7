package process

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// RecordGroup notes a running action's process group in path, with the
// start time of its leader, so that the next process (a resumed run, a
// restarted operator) can kill it, and only it, should this one die
// without taking it along. The note is not fsynced: it matters only while
// the machine keeps running.
func RecordGroup(path string, pgid int) error {
	start, err := startTime(pgid)
	if err != nil {
		return err
	}
	return os.WriteFile(path, fmt.Appendf(nil, "%d %d\n", pgid, start), 0o644)
}

// KillRecordedGroup kills the process group noted in path, if its leader
// is still the process that was noted (not a new process under a reused
// id), and removes the note. killed says whether a group was killed.
func KillRecordedGroup(path string) (killed bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer func() { _ = os.Remove(path) }()
	var pgid int
	var start uint64
	if _, err := fmt.Sscan(string(b), &pgid, &start); err != nil || pgid <= 1 {
		return false, nil // a damaged note names nothing to kill
	}
	if now, err := startTime(pgid); err != nil || now != start {
		return false, nil // gone, or another process now
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return false, err
	}
	return true, nil
}

// ForgetGroup removes the note of an action that ended.
func ForgetGroup(path string) { _ = os.Remove(path) }

// GroupNote is RecordGroup's note kept open, for a process that runs one
// action after another (a local run): noting and clearing cost a write,
// not a file's creation and removal.
type GroupNote struct{ f *os.File }

// OpenGroupNote opens (creating it) the note at path.
func OpenGroupNote(path string) (*GroupNote, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &GroupNote{f: f}, nil
}

// Record notes the process group of the action that runs.
func (n *GroupNote) Record(pgid int) {
	start, err := startTime(pgid)
	if err != nil {
		return
	}
	b := fmt.Appendf(nil, "%d %d\n", pgid, start)
	if _, err := n.f.WriteAt(b, 0); err == nil {
		_ = n.f.Truncate(int64(len(b)))
	}
}

// Clear empties the note: the action ended.
func (n *GroupNote) Clear() { _ = n.f.Truncate(0) }

// Close closes the note and removes it.
func (n *GroupNote) Close() error {
	_ = os.Remove(n.f.Name())
	return n.f.Close()
}

// startTime is when a process started, in clock ticks since boot
// (/proc/PID/stat, field 22).
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count after its ')'.
	_, rest, ok := strings.Cut(string(b), ") ")
	if !ok {
		return 0, errors.New("unreadable /proc stat")
	}
	f := strings.Fields(rest)
	if len(f) < 20 {
		return 0, errors.New("unreadable /proc stat")
	}
	return strconv.ParseUint(f[19], 10, 64)
}
