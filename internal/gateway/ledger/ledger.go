// Package ledger keeps what each step's model calls used, as the model
// gateway counted them from the upstream's responses: one ConfigMap per
// step (per agent Pod), in the gateway's own namespace, where no tenant
// has rights. The gateway records a call before the end of its response
// reaches the agent; the operator reads the step's ledger when the step
// ends, records it as the step's usage, and deletes it.
//
// A call is recorded by its id (the upstream's message id): recording it
// again (a retried write, a second gateway replica, a checkpoint then the
// final count) never lowers a count nor counts it twice. Writes use the
// ConfigMap's resourceVersion, so replicas never overwrite each other.
package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/internal/agentstream"
	"github.com/looprun/looprun/internal/pricing"
)

// Labels of a ledger ConfigMap.
const (
	// LabelLedger marks a ledger (its value "true").
	LabelLedger = "looprun.io/usage-ledger"
	// LabelLoopUID is the uid of the Loop whose step it counts.
	LabelLoopUID = "looprun.io/loop-uid"
	// stepKey holds the Step as JSON.
	stepKey = "step"
	// callPrefix starts the key of each call.
	callPrefix = "call."
	// sumPrefix starts the key of the folded calls of one model.
	sumPrefix = "sum."
)

// MaxCalls is how many calls a ledger holds one by one; beyond it, its
// finished calls are folded into one sum per model (a ConfigMap holds at
// most 1 MiB).
const MaxCalls = 1000

// Step is who a call is for: a step of a Loop's run, run by one Pod. The
// gateway takes it from the Loop's status (never from what the Pod says).
type Step struct {
	Namespace string    `json:"namespace"`
	Loop      string    `json:"loop"`
	LoopUID   types.UID `json:"loopUID"`
	Pod       string    `json:"pod"`
	PodUID    types.UID `json:"podUID"`
	Run       string    `json:"run"`
	Iteration int32     `json:"iteration"`
	State     string    `json:"state"`
}

// Call is what one model call used.
type Call struct {
	// ID is the upstream's message id (or one the gateway made).
	ID    string `json:"-"`
	Model string `json:"model,omitempty"`
	// The counts, as the upstream reported them (checked with
	// agentstream.Usage.Check before they are recorded).
	InputTokens         int64 `json:"input,omitempty"`
	OutputTokens        int64 `json:"output,omitempty"`
	CacheReadTokens     int64 `json:"cacheRead,omitempty"`
	CacheCreationTokens int64 `json:"cacheCreation,omitempty"`
	// Final: the response ended and its usage is the upstream's last
	// word. A call not final is a checkpoint of one still streaming, or
	// one cut off (its input tokens, and the output seen so far).
	Final bool `json:"final,omitempty"`
	// Folded counts the calls a sum stands for (0 for one call).
	Folded int64 `json:"folded,omitempty"`
}

// Usage is the call's counts as agentstream.Usage (to check and price).
func (c Call) Usage() agentstream.Usage {
	return agentstream.Usage{Model: c.Model, InputTokens: c.InputTokens, OutputTokens: c.OutputTokens,
		CacheReadTokens: c.CacheReadTokens, CacheCreationTokens: c.CacheCreationTokens}
}

// merge keeps the larger of each count: a call recorded again never counts
// less, nor twice.
func (c Call) merge(o Call) Call {
	c.InputTokens = max(c.InputTokens, o.InputTokens)
	c.OutputTokens = max(c.OutputTokens, o.OutputTokens)
	c.CacheReadTokens = max(c.CacheReadTokens, o.CacheReadTokens)
	c.CacheCreationTokens = max(c.CacheCreationTokens, o.CacheCreationTokens)
	c.Final = c.Final || o.Final
	if o.Model != "" {
		c.Model = o.Model
	}
	return c
}

// Name is the ConfigMap of the step run by the Pod of uid.
func Name(podUID types.UID) string { return "usage-" + string(podUID) }

