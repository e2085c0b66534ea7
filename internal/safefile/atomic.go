package safefile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// AtomicSlots is how many temporary files an Atomic file rotates through.
const AtomicSlots = 4

// Atomic replaces a file's content atomically: the new content goes into
// a temporary file beside it, which is fsynced and then renamed over the
// file, so the file is whole at every moment and after any crash.
//
// On Linux the rename is an exchange (renameat2 RENAME_EXCHANGE): the
// temporary file receives the previous content, and is rewritten in place
// AtomicSlots saves later. A save thus allocates and frees nothing, which
// halves its cost; the files stay open between saves (each descriptor
// follows its inode from name to name), so a save opens nothing either. A
// reader that opened the file AtomicSlots saves ago could see that old inode
// change under it, so a reader checks that the inode it read is still the
// live one (localrun.ReadStateFile does). Where exchange is not
// available, a plain rename does the classic thing.
type Atomic struct {
	path string
	next int
	// dirDirty is set when a rename must still be made durable by fsyncing
	// the directory.
	dirDirty bool
	// slotFiles[i] is the open file now named slot(i), nil when not open,
	// holding slotSizes[i] bytes. current is the file now at path, which
	// becomes a slot at the next exchange.
	slotFiles   [AtomicSlots]*os.File
	slotSizes   [AtomicSlots]int64
	current     *os.File
	currentSize int64
}

// NewAtomic returns the Atomic file at path; nothing is opened yet.
func NewAtomic(path string) *Atomic {
	return &Atomic{path: path}
}

func (a *Atomic) slot(i int) string {
	return filepath.Join(filepath.Dir(a.path), fmt.Sprintf(".%s.tmp%d", filepath.Base(a.path), i))
}

// Slots lists the temporary files of an Atomic file at path.
func Slots(path string) []string {
	a := NewAtomic(path)
	out := make([]string, AtomicSlots)
	for i := range out {
		out[i] = a.slot(i)
	}
	return out
}

// Write replaces the file with data. before, when set, runs once data is
// written and before it is synced, and must succeed for the rename to
// happen (it syncs the event log).
func (a *Atomic) Write(data []byte, before func() error) error {
	if a.current == nil {
		// The first save: a link at the path would be exchanged into a
		// slot's name, and written through AtomicSlots saves later.
		if st, err := os.Lstat(a.path); err == nil && st.Mode()&os.ModeSymlink != 0 {
			return &LinkError{Path: a.path}
		}
	}
	i := a.next
	a.next = (a.next + 1) % AtomicSlots
	tmp := a.slot(i)
	f, size := a.slotFiles[i], a.slotSizes[i]
	a.slotFiles[i] = nil
	if f == nil {
		var err error
		if f, err = OpenFile(tmp, os.O_CREATE|os.O_RDWR, 0o644); err != nil {
			return err
		}
		size = -1 // unknown: cut it to size
	}
	n := int64(len(data))
	_, err := f.WriteAt(data, 0)
	if err == nil && (size < 0 || n < size) {
		err = f.Truncate(n)
	}
	if err == nil && before != nil {
		err = before()
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return errors.Join(err, f.Close())
	}
	a.dirDirty = true
	err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, a.path, unix.RENAME_EXCHANGE)
	switch {
	case err == nil:
		// The names swapped: the previous content is now the slot's.
		a.slotFiles[i], a.slotSizes[i] = a.current, a.currentSize
		a.current, a.currentSize = f, n
		return nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EOPNOTSUPP):
		// The first save, or a filesystem that cannot exchange.
		if err := os.Rename(tmp, a.path); err != nil {
			return errors.Join(err, f.Close())
		}
		old := a.current
		a.current, a.currentSize = f, n
		if old != nil {
			return old.Close()
		}
		return nil
	}
	return errors.Join(fmt.Errorf("replace %s: %w", a.path, err), f.Close())
}

// Close closes the files kept open.
func (a *Atomic) Close() error {
	errs := []error{}
	for i, f := range a.slotFiles {
		if f != nil {
			errs = append(errs, f.Close())
			a.slotFiles[i] = nil
		}
	}
	if a.current != nil {
		errs = append(errs, a.current.Close())
		a.current = nil
	}
	return errors.Join(errs...)
}

// SyncDir makes the renames durable. Saves during a run skip it: on the
// usual journaling filesystems the next fsync commits the rename anyway, and
// a state one step older is still a consistent state.
func (a *Atomic) SyncDir() error {
	if !a.dirDirty {
		return nil
	}
	d, err := os.Open(filepath.Dir(a.path))
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return err
	}
	a.dirDirty = false
	return nil
}
