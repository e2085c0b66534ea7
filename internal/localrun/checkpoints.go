package localrun

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/history"
	"github.com/looprun/looprun/internal/safefile"
)

// checkpointFile appends checkpoints to <name>.checkpoints.jsonl. Appends
// are not fsynced on their own: the state file is the run's truth, and the
// fsync of the next save carries them. When the file holds twice max
// checkpoints it is rewritten with the newest max.
type checkpointFile struct {
	path string
	max  int
	// count is how many checkpoints the file holds, once it is open.
	count int
	f     *os.File
}

func (c *checkpointFile) append(cp *history.Checkpoint) error {
	if c.f == nil {
		// A resumed run's file may be large: count its lines, decode none.
		data, err := os.ReadFile(c.path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		c.count = bytes.Count(data, []byte("\n"))
		if c.f, err = safefile.OpenFile(c.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return err
		}
	}
	line, err := cp.Line()
	if err != nil {
		return err
	}
	if _, err := c.f.Write(line); err != nil {
		return fmt.Errorf("append to %s: %w", c.path, err)
	}
	c.count++
	if c.max > 0 && c.count >= 2*c.max {
		return c.compact()
	}
	return nil
}

// compact keeps the newest max checkpoints. Their lines are copied as they
// are, none decoded: the check is the reader's (Checkpoints).
func (c *checkpointFile) compact() error {
	data, err := os.ReadFile(c.path)
	if err != nil {
		return err
	}
	kept, n := lastLines(data, c.max)
	if err := safefile.WriteFile(c.path, kept); err != nil {
		return err
	}
	c.count = n
	old := c.f
	c.f, err = safefile.OpenFile(c.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	return errors.Join(err, old.Close())
}

// lastLines is the end of data holding its last n whole lines (a line cut
// short at the end is dropped), and how many lines that is.
func lastLines(data []byte, n int) ([]byte, int) {
	end := bytes.LastIndexByte(data, '\n') + 1
	start, kept := end, 0
	for start > 0 && kept < n {
		start = bytes.LastIndexByte(data[:start-1], '\n') + 1
		kept++
	}
	return data[start:end], kept
}

func (c *checkpointFile) close() error {
	if c.f == nil {
		return nil
	}
	return c.f.Close()
}

// readCheckpoints reads a checkpoints file; a missing one holds none. bad
// counts damaged lines.
func readCheckpoints(path string) (cps []history.Checkpoint, bad int, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	cps, bad = history.Parse(data)
	return cps, bad, nil
}

// writeCheckpoints replaces a checkpoints file atomically.
func writeCheckpoints(path string, cps []history.Checkpoint) error {
	var b bytes.Buffer
	for i := range cps {
		line, err := cps[i].Line()
		if err != nil {
			return err
		}
		b.Write(line)
	}
	return safefile.WriteFile(path, b.Bytes())
}

// Checkpoints reads the run's checkpoints, oldest first, each checked.
// Damaged ones come back in bad with why.
func (s *Store) Checkpoints() (good []history.Checkpoint, bad []error, err error) {
	cps, damaged, err := readCheckpoints(s.CheckpointsPath())
	if err != nil {
		return nil, nil, err
	}
	for i := range cps {
		if verr := cps[i].Verify(); verr != nil {
			bad = append(bad, verr)
			continue
		}
		good = append(good, cps[i])
	}
	if damaged > 0 {
		bad = append(bad, &history.CorruptError{Iteration: -1, Reason: fmt.Sprintf("%d damaged line(s) in %s", damaged, s.CheckpointsPath())})
	}
	return good, bad, nil
}

// LastGoodCheckpoint is the newest checkpoint that passes its check.
func (s *Store) LastGoodCheckpoint() (*history.Checkpoint, error) {
	good, _, err := s.Checkpoints()
	if err != nil {
		return nil, err
	}
	if len(good) == 0 {
		return nil, history.ErrMissing
	}
	return &good[len(good)-1], nil
}

// WriteCheckpoints replaces the run's checkpoints (an import).
func (s *Store) WriteCheckpoints(cps []history.Checkpoint) error {
	if err := s.mkdir(); err != nil {
		return err
	}
	return writeCheckpoints(s.CheckpointsPath(), cps)
}

// LoadCheckpoint reads the checkpoint seq from a checkpoints file, checked.
func LoadCheckpoint(path string, seq int64) (*v1alpha1.RunState, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	_, run, err := history.FindIn(f, seq)
	return run, err
}

// repairCheckpoints drops the checkpoints past the saved sequence number
// (taken in a step that was never saved) and a last line cut short (a full
// disk, a crash): the file reads whole again, and export works.
func (s *Store) repairCheckpoints(saved int64) error {
	data, err := os.ReadFile(s.CheckpointsPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	// Only the end is cut: a damaged line within stays, reported by
	// Checkpoints, and the good ones around it stay usable.
	end := bytes.LastIndexByte(data, '\n') + 1
	for end > 0 {
		start := bytes.LastIndexByte(data[:end-1], '\n') + 1
		if _, seq, ok := history.Head(data[start : end-1]); !ok || seq <= saved {
			break
		}
		end = start
	}
	if end == len(data) {
		return nil
	}
	kept := data[:end]
	f, err := safefile.OpenFile(s.CheckpointsPath(), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = f.Truncate(int64(len(kept)))
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}