// Ledger is one step's calls.
type Ledger struct {
	Step  Step
	Calls []Call
}

// Open counts the calls not final: still streaming, their end not shipped
// yet, or cut off.
func (l *Ledger) Open() int {
	if l == nil {
		return 0
	}
	n := 0
	for _, c := range l.Calls {
		if !c.Final {
			n++
		}
	}
	return n
}

// Totals is what a ledger's calls used, priced call by call (a step may
// call more than one model).
type Totals struct {
	// Usage sums the counts; its Model is the model most used.
	Usage agentstream.Usage
	// Calls counts the calls, Unpriced those of a model the table lacks.
	Calls, Unpriced int64
	// CostMicroUSD is the priced calls' cost.
	CostMicroUSD int64
}

// Totals sums the ledger's calls, priced with prices.
func (l *Ledger) Totals(prices *pricing.Table) Totals {
	var t Totals
	if l == nil {
		return t
	}
	byModel := map[string]int64{}
	for _, c := range l.Calls {
		u := c.Usage()
		t.Usage.Add(u)
		n := max(c.Folded, 1)
		t.Calls = sat(t.Calls, n)
		if cost, ok := prices.CostMicroUSD(u); ok {
			t.CostMicroUSD = sat(t.CostMicroUSD, cost)
		} else {
			t.Unpriced = sat(t.Unpriced, n)
		}
		byModel[c.Model] = sat(byModel[c.Model], u.Tokens())
	}
	t.Usage.Model = ""
	best := int64(-1)
	for m, n := range byModel {
		if n > best || (n == best && m < t.Usage.Model) {
			t.Usage.Model, best = m, n
		}
	}
	return t
}

func sat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + max(b, 0)
}

// Store reads and writes ledgers in one namespace.
type Store struct {
	Client client.Client
	// Reader reads ledgers (nil: Client); the operator reads them past its
	// cache, which holds no ConfigMaps of this namespace.
	Reader    client.Reader
	Namespace string

	// last holds, by name, the ledgers this Store last read or wrote: a
	// write starts from it instead of reading first (one round trip to
	// the API server fewer a call); a write that finds it stale (a
	// conflict: another replica wrote) reads afresh.
	last sync.Map
}

// remember keeps a copy of cm, without its managed fields (an update that
// sends none keeps the server's).
func (s *Store) remember(cm *corev1.ConfigMap) {
	c := cm.DeepCopy()
	c.ManagedFields = nil
	s.last.Store(cm.Name, c)
}

func (s *Store) recall(name string) *corev1.ConfigMap {
	if v, ok := s.last.Load(name); ok {
		return v.(*corev1.ConfigMap).DeepCopy()
	}
	return nil
}

// peek is the remembered copy itself, not to be changed.
func (s *Store) peek(name string) *corev1.ConfigMap {
	if v, ok := s.last.Load(name); ok {
		return v.(*corev1.ConfigMap)
	}
	return nil
}

func (s *Store) reader() client.Reader {
	if s.Reader != nil {
		return s.Reader
	}
	return s.Client
}

var keyUnsafe = regexp.MustCompile(`[^-._a-zA-Z0-9]`)

// callKey is the ConfigMap key of a call id (ConfigMap keys allow
// [-._a-zA-Z0-9]; an id is bounded to keep the key short).
func callKey(id string) string {
	k := keyUnsafe.ReplaceAllString(id, "_")
	if len(k) > 200 {
		k = k[:200]
	}
	return callPrefix + k
}

// conflictBackoff is how a write that lost a race tries again: the calls
// of one step (sub-agents stream at once, and replicas serve them) write
// one ConfigMap.
var conflictBackoff = wait.Backoff{Steps: 100, Duration: 2 * time.Millisecond, Factor: 1.3, Jitter: 1, Cap: 200 * time.Millisecond}

