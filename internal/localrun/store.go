package localrun

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
	"unicode"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/history"
	"github.com/looprun/looprun/internal/runner/process"
	"github.com/looprun/looprun/internal/safefile"
)

// Store is where one loop's local run lives: <loops-dir>/.running/<name>.*.
// Every file a run writes there is opened through internal/safefile: a
// symbolic link in its place, or as .running or the loops directory, is
// refused, never written through.
type Store struct {
	loops string
	dir   string
	name  string
}

// MaxNameLength bounds a local run's name: its files' names add at most
// 20 characters, and a file name may have 255.
const MaxNameLength = 200

// ValidateName checks a local run's name: it names files in one
// directory, so it is a non-empty word of letters, digits, '-', '_' and
// '.', not starting with '.' (no path, no hidden or special file).
func ValidateName(name string) error {
	switch {
	case name == "":
		return errors.New("a loop name cannot be empty")
	case len(name) > MaxNameLength:
		return fmt.Errorf("loop name %.40q... is %d characters long; at most %d", name, len(name), MaxNameLength)
	case name[0] == '.':
		return fmt.Errorf("loop name %q cannot start with '.'", name)
	}
	for _, c := range name {
		if c > unicode.MaxASCII || !unicode.IsLetter(c) && !unicode.IsDigit(c) && c != '-' && c != '_' && c != '.' {
			return fmt.Errorf("loop name %q: %q is not allowed (letters, digits, '-', '_' and '.' only)", name, c)
		}
	}
	return nil
}

// NewStore returns the store of the loop called name under loopsDir; a
// name that is not a valid one (ValidateName) is refused, so nothing is
// ever written outside loopsDir/.running.
func NewStore(loopsDir, name string) (*Store, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	return &Store{loops: loopsDir, dir: filepath.Join(loopsDir, ".running"), name: name}, nil
}

// mkdir makes the directory of the run's files, .running under the loops
// directory, neither of them a symbolic link.
func (s *Store) mkdir() error {
	_, err := safefile.Dir(s.loops, ".running")
	return err
}

// StatePath is the state file.
func (s *Store) StatePath() string { return filepath.Join(s.dir, s.name+".state.json") }

// EventsPath is the JSONL event log.
func (s *Store) EventsPath() string { return filepath.Join(s.dir, s.name+".events.jsonl") }

// CheckpointsPath holds the run's checkpoints, one JSON line each.
func (s *Store) CheckpointsPath() string { return filepath.Join(s.dir, s.name+".checkpoints.jsonl") }

// ActionPath notes the process group of the action running, if any.
func (s *Store) ActionPath() string { return filepath.Join(s.dir, s.name+".action") }

// LoopPath is where an imported run keeps its loop (a Loop manifest).
func (s *Store) LoopPath() string { return filepath.Join(s.dir, s.name+".loop.yaml") }

// Name is the loop's name.
func (s *Store) Name() string { return s.name }

// StdoutPath holds the complete stdout of every action of the run.
func (s *Store) StdoutPath() string { return filepath.Join(s.dir, s.name+".stdout.log") }

// StderrPath holds the complete stderr of every action of the run.
func (s *Store) StderrPath() string { return filepath.Join(s.dir, s.name+".stderr.log") }

// OpenOutputs opens the output logs for an action runner: a fresh run
// starts them empty, a resumed one appends.
func (s *Store) OpenOutputs(fresh bool) (stdout, stderr *os.File, err error) {
	if err := s.mkdir(); err != nil {
		return nil, nil, err
	}
	mode := os.O_CREATE | os.O_RDWR | os.O_APPEND
	if fresh {
		mode |= os.O_TRUNC
	}
	if stdout, err = safefile.OpenFile(s.StdoutPath(), mode, 0o644); err != nil {
		return nil, nil, err
	}
	if stderr, err = safefile.OpenFile(s.StderrPath(), mode, 0o644); err != nil {
		_ = stdout.Close()
		return nil, nil, err
	}
	return stdout, stderr, nil
}

func (s *Store) lockPath() string { return filepath.Join(s.dir, s.name+".lock") }

// Lock makes sure only one process runs this loop. The lock goes with the
// process, however it ends.
func (s *Store) Lock() (unlock func(), err error) {
	if err := s.mkdir(); err != nil {
		return nil, err
	}
	f, err := safefile.OpenFile(s.lockPath(), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("loop %q is already running here (%s is locked)", s.name, s.lockPath())
	}
	return func() { _ = f.Close() }, nil
}

