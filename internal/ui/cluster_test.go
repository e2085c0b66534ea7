package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/internal/eventlog/configmaps"
	"github.com/looprun/looprun/internal/executor"
	"github.com/looprun/looprun/test/fixture"
)

// shared is the API server (and etcd) the cluster tests share, started by
// the first of them and stopped by TestMain.
var shared struct {
	once sync.Once
	cfg  *rest.Config
	c    client.Client
	stop func()
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.stop != nil {
		shared.stop()
	}
	os.Exit(code)
}

// cluster is the shared API server, an admin client, and a namespace of
// the test's own.
func cluster(t *testing.T) (*rest.Config, client.Client, string) {
	t.Helper()
	shared.once.Do(func() { shared.cfg, shared.c, shared.stop, shared.err = fixture.StartEnv(true) })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ui-"}}
	if err := shared.c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return shared.cfg, shared.c, ns.Name
}

// viewerOf is a client with cfg's credentials, the viewer's.
func viewerOf(t *testing.T, cfg *rest.Config) client.WithWatch {
	t.Helper()
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: fixture.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// serveCluster serves the view of c (and no local runs) for the test.
func serveCluster(t *testing.T, c *Cluster) *httptest.Server {
	srv := httptest.NewServer((&Server{LoopsDir: t.TempDir(), Cluster: c}).Handler())
	t.Cleanup(srv.Close)
	return srv
}

// A Loop of a cluster, read as the viewer: its page from its status and
// its event log's ConfigMaps, live from a watch; a viewer without rights is
// told so.
func TestClusterLoops(t *testing.T) {
	cfg, c, ns := cluster(t)
	ctx := context.Background()
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fix"}, Spec: v1alpha1.LoopSpec{Initial: "check",
		States: map[string]v1alpha1.State{
			"check": {Action: "make test", OnSuccess: "done", OnFailure: "fix"},
			"fix":   {Action: "fix it", ActionType: v1alpha1.ActionAgent, Next: "check"},
			"sub":   {Loop: "child", Next: "done"},
			"done":  {Terminal: true},
		}}}
	if err := c.Create(ctx, loop); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Minute)
	ev := func(seq int64, typ string, data map[string]any) executor.Event {
		return executor.Event{Seq: seq, Type: typ, Time: t0.Add(time.Duration(seq) * time.Second), Data: data}
	}
	evs := []executor.Event{
		ev(1, executor.EventLoopStart, map[string]any{"loop": "fix"}),
		ev(2, executor.EventStateEnter, map[string]any{"state": "check", "iteration": 1}),
		ev(3, executor.EventActionComplete, map[string]any{"exit_code": 2, "output_preview": "FAIL: TestX"}),
		ev(4, executor.EventEvaluate, map[string]any{"type": "exit_code", "verdict": "failure"}),
		ev(5, executor.EventRoute, map[string]any{"from": "check", "to": "fix", "verdict": "failure"}),
		ev(6, executor.EventStateEnter, map[string]any{"state": "fix", "iteration": 2}),
		ev(7, executor.EventRoute, map[string]any{"from": "fix", "to": "sub"}),
		ev(8, executor.EventStateEnter, map[string]any{"state": "sub", "iteration": 3}),
		ev(9, executor.EventSubLoopStart, map[string]any{"state": "sub", "loop": "child", "child": "fix-sub-1a2b3c4d"}),
	}
	log := &configmaps.Log{Client: c, Reader: c, Scheme: c.Scheme()}
	if err := log.Append(ctx, loop, evs, nil); err != nil {
		t.Fatal(err)
	}
	started := metav1.NewTime(t0)
	loop.Status.RunState = v1alpha1.RunState{RunID: "r1", Phase: v1alpha1.PhaseRunning, CurrentState: "sub", Iteration: 3, LastSeq: 9,
		StartedAt: &started, EdgeRevisits: map[string]int32{"check->fix": 1}}
	if err := c.Status().Update(ctx, loop); err != nil {
		t.Fatal(err)
	}

	srv := serveCluster(t, &Cluster{Client: viewerOf(t, cfg), Namespace: ns}) // the other tests' Loops are elsewhere

	var list List
	get(t, srv, "/api/loops", &list)
	if len(list.Loops) != 1 || list.Loops[0].Source != "cluster" || list.Loops[0].Namespace != ns || list.Loops[0].State != "sub" {
		t.Fatalf("list %+v", list)
	}
	base := "/api/loops/cluster/" + ns + "/fix"
	var d Detail
	get(t, srv, base, &d)
	if d.State != "sub" || d.Iteration != 3 || len(d.Nodes) != 4 || d.States["check"].Output != "FAIL: TestX" || d.States["check"].Verdict != "failure" {
		t.Fatalf("detail %+v", d)
	}
	// A sub-loop state links the child it started.
	if d.States["sub"].Child != "fix-sub-1a2b3c4d" {
		t.Fatalf("the sub-loop state's child: %+v", d.States["sub"])
	}
	var p Page
	get(t, srv, base+"/timeline", &p)
	if p.Total != 3 || p.Visits[0].State != "sub" || p.Visits[1].Next != "sub" || p.Visits[2].Next != "fix" {
		t.Fatalf("timeline %+v", p)
	}

	// Live: the Loop moves on, the stream says so.
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(sctx, http.MethodGet, srv.URL+base+"/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	updates := updatesOf(resp.Body)
	waitFor(t, updates, func(m map[string]any) bool { return m["state"] == "sub" }) // the watch's first event
	loop.Status.CurrentState, loop.Status.Iteration, loop.Status.LastSeq = "check", 4, 12
	if err := c.Status().Update(ctx, loop); err != nil {
		t.Fatal(err)
	}
	waitFor(t, updates, func(m map[string]any) bool { return m["state"] == "check" && m["lastSeq"] == float64(12) })

	// A viewer the cluster does not let read Loops is told so.
	nobody := rest.CopyConfig(cfg)
	nobody.Impersonate = rest.ImpersonationConfig{UserName: "nobody"}
	srv2 := serveCluster(t, &Cluster{Client: viewerOf(t, nobody)})
	var none List
	get(t, srv2, "/api/loops", &none)
	if len(none.Loops) != 0 || len(none.Problems) != 1 || !strings.Contains(none.Problems[0], "forbidden") {
		t.Fatalf("a viewer without rights: %+v", none)
	}
	if code := get(t, srv2, base, nil); code != http.StatusForbidden {
		t.Fatalf("a viewer without rights got %d", code)
	}
}

