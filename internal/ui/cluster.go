package ui

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/approval"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/runner/warm/handoff"
)

// Cluster is where the view finds Loops in a cluster: a client with the
// viewer's own credentials (their kubeconfig), so that they see what
// their RBAC lets them see.
type Cluster struct {
	Client client.WithWatch
	// Namespace limits the list to one namespace ("": all the viewer may list).
	Namespace string
	// Pods, when set, reads the logs of the Loops' action Pods (a state's
	// panel shows its last Pod's log), as the viewer too.
	Pods kubernetes.Interface
}

func (c *Cluster) list(ctx context.Context) ([]Summary, error) {
	var loops v1alpha1.LoopList
	if err := c.Client.List(ctx, &loops, client.InNamespace(c.Namespace)); err != nil {
		return nil, fmt.Errorf("the cluster's Loops: %w", err)
	}
	out := make([]Summary, 0, len(loops.Items))
	for i := range loops.Items {
		out = append(out, clusterSummary(&loops.Items[i]))
	}
	return out, nil
}

func clusterSummary(l *v1alpha1.Loop) Summary {
	sm := summary(l.Name, &l.Status.RunState)
	sm.Source, sm.Namespace = "cluster", l.Namespace
	if sm.Phase == "" {
		sm.Phase = string(v1alpha1.PhasePending)
	}
	return sm
}

// openCluster reads a Loop and what its event log (its ConfigMaps) says,
// as the viewer: the log is followed from the segment and event read last,
// so that a page of a long run reads a segment or two, not the whole log. A
// Loop made again under its name, a new run, a log that went back or a
// rewind not read before is read again from its start (what a rewind
// abandoned left out).
func (s *Server) openCluster(ctx context.Context, ns, name string) (*v1alpha1.Loop, digested, error) {
	loop := &v1alpha1.Loop{}
	if err := s.Cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, loop); err != nil {
		return nil, digested{}, err
	}
	f := s.follower("cluster/" + ns + "/" + name)
	f.mu.Lock()
	defer f.mu.Unlock()
	st := loop.Status.EventLog
	if f.d == nil || f.uid != loop.UID || f.runID != loop.Status.RunID || st == nil || st.LastSeq < f.d.lastSeq {
		f.d, f.uid, f.runID, f.segment = newDigester(), loop.UID, loop.Status.RunID, 0
	}
	evs, seg, err := configmaps.ReadSince(ctx, s.Cluster.Client, loop, f.segment, f.d.lastSeq)
	if err != nil {
		f.d = nil
		return nil, digested{}, err
	}
	for _, e := range evs {
		f.d.add(e)
	}
	if f.d.stale { // a rewind not known: the log again, without what it abandoned
		f.d = f.d.reread()
		if evs, seg, err = configmaps.ReadSince(ctx, s.Cluster.Client, loop, 0, 0); err != nil {
			f.d = nil
			return nil, digested{}, err
		}
		for _, e := range evs {
			f.d.add(e)
		}
	}
	f.segment = seg
	return loop, f.d.digested(), nil
}

func (s *Server) clusterDetail(w http.ResponseWriter, r *http.Request) {
	loop, dg, err := s.openCluster(r.Context(), r.PathValue("ns"), r.PathValue("name"))
	if err != nil {
		clusterError(w, err)
		return
	}
	d := s.describeRun(&loop.Spec, &loop.Status.RunState, clusterSummary(loop), dg)
	if d.Approval != nil {
		d.Approval.Command = fmt.Sprintf("looprun approve loop/%s -n %s   (or: looprun reject loop/%s -n %s)",
			loop.Name, loop.Namespace, loop.Name, loop.Namespace)
		d.Approval.Who = "whoever holds the verb approve (and patch) on this Loop, as the looprun-approver ClusterRole grants it"
		may, err := approval.MayAnswer(r.Context(), s.Cluster.Client, loop.Namespace, loop.Name)
		switch {
		case err != nil:
			d.Approval.Who += fmt.Sprintf("; whether you do could not be asked (%v)", err)
		case may:
			d.Approval.Who += "; you do"
			d.Approval.CanAnswer = answerableFrom(r) == nil
		default:
			d.Approval.Who += "; you do not"
		}
	}
	writeJSON(w, d)
}

