package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
)

// Cluster is where the view finds Loops in a cluster: a client with the
// viewer's own credentials (their kubeconfig), so that they see what
// their RBAC lets them see.
type Cluster struct {
	Client client.WithWatch
	// Namespace limits the list to one namespace ("": all the viewer may list).
	Namespace string
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

// open reads a Loop and its event log (its ConfigMaps), as the viewer.
func (c *Cluster) open(ctx context.Context, ns, name string) (*v1alpha1.Loop, digested, error) {
	loop := &v1alpha1.Loop{}
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, loop); err != nil {
		return nil, digested{}, err
	}
	evs, err := configmaps.Read(ctx, c.Client, loop)
	if err != nil {
		return nil, digested{}, err
	}
	d := newDigester()
	for _, e := range evs {
		d.add(e)
	}
	return loop, digested{visits: d.snapshot(), last: d.last, entered: d.entered}, nil
}

func (s *Server) clusterDetail(w http.ResponseWriter, r *http.Request) {
	loop, dg, err := s.Cluster.open(r.Context(), r.PathValue("ns"), r.PathValue("name"))
	if err != nil {
		clusterError(w, err)
		return
	}
	d := s.describeRun(&loop.Spec, &loop.Status.RunState, clusterSummary(loop), dg)
	if d.Approval != nil {
		d.Approval.Command = fmt.Sprintf("looprun approve loop/%s -n %s   (or: looprun reject loop/%s -n %s; it needs the approve verb on the Loop)",
			loop.Name, loop.Namespace, loop.Name, loop.Namespace)
	}
	writeJSON(w, d)
}

func (s *Server) clusterTimeline(w http.ResponseWriter, r *http.Request) {
	_, dg, err := s.Cluster.open(r.Context(), r.PathValue("ns"), r.PathValue("name"))
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
			if isLoop && !events.update(loop.Status.LastSeq, loop.Status.Phase, loop.Status.CurrentState) {
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