// A Loop waiting for an approval: a viewer who holds the verb approve is
// told so and answers on the page (the request names them, as looprun
// approve's does); one who may only read sees who may and the command, and
// is refused by the API server. A state's panel names the Pod it ran in
// last (its log needs a kubelet: test/e2e reads it).
func TestClusterApprovalAndPod(t *testing.T) {
	cfg, c, ns := cluster(t)
	ctx := context.Background()
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ship"}, Spec: v1alpha1.LoopSpec{Initial: "build",
		States: map[string]v1alpha1.State{
			"build": {Action: "make", Next: "ask"},
			"ask":   {Approval: &v1alpha1.Approval{Message: "ship it?"}, OnSuccess: "done", OnFailure: "done"},
			"done":  {Terminal: true},
		}}}
	if err := c.Create(ctx, loop); err != nil {
		t.Fatal(err)
	}
	loop.Status.RunState = v1alpha1.RunState{RunID: "r1", Phase: v1alpha1.PhaseRunning, CurrentState: "ask", Iteration: 2, LastSeq: 0,
		Action: &v1alpha1.ActionStatus{State: "ask", Iteration: 2, Approval: &v1alpha1.ApprovalWait{Message: "ship it?"}}}
	if err := c.Status().Update(ctx, loop); err != nil {
		t.Fatal(err)
	}
	long := "build-" + strings.Repeat("x", 70) // a state too long for a label value: its name is in an annotation
	for i, p := range []struct{ name, state, retry string }{
		{"ship-r1-1-0", "build", "0"}, {"ship-r1-1-1", "build", "1"}, // the state's Pods: the retry is the last
		{"ship-r1-2-0", long, "0"},
	} {
		labels := map[string]string{v1alpha1.LabelLoop: "ship", v1alpha1.LabelIteration: "1", v1alpha1.LabelRetry: p.retry,
			v1alpha1.LabelState: v1alpha1.LabelValue(p.state)}
		var annotations map[string]string
		if labels[v1alpha1.LabelState] != p.state {
			annotations = map[string]string{v1alpha1.AnnotationState: p.state}
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.name, Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Loop", Name: "ship", UID: loop.UID, Controller: ptr(true)}}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: v1alpha1.ActionContainerName, Image: "busybox"}}}}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(i, err)
		}
	}

	// A reader: get, list and watch on Loops and ConfigMaps, nothing else.
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reader"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"loops"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps", "pods", "pods/log"}, Verbs: []string{"get", "list"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "reader"}}}
	for _, o := range []client.Object{role, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	serve := func(cfg *rest.Config) *httptest.Server {
		pods, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return serveCluster(t, &Cluster{Client: viewerOf(t, cfg), Pods: pods})
	}
	base := "/api/loops/cluster/" + ns + "/ship"

	readerCfg := rest.CopyConfig(cfg)
	readerCfg.Impersonate = rest.ImpersonationConfig{UserName: "reader"}
	reader := serve(readerCfg)
	var d Detail
	get(t, reader, base, &d)
	if a := d.Approval; a == nil || a.CanAnswer || !strings.Contains(a.Who, "verb approve") || !strings.Contains(a.Who, "you do not") ||
		!strings.Contains(a.Command, "looprun approve loop/ship -n "+ns) {
		t.Fatalf("the reader's approval: %+v", d.Approval)
	}
	if code, body := post(t, reader.URL+base+"/approval", `{"approve": true}`, nil); code != http.StatusForbidden {
		t.Fatalf("the reader's answer: %d %s", code, body)
	}
	var pl PodLog
	get(t, reader, base+"/states/build/pod", &pl)
	if pl.Pod != "ship-r1-1-1" || pl.Iteration != 1 || pl.Phase != "Pending" {
		t.Fatalf("the build state's Pod: %+v", pl)
	}
	var longs PodLog
	get(t, reader, base+"/states/"+long+"/pod", &longs)
	if longs.Pod != "ship-r1-2-0" {
		t.Fatalf("the Pod of a state with a long name: %+v", longs)
	}
	var none PodLog
	get(t, reader, base+"/states/done/pod", &none)
	if none.Pod != "" || !strings.Contains(none.Problem, "no action Pod") {
		t.Fatalf("a state with no Pod: %+v", none)
	}

	admin := serve(cfg)
	d = Detail{}
	get(t, admin, base, &d)
	if a := d.Approval; a == nil || !a.CanAnswer || !strings.Contains(a.Who, "you do") {
		t.Fatalf("the approver's approval: %+v", d.Approval)
	}
	// A page gone stale (another iteration, another run) answers nothing;
	// an answer naming no approval neither.
	a := d.Approval
	for _, stale := range []string{
		fmt.Sprintf(`{"approve": true, "run": %q, "state": %q, "iteration": %d}`, a.Run, a.State, a.Iteration-1),
		fmt.Sprintf(`{"approve": true, "run": "another-run", "state": %q, "iteration": %d}`, a.State, a.Iteration),
	} {
		if code, body := post(t, admin.URL+base+"/approval", stale, nil); code != http.StatusConflict || !strings.Contains(body, "no longer waits for that approval") {
			t.Fatalf("a stale page's answer %s: %d %s", stale, code, body)
		}
	}
	if code, body := post(t, admin.URL+base+"/approval", `{"approve": true}`, nil); code != http.StatusForbidden {
		t.Fatalf("an answer naming no approval: %d %s", code, body)
	}
	answer := fmt.Sprintf(`{"approve": true, "message": "green", "run": %q, "state": %q, "iteration": %d}`, a.Run, a.State, a.Iteration)
	code, body := post(t, admin.URL+base+"/approval", answer, nil)
	if code != http.StatusOK || !strings.Contains(body, `"state":"ask"`) {
		t.Fatalf("the approver's answer: %d %s", code, body)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(loop), loop); err != nil {
		t.Fatal(err)
	}
	named, ok := v1alpha1.ParseApprovalTarget(loop.Annotations[v1alpha1.RequestAnnotation])
	if req := loop.Annotations[v1alpha1.RequestAnnotation]; !strings.HasPrefix(req, v1alpha1.RequestApprove+":") || !ok ||
		named != (v1alpha1.ApprovalTarget{RunID: a.Run, State: a.State, Iteration: a.Iteration}) ||
		loop.Annotations[v1alpha1.ApprovedByAnnotation] == "" || loop.Annotations[v1alpha1.ApprovalMessageAnnotation] != "green" {
		t.Fatalf("the Loop's annotations after the answer: %v", loop.Annotations)
	}
	// A second answer before the operator took the first is refused, not
	// put in its place.
	if code, body := post(t, admin.URL+base+"/approval", strings.Replace(answer, "true", "false", 1), nil); code != http.StatusConflict || !strings.Contains(body, "was answered already") {
		t.Fatalf("a second answer: %d %s", code, body)
	}
}

