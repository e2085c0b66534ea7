// Package eventlog is a loop's append-only event log: its format (JSONL, one
// event per line with its sequence number) and the local backend, a JSONL
// file, each append written in one call and fsynced. The cluster backend,
// ConfigMap segments, is internal/eventlog/configmaps; this package links no
// Kubernetes client, so the local CLI does not either.
package eventlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/safefile"
)

// File is a JSONL event log.
type File struct {
	path     string
	f        *os.File
	buf      bytes.Buffer
	unsynced bool
}

// Open opens (creating it if needed) the log at path for appending; a
// symbolic link or anything but a regular file there is refused
// (safefile.OpenFile).
func Open(path string) (*File, error) {
	f, err := safefile.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &File{path: path, f: f}, nil
}

// Append writes events in one write and fsyncs the file.
func (l *File) Append(events []executor.Event) error {
	if err := l.Write(events); err != nil {
		return err
	}
	return l.Sync()
}

// Write appends events in one write, without waiting for the disk: a
// caller with more files to save writes them all, then syncs each, so
// that one journal commit can carry them.
func (l *File) Write(events []executor.Event) error {
	if len(events) == 0 {
		return nil
	}
	l.buf.Reset()
	enc := json.NewEncoder(&l.buf)
	enc.SetEscapeHTML(false)
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	if _, err := l.f.Write(l.buf.Bytes()); err != nil {
		return fmt.Errorf("append to %s: %w", l.path, err)
	}
	l.unsynced = true
	return nil
}

// Sync waits until what was written is on disk.
func (l *File) Sync() error {
	if !l.unsynced {
		return nil
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", l.path, err)
	}
	l.unsynced = false
	return nil
}

// Close closes the log.
func (l *File) Close() error {
	return l.f.Close()
}

// Read returns the events in the log at path; a missing log has none. A last
// line cut short by a crash is ignored.
func Read(path string) ([]executor.Event, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []executor.Event
	err = scan(f, func(e executor.Event, _ int64) bool {
		out = append(out, e)
		return true
	})
	return out, err
}

// TruncateAfter removes the events numbered after seq, and any partial last
// line: they were written for a step whose state was never saved, and that
// step will run again.
func TruncateAfter(path string, seq int64) error {
	f, err := safefile.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	var keep int64
	err = scan(f, func(e executor.Event, end int64) bool {
		if e.Seq > seq {
			return false
		}
		keep = end
		return true
	})
	if err != nil {
		return err
	}
	if err := f.Truncate(keep); err != nil {
		return err
	}
	return f.Sync()
}

// ReadFrom calls fn with each complete event of the log at path from byte
// offset on, and returns the offset just past the last one: a reader that
// follows a growing log passes it back next time. A missing log has none.
func ReadFrom(path string, offset int64, fn func(executor.Event)) (int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return offset, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return offset, err
	}
	end := offset
	err = scan(f, func(e executor.Event, off int64) bool {
		fn(e)
		end = offset + off
		return true
	})
	return end, err
}
