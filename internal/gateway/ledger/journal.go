package ledger

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// JournalFile is the journal's file in its directory.
const JournalFile = "calls.jsonl"

// maxJournalBytes is how large the journal file grows before it is
// rewritten with only the records not yet shipped.
const maxJournalBytes = 8 << 20

// Journal is how the gateway records a call: the record is appended to a
// file on the gateway's own volume before Record returns (a write the
// kernel keeps when the gateway's process is killed, and the volume keeps
// across a restart of its container), and shipped to the step's ledger
// ConfigMap behind it, all the records of one step waiting at that moment
// in one write. A call's answer therefore waits for a local append, not
// for the API server; the ledger follows within one write's time.
//
// Reopened after a restart, a journal ships again what it holds that was
// not shipped: merged by call id, a record shipped twice counts once.
//
// Read gives a step's ledger as the budget check needs it: the ledger as
// the API server has it (through View, a cache) with this gateway's
// records not yet shipped merged in.
type Journal struct {
	// Store writes the ledgers.
	Store *Store
	// View reads the ledgers (a cache fed by a watch); nil reads them
	// through Store.
	View client.Reader
	// Log reports shipping that fails (it is tried again).
	Log logr.Logger
	// Shipped, when set, is told of each write that shipped records: how
	// many, and how long the oldest of them waited in the journal.
	Shipped func(calls int, waited time.Duration)

	dir string

	mu      sync.Mutex
	f       *os.File
	size    int64
	pending map[types.UID]*waiting
	closed  bool
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	idle    *sync.Cond // signalled when a step's records are all shipped
	ready   *sync.Cond // signalled when a step is queued
	queue   []types.UID

	parsedMu sync.Mutex
	parsed   map[string]parsedLedger // by name
}

// parsedLedger is a version of a ledger, parsed.
type parsedLedger struct {
	rv string
	l  *Ledger
}

// waiting is one step's records not shipped yet.
type waiting struct {
	step     Step
	calls    map[string]Call
	shipping bool
	// since is when the oldest record waiting was recorded.
	since time.Time
	// backoff paces the tries after a write that failed.
	backoff time.Duration
}

// journalLine is one line of the journal: a call recorded, or calls
// shipped (Done: the records as they were shipped).
type journalLine struct {
	Step *Step      `json:"step,omitempty"`
	Call *lineCall  `json:"call,omitempty"`
	Pod  types.UID  `json:"pod,omitempty"`
	Done []lineCall `json:"done,omitempty"`
}

// lineCall is a Call with its id (a Call's id is its ConfigMap key).
type lineCall struct {
	ID string `json:"id"`
	Call
}

// recordLine is the journal's line of call c of step.
func recordLine(step Step, c Call) ([]byte, error) {
	return json.Marshal(journalLine{Step: &step, Call: &lineCall{ID: c.ID, Call: c}})
}

// OpenJournal opens (or makes) the journal in dir and starts shipping
// what it holds from an earlier run.
func OpenJournal(dir string, store *Store, view client.Reader, log logr.Logger) (*Journal, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("the journal: %w", err)
	}
	j := &Journal{Store: store, View: view, Log: log, dir: dir, pending: map[types.UID]*waiting{}, parsed: map[string]parsedLedger{}}
	j.idle = sync.NewCond(&j.mu)
	j.ready = sync.NewCond(&j.mu)
	j.ctx, j.cancel = context.WithCancel(context.Background())
	replayed, err := j.replay()
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.rewrite(); err != nil {
		return nil, err
	}
	if replayed > 0 {
		log.Info("Shipping the calls a previous run of the gateway recorded and had not shipped", "calls", replayed, "steps", len(j.pending))
	}
	for uid := range j.pending {
		j.startShipping(uid)
	}
	j.wg.Add(Shippers)
	for range Shippers {
		go j.shipper()
	}
	return j, nil
}

