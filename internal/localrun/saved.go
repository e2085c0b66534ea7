package localrun

import (
	"errors"
	"fmt"
	"os"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/loopfile"
)

// Saved is a local run read back from its files: the one place that
// rebuilds a run from its state file, for resume, export and rewind.
type Saved struct {
	Store *Store
	State *StateFile
	// Run is the saved run state.
	Run *v1alpha1.RunState
	// Loop is the loop file the run runs, with the context it ran with.
	Loop *loopfile.File
}

// Open reads the local run of the loop name under loopsDir and the loop file
// it runs. A run that was never saved is os.ErrNotExist.
func Open(loopsDir, name string) (*Saved, error) {
	return OpenWith(loopfile.Options{LoopsDir: loopsDir}, name)
}

// OpenWith is Open with the loop file's references looked up as opts say
// (opts.LoopsDir holds the run).
func OpenWith(opts loopfile.Options, name string) (*Saved, error) {
	store, err := NewStore(opts.LoopsDir, name)
	if err != nil {
		return nil, err
	}
	sf, err := store.Load()
	if err != nil {
		return nil, err
	}
	run, err := sf.RunState()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", store.StatePath(), err)
	}
	if sf.LoopFile == "" {
		return nil, fmt.Errorf("%s does not say which loop file it ran", store.StatePath())
	}
	lf, err := loopfile.Load(sf.LoopFile, opts)
	if err != nil {
		return nil, err
	}
	for k, v := range sf.Context {
		lf.Loop.Spec.SetContext(k, v)
	}
	if err := executor.ValidateRun(&lf.Loop.Spec, run); err != nil {
		return nil, fmt.Errorf("%s does not fit loop %s: %w", store.StatePath(), sf.LoopFile, err)
	}
	return &Saved{Store: store, State: sf, Run: run, Loop: lf}, nil
}

// LoopFile finds the loop file of the local run name under loopsDir, even
// when its state file cannot be read (a rewind repairs such a run): the one
// the state file names, else the loop NAME resolves to, else the manifest
// an import left beside the state file.
func LoopFile(loopsDir, name string) (string, error) {
	store, err := NewStore(loopsDir, name)
	if err != nil {
		return "", err
	}
	if sf, err := ReadStateFile(store.StatePath()); err == nil && sf.LoopFile != "" {
		return sf.LoopFile, nil
	}
	if p, err := loopfile.Resolve(name, loopfile.Options{LoopsDir: loopsDir}); err == nil {
		return p, nil
	}
	if _, err := os.Stat(store.LoopPath()); err == nil {
		return store.LoopPath(), nil
	}
	return "", errors.New("the run does not say which loop file it runs")
}
