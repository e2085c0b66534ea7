package ui

import (
	"errors"
	"net/http"
	"path/filepath"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// MaxStreams bounds the event streams open at once, local and cluster
// together: each holds a connection and (in a cluster) a watch.
const MaxStreams = 64

// errTooManyStreams answers a stream past MaxStreams.
var errTooManyStreams = errors.New("too many live views are open: close some tabs")

// openStream counts a stream in, false (answered 503) past MaxStreams;
// the caller calls the returned func when the stream ends.
func (s *Server) openStream(w http.ResponseWriter) (func(), bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams >= MaxStreams {
		http.Error(w, errTooManyStreams.Error(), http.StatusServiceUnavailable)
		return nil, false
	}
	s.streams++
	return func() {
		s.mu.Lock()
		s.streams--
		s.mu.Unlock()
	}, true
}

// dirWatch shares one inotify instance among every local stream: each
// watches its run's files in one directory, the hub watches each
// directory once. (One instance per stream ran out of the user's inotify
// instances after ~126 open tabs, and then other programs got EMFILE.)
type dirWatch struct {
	mu   sync.Mutex
	w    *fsnotify.Watcher
	dirs map[string]int
	subs map[*dirSub]struct{}
}

// dirSub is one stream's interest: the files it names in dir. changed has
// a value when one of them changed since it was last read (changes come in
// bursts; one is enough).
type dirSub struct {
	dir     string
	files   map[string]bool
	changed chan struct{}
	// gone is closed when the watcher failed: the stream ends, and the
	// page reconnects.
	gone chan struct{}
}

// subscribe watches files (base names) of dir for one stream.
func (d *dirWatch) subscribe(dir string, files ...string) (*dirSub, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.w == nil {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			return nil, err
		}
		d.w, d.dirs, d.subs = w, map[string]int{}, map[*dirSub]struct{}{}
		go d.dispatch(w)
	}
	if d.dirs[dir] == 0 {
		if err := d.w.Add(dir); err != nil {
			return nil, err
		}
	}
	d.dirs[dir]++
	sub := &dirSub{dir: dir, files: map[string]bool{}, changed: make(chan struct{}, 1), gone: make(chan struct{})}
	for _, f := range files {
		sub.files[f] = true
	}
	d.subs[sub] = struct{}{}
	return sub, nil
}

// unsubscribe ends a stream's interest; a directory no stream watches is
// no longer watched.
func (d *dirWatch) unsubscribe(sub *dirSub) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.subs[sub]; !ok {
		return
	}
	delete(d.subs, sub)
	if d.dirs[sub.dir]--; d.dirs[sub.dir] <= 0 {
		delete(d.dirs, sub.dir)
		if d.w != nil {
			_ = d.w.Remove(sub.dir)
		}
	}
}

// dispatch hands each notification to the streams whose files it names.
func (d *dirWatch) dispatch(w *fsnotify.Watcher) {
	for {
		select {
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			dir, base := filepath.Dir(ev.Name), filepath.Base(ev.Name)
			d.mu.Lock()
			if _, watched := d.dirs[ev.Name]; watched && ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
				// The directory itself went (inotify dropped its watch):
				// its streams end, and the pages reconnect, watching it
				// afresh.
				d.dropDir(ev.Name)
				d.mu.Unlock()
				continue
			}
			for sub := range d.subs {
				if sub.dir == dir && sub.files[base] {
					select {
					case sub.changed <- struct{}{}:
					default: // one pending is enough
					}
				}
			}
			d.mu.Unlock()
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			if err != nil {
				// Events may have been lost (the kernel's queue
				// overflowed): every stream reads its run again.
				d.mu.Lock()
				for sub := range d.subs {
					select {
					case sub.changed <- struct{}{}:
					default:
					}
				}
				d.mu.Unlock()
			}
		}
	}
}

// dropDir ends the streams of dir and forgets it (d.mu held).
func (d *dirWatch) dropDir(dir string) {
	for sub := range d.subs {
		if sub.dir == dir {
			delete(d.subs, sub)
			close(sub.gone)
		}
	}
	delete(d.dirs, dir)
	_ = d.w.Remove(dir)
}

// close stops the hub's watcher (a test's server going away).
func (d *dirWatch) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.w != nil {
		_ = d.w.Close()
		for sub := range d.subs {
			close(sub.gone)
		}
		d.w, d.dirs, d.subs = nil, nil, nil
	}
}
