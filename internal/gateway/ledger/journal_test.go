package ledger

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/looprun/looprun/test/fixture"
)

// gate holds the ledger writes of the Pods it is told to, and counts the
// calls each write carried.
type gate struct {
	mu      sync.Mutex
	held    map[types.UID]chan struct{} // closed: let through
	fail    map[types.UID]bool
	shipped map[string]int // call key → writes that carried it
}

func newGate() *gate {
	return &gate{held: map[types.UID]chan struct{}{}, fail: map[types.UID]bool{}, shipped: map[string]int{}}
}

func (g *gate) hold(pod types.UID) { g.mu.Lock(); g.held[pod] = make(chan struct{}); g.mu.Unlock() }
func (g *gate) release(pod types.UID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ch, ok := g.held[pod]; ok {
		close(ch)
		delete(g.held, pod)
	}
}
func (g *gate) failing(pod types.UID, on bool) { g.mu.Lock(); g.fail[pod] = on; g.mu.Unlock() }

func (g *gate) count(key string) int { g.mu.Lock(); defer g.mu.Unlock(); return g.shipped[key] }

func (g *gate) write(ctx context.Context, obj client.Object, do func() error) error {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return do()
	}
	pod := types.UID(cm.Name[len("usage-"):])
	g.mu.Lock()
	ch, failing := g.held[pod], g.fail[pod]
	g.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if failing {
		return apierrors.NewServiceUnavailable("the API server is away")
	}
	err := do()
	if err == nil {
		g.mu.Lock()
		for k := range cm.Data {
			if k != stepKey {
				g.shipped[cm.Name+"/"+k]++
			}
		}
		g.mu.Unlock()
	}
	return err
}

func (g *gate) client(c client.WithWatch) client.WithWatch {
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return g.write(ctx, obj, func() error { return c.Create(ctx, obj, opts...) })
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			return g.write(ctx, obj, func() error { return c.Update(ctx, obj, opts...) })
		},
	})
}

// notFound is a View that never has the ledger: a watch that lags.
type notFound struct{ client.Reader }

func (notFound) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return apierrors.NewNotFound(corev1.Resource("configmaps"), "")
}

