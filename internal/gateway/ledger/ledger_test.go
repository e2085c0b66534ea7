package ledger

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/internal/pricing"
	"github.com/looprun/looprun/test/fixture"
)

func TestLedgerAgainstAPIServer(t *testing.T) {
	_, c := fixture.Start(t, false)
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "looprun-system"}}); err != nil {
		t.Fatal(err)
	}
	store := &Store{Client: c, Namespace: "looprun-system"}
	step := func(pod string) Step {
		return Step{Namespace: "team-a", Loop: "fix", LoopUID: "loop-1", Pod: pod, PodUID: types.UID("uid-" + pod), Run: "r1", Iteration: 3, State: "fix"}
	}

	// A call recorded as a checkpoint, again, then final, counts once, at
	// its largest; a lower count never lowers it.
	t.Run("a call counts once, never less", func(t *testing.T) {
		s := step("a")
		for _, call := range []Call{
			{ID: "msg_1", Model: "claude-sonnet-4-6", InputTokens: 1000, OutputTokens: 1},
			{ID: "msg_1", Model: "claude-sonnet-4-6", InputTokens: 1000, OutputTokens: 40},
			{ID: "msg_1", Model: "claude-sonnet-4-6", InputTokens: 1000, OutputTokens: 100, Final: true},
			{ID: "msg_1", Model: "claude-sonnet-4-6", InputTokens: 1000, OutputTokens: 100, Final: true},
			{ID: "msg_1", Model: "claude-sonnet-4-6", InputTokens: 10, OutputTokens: 5},
		} {
			if err := store.Record(ctx, s, call); err != nil {
				t.Fatal(err)
			}
		}
		l, err := store.Read(ctx, s.PodUID)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Calls) != 1 || l.Calls[0].OutputTokens != 100 || !l.Calls[0].Final || l.Step != s {
			t.Fatalf("ledger %+v", l)
		}
		tot := l.Totals(pricing.Default())
		if tot.Calls != 1 || tot.Usage.InputTokens != 1000 || tot.CostMicroUSD <= 0 {
			t.Errorf("totals %+v", tot)
		}
	})

	// Usage that fails the check is refused on the way in and on the way out.
	t.Run("hostile counts", func(t *testing.T) {
		for _, bad := range []Call{{ID: "n", InputTokens: -1}, {ID: "o", OutputTokens: 1 << 62}, {ID: ""}} {
			if err := store.Record(ctx, step("b"), bad); err == nil {
				t.Errorf("recorded %+v", bad)
			}
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: Name("forged"), Namespace: "looprun-system"},
			Data: map[string]string{stepKey: `{"loop":"fix"}`, "call.x": `{"input":-5,"final":true}`}}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Read(ctx, "forged"); err == nil || !strings.Contains(err.Error(), "input_tokens -5") {
			t.Errorf("a negative count read back: %v", err)
		}
	})

	// A write from a remembered copy that another replica made stale is
	// a conflict, read afresh: nothing the other wrote is lost.
	t.Run("a stale remembered copy", func(t *testing.T) {
		s := step("stale")
		other := &Store{Client: c, Namespace: "looprun-system"}
		if err := store.Record(ctx, s, Call{ID: "msg_1", InputTokens: 1, Final: true}); err != nil {
			t.Fatal(err)
		}
		if err := other.Record(ctx, s, Call{ID: "msg_2", InputTokens: 2, Final: true}); err != nil {
			t.Fatal(err)
		}
		if err := store.Record(ctx, s, Call{ID: "msg_3", InputTokens: 3, Final: true}); err != nil {
			t.Fatal(err)
		}
		l, err := other.Read(ctx, s.PodUID)
		if err != nil || len(l.Calls) != 3 {
			t.Fatalf("ledger %+v, %v", l, err)
		}
	})

	// Two gateway replicas writing the same step's ledger at once lose
	// nothing: the writes go by resourceVersion.
	t.Run("replicas racing", func(t *testing.T) {
		s := step("c")
		other := &Store{Client: c, Namespace: "looprun-system"}
		var wg sync.WaitGroup
		errs := make(chan error, 40)
		for i := range 40 {
			st := store
			if i%2 == 1 {
				st = other
			}
			wg.Go(func() {
				errs <- st.Record(ctx, s, Call{ID: fmt.Sprintf("msg_%d", i), Model: "claude-sonnet-4-6", InputTokens: 10, OutputTokens: 1, Final: true})
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		l, err := store.Read(ctx, s.PodUID)
		if err != nil {
			t.Fatal(err)
		}
		if tot := l.Totals(pricing.Default()); tot.Calls != 40 || tot.Usage.InputTokens != 400 {
			t.Errorf("40 calls from two replicas: %+v", tot)
		}
	})

	// Past MaxCalls, finished calls fold into a sum per model: the totals
	// stay, the ConfigMap stays small.
	t.Run("folding", func(t *testing.T) {
		cm := &corev1.ConfigMap{Data: map[string]string{stepKey: `{}`}}
		for i := range MaxCalls + 5 {
			put(cm, Call{ID: fmt.Sprintf("msg_%d", i), Model: "claude-haiku-4-5", InputTokens: 2, OutputTokens: 1, Final: true})
		}
		put(cm, Call{ID: "msg_open", Model: "claude-haiku-4-5", InputTokens: 7})
		if len(cm.Data) > 10 {
			t.Errorf("%d keys after folding", len(cm.Data))
		}
		l, err := Parse(cm)
		if err != nil {
			t.Fatal(err)
		}
		tot := l.Totals(pricing.Default())
		if tot.Calls != MaxCalls+6 || tot.Usage.InputTokens != 2*(MaxCalls+5)+7 {
			t.Errorf("folded totals %+v", tot)
		}
	})

	// The sweep drops a ledger whose step is over, only once it is old
	// enough, and keeps one whose step is in flight.
	t.Run("sweep", func(t *testing.T) {
		done, live := step("done"), step("live")
		for _, s := range []Step{done, live} {
			if err := store.Record(ctx, s, Call{ID: "msg_1", InputTokens: 1, Final: true}); err != nil {
				t.Fatal(err)
			}
		}
		inFlight := func(_ context.Context, s Step) (bool, error) { return s.Pod == "live", nil }
		if n, err := store.Sweep(ctx, inFlight, time.Hour, time.Now()); err != nil || n != 0 {
			t.Errorf("young ledgers swept: %d, %v", n, err)
		}
		if _, err := store.Sweep(ctx, inFlight, time.Minute, time.Now().Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		for pod, want := range map[string]bool{"done": false, "live": true} {
			err := c.Get(ctx, client.ObjectKey{Namespace: "looprun-system", Name: Name(step(pod).PodUID)}, &corev1.ConfigMap{})
			if (err == nil) != want {
				t.Errorf("ledger of %s kept %v, want %v", pod, err == nil, want)
			}
		}
		if err := store.Delete(ctx, live.PodUID); err != nil {
			t.Fatal(err)
		}
		if l, err := store.Read(ctx, live.PodUID); l != nil || err != nil {
			t.Errorf("deleted ledger read %v, %v", l, err)
		}
		// A ledger dropped by another (the operator) is forgotten by the
		// next sweep.
		gone := step("gone")
		if err := store.Record(ctx, gone, Call{ID: "msg_1", InputTokens: 1, Final: true}); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "looprun-system", Name: Name(gone.PodUID)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Sweep(ctx, inFlight, time.Hour, time.Now()); err != nil {
			t.Fatal(err)
		}
		if _, ok := store.last.Load(Name(gone.PodUID)); ok {
			t.Error("a dropped ledger is still remembered after a sweep")
		}
		// A call recorded after its ledger was dropped makes it again.
		if err := store.Record(ctx, gone, Call{ID: "msg_2", InputTokens: 2, Final: true}); err != nil {
			t.Fatal(err)
		}
		if l, err := store.Read(ctx, gone.PodUID); err != nil || l == nil || len(l.Calls) != 1 || l.Calls[0].InputTokens != 2 {
			t.Errorf("ledger made again: %+v, %v", l, err)
		}
	})
}
