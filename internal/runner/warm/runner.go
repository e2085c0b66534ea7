// Package warm runs the shell steps of a Loop in Warm mode
// (spec.runner.mode: Warm) in one runner Pod of the run: the Pod is made
// at the run's first such step, each step is handed to it over the
// handoff protocol in milliseconds, and it goes when the run ends or it
// idles out. Everything else (Loops in Pod mode, agent steps, clones,
// pushes, exit hooks) goes to the Pod runner it wraps.
//
// A step handed over has an id (RUN.ITERATION.RETRY), recorded with the
// runner Pod's name and uid in status.action before it is handed: the
// runner runs an id once, so a step handed again after an operator restart
// is answered, not run again; a step whose runner Pod is gone is Lost and
// runs again in the next one.
package warm

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/internal/executor/evaluate"
	"github.com/looprun/looprun/internal/runner"
	"github.com/looprun/looprun/internal/runner/entrypoint"
	"github.com/looprun/looprun/internal/runner/pod"
	"github.com/looprun/looprun/internal/runner/warm/handoff"
)

// Failure reasons of warm steps.
const (
	// ReasonRunnerUnreachable: the operator could not reach the runner Pod.
	ReasonRunnerUnreachable = "RunnerUnreachable"
	// ReasonRunnerRefused: the runner refused the step (or answered
	// without the run's key).
	ReasonRunnerRefused = "RunnerRefused"
)