func ptr[T any](v T) *T { return &v }

// A Loop that has not run (suspended before its first step) has a page:
// its graph, an empty timeline ([], not null: the page reads it).
func TestClusterLoopNotStarted(t *testing.T) {
	cfg, c, ns := cluster(t)
	ctx := context.Background()
	loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "later"}, Spec: v1alpha1.LoopSpec{Initial: "only", Suspend: true,
		States: map[string]v1alpha1.State{"only": {Terminal: true}}}}
	if err := c.Create(ctx, loop); err != nil {
		t.Fatal(err)
	}
	srv := serveCluster(t, &Cluster{Client: viewerOf(t, cfg)})
	base := "/api/loops/cluster/" + ns + "/later"
	for _, path := range []string{base, base + "/timeline"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var raw map[string]json.RawMessage
		err = json.NewDecoder(resp.Body).Decode(&raw)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %v", path, resp.StatusCode, err)
		}
		for _, key := range []string{"nodes", "edges", "states", "visits"} {
			if v, ok := raw[key]; ok && string(v) == "null" {
				t.Errorf("%s: %s is null", path, key)
			}
		}
	}
}

// countingReader counts the ConfigMaps a viewer's client reads.
type countingReader struct {
	client.WithWatch
	configMaps int
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.ConfigMap); ok {
		c.configMaps++
	}
	return c.WithWatch.Get(ctx, key, obj, opts...)
}