// replay reads the journal file: every call recorded and not marked
// shipped goes back to pending. A last line cut short (the process killed
// in its write) is skipped, as are lines that do not parse.
func (j *Journal) replay() (int, error) {
	f, err := os.Open(filepath.Join(j.dir, JournalFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("the journal: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var ln journalLine
		if json.Unmarshal(sc.Bytes(), &ln) != nil {
			continue
		}
		switch {
		case ln.Call != nil && ln.Step != nil && ln.Call.ID != "" && ln.Call.Usage().Check() == nil:
			j.add(*ln.Step, ln.Call.withID())
		case ln.Pod != "":
			j.shipped(ln.Pod, ln.Done)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("the journal: %w", err)
	}
	return j.waitingLocked(), nil
}

func (c lineCall) withID() Call {
	out := c.Call
	out.ID = c.ID
	return out
}

// add merges c into step's waiting records (j.mu held, or replaying).
func (j *Journal) add(step Step, c Call) {
	w := j.pending[step.PodUID]
	if w == nil {
		w = &waiting{step: step, calls: map[string]Call{}}
		j.pending[step.PodUID] = w
	}
	if len(w.calls) == 0 {
		w.since = time.Now()
	}
	if prev, ok := w.calls[c.ID]; ok {
		c = c.merge(prev)
		c.ID = prev.ID
	}
	w.calls[c.ID] = c
}

// shipped drops from pending the records shipped as they are (j.mu held,
// or replaying); a record raised since stays to be shipped.
func (j *Journal) shipped(pod types.UID, done []lineCall) {
	w := j.pending[pod]
	if w == nil {
		return
	}
	for _, d := range done {
		if c, ok := w.calls[d.ID]; ok && c == d.withID() {
			delete(w.calls, d.ID)
		}
	}
	if len(w.calls) == 0 && !w.shipping {
		delete(j.pending, pod)
	}
}

// rewrite replaces the journal file with one holding only the records not
// shipped (j.mu held).
func (j *Journal) rewrite() error {
	path := filepath.Join(j.dir, JournalFile)
	tmp, err := os.CreateTemp(j.dir, JournalFile+".*")
	if err != nil {
		return fmt.Errorf("the journal: %w", err)
	}
	bw := bufio.NewWriter(tmp)
	var size int64
	for _, w := range j.pending {
		for _, c := range w.calls {
			b, _ := recordLine(w.step, c)
			n, _ := bw.Write(append(b, '\n'))
			size += int64(n)
		}
	}
	err = errors.Join(bw.Flush(), tmp.Sync(), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("the journal: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("the journal: %w", err)
	}
	if j.f != nil {
		_ = j.f.Close()
	}
	j.f, j.size = f, size
	return nil
}

// Record appends call c of step to the journal and has it shipped. It
// returns once the record is in the journal's file.
func (j *Journal) Record(_ context.Context, step Step, c Call) error {
	if err := checkCall(c); err != nil {
		return err
	}
	b, err := recordLine(step, c)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return errors.New("the journal is closed")
	}
	if err := j.append(b); err != nil {
		return err
	}
	j.add(step, c)
	j.startShipping(step.PodUID)
	return nil
}

// append writes one line (j.mu held).
func (j *Journal) append(b []byte) error {
	if j.size > maxJournalBytes {
		if err := j.rewrite(); err != nil {
			return err
		}
	}
	n, err := j.f.Write(append(b, '\n'))
	j.size += int64(n)
	if err != nil {
		return fmt.Errorf("the journal: %w", err)
	}
	return nil
}

// Shippers is how many ledger writes a journal has in flight at most.
const Shippers = 8

// ShipDelay is how long a step's first record waits for others to share
// its write.
const ShipDelay = 5 * time.Millisecond

// startShipping queues the step's records to be shipped, unless they are
// (j.mu held).
func (j *Journal) startShipping(pod types.UID) {
	w := j.pending[pod]
	if w == nil || w.shipping {
		return
	}
	w.shipping = true
	// Shipped a moment later, with the records that come meanwhile: a
	// step whose calls come fast costs the API server one write for many.
	time.AfterFunc(ShipDelay, func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		j.queue = append(j.queue, pod)
		j.ready.Signal()
	})
}

// shipper ships the steps queued, one write of one step at a time, until
// the journal is closed. A step with records left (raised during its
// write, or a write that failed) goes back to the end of the queue: no
// step's volume of calls holds up another's.
func (j *Journal) shipper() {
	defer j.wg.Done()
	j.mu.Lock()
	defer j.mu.Unlock()
	for {
		for len(j.queue) == 0 && j.ctx.Err() == nil {
			j.ready.Wait()
		}
		if j.ctx.Err() != nil {
			return
		}
		pod := j.queue[0]
		j.queue = j.queue[1:]
		w := j.pending[pod]
		if len(w.calls) > 0 {
			j.mu.Unlock()
			ok := j.shipOnce(pod, w)
			j.mu.Lock()
			if !ok && len(w.calls) > 0 {
				// Tried again after a pause; others go first meanwhile.
				time.AfterFunc(w.backoff, func() {
					j.mu.Lock()
					defer j.mu.Unlock()
					j.queue = append(j.queue, pod)
					j.ready.Signal()
				})
				continue
			}
		}
		if len(w.calls) == 0 {
			j.done(pod, w)
			continue
		}
		j.queue = append(j.queue, pod)
	}
}

// done ends a step's shipping: all its records are shipped (j.mu held).
func (j *Journal) done(pod types.UID, w *waiting) {
	w.shipping = false
	delete(j.pending, pod)
	if len(j.pending) == 0 && j.size > 0 && !j.closed {
		// Everything shipped: the file starts again empty.
		if err := j.f.Truncate(0); err == nil {
			j.size = 0
		}
	}
	j.idle.Broadcast()
}

// shipBackoff paces the tries of a step whose write fails.
var shipBackoff = struct{ first, max time.Duration }{50 * time.Millisecond, 5 * time.Second}

// shipOnce writes the step's waiting records to its ledger in one write
// (j.mu not held); false when the write failed.
func (j *Journal) shipOnce(pod types.UID, w *waiting) bool {
	j.mu.Lock()
	step, since := w.step, w.since
	batch := make([]Call, 0, len(w.calls))
	for _, c := range w.calls {
		batch = append(batch, c)
	}
	j.mu.Unlock()

	if err := j.Store.RecordCalls(j.ctx, step, batch); err != nil {
		if j.ctx.Err() == nil {
			j.Log.Error(err, "Shipping calls to their step's ledger (tried again)", "pod", pod, "calls", len(batch))
		}
		j.mu.Lock()
		w.backoff = min(max(w.backoff*2, shipBackoff.first), shipBackoff.max)
		j.mu.Unlock()
		return false
	}
	done := make([]lineCall, len(batch))
	for i, c := range batch {
		done[i] = lineCall{ID: c.ID, Call: c}
	}
	b, _ := json.Marshal(journalLine{Pod: pod, Done: done})
	j.mu.Lock()
	w.backoff = 0
	if !j.closed {
		if err := j.append(b); err != nil {
			j.Log.Error(err, "Marking shipped calls in the journal (they may be shipped again: merged by id, they count once)")
		}
	}
	j.shipped(pod, done)
	w.since = time.Now() // what is left was raised during the write
	j.mu.Unlock()
	if j.Shipped != nil {
		j.Shipped(len(batch), time.Since(since))
	}
	return true
}

// Flush waits until every record so far is shipped, or ctx ends.
func (j *Journal) Flush(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		j.mu.Lock()
		j.idle.Broadcast()
		j.mu.Unlock()
	})
	defer stop()
	j.mu.Lock()
	defer j.mu.Unlock()
	for len(j.pending) > 0 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%d calls of %d steps not shipped (kept in the journal): %w", j.waitingLocked(), len(j.pending), err)
		}
		j.idle.Wait()
	}
	return nil
}