// Timings of hand-offs.
const (
	// handTimeout bounds one request made in a reconcile.
	handTimeout = 3 * time.Second
	// pollWait is one long poll's wait for a step's end.
	pollWait = 30 * time.Second
	// unreachableAfter is how long a running runner Pod may be
	// unreachable before its step fails (a NetworkPolicy that keeps the
	// operator out, say).
	unreachableAfter = time.Minute
	// startingRecheck is how often a step looks at its runner Pod while
	// the Pod starts.
	startingRecheck = 200 * time.Millisecond
	// overrun is how long past its timeout a step may run before its
	// runner Pod is deleted (the wrapper ends it at its timeout).
	overrun = time.Minute
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=create

// Runner runs a Warm Loop's shell steps in its run's runner Pod, and all
// else through Pods.
type Runner struct {
	Pods *pod.Runner
	// Key derives each Loop's runner key (HMAC of the Loop's uid): the
	// operator's runner key, the same for every replica and across
	// restarts (--runner-key-file).
	Key []byte
	// Addr is where a runner Pod listens (nil: its Pod IP and handoff.Port).
	Addr func(*corev1.Pod) string
	// HTTP is the client of hand-offs (nil: handoff.Default).
	HTTP *http.Client
	// UnreachableAfter is how long a running runner Pod may not answer
	// before its step fails (0: a minute).
	UnreachableAfter time.Duration

	mu     sync.Mutex
	polls  map[string]*poll
	events chan event.TypedGenericEvent[*v1alpha1.Loop]
}

var _ runner.Runner = &Runner{}

// New wraps the Pod runner.
func New(pods *pod.Runner, key []byte) *Runner {
	return &Runner{Pods: pods, Key: key, polls: map[string]*poll{}, events: make(chan event.TypedGenericEvent[*v1alpha1.Loop], 1024)}
}

// poll hands a step over and follows it until it ends, in the
// background: no reconcile waits on a runner.
type poll struct {
	owner  types.NamespacedName
	iter   int32
	client *handoff.Client
	id     string
	cancel context.CancelFunc
	// unreachable says the runner has not answered since this time.
	unreachable time.Time
	done        bool
	out         runner.Outcome
}

// LoopKey is the key of a Loop's runner Pods.
func (r *Runner) LoopKey(loopUID types.UID) []byte {
	return LoopKey(r.Key, loopUID)
}

// LoopKey is the key of a Loop's runner Pods under the operator's key.
func LoopKey(operatorKey []byte, loopUID types.UID) []byte {
	m := hmac.New(sha256.New, operatorKey)
	m.Write([]byte("looprun runner key\n" + string(loopUID)))
	return m.Sum(nil)
}

// Fingerprint names a Loop's key (in its Secret's name and its runner
// Pods' label) without giving it away: the first 10 hex digits of its
// SHA-256.
func Fingerprint(loopKey []byte) string {
	sum := sha256.Sum256(loopKey)
	return hex.EncodeToString(sum[:5])
}

// stale says whether a runner Pod was made with another operator key
// (the operator restarted without --runner-key-file): nothing this
// operator sends it would be believed, nor anything it answers.
func (r *Runner) stale(loop *v1alpha1.Loop, p *corev1.Pod) bool {
	return p.Labels[pod.LabelWarmKey] != Fingerprint(r.LoopKey(loop.UID))
}

// Start implements runner.Runner: a warm step is recorded (Pod, uid, step
// id) and handed to the run's runner Pod, made first when there is none.
func (r *Runner) Start(ctx context.Context, loop *v1alpha1.Loop, a executor.Action) (time.Duration, error) {
	if !pod.Warm(loop, &a) {
		return r.Pods.Start(ctx, loop, a)
	}
	step, err := pod.WarmStep(loop, a)
	if err != nil {
		return 0, err
	}
	p, err := r.runnerPod(ctx, loop)
	if err != nil {
		return 0, err
	}
	id := handoff.StepID(loop.Status.RunID, a.Iteration, a.Retry)
	if st := loop.Status.Action; st != nil {
		st.Pod, st.PodUID, st.Step = p.Name, string(p.UID), id
	}
	if !ready(p) {
		// Check finds the step not handed over once the runner runs, and
		// it starts again. The Pod's start wakes the Loop, but nothing of
		// the Pod changes after it: a wake taken with a Loop older than
		// this status would be the last, so look again soon.
		return startingRecheck, nil
	}
	key := pollKey(loop.UID, p.Name, id)
	r.drop(key) // a poll that found it not handed over
	r.follow(loop, key, a.Iteration, r.client(loop, p), id, &step)
	return time.Minute, nil
}

// Check implements runner.Runner.
func (r *Runner) Check(ctx context.Context, loop *v1alpha1.Loop) (runner.Outcome, error) {
	a := loop.Status.Action
	if a == nil || a.Step == "" {
		return r.Pods.Check(ctx, loop)
	}
	key := pollKey(loop.UID, a.Pod, a.Step)
	pl, done, out, unreachable := r.poll(key)
	if done && out.State != runner.NotStarted {
		return out, nil
	}
	p, err := r.Pods.Get(ctx, types.NamespacedName{Namespace: loop.Namespace, Name: a.Pod})
	if err != nil {
		return runner.Outcome{}, err
	}
	if out, decided, err := r.unusable(ctx, loop, key, p); decided || err != nil {
		return out, err
	}
	if done { // not handed over: Start hands it over now
		return out, nil
	}
	if out, decided, err := r.overdue(ctx, loop, key, p, unreachable); decided || err != nil {
		return out, err
	}
	if pl == nil {
		// Not followed by this process (it restarted, or the step was
		// recorded before its runner was up): ask the runner what it
		// knows of the step.
		r.follow(loop, key, a.Iteration, r.client(loop, p), a.Step, nil)
	}
	return runner.Outcome{State: runner.Running, RecheckAfter: min(5*time.Second, r.unreachableLimit())}, nil
}

// poll is what is known here of a step's poll.
func (r *Runner) poll(key string) (pl *poll, done bool, out runner.Outcome, unreachable time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pl = r.polls[key]; pl != nil {
		return pl, pl.done, pl.out, pl.unreachable
	}
	return nil, false, runner.Outcome{}, time.Time{}
}

// unusable decides a step whose runner Pod cannot take it: gone or made
// under another key (lost), or not started yet (waiting, or given up).
func (r *Runner) unusable(ctx context.Context, loop *v1alpha1.Loop, key string, p *corev1.Pod) (runner.Outcome, bool, error) {
	a := loop.Status.Action
	switch {
	case p == nil || string(p.UID) != a.PodUID && a.PodUID != "" || !p.DeletionTimestamp.IsZero() || ended(p):
		// The runner Pod is gone, and the step with it: run it again in
		// the next one.
		r.drop(key)
		return runner.Outcome{State: runner.Lost}, true, nil
	case r.stale(loop, p):
		// Made under another operator key: it cannot be talked to, so
		// it goes, and the step runs again in the next runner.
		r.drop(key)
		return runner.Outcome{State: runner.Lost}, true, client.IgnoreNotFound(r.Pods.Client.Delete(ctx, p))
	case !ready(p):
		out, giveUp := pod.Inspect(p, r.Pods.Clock(), r.Pods.StartAllowance())
		if giveUp {
			if err := r.Pods.Client.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
				return runner.Outcome{}, true, err
			}
		}
		if out.State == runner.Running {
			out.RecheckAfter = startingRecheck
		}
		return out, true, nil
	}
	return runner.Outcome{}, false, nil
}

