package localrun

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog"
	"github.com/looprun/looprun/internal/executor"
)

// Store is where one loop's local run lives: <loops-dir>/.running/<name>.*.
type Store struct {
	dir  string
	name string
}

// NewStore returns the store of the loop called name under loopsDir.
func NewStore(loopsDir, name string) *Store {
	return &Store{dir: filepath.Join(loopsDir, ".running"), name: name}
}

// StatePath is the state file.
func (s *Store) StatePath() string { return filepath.Join(s.dir, s.name+".state.json") }

// EventsPath is the JSONL event log.
func (s *Store) EventsPath() string { return filepath.Join(s.dir, s.name+".events.jsonl") }

// StdoutPath holds the complete stdout of every action of the run.
func (s *Store) StdoutPath() string { return filepath.Join(s.dir, s.name+".stdout.log") }

// StderrPath holds the complete stderr of every action of the run.
func (s *Store) StderrPath() string { return filepath.Join(s.dir, s.name+".stderr.log") }

// OpenOutputs opens the output logs for an action runner: a fresh run
// starts them empty, a resumed one appends.
func (s *Store) OpenOutputs(fresh bool) (stdout, stderr *os.File, err error) {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, nil, err
	}
	mode := os.O_CREATE | os.O_RDWR | os.O_APPEND
	if fresh {
		mode |= os.O_TRUNC
	}
	if stdout, err = os.OpenFile(s.StdoutPath(), mode, 0o644); err != nil {
		return nil, nil, err
	}
	if stderr, err = os.OpenFile(s.StderrPath(), mode, 0o644); err != nil {
		_ = stdout.Close()
		return nil, nil, err
	}
	return stdout, stderr, nil
}

func (s *Store) lockPath() string { return filepath.Join(s.dir, s.name+".lock") }

// Lock makes sure only one process runs this loop. The lock goes with the
// process, however it ends.
func (s *Store) Lock() (unlock func(), err error) {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(s.lockPath(), os.O_CREATE|os.O_RDWR, 0o644)
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
	var errs []error
	for _, p := range append([]string{s.StatePath(), s.EventsPath()}, slots(s.StatePath())...) {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Load reads the saved state; os.ErrNotExist when there is none.
func (s *Store) Load() (*StateFile, error) {
	return ReadStateFile(s.StatePath())
}

// writer saves steps: events first (appended, fsynced), then the state file
// (atomically). Saves may run in the background while an action runs; at
// most one is in flight and they complete in order.
type writer struct {
	store    *Store
	state    *atomicFile
	log      *eventlog.File
	loopFile string
	context  map[string]any
	pending  chan error
}

func (s *Store) openWriter(loopFile string, ctx map[string]any) (*writer, error) {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, err
	}
	log, err := eventlog.Open(s.EventsPath())
	if err != nil {
		return nil, err
	}
	return &writer{store: s, state: newAtomicFile(s.StatePath()), log: log, loopFile: loopFile, context: ctx}, nil
}

// encode snapshots the run state, so the caller may change it at once.
func (w *writer) encode(run *v1alpha1.RunState) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	err := enc.Encode(encodeState(w.store.name, w.loopFile, w.context, run))
	return b.Bytes(), err
}

// write appends the events and replaces the state file. The two fsyncs run
// side by side (the filesystem can commit them together); the state file is
// renamed into place only once both are on disk, so a saved state never
// refers to an event that is not.
func (w *writer) write(events []executor.Event, state []byte) error {
	logDone := make(chan error, 1)
	go func() { logDone <- w.log.Append(events) }()
	return w.state.write(state, func() error { return <-logDone })
}

// saveAsync starts saving in the background; wait returns the outcome.
func (w *writer) saveAsync(run *v1alpha1.RunState, events []executor.Event) error {
	if err := w.wait(); err != nil {
		return err
	}
	state, err := w.encode(run)
	if err != nil {
		return err
	}
	ch := make(chan error, 1)
	w.pending = ch
	go func() { ch <- w.write(events, state) }()
	return nil
}

// save saves now, the directory included.
func (w *writer) save(run *v1alpha1.RunState, events []executor.Event) error {
	if err := w.saveAsync(run, events); err != nil {
		return err
	}
	if err := w.wait(); err != nil {
		return err
	}
	return w.state.syncDir()
}

// wait waits for the background save.
func (w *writer) wait() error {
	if w.pending == nil {
		return nil
	}
	err := <-w.pending
	w.pending = nil
	return err
}

func (w *writer) close() error {
	return errors.Join(w.wait(), w.log.Close())
}
