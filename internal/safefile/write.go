package safefile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// What a local run writes goes through OpenFile, WriteFile and Dir, so that
// a symbolic link planted under --loops-dir (a checked-out repository may
// hold one: .loops/.running/NAME.stdout.log -> ~/.bashrc) is refused, never
// followed: a run writes only files and directories that are what their
// names say.

// LinkError is a path a run would write through that is a symbolic link.
type LinkError struct {
	Path string
}

func (e *LinkError) Error() string {
	return fmt.Sprintf("%s is a symbolic link: looprun writes a run's files only as real files and directories, never through a link (remove the link)", e.Path)
}

// IsLink reports whether err is a LinkError.
func IsLink(err error) bool {
	var l *LinkError
	return errors.As(err, &l)
}

// OpenFile opens path as os.OpenFile does, for a file a run writes: a
// symbolic link at path is refused (O_NOFOLLOW), and so is anything but a
// regular file of one name (a FIFO, a device, a hard link to a file
// elsewhere), checked on the open descriptor before anything is written.
// O_TRUNC truncates only once those checks passed.
func OpenFile(path string, flag int, perm os.FileMode) (*os.File, error) {
	sysFlag := flag&^os.O_TRUNC | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	var fd int
	var err error
	for {
		fd, err = unix.Open(path, sysFlag, uint32(perm.Perm()))
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, openError(path, err)
	}
	if err := checkWritable(fd, path); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	// O_NONBLOCK only kept a FIFO from blocking the open; a regular file
	// does not heed it, and the descriptor may be handed to an action.
	if err := unix.SetNonblock(fd, false); err != nil {
		_ = unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	if flag&os.O_TRUNC != 0 {
		if err := f.Truncate(0); err != nil {
			_ = f.Close()
			return nil, err
		}
	}
	return f, nil
}

// openError names why path could not be opened.
func openError(path string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		if st, lerr := os.Lstat(path); lerr == nil && st.Mode()&os.ModeSymlink != 0 {
			return &LinkError{Path: path}
		}
	case errors.Is(err, unix.ENXIO):
		return fmt.Errorf("%s is not a regular file", path) // a FIFO no one reads
	}
	return &os.PathError{Op: "open", Path: path, Err: err}
}

func checkWritable(fd int, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if st.Nlink > 1 {
		return fmt.Errorf("%s has %d names (a hard link): looprun does not write a file that has another name elsewhere", path, st.Nlink)
	}
	return nil
}

// WriteFile replaces the file at path with data atomically: a new
// temporary file beside it, fsynced, renamed over it. A symbolic link at
// path is replaced, not followed.
func WriteFile(path string, data []byte) error {
	// CreateTemp's O_EXCL never opens what is there already, a link included.
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// Dir makes sure the directory base/elems... exists, and that neither
// base nor any of elems is a symbolic link: the missing ones are created,
// a link is refused with a LinkError naming it. base's own parents are
// the caller's choice and not checked. It returns the directory's path.
func Dir(base string, elems ...string) (string, error) {
	if err := os.MkdirAll(base, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	p := base
	if err := realDir(p); err != nil {
		return "", err
	}
	for _, e := range elems {
		p = filepath.Join(p, e)
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return "", err
		}
		if err := realDir(p); err != nil {
			return "", err
		}
	}
	return p, nil
}

// realDir checks that p is a directory and not a symbolic link to one.
func realDir(p string) error {
	st, err := os.Lstat(p)
	switch {
	case err != nil:
		return err
	case st.Mode()&os.ModeSymlink != 0:
		return &LinkError{Path: p}
	case !st.IsDir():
		return fmt.Errorf("%s is not a directory", p)
	}
	return nil
}