// overdue fails a step that ran well past its timeout (the wrapper did not
// end it) or whose runner has not answered for too long: its Pod goes, so
// nothing of the step runs on.
func (r *Runner) overdue(ctx context.Context, loop *v1alpha1.Loop, key string, p *corev1.Pod, unreachable time.Time) (runner.Outcome, bool, error) {
	a := loop.Status.Action
	var res executor.ActionResult
	limit := r.unreachableLimit()
	switch {
	case a.StartedAt != nil && a.TimeoutSeconds > 0 && r.Pods.Clock().Sub(a.StartedAt.Time) > time.Duration(a.TimeoutSeconds)*time.Second+overrun:
		res = runner.Failure("DeadlineExceeded", "the step ran %s past its timeout; its runner Pod %s was deleted", overrun, p.Name)
		res.ExitCode = evaluate.ExitTimeout
	case !unreachable.IsZero() && time.Since(unreachable) > limit:
		res = runner.TransientFailure(ReasonRunnerUnreachable,
			"the operator could not reach runner Pod %s at %s for %s (a NetworkPolicy that keeps the operator out?)", p.Name, r.addr(p), limit)
	default:
		return runner.Outcome{}, false, nil
	}
	if err := r.Pods.Client.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
		return runner.Outcome{}, true, err
	}
	r.drop(key)
	return runner.Outcome{State: runner.Done, Result: res}, true, nil
}

func (r *Runner) unreachableLimit() time.Duration {
	return cmp.Or(r.UnreachableAfter, unreachableAfter)
}

// follow hands a step over (step set) or asks for it (nil), then follows
// it in the background until it ends; its end wakes the Loop.
func (r *Runner) follow(loop *v1alpha1.Loop, key string, iteration int32, c *handoff.Client, id string, step *handoff.Step) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.polls[key]; ok {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	pl := &poll{owner: client.ObjectKeyFromObject(loop), iter: iteration, client: c, id: id, cancel: cancel}
	r.polls[key] = pl
	go r.wait(ctx, key, pl, step)
}

// wait hands a step over (or asks for it), then polls it until it ends,
// and wakes its Loop with what it found.
func (r *Runner) wait(ctx context.Context, key string, pl *poll, step *handoff.Step) {
	defer pl.cancel()
	backoff := 20 * time.Millisecond
	var st handoff.Status
	var err error
	first := true
	for ctx.Err() == nil {
		switch {
		case first && step != nil:
			st, err = pl.client.Hand(ctx, pl.id, *step)
		case first:
			st, err = pl.client.Wait(ctx, pl.id, 0)
		default:
			st, err = pl.client.Wait(ctx, pl.id, pollWait)
		}
		var ae *handoff.AnswerError
		switch {
		case errors.As(err, &ae) && ae.Code == http.StatusNotFound && first && step == nil:
			r.end(key, pl, runner.Outcome{State: runner.NotStarted})
			return
		case errors.As(err, &ae):
			res := runner.Failure(ReasonRunnerRefused, "%v", err)
			r.end(key, pl, runner.Outcome{State: runner.Done, Result: res})
			return
		case err != nil:
			// Unreachable: not listening yet, or gone (the Pod's watch
			// wakes the Loop then); Check gives up after a while.
			r.mu.Lock()
			if pl.unreachable.IsZero() {
				pl.unreachable = time.Now()
			}
			r.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		first = false
		backoff = 20 * time.Millisecond
		r.mu.Lock()
		pl.unreachable = time.Time{}
		r.mu.Unlock()
		if st.Phase != handoff.Running {
			r.end(key, pl, outcome(st))
			return
		}
	}
}

// end keeps a poll's outcome and wakes its Loop, unless the poll was
// dropped meanwhile.
func (r *Runner) end(key string, pl *poll, out runner.Outcome) {
	r.mu.Lock()
	wanted := r.polls[key] == pl
	pl.done, pl.out = true, out
	r.mu.Unlock()
	if wanted {
		r.events <- runner.WakeOf(pl.owner)
	}
}

// outcome is a step's end as the reconciler takes it.
func outcome(st handoff.Status) runner.Outcome {
	switch {
	case st.Phase == handoff.Lost:
		return runner.Outcome{State: runner.Lost}
	case len(st.Result) > 0:
		res, err := entrypoint.Decode(string(st.Result))
		if err == nil {
			return runner.Outcome{State: runner.Done, Result: res}
		}
		st.NoResult = err.Error()
	}
	res := runner.TransientFailure(pod.ReasonNoResult, "%s", st.NoResult)
	res.ExitCode = st.ExitCode
	return runner.Outcome{State: runner.Done, Result: res}
}

// Release implements runner.Runner: the runner is told its result was
// kept, so it may idle out.
func (r *Runner) Release(loop *v1alpha1.Loop, iteration int32) {
	r.Pods.Release(loop, iteration)
	r.mu.Lock()
	defer r.mu.Unlock()
	prefix := string(loop.UID) + "/"
	for k, pl := range r.polls {
		if strings.HasPrefix(k, prefix) && pl.iter == iteration && pl.done && pl.out.State == runner.Done {
			delete(r.polls, k)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), handTimeout)
				defer cancel()
				_ = pl.client.Collected(ctx, pl.id)
			}()
		}
	}
}