// checkCall refuses a call that cannot be recorded: counts out of range,
// or no id to record it under.
func checkCall(c Call) error {
	if err := c.Usage().Check(); err != nil {
		return fmt.Errorf("usage of call %s: %w", c.ID, err)
	}
	if c.ID == "" {
		return fmt.Errorf("a call without an id")
	}
	return nil
}

// Record adds (or raises) call c of step s. Its counts must be checked.
func (s *Store) Record(ctx context.Context, step Step, c Call) error {
	return s.RecordCalls(ctx, step, []Call{c})
}

// RecordCalls adds (or raises) calls of step s in one write. Their counts
// must be checked.
func (s *Store) RecordCalls(ctx context.Context, step Step, calls []Call) error {
	for _, c := range calls {
		if err := checkCall(c); err != nil {
			return err
		}
	}
	key := types.NamespacedName{Namespace: s.Namespace, Name: Name(step.PodUID)}
	first := true
	return retry.RetryOnConflict(conflictBackoff, func() error {
		cm := s.recall(key.Name)
		var err error
		if !first || cm == nil {
			cm = &corev1.ConfigMap{}
			err = s.Client.Get(ctx, key, cm)
		}
		first = false
		if apierrors.IsNotFound(err) {
			stepJSON, jerr := json.Marshal(step)
			if jerr != nil {
				return jerr
			}
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace,
				Labels: map[string]string{LabelLedger: "true", LabelLoopUID: string(step.LoopUID)}},
				Data: map[string]string{stepKey: string(stepJSON)}}
			for _, c := range calls {
				put(cm, c)
			}
			err = s.Client.Create(ctx, cm)
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("configmaps"), key.Name, err)
			}
			if err == nil {
				s.remember(cm)
			}
			return err
		}
		if err != nil {
			return err
		}
		changed := false
		for _, c := range calls {
			changed = put(cm, c) || changed
		}
		if !changed {
			s.remember(cm)
			return nil
		}
		err = s.Client.Update(ctx, cm)
		switch {
		case err == nil:
			s.remember(cm)
		case apierrors.IsNotFound(err):
			// Dropped since (counted): a write now makes it again, as
			// one that found none would.
			s.last.Delete(key.Name)
			return apierrors.NewConflict(corev1.Resource("configmaps"), key.Name, err)
		}
		return err
	})
}

// put merges c into the ConfigMap's data, folding finished calls when it
// holds too many; false when nothing changed.
func put(cm *corev1.ConfigMap, c Call) bool {
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	k := callKey(c.ID)
	if old, ok := cm.Data[k]; ok {
		var prev Call
		if json.Unmarshal([]byte(old), &prev) == nil {
			merged := c.merge(prev)
			merged.ID = ""
			if merged == prev {
				return false
			}
			c = merged
		}
	}
	b, _ := json.Marshal(c)
	cm.Data[k] = string(b)
	if len(cm.Data) > MaxCalls+1 {
		fold(cm)
	}
	return true
}

// fold replaces the finished calls by one sum per model.
func fold(cm *corev1.ConfigMap) {
	for k, v := range cm.Data {
		if !strings.HasPrefix(k, callPrefix) {
			continue
		}
		var c Call
		if json.Unmarshal([]byte(v), &c) != nil || !c.Final {
			continue
		}
		sk := sumPrefix + keyUnsafe.ReplaceAllString(c.Model, "_")
		var sum Call
		if old, ok := cm.Data[sk]; ok {
			_ = json.Unmarshal([]byte(old), &sum)
		}
		u := sum.Usage()
		u.Add(c.Usage()) // saturating, as every sum of counts
		sum.Model, sum.Final = c.Model, true
		sum.InputTokens, sum.OutputTokens, sum.CacheReadTokens, sum.CacheCreationTokens = u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheCreationTokens
		sum.Folded = sat(max(sum.Folded, 0), 1)
		b, _ := json.Marshal(sum)
		cm.Data[sk] = string(b)
		delete(cm.Data, k)
	}
}

