package gateway

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// KeySource returns the upstream's key as it is now. The gateway asks it
// on every call, so a rotated key is used from the next call on.
type KeySource func() (string, error)

// StaticKey is a key that never changes (the ANTHROPIC_API_KEY variable).
func StaticKey(key string) KeySource {
	key = strings.TrimSpace(key)
	return func() (string, error) {
		if key == "" {
			return "", errors.New("the upstream key is empty")
		}
		return key, nil
	}
}

// FileKey reads the key from a file (a mounted Secret), again whenever
// the file's modification time or size changes: a rotated Secret (the
// kubelet swaps the mount's ..data link) is picked up on the next call,
// for the cost of one stat per call.
func FileKey(path string) KeySource {
	f := &fileKey{path: path}
	return f.get
}

type fileKey struct {
	path string

	mu   sync.Mutex
	mod  time.Time
	size int64
	key  string
}

func (f *fileKey) get() (string, error) {
	fi, err := os.Stat(f.path)
	if err != nil {
		return "", fmt.Errorf("the upstream key: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.key != "" && fi.ModTime().Equal(f.mod) && fi.Size() == f.size {
		return f.key, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return "", fmt.Errorf("the upstream key: %w", err)
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("the upstream key file %s is empty", f.path)
	}
	f.key, f.mod, f.size = key, fi.ModTime(), fi.Size()
	return key, nil
}
