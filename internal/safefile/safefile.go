// Package safefile reads the files looprun is handed (loop files and the
// files they import, state files, exports) within a size bound, and only
// when they are regular files: a loop that imports /dev/zero, or a state
// file replaced by a FIFO, gets a clear error instead of filling memory or
// hanging.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// Bounds of what looprun reads.
const (
	// MaxLoopFile bounds a loop file and each file it imports.
	MaxLoopFile = 4 << 20
	// MaxStateFile bounds a state file.
	MaxStateFile = 16 << 20
	// MaxExport bounds an export document.
	MaxExport = 512 << 20
)

// TooLargeError is a file or stream past its bound.
type TooLargeError struct {
	Name string
	Max  int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s is larger than %d bytes, the most looprun reads there", e.Name, e.Max)
}

// Open opens path for reading if it is a regular file: a FIFO or a device
// is refused without blocking on it.
func Open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", path)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// Read reads the regular file at path, at most max bytes.
func Read(path string, max int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > max {
		return nil, &TooLargeError{Name: path, Max: max}
	}
	return ReadAll(f, path, max)
}

// ReadAll reads r to its end, at most max bytes; name says what r is.
func ReadAll(r io.Reader, name string, max int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, &TooLargeError{Name: name, Max: max}
	}
	return data, nil
}

// IsTooLarge reports whether err is a TooLargeError.
func IsTooLarge(err error) bool {
	var t *TooLargeError
	return errors.As(err, &t)
}