// clusterAnswer approves or rejects what the Loop waits for, as the viewer
// (their credentials: the API server and the admission policy decide).
func (s *Server) clusterAnswer(w http.ResponseWriter, r *http.Request) {
	req, err := readAnswer(w, r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	loop := &v1alpha1.Loop{}
	if err := s.Cluster.Client.Get(r.Context(), client.ObjectKey{Namespace: r.PathValue("ns"), Name: r.PathValue("name")}, loop); err != nil {
		clusterError(w, err)
		return
	}
	a, err := approval.Answer(r.Context(), s.Cluster.Client, loop, req.Approve, req.Message, req.target(), s.now())
	if errors.Is(err, approval.ErrNotWaiting) || errors.Is(err, approval.ErrStale) || errors.Is(err, approval.ErrAnswered) {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	if err != nil {
		clusterError(w, err)
		return
	}
	writeJSON(w, Answered{State: a.State, Iteration: a.Iteration, Approved: req.Approve})
}

// PodLog is the action Pod a state ran last, and the end of its log.
type PodLog struct {
	Pod       string `json:"pod,omitempty"`
	Phase     string `json:"phase,omitempty"`
	Iteration int    `json:"iteration,omitempty"`
	Log       string `json:"log,omitempty"`
	// Problem says why there is no Pod or no log (the actions run in the
	// operator, the Pod was pruned, RBAC refused the log).
	Problem string `json:"problem,omitempty"`
}

// podLogTail bounds the log a state's panel shows.
const podLogTail = 64 << 10

// clusterPodLog is the Pod a state's action ran in last, and its log's
// tail, read as the viewer.
func (s *Server) clusterPodLog(w http.ResponseWriter, r *http.Request) {
	ns, name, state := r.PathValue("ns"), r.PathValue("name"), r.PathValue("state")
	var pods corev1.PodList
	if err := s.Cluster.Client.List(r.Context(), &pods, client.InNamespace(ns),
		client.MatchingLabels{v1alpha1.LabelLoop: v1alpha1.LabelValue(name)}); err != nil {
		clusterError(w, err)
		return
	}
	var last *corev1.Pod
	lastIt, lastRetry := -1, -1
	var runners []*corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Labels[v1alpha1.LabelRunner] != "" && controlledBy(p, name) {
			runners = append(runners, p)
			continue
		}
		if v1alpha1.StateOf(p.Labels, p.Annotations) != state || !controlledBy(p, name) {
			continue
		}
		it, _ := strconv.Atoi(p.Labels[v1alpha1.LabelIteration])
		retry, _ := strconv.Atoi(p.Labels[v1alpha1.LabelRetry])
		if it > lastIt || it == lastIt && retry > lastRetry {
			last, lastIt, lastRetry = p, it, retry
		}
	}
	if out, ok := s.warmStepLog(r, ns, state, runners, lastIt); ok {
		writeJSON(w, out)
		return
	}
	if last == nil {
		writeJSON(w, PodLog{Problem: "no action Pod of this state is left (the actions may run in the operator, or history.keepPods pruned it)"})
		return
	}
	out := PodLog{Pod: last.Name, Phase: string(last.Status.Phase), Iteration: lastIt}
	limit := int64(podLogTail)
	raw, err := s.Cluster.Pods.CoreV1().Pods(ns).GetLogs(last.Name,
		&corev1.PodLogOptions{Container: v1alpha1.ActionContainerName, LimitBytes: &limit}).Do(r.Context()).Raw()
	if err != nil {
		out.Problem = fmt.Sprintf("its log could not be read: %v", err)
	}
	out.Log = strings.ToValidUTF8(string(raw), "\uFFFD")
	writeJSON(w, out)
}

// runnerLogLines bounds the lines of a warm runner's log read for a
// state's panel (its newest).
const runnerLogLines = 20000

// warmStepLog is the last step of state in a warm runner Pod's log when it
// is newer than iteration (the state's last step Pod's), as the viewer
// reads it.
func (s *Server) warmStepLog(r *http.Request, ns, state string, runners []*corev1.Pod, iteration int) (PodLog, bool) {
	return lastWarmStep(state, iteration, runners, func(p *corev1.Pod) ([]byte, error) {
		tail := int64(runnerLogLines)
		return s.Cluster.Pods.CoreV1().Pods(ns).GetLogs(p.Name,
			&corev1.PodLogOptions{Container: v1alpha1.ActionContainerName, TailLines: &tail}).Do(r.Context()).Raw()
	})
}

// lastWarmStep is the last step of state, after iteration, in the logs of
// runner Pods read by read.
func lastWarmStep(state string, iteration int, runners []*corev1.Pod, read func(*corev1.Pod) ([]byte, error)) (PodLog, bool) {
	var out PodLog
	found := false
	for _, p := range runners {
		raw, err := read(p)
		if err != nil {
			continue
		}
		for _, st := range handoff.ParseLog(bytes.NewReader(raw)) {
			if st.State != state || int(st.Iteration) <= iteration {
				continue
			}
			log := st.Output
			if len(log) > podLogTail {
				log = log[len(log)-podLogTail:]
			}
			iteration, found = int(st.Iteration), true
			out = PodLog{Pod: p.Name + " (step " + st.ID + ")", Phase: string(p.Status.Phase), Iteration: iteration,
				Log: strings.ToValidUTF8(log, "\uFFFD")}
		}
	}
	return out, found
}

// controlledBy says whether the Loop named name owns p.
func controlledBy(p *corev1.Pod, name string) bool {
	ref := metav1.GetControllerOf(p)
	return ref != nil && ref.Kind == "Loop" && ref.Name == name
}

func (s *Server) clusterTimeline(w http.ResponseWriter, r *http.Request) {
	_, dg, err := s.openCluster(r.Context(), r.PathValue("ns"), r.PathValue("name"))
	if err != nil {
		clusterError(w, err)
		return
	}
	writeJSON(w, pageOf(dg.visits, r))
}

// clusterStream sends "update" each time the Loop changes, from a watch on
// it (as the viewer).
func (s *Server) clusterStream(w http.ResponseWriter, r *http.Request) {
	events, ok := newEventStream(w)
	if !ok {
		return
	}
	done, ok := s.openStream(w)
	if !ok {
		return
	}
	defer done()
	ns, name := r.PathValue("ns"), r.PathValue("name")
	watch, err := s.Cluster.Client.Watch(r.Context(), &v1alpha1.LoopList{}, client.InNamespace(ns),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)})
	if err != nil {
		clusterError(w, err)
		return
	}
	defer watch.Stop()
	events.open()
	keepAlive := time.NewTicker(keepAliveEvery)
	defer keepAlive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev, ok := <-watch.ResultChan():
			if !ok {
				return // the client reconnects
			}
			loop, isLoop := ev.Object.(*v1alpha1.Loop)
			if !isLoop {
				continue
			}
			hook := ""
			if h := loop.Status.ExitHook; h != nil {
				hook = string(h.Phase)
			}
			if !events.update(loop.Status.LastSeq, loop.Status.Phase, loop.Status.CurrentState, hook) {
				return
			}
		case <-keepAlive.C:
			if !events.keepAlive() {
				return
			}
		}
	}
}

// clusterError answers with the API server's status: a viewer who may not
// read a Loop is told so (403), a Loop that is not there is a 404.
func clusterError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Code != 0 {
		code = int(st.Status().Code)
	}
	http.Error(w, err.Error(), code)
}