// Close ships what is left (until ctx ends) and closes the file; what is
// not shipped stays in it for the next run.
func (j *Journal) Close(ctx context.Context) error {
	err := j.Flush(ctx)
	j.cancel()
	j.mu.Lock()
	j.ready.Broadcast()
	j.mu.Unlock()
	j.wg.Wait()
	j.mu.Lock()
	defer j.mu.Unlock()
	j.closed = true
	if j.f != nil {
		err = errors.Join(err, j.f.Close())
	}
	return err
}

// Waiting counts the records not shipped yet.
func (j *Journal) Waiting() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.waitingLocked()
}

// waitingLocked counts the records not shipped yet (j.mu held, or
// replaying).
func (j *Journal) waitingLocked() int {
	n := 0
	for _, w := range j.pending {
		n += len(w.calls)
	}
	return n
}

// Read returns the step's ledger for a budget check: the ledger as the
// API server has it (through View, a watch's cache: every replica's
// writes, a moment late), as this gateway last wrote it (its own writes,
// not late), and its records not shipped yet, merged call by call (the
// larger of each count: never less than any of them says). nil when there
// is none of them.
func (j *Journal) Read(ctx context.Context, podUID types.UID) (*Ledger, error) {
	var views []*Ledger
	if j.View != nil {
		l, err := j.readView(ctx, podUID)
		if err != nil {
			return nil, err
		}
		views = append(views, l)
	} else {
		l, err := j.Store.Read(ctx, podUID)
		if err != nil {
			return nil, err
		}
		views = append(views, l)
	}
	if cm := j.Store.peek(Name(podUID)); cm != nil {
		l, err := j.parse(cm)
		if err != nil {
			return nil, err
		}
		views = append(views, l)
	}
	j.mu.Lock()
	if w := j.pending[podUID]; w != nil && len(w.calls) > 0 {
		l := &Ledger{Step: w.step, Calls: make([]Call, 0, len(w.calls))}
		for _, c := range w.calls {
			l.Calls = append(l.Calls, c)
		}
		views = append(views, l)
	}
	j.mu.Unlock()
	return mergeLedgers(views), nil
}