// Clear removes the state and events of a previous run. (The output logs
// are truncated by OpenOutputs for the new run.)
func (s *Store) Clear() error {
	if err := s.mkdir(); err != nil {
		return err // nothing is removed through a link either
	}
	var errs []error
	for _, p := range append([]string{s.StatePath(), s.EventsPath(), s.CheckpointsPath()}, safefile.Slots(s.StatePath())...) {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Load reads the saved state; os.ErrNotExist when there is none. A state
// file that cannot be read is reported with its path and the last good
// checkpoint, from which the run can be rewound.
func (s *Store) Load() (*StateFile, error) {
	f, err := ReadStateFile(s.StatePath())
	var unreadable *UnreadableError
	if errors.As(err, &unreadable) {
		if cp, cerr := s.LastGoodCheckpoint(); cerr == nil {
			return nil, fmt.Errorf("%w\nthe last good checkpoint is iteration %d (state %s, taken %s): restore it with `looprun rewind --local %s --iteration %d`",
				err, cp.Iteration, cp.State, cp.Time.Format(time.RFC3339), s.name, cp.Iteration)
		}
		return nil, fmt.Errorf("%w\nno good checkpoint of the run is left in %s", err, s.CheckpointsPath())
	}
	return f, err
}

// writer saves steps: events first (appended, fsynced), then the state file
// (atomically). Saves may run in the background while an action runs; at
// most one is in flight and they complete in order.
type writer struct {
	store    *Store
	state    *safefile.Atomic
	log      *eventlog.File
	cps      *checkpointFile
	loopFile string
	context  map[string]any
	pending  chan error
	err      error
	note     *process.GroupNote
}

func (s *Store) openWriter(loopFile string, ctx map[string]any) (*writer, error) {
	if err := s.mkdir(); err != nil {
		return nil, err
	}
	log, err := eventlog.Open(s.EventsPath())
	if err != nil {
		return nil, err
	}
	return &writer{store: s, state: safefile.NewAtomic(s.StatePath()), log: log, cps: &checkpointFile{path: s.CheckpointsPath()},
		loopFile: loopFile, context: ctx}, nil
}

// encode renders the run state as the state file holds it.
func (w *writer) encode(run *v1alpha1.RunState) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	err := enc.Encode(encodeState(w.store.name, w.loopFile, w.context, run))
	return b.Bytes(), err
}

// write appends the events and replaces the state file. Everything is
// written first and synced after, the event log before the state file,
// all from one goroutine: the log's fsync commits the journal with the
// state file's metadata in it, so the second fsync is short, and the
// save needs one processor while the next action's process starts on the
// other. The state file is renamed into place only once both are on disk,
// so a saved state never refers to an event that is not.
// A checkpoint taken in the step is appended beside the events.
func (w *writer) write(events []executor.Event, state []byte, cp *history.Snapshot) error {
	if err := w.log.Write(events); err != nil {
		return err
	}
	if cp != nil {
		c, err := cp.Checkpoint()
		if err == nil {
			err = w.cps.append(c)
		}
		if err != nil {
			return err
		}
	}
	return w.state.Write(state, w.log.Sync)
}

// saveAsync starts saving in the background; wait returns the outcome.
// The run state is encoded in the background too, while the next action's
// process starts: run must not change until wait returns.
func (w *writer) saveAsync(run *v1alpha1.RunState, events []executor.Event, cp *history.Snapshot) error {
	if err := w.wait(); err != nil {
		return err
	}
	ch := make(chan error, 1)
	w.pending = ch
	go func() {
		state, err := w.encode(run)
		if err == nil {
			err = w.write(events, state, cp)
		}
		ch <- err
	}()
	return nil
}

// save saves now, the directory included.
func (w *writer) save(run *v1alpha1.RunState, events []executor.Event, cp *history.Snapshot) error {
	if err := w.saveAsync(run, events, cp); err != nil {
		return err
	}
	if err := w.wait(); err != nil {
		return err
	}
	return w.state.SyncDir()
}

// wait waits for the background save. A failed save stays failed: the run
// stops there.
func (w *writer) wait() error {
	if w.pending != nil {
		w.err = <-w.pending
		w.pending = nil
	}
	return w.err
}

// openNote opens the note of the action that runs (a run opens it before
// its first action, so that a link in its place stops the run at once).
func (w *writer) openNote() error {
	if w.note != nil {
		return nil
	}
	n, err := process.OpenGroupNote(w.store.ActionPath())
	if err != nil {
		return err
	}
	w.note = n
	return nil
}

// recordAction notes the process group of the action that runs, so that a
// resume can kill it should this process die without taking it along.
func (w *writer) recordAction(pgid int) {
	if w.openNote() == nil {
		w.note.Record(pgid)
	}
}

// forgetAction clears the note: the action ended.
func (w *writer) forgetAction() {
	if w.note != nil {
		w.note.Clear()
	}
}

func (w *writer) close() error {
	var noteErr error
	if w.note != nil {
		noteErr = w.note.Close()
	}
	return errors.Join(w.wait(), w.log.Close(), w.cps.close(), w.state.Close(), noteErr)
}

// Import writes a whole run (an import): the loop manifest at LoopPath, the
// event log, the checkpoints and the state file, last, so that a run is
// there only once all of it is.
func (s *Store) Import(manifest []byte, run *v1alpha1.RunState, events []executor.Event, cps []history.Checkpoint) error {
	unlock, err := s.Lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.Clear(); err != nil {
		return err
	}
	if err := safefile.WriteFile(s.LoopPath(), manifest); err != nil {
		return err
	}
	if err := s.WriteCheckpoints(cps); err != nil {
		return err
	}
	w, err := s.openWriter(s.LoopPath(), nil)
	if err != nil {
		return err
	}
	return errors.Join(w.save(run, events, nil), w.close())
}