// Read returns the ledger of the step run by the Pod of podUID; nil when
// none was made (the step made no call).
func (s *Store) Read(ctx context.Context, podUID types.UID) (*Ledger, error) {
	cm := &corev1.ConfigMap{}
	err := s.reader().Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: Name(podUID)}, cm)
	if apierrors.IsNotFound(err) {
		s.last.Delete(Name(podUID))
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.remember(cm)
	return Parse(cm)
}

// Parse reads a ledger ConfigMap. A call whose counts fail the check is
// an error, never a free call.
func Parse(cm *corev1.ConfigMap) (*Ledger, error) {
	l := &Ledger{}
	if err := json.Unmarshal([]byte(cm.Data[stepKey]), &l.Step); err != nil {
		return nil, fmt.Errorf("ledger %s: step: %w", cm.Name, err)
	}
	keys := make([]string, 0, len(cm.Data))
	for k := range cm.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == stepKey {
			continue
		}
		var c Call
		if err := json.Unmarshal([]byte(cm.Data[k]), &c); err != nil {
			return nil, fmt.Errorf("ledger %s: %s: %w", cm.Name, k, err)
		}
		if err := c.Usage().Check(); err != nil {
			return nil, fmt.Errorf("ledger %s: %s: %w", cm.Name, k, err)
		}
		if c.Folded < 0 {
			return nil, fmt.Errorf("ledger %s: %s: folded %s", cm.Name, k, strconv.FormatInt(c.Folded, 10))
		}
		c.ID = strings.TrimPrefix(strings.TrimPrefix(k, callPrefix), sumPrefix)
		l.Calls = append(l.Calls, c)
	}
	return l, nil
}

// Delete drops the ledger of the step run by the Pod of podUID, once its
// usage is recorded.
func (s *Store) Delete(ctx context.Context, podUID types.UID) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: Name(podUID)}}
	s.last.Delete(cm.Name)
	return client.IgnoreNotFound(s.Client.Delete(ctx, cm))
}

// Sweep drops the ledgers of steps no longer in flight (inFlight says
// false: the Loop counted the step and moved on, or is gone) that are at
// least minAge old: one written after its step was counted (a call cut
// off as its Pod ended) is not left behind. It returns how many it
// dropped. A ledger whose step is still in flight (its operator has not
// counted it yet, however long it is down) is kept.
func (s *Store) Sweep(ctx context.Context, inFlight func(context.Context, Step) (bool, error), minAge time.Duration, now time.Time) (int, error) {
	var list corev1.ConfigMapList
	if err := s.reader().List(ctx, &list, client.InNamespace(s.Namespace), client.MatchingLabels{LabelLedger: "true"}); err != nil {
		return 0, err
	}
	// What this Store remembers of ledgers gone since (the operator drops
	// them) goes too: it holds no more than the ledgers there are.
	there := make(map[string]bool, len(list.Items))
	for i := range list.Items {
		there[list.Items[i].Name] = true
	}
	s.last.Range(func(k, _ any) bool {
		if !there[k.(string)] {
			s.last.Delete(k)
		}
		return true
	})
	dropped := 0
	for i := range list.Items {
		cm := &list.Items[i]
		if now.Sub(cm.CreationTimestamp.Time) < minAge {
			continue
		}
		var step Step
		if err := json.Unmarshal([]byte(cm.Data[stepKey]), &step); err == nil {
			live, err := inFlight(ctx, step)
			if err != nil {
				return dropped, err
			}
			if live {
				continue
			}
		}
		s.last.Delete(cm.Name)
		if err := client.IgnoreNotFound(s.Client.Delete(ctx, cm, client.Preconditions{UID: &cm.UID})); err != nil {
			return dropped, err
		}
		dropped++
	}
	return dropped, nil
}
