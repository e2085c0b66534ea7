package process

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/looprun/looprun/internal/safefile"
)

// RecordGroup notes a running action's process group in path, with the
// start time of its leader, so that the next process (a resumed run, a
// restarted operator) can kill it, and only it, should this one die
// without taking it along. The note is not fsynced: it matters only while
// the machine keeps running.
func RecordGroup(path string, pgid int) error {
	note, err := groupNote(pgid)
	if err != nil {
		return err
	}
	return os.WriteFile(path, note, 0o644)
}

// noteSize is the width of a note: a process id and a start time, padded
// with spaces, so that a GroupNote rewrites it in place and never needs to
// truncate its file.
const noteSize = 48

func groupNote(pgid int) ([]byte, error) {
	start, err := startTime(pgid)
	if err != nil {
		return nil, err
	}
	b := fmt.Appendf(make([]byte, 0, noteSize), "%d %d", pgid, start)
	for len(b) < noteSize-1 {
		b = append(b, ' ')
	}
	return append(b, '\n'), nil
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
// action after another (a local run): noting and clearing each cost one
// write of a fixed-width record, not a file's creation and removal.
type GroupNote struct{ f *os.File }

// blankNote is a cleared note: it names no process.
var blankNote = append([]byte(strings.Repeat(" ", noteSize-1)), '\n')

// OpenGroupNote opens (creating it, emptying what was in it) the note at
// path; a symbolic link there is refused, not written through.
func OpenGroupNote(path string) (*GroupNote, error) {
	f, err := safefile.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return &GroupNote{f: f}, nil
}

// Record notes the process group of the action that runs.
func (n *GroupNote) Record(pgid int) {
	if b, err := groupNote(pgid); err == nil {
		_, _ = n.f.WriteAt(b, 0)
	}
}

// Clear blanks the note: the action ended.
func (n *GroupNote) Clear() { _, _ = n.f.WriteAt(blankNote, 0) }

// Close closes the note and removes it.
func (n *GroupNote) Close() error {
	_ = os.Remove(n.f.Name())
	return n.f.Close()
}

// startTime is when a process started, in clock ticks since boot
// (/proc/PID/stat, field 22).
func startTime(pid int) (uint64, error) {
	b, err := readProcStat(pid)
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

// readProcStat reads /proc/PID/stat with plain system calls: it is read
// once per action, and a pseudo-file gains nothing from the runtime's poller.
func readProcStat(pid int) ([]byte, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	buf := make([]byte, 1024) // the line is about 300 bytes
	n := 0
	for n < len(buf) {
		m, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return buf[:n], nil
}