// mergeLedgers merges versions of one ledger call by call (and sum by
// sum), keeping the larger of each count.
func mergeLedgers(views []*Ledger) *Ledger {
	var out *Ledger
	var n int
	for _, l := range views {
		if l != nil {
			out, n = l, n+1
		}
	}
	if n <= 1 {
		return out // none, or one as it is
	}
	out = &Ledger{}
	idx := map[string]int{}
	for _, l := range views {
		if l == nil {
			continue
		}
		if out.Step.PodUID == "" {
			out.Step = l.Step
		}
		for _, c := range l.Calls {
			k := "c/" + c.ID
			if c.Folded > 0 {
				k = "s/" + c.ID
			}
			i, ok := idx[k]
			if !ok {
				idx[k] = len(out.Calls)
				out.Calls = append(out.Calls, c)
				continue
			}
			m := out.Calls[i].merge(c)
			m.ID, m.Folded = c.ID, max(out.Calls[i].Folded, c.Folded)
			out.Calls[i] = m
		}
	}
	return out
}

// readView reads the ledger through View.
func (j *Journal) readView(ctx context.Context, podUID types.UID) (*Ledger, error) {
	cm := &corev1.ConfigMap{}
	err := j.View.Get(ctx, types.NamespacedName{Namespace: j.Store.Namespace, Name: Name(podUID)}, cm)
	if apierrors.IsNotFound(err) {
		j.parsedMu.Lock()
		delete(j.parsed, Name(podUID))
		j.parsedMu.Unlock()
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return j.parse(cm)
}

// maxParsed bounds the parsed ledgers kept: past it, they are parsed
// again as they are read.
const maxParsed = 4096

// parse parses a ledger ConfigMap, once per version (the last parsed is
// kept per name).
func (j *Journal) parse(cm *corev1.ConfigMap) (*Ledger, error) {
	j.parsedMu.Lock()
	p, ok := j.parsed[cm.Name]
	j.parsedMu.Unlock()
	if ok && p.rv == cm.ResourceVersion {
		return p.l, nil
	}
	l, err := Parse(cm)
	if err != nil {
		return nil, err
	}
	j.parsedMu.Lock()
	if len(j.parsed) >= maxParsed {
		clear(j.parsed)
	}
	j.parsed[cm.Name] = parsedLedger{rv: cm.ResourceVersion, l: l}
	j.parsedMu.Unlock()
	return l, nil
}