// Cancel implements runner.Runner: a warm step is stopped in its runner
// (its Pod deleted when the runner cannot be told).
func (r *Runner) Cancel(ctx context.Context, loop *v1alpha1.Loop) error {
	a := loop.Status.Action
	if a == nil || a.Step == "" {
		return r.Pods.Cancel(ctx, loop)
	}
	r.drop(pollKey(loop.UID, a.Pod, a.Step))
	p, err := r.Pods.Get(ctx, types.NamespacedName{Namespace: loop.Namespace, Name: a.Pod})
	if err != nil || p == nil || !ready(p) {
		return err
	}
	hctx, cancel := context.WithTimeout(ctx, handTimeout)
	defer cancel()
	if err := r.client(loop, p).Cancel(hctx, a.Step); err != nil {
		var ae *handoff.AnswerError
		if errors.As(err, &ae) && ae.Code == http.StatusNotFound {
			return nil
		}
		if err := r.Pods.Client.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete runner Pod %s: %w", p.Name, err)
		}
	}
	return nil
}

// Prune implements runner.Runner: step Pods as the Pod runner prunes them;
// the runner Pods of other runs are deleted; the run's own is asked to end
// once the run ended (its Pod stays, with its log, as finished step Pods
// do).
func (r *Runner) Prune(ctx context.Context, loop *v1alpha1.Loop) error {
	err := r.Pods.Prune(ctx, loop)
	list := &corev1.PodList{}
	if lerr := r.Pods.Client.List(ctx, list, client.InNamespace(loop.Namespace), client.MatchingLabels{
		v1alpha1.LabelLoop: v1alpha1.LabelValue(loop.Name), v1alpha1.LabelRunner: pod.WarmLabelValue}); lerr != nil {
		return errors.Join(err, fmt.Errorf("list runner Pods: %w", lerr))
	}
	finished := loop.Status.Phase.IsFinished()
	for i := range list.Items {
		p := &list.Items[i]
		switch {
		case !ownedBy(p, loop.UID) || !p.DeletionTimestamp.IsZero():
		case p.Labels[v1alpha1.LabelRun] != v1alpha1.LabelValue(loop.Status.RunID):
			if err2 := r.Pods.Client.Delete(ctx, p); client.IgnoreNotFound(err2) != nil {
				err = errors.Join(err, fmt.Errorf("delete runner Pod %s: %w", p.Name, err2))
			}
		case finished && ready(p):
			r.endRunner(loop, p)
		}
	}
	return err
}

// endRunner asks a runner Pod to end, in the background; one that cannot
// be told is deleted.
func (r *Runner) endRunner(loop *v1alpha1.Loop, p *corev1.Pod) {
	c, pod := r.client(loop, p), p.DeepCopy()
	last := handoff.StepID(loop.Status.RunID, loop.Status.Iteration, 0)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), handTimeout)
		defer cancel()
		if err := c.Exit(ctx, last); err != nil {
			_ = r.Pods.Client.Delete(context.Background(), pod)
		}
	}()
}

// Hook implements runner.Runner: exit hooks, clones and pushes run in Pods.
func (r *Runner) Hook(ctx context.Context, loop *v1alpha1.Loop, a executor.Action, started bool) (runner.Outcome, string, error) {
	return r.Pods.Hook(ctx, loop, a, started)
}

// Workspace implements runner.Runner.
func (r *Runner) Workspace(ctx context.Context, loop *v1alpha1.Loop) error {
	return r.Pods.Workspace(ctx, loop)
}