// A long Loop's page follows its event log: after the first read, a page
// reads the segment it read last and the new ones, not the whole log; a
// Loop made again under the same name is read from its start.
func TestClusterLogIsFollowed(t *testing.T) {
	cfg, c, ns := cluster(t)
	ctx := context.Background()
	spec := v1alpha1.LoopSpec{Initial: "a", States: map[string]v1alpha1.State{
		"a": {Action: "echo a", Next: "b"}, "b": {Action: "echo b", Next: "a", OnError: "done"}, "done": {Terminal: true}}}
	log := &configmaps.Log{Client: c, Reader: c, Scheme: c.Scheme(), SegmentBytes: 1024}
	var seq int64
	// steps appends n state visits (a, b, a, ...) to the Loop's log.
	steps := func(loop *v1alpha1.Loop, n int) {
		t.Helper()
		var evs []executor.Event
		for range n {
			state := []string{"a", "b"}[seq/3%2]
			it := seq/3 + 1
			evs = append(evs,
				executor.Event{Seq: seq + 1, Type: executor.EventStateEnter, Time: time.Now(), Data: map[string]any{"state": state, "iteration": it}},
				executor.Event{Seq: seq + 2, Type: executor.EventActionComplete, Time: time.Now(), Data: map[string]any{"exit_code": 0, "output_preview": fmt.Sprintf("step %d", it)}},
				executor.Event{Seq: seq + 3, Type: executor.EventRoute, Time: time.Now(), Data: map[string]any{"from": state, "to": map[string]string{"a": "b", "b": "a"}[state]}})
			seq += 3
		}
		if err := log.Append(ctx, loop, evs, nil); err != nil {
			t.Fatal(err)
		}
		loop.Status.RunState = v1alpha1.RunState{RunID: "r1", Phase: v1alpha1.PhaseRunning, CurrentState: "a", Iteration: int32(seq / 3), LastSeq: seq}
		if err := c.Status().Update(ctx, loop); err != nil {
			t.Fatal(err)
		}
	}
	create := func() *v1alpha1.Loop {
		loop := &v1alpha1.Loop{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "long"}, Spec: spec}
		if err := c.Create(ctx, loop); err != nil {
			t.Fatal(err)
		}
		return loop
	}
	loop := create()
	for range 60 { // a step an append, as the operator appends
		steps(loop, 1)
	}
	if loop.Status.EventLog.LastSegment < 5 {
		t.Fatalf("the log has too few segments to tell: %+v", loop.Status.EventLog)
	}

	viewer := &countingReader{WithWatch: viewerOf(t, cfg)}
	srv := serveCluster(t, &Cluster{Client: viewer})
	base := "/api/loops/cluster/" + ns + "/long"
	var d Detail
	get(t, srv, base, &d)
	if d.States["b"].Output != "step 60" || viewer.configMaps < int(loop.Status.EventLog.LastSegment) {
		t.Fatalf("first read: %d ConfigMaps, %+v", viewer.configMaps, d.States)
	}

	steps(loop, 1)
	steps(loop, 1)
	viewer.configMaps = 0
	var p Page
	get(t, srv, base+"/timeline", &p)
	if viewer.configMaps > 2 {
		t.Errorf("a page after two more steps read %d ConfigMaps", viewer.configMaps)
	}
	// 62 visits of a then b: the first pass and 30 more folded into it.
	if len(p.Visits) != 2 || p.Visits[0].Repeat != 30 || p.Visits[0].Period != 2 {
		t.Fatalf("the timeline after 62 steps: %+v", p.Visits)
	}
	get(t, srv, base, &d)
	if d.States["b"].Output != "step 62" {
		t.Fatalf("the last of b: %+v", d.States["b"])
	}

	// The same name, a new Loop: its own log only.
	if err := c.Delete(ctx, loop); err != nil {
		t.Fatal(err)
	}
	seq = 0
	loop = create()
	steps(loop, 1)
	p = Page{}
	get(t, srv, base+"/timeline", &p)
	if p.Total != 1 || p.Visits[0].Iteration != 1 {
		t.Fatalf("the new Loop's timeline: %+v", p)
	}
}