func within(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

func TestJournalAgainstAPIServer(t *testing.T) {
	cfg, _ := fixture.Start(t, false)
	raw, err := client.NewWithWatch(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := raw.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "looprun-system"}}); err != nil {
		t.Fatal(err)
	}
	step := func(pod string) Step {
		return Step{Namespace: "team-a", Loop: "fix", LoopUID: "loop-1", Pod: pod, PodUID: types.UID(pod), Run: "r1", Iteration: 1, State: "fix"}
	}
	call := func(id string, out int64, final bool) Call {
		return Call{ID: id, Model: "claude-sonnet-4-6", InputTokens: 1000, OutputTokens: out, Final: final}
	}
	direct := &Store{Client: raw, Namespace: "looprun-system"}
	read := func(t *testing.T, pod string) *Ledger {
		t.Helper()
		l, err := direct.Read(ctx, types.UID(pod))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	open := func(t *testing.T, dir string, g *gate, view client.Reader) *Journal {
		t.Helper()
		j, err := OpenJournal(dir, &Store{Client: g.client(raw), Namespace: "looprun-system"}, view, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		return j
	}

	// The answer's end waits for the journal, not for the API server: a
	// record is kept (and counted by the budget check) while its ledger
	// write is held, and shipped when the API server answers.
	t.Run("a record does not wait for the API server", func(t *testing.T) {
		g := newGate()
		g.hold("held-a")
		j := open(t, t.TempDir(), g, notFound{})
		defer j.Close(ctx)
		if err := j.Record(ctx, step("held-a"), call("msg_1", 10, true)); err != nil {
			t.Fatal(err)
		}
		// Raised while its first write is held: shipped again after it.
		if err := j.Record(ctx, step("held-a"), call("msg_1", 50, true)); err != nil {
			t.Fatal(err)
		}
		l, err := j.Read(ctx, "held-a")
		if err != nil {
			t.Fatal(err)
		}
		if l == nil || len(l.Calls) != 1 || l.Calls[0].OutputTokens != 50 {
			t.Fatalf("the budget check must see a record not shipped yet: %+v", l)
		}
		if read(t, "held-a") != nil {
			t.Fatal("shipped through a held write")
		}
		g.release("held-a")
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := j.Flush(fctx); err != nil {
			t.Fatal(err)
		}
		got := read(t, "held-a")
		if len(got.Calls) != 1 || got.Calls[0].OutputTokens != 50 || !got.Calls[0].Final {
			t.Fatalf("ledger %+v", got)
		}
		// Shipped and the watch still behind: this replica's own write
		// is still seen.
		if l, _ := j.Read(ctx, "held-a"); l == nil || l.Calls[0].OutputTokens != 50 {
			t.Fatalf("a shipped record lost to a lagging watch: %+v", l)
		}
	})

	// One step's ledger that cannot be written (its writes hang) holds up
	// no other step's.
	t.Run("a stuck ledger holds up no other", func(t *testing.T) {
		g := newGate()
		g.hold("stuck")
		j := open(t, t.TempDir(), g, nil)
		defer func() { g.release("stuck"); j.Close(ctx) }()
		for i := range Shippers + 2 {
			if err := j.Record(ctx, step("stuck"), call("msg_s"+string(rune('a'+i)), 1, true)); err != nil {
				t.Fatal(err)
			}
		}
		if err := j.Record(ctx, step("other"), call("msg_o", 7, true)); err != nil {
			t.Fatal(err)
		}
		within(t, "the other step's ledger", 30*time.Second, func() bool {
			l, err := direct.Read(ctx, "other")
			return err == nil && l != nil && len(l.Calls) == 1
		})
	})

	// The gateway killed before its records were shipped: the journal on
	// its volume ships them when it starts again; what was shipped already
	// is not shipped again, a line cut short by the kill is skipped, and
	// nothing is counted twice.
	t.Run("killed before shipping", func(t *testing.T) {
		dir := t.TempDir()
		g := newGate()
		g.failing("down", true)
		j := open(t, dir, g, nil)
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(j.Record(ctx, step("down"), call("msg_d1", 5, false)))
		must(j.Record(ctx, step("down"), call("msg_d1", 9, true)))
		must(j.Record(ctx, step("down"), call("msg_d2", 3, true)))
		must(j.Record(ctx, step("up"), call("msg_u1", 4, true)))
		within(t, "the reachable step shipped", 30*time.Second, func() bool { return g.count("usage-up/call.msg_u1") == 1 })
		within(t, "its record marked shipped", 30*time.Second, func() bool { return j.Waiting() == 2 })
		// Killed: nothing more is shipped, the file stays as it is, and
		// the last line is cut short.
		stopped, cancel := context.WithCancel(ctx)
		cancel()
		if err := j.Close(stopped); err == nil {
			t.Fatal("closing with records not shipped says nothing")
		}
		f, err := os.OpenFile(filepath.Join(dir, JournalFile), os.O_WRONLY|os.O_APPEND, 0)
		must(err)
		_, err = f.WriteString(`{"step":{"podUID":"down"},"call":{"id":"msg_torn","inp`)
		must(err)
		must(f.Close())

		g2 := newGate()
		j2 := open(t, dir, g2, nil)
		fctx, cancelF := context.WithTimeout(ctx, 30*time.Second)
		defer cancelF()
		must(j2.Flush(fctx))
		must(j2.Close(fctx))
		down := read(t, "down")
		if down == nil || len(down.Calls) != 2 {
			t.Fatalf("the records of the step that could not be written: %+v", down)
		}
		for _, c := range down.Calls {
			if c.ID == "msg_d1" && (c.OutputTokens != 9 || !c.Final) {
				t.Errorf("msg_d1 shipped as %+v, want its final count", c)
			}
		}
		if n := g2.count("usage-up/call.msg_u1"); n != 0 {
			t.Errorf("a record shipped before the kill was shipped %d more times", n)
		}
		if up := read(t, "up"); len(up.Calls) != 1 || up.Calls[0].OutputTokens != 4 {
			t.Errorf("ledger of the shipped step %+v", up)
		}
	})

	// A journal file that is not the gateway's (garbage, counts out of
	// range) loses nothing that parses and counts nothing that does not.
	t.Run("a damaged journal", func(t *testing.T) {
		dir := t.TempDir()
		lines := `not json
{"step":{"podUID":"dmg","loop":"fix","namespace":"team-a"},"call":{"id":"msg_neg","input":-5,"final":true}}
{"step":{"podUID":"dmg","loop":"fix","namespace":"team-a"},"call":{"id":"","input":5,"final":true}}
{"step":{"podUID":"dmg","loop":"fix","namespace":"team-a"},"call":{"id":"msg_ok","model":"claude-sonnet-4-6","input":8,"final":true}}
{"pod":"dmg","done":[{"id":"msg_other","input":1}]}
`
		if err := os.WriteFile(filepath.Join(dir, JournalFile), []byte(lines), 0o600); err != nil {
			t.Fatal(err)
		}
		j := open(t, dir, newGate(), nil)
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := j.Flush(fctx); err != nil {
			t.Fatal(err)
		}
		if err := j.Close(fctx); err != nil {
			t.Fatal(err)
		}
		l := read(t, "dmg")
		if l == nil || len(l.Calls) != 1 || l.Calls[0].ID != "msg_ok" || l.Calls[0].InputTokens != 8 {
			t.Fatalf("ledger from a damaged journal %+v", l)
		}
		if b, err := os.ReadFile(filepath.Join(dir, JournalFile)); err != nil || len(b) != 0 {
			t.Errorf("a journal all shipped keeps %d bytes (%v)", len(b), err)
		}
	})

	// Records refused on the way in never reach the file.
	t.Run("hostile counts", func(t *testing.T) {
		j := open(t, t.TempDir(), newGate(), nil)
		defer j.Close(ctx)
		for _, c := range []Call{
			{ID: "msg_neg", InputTokens: -1},
			{ID: "msg_huge", OutputTokens: 1 << 62},
			{ID: "", InputTokens: 1},
		} {
			if err := j.Record(ctx, step("hostile"), c); err == nil {
				t.Errorf("recorded %+v", c)
			}
		}
		if j.Waiting() != 0 {
			t.Errorf("%d records kept", j.Waiting())
		}
	})

	// Closing (the gateway stopping: a rolling update, an eviction) ships
	// what the journal holds; a closed journal refuses records.
	t.Run("closed", func(t *testing.T) {
		g := newGate()
		g.hold("closing")
		j := open(t, t.TempDir(), g, nil)
		if err := j.Record(ctx, step("closing"), call("msg_c", 3, true)); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(100*time.Millisecond, func() { g.release("closing") })
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := j.Close(cctx); err != nil {
			t.Fatal(err)
		}
		if l := read(t, "closing"); l == nil || len(l.Calls) != 1 {
			t.Fatalf("closing did not ship: %+v", l)
		}
		if err := j.Record(ctx, step("late"), call("msg_late", 1, true)); err == nil || errors.Is(err, context.Canceled) {
			t.Errorf("a closed journal recorded: %v", err)
		}
	})
}