// Forget implements runner.Runner.
func (r *Runner) Forget(key types.NamespacedName) {
	r.Pods.Forget(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, pl := range r.polls {
		if pl.owner == key {
			if pl.cancel != nil {
				pl.cancel()
			}
			delete(r.polls, k)
		}
	}
}

// Wakes implements runner.Background: the Pods' changes, and the ends of
// warm steps.
func (r *Runner) Wakes() runner.Wake {
	w := r.Pods.Wakes()
	w.Channel = r.events
	return w
}

func (r *Runner) drop(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pl, ok := r.polls[key]; ok {
		if pl.cancel != nil {
			pl.cancel()
		}
		delete(r.polls, key)
	}
}

// runnerPod is the run's live runner Pod, made (with its key's Secret)
// when there is none.
func (r *Runner) runnerPod(ctx context.Context, loop *v1alpha1.Loop) (*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := r.Pods.Client.List(ctx, list, client.InNamespace(loop.Namespace), client.MatchingLabels{
		v1alpha1.LabelLoop: v1alpha1.LabelValue(loop.Name), v1alpha1.LabelRun: v1alpha1.LabelValue(loop.Status.RunID),
		v1alpha1.LabelRunner: pod.WarmLabelValue}); err != nil {
		return nil, fmt.Errorf("list runner Pods: %w", err)
	}
	var live *corev1.Pod
	last := 0
	for i := range list.Items {
		p := &list.Items[i]
		if !ownedBy(p, loop.UID) {
			continue
		}
		gen, _ := strconv.Atoi(p.Labels[pod.LabelWarmGeneration])
		last = max(last, gen)
		if !p.DeletionTimestamp.IsZero() || ended(p) {
			continue
		}
		if r.stale(loop, p) {
			if err := r.Pods.Client.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
				return nil, fmt.Errorf("delete runner Pod %s of another key: %w", p.Name, err)
			}
			continue
		}
		if live == nil || gen > generation(live) {
			live = p
		}
	}
	if live != nil {
		return live, nil
	}
	if err := r.Pods.Prepare(ctx, loop); err != nil {
		return nil, err
	}
	name := pod.WarmName(loop.Name, loop.Status.RunID, last+1)
	loopKey := r.LoopKey(loop.UID)
	fingerprint := Fingerprint(loopKey)
	keyName := pod.WarmKeySecret(loop.Name, fingerprint)
	p, err := pod.BuildWarm(loop, loop.Status.RunID, last+1, keyName, fingerprint, r.Pods.Options)
	if err != nil {
		return nil, err
	}
	// The Loop's key, made with its first runner Pod (made again if it
	// went); the operator never reads Secrets: it derives the key.
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: keyName, Namespace: loop.Namespace, Labels: v1alpha1.ChildLabels(loop)},
		Data:       map[string][]byte{pod.WarmKeyName: []byte(hex.EncodeToString(loopKey))},
	}
	secret.Labels[v1alpha1.LabelRunner] = pod.WarmLabelValue
	if err := controllerutil.SetControllerReference(loop, secret, r.Pods.Client.Scheme()); err != nil {
		return nil, err
	}
	if err := r.Pods.Client.Create(ctx, secret); client.IgnoreAlreadyExists(err) != nil {
		return nil, fmt.Errorf("create the runner key %s: %w", keyName, err)
	}
	if err := r.Pods.Client.Create(ctx, p); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create runner Pod %s: %w", name, err)
		}
		existing, err := r.Pods.Get(ctx, client.ObjectKeyFromObject(p))
		if err != nil {
			return nil, fmt.Errorf("adopt runner Pod %s: %w", name, err)
		}
		if existing == nil {
			return nil, fmt.Errorf("adopt runner Pod %s: gone", name)
		}
		if !ownedBy(existing, loop.UID) {
			return nil, &runner.Refused{Reason: "PodNameTaken", Message: fmt.Sprintf("Pod %s exists and does not belong to this Loop", name)}
		}
		return existing, nil
	}
	return p, nil
}

func (r *Runner) client(loop *v1alpha1.Loop, p *corev1.Pod) *handoff.Client {
	return &handoff.Client{Addr: r.addr(p), Key: r.LoopKey(loop.UID), HTTP: r.HTTP}
}

func (r *Runner) addr(p *corev1.Pod) string {
	if r.Addr != nil {
		return r.Addr(p)
	}
	return net.JoinHostPort(p.Status.PodIP, strconv.Itoa(handoff.Port))
}

func pollKey(loopUID types.UID, podName, step string) string {
	return string(loopUID) + "/" + podName + "/" + step
}

// ready says whether a runner Pod's runner runs and has an address.
func ready(p *corev1.Pod) bool {
	if p.Status.PodIP == "" || !p.DeletionTimestamp.IsZero() {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == pod.ActionContainer {
			return cs.State.Running != nil
		}
	}
	return false
}

// ended says whether a runner Pod is done for (idled out, failed).
func ended(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func generation(p *corev1.Pod) int {
	g, _ := strconv.Atoi(p.Labels[pod.LabelWarmGeneration])
	return g
}

func ownedBy(obj metav1.Object, uid types.UID) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == uid
}
