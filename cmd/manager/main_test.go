package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/looprun/looprun/api/v1alpha1"
	"github.com/looprun/looprun/test/fixture"
)

func TestParseFlags(t *testing.T) {
	env := map[string]string{"LOOPRUN_ENTRYPOINT_IMAGE": "registry.example/looprun:v1", "POD_NAMESPACE": "looprun-system"}
	s, err := parseFlags([]string{"--watch-namespaces", " team-a,,team-b ", "--zap-log-level=debug"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.watchNamespaces, "|"); got != "team-a|team-b" {
		t.Errorf("watch namespaces = %q", got)
	}
	if s.reconciler.Pods.Images.Entrypoint != "registry.example/looprun:v1" {
		t.Errorf("entrypoint image = %q, want the one of $LOOPRUN_ENTRYPOINT_IMAGE", s.reconciler.Pods.Images.Entrypoint)
	}
	if s.reconciler.Pods.OperatorNamespace != "looprun-system" || s.reconciler.AllowLocalActions || !s.metricsSecure {
		t.Errorf("defaults: %+v, metrics secure %v", s.reconciler, s.metricsSecure)
	}
	o := s.options()
	if !o.LeaderElectionReleaseOnCancel {
		t.Error("the lease is not released on shutdown: a restarted operator would wait for it to expire")
	}
	if o.LeaderElectionID != "looprun-manager.looprun.io" {
		t.Errorf("lease %s", o.LeaderElectionID)
	}
	if *o.LeaseDuration != 15*time.Second || *o.RenewDeadline != 10*time.Second || *o.RetryPeriod != 2*time.Second {
		t.Errorf("leader election %s/%s/%s, want the defaults 15s/10s/2s", *o.LeaseDuration, *o.RenewDeadline, *o.RetryPeriod)
	}
	fast, err := parseFlags([]string{"--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=4s", "--leader-elect-retry-period=1s"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if o := fast.options(); *o.LeaseDuration != 5*time.Second || *o.RenewDeadline != 4*time.Second || *o.RetryPeriod != time.Second {
		t.Errorf("leader election %s/%s/%s, want 5s/4s/1s", *o.LeaseDuration, *o.RenewDeadline, *o.RetryPeriod)
	}
	for _, bad := range [][]string{{"--leader-elect-renew-deadline=20s"}, {"--leader-elect-retry-period=0s"}, {"--leader-elect-retry-period=10s"}} {
		if _, err := parseFlags(bad, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "leader election") {
			t.Errorf("%v: %v", bad, err)
		}
	}
	priced, err := parseFlags([]string{"--prices", `{"models": {"in-house": {"input": 1, "output": 2}}}`}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := priced.reconciler.Prices.Rates("in-house"); !ok || r.Output != 2 {
		t.Errorf("--prices: %+v %v", r, ok)
	}
	if _, ok := priced.reconciler.Prices.Rates("claude-opus-4-8"); !ok {
		t.Error("--prices dropped the default table")
	}
	for _, bad := range [][]string{{"--prices", "models: {x: {input: -2}}"}, {"--prices-file", "/nonexistent"}, {"--prices", "{}", "--prices-file", "x"}} {
		if _, err := parseFlags(bad, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "price") {
			t.Errorf("%v: %v", bad, err)
		}
	}
	sharded, err := parseFlags([]string{"--shard", "blue"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if o := sharded.options(); o.LeaderElectionID != "looprun-manager-blue.looprun.io" {
		t.Errorf("a shard shares the lease %s: its leader would stop the others'", o.LeaderElectionID)
	}
	for _, bad := range []string{"Blue", "a_b", "-x", strings.Repeat("x", 64)} {
		if _, err := parseFlags([]string{"--shard", bad}, func(string) string { return "" }); err == nil {
			t.Errorf("shard %q accepted", bad)
		}
	}
	if _, err := parseFlags([]string{"--llm-allowed-base-urls", "https://llm.internal/team-a/,http://llm.internal/team-a/../"}, func(string) string { return "" }); err == nil ||
		!strings.Contains(err.Error(), "dot segment") {
		t.Errorf("an allowed base URL with a dot segment: %v", err)
	}
	if _, err := parseFlags([]string{"extra"}, func(string) string { return "" }); err == nil {
		t.Error("a stray argument was accepted")
	}
}

const testLoop = `
apiVersion: looprun.io/v1alpha1
kind: Loop
metadata: {name: hello}
spec:
  initial: greet
  states:
    greet: {action: "echo hello", next: done}
    done: {terminal: true}
`

// TestManager runs the manager as the binary does against an envtest API
// server: only watched namespaces are served, logs are JSON lines with loop,
// state and iteration keys, and metrics answer only authorized clients.
func TestManager(t *testing.T) {
	cfg, c := fixture.Start(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	metricsAddr := freeAddress(t)
	s, err := parseFlags([]string{"--allow-local-actions", "--local-workdir", t.TempDir(), "--watch-namespaces", "watched",
		"--metrics-bind-address", metricsAddr, "--health-probe-bind-address", "0"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	logs := &fixture.SyncBuffer{}
	done := make(chan error, 1)
	runCtx, stop := context.WithCancel(ctx)
	go func() { done <- run(runCtx, s, cfg, logs) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()

	for _, ns := range []string{"watched", "other"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		loop := &v1alpha1.Loop{}
		if err := yaml.Unmarshal([]byte(testLoop), loop); err != nil {
			t.Fatal(err)
		}
		loop.Namespace = ns
		if err := c.Create(ctx, loop); err != nil {
			t.Fatal(err)
		}
	}
	watched := waitPhase(ctx, t, c, "watched", v1alpha1.PhaseCompleted)
	if watched.Status.Iteration != 1 {
		t.Errorf("iteration = %d, want 1", watched.Status.Iteration)
	}
	other := &v1alpha1.Loop{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "other", Name: "hello"}, other); err != nil {
		t.Fatal(err)
	}
	if other.Status.Phase != "" {
		t.Errorf("a Loop outside --watch-namespaces ran: phase %q", other.Status.Phase)
	}

	t.Run("JSON logs", func(t *testing.T) { checkLogs(t, logs.String()) })
	t.Run("secured metrics", func(t *testing.T) { checkMetrics(ctx, t, c, kubernetes.NewForConfigOrDie(cfg), metricsAddr) })
}

func waitPhase(ctx context.Context, t *testing.T, c client.Client, ns string, phase v1alpha1.Phase) *v1alpha1.Loop {
	t.Helper()
	loop := &v1alpha1.Loop{}
	for {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hello"}, loop); err != nil {
			t.Fatal(err)
		}
		if loop.Status.Phase == phase {
			return loop
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Loop %s/hello is %q, never %q", ns, loop.Status.Phase, phase)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// checkLogs wants every line to be a JSON object and the reconciler's lines
// to name the loop, its state and its iteration.
func checkLogs(t *testing.T, logs string) {
	var keyed int
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("not a JSON log line: %s", sc.Text())
		}
		for _, k := range []string{"ts", "level", "msg"} {
			if _, ok := line[k]; !ok {
				t.Errorf("log line without %q: %s", k, sc.Text())
			}
		}
		if line["name"] == "hello" && line["namespace"] == "watched" { // controller-runtime's keys
			if _, ok := line["state"]; !ok {
				t.Errorf("loop line without state: %s", sc.Text())
			}
			if _, ok := line["iteration"]; !ok {
				t.Errorf("loop line without iteration: %s", sc.Text())
			}
			keyed++
		}
	}
	if keyed == 0 {
		t.Errorf("no log line names loop hello; logs:\n%s", logs)
	}
}

// checkMetrics scrapes /metrics as nobody, as a service account without the
// right, and as one bound to a role allowed to get /metrics.
func checkMetrics(ctx context.Context, t *testing.T, c client.Client, cs kubernetes.Interface, addr string) {
	url := "https://" + addr + "/metrics"
	scrape := func(token string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		// The endpoint serves a self-signed certificate unless given one.
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	token := func(sa string) string {
		if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "watched", Name: sa}}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts("watched").CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	if code, _ := scrape(""); code != http.StatusUnauthorized {
		t.Errorf("anonymous scrape: HTTP %d, want 401", code)
	}
	if code, _ := scrape(token("stranger")); code != http.StatusForbidden {
		t.Errorf("scrape without the right: HTTP %d, want 403", code)
	}
	reader := token("prometheus")
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "looprun-metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "prometheus-looprun"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "watched", Name: "prometheus"}}}
	for _, o := range []client.Object{role, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// Authorization decisions are cached for a while; wait for the new one.
	var code int
	var body string
	for range 100 {
		if code, body = scrape(reader); code == http.StatusOK {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != http.StatusOK {
		t.Fatalf("authorized scrape: HTTP %d", code)
	}
	for _, m := range []string{"looprun_transitions_total", "looprun_loops_running"} {
		if !strings.Contains(body, m) {
			t.Errorf("metrics lack %s", m)
		}
	}
}

func freeAddress(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return fmt.Sprint(l.Addr())
}

// --gateway-url makes agent Pods call the gateway (with its port and Pods
// for their egress policies); bad values are refused at start.
func TestParseGatewayFlags(t *testing.T) {
	env := func(k string) string { return map[string]string{"POD_NAMESPACE": "looprun-system"}[k] }
	s, err := parseFlags([]string{"--gateway-url", "http://looprun-gateway.looprun-system.svc:8080", "--default-egress", "Restricted"}, env)
	if err != nil {
		t.Fatal(err)
	}
	o := s.reconciler.Pods
	if o.Gateway == nil || o.Gateway.URL != "http://looprun-gateway.looprun-system.svc:8080" || o.Gateway.Audience != "looprun-gateway" {
		t.Errorf("gateway %+v", o.Gateway)
	}
	if o.Egress.GatewayPort != 8080 || o.Egress.GatewayLabels["app.kubernetes.io/component"] != "gateway" || o.Egress.Default != "Restricted" {
		t.Errorf("egress %+v", o.Egress)
	}
	if s.reconciler.LedgerNamespace != "looprun-system" {
		t.Errorf("ledger namespace %q", s.reconciler.LedgerNamespace)
	}
	none, err := parseFlags(nil, env)
	if err != nil || none.reconciler.Pods.Gateway != nil {
		t.Errorf("no --gateway-url: %+v, %v", none.reconciler.Pods.Gateway, err)
	}
	for _, bad := range [][]string{{"--gateway-url", "gateway:8080"}, {"--default-egress", "closed"}, {"--gateway-url", "http://g", "--gateway-selector", "a=b=c"}} {
		if _, err := parseFlags(bad, env); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The CloudEvents sink's headers file is read at start, so a malformed one
// stops the manager instead of every event failing; it needs a sink.
func TestParseCloudEventsHeadersFile(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	if err := os.WriteFile(good, []byte("Authorization: Bearer t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("Authorization Bearer t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	none := func(string) string { return "" }
	s, err := parseFlags([]string{"--cloudevents-sink=https://sink.example", "--cloudevents-headers-file=" + good}, none)
	if err != nil {
		t.Fatal(err)
	}
	if s.reconciler.CloudEventsHeadersFile != good {
		t.Errorf("headers file %q", s.reconciler.CloudEventsHeadersFile)
	}
	for _, args := range [][]string{
		{"--cloudevents-sink=https://sink.example", "--cloudevents-headers-file=" + bad},
		{"--cloudevents-sink=https://sink.example", "--cloudevents-headers-file=" + filepath.Join(dir, "absent")},
		{"--cloudevents-headers-file=" + good},
	} {
		if _, err := parseFlags(args, none); err == nil || !strings.Contains(err.Error(), "--cloudevents-headers-file") {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// The runner key: read from the file (the chart's Secret), the same on
// every start; too short or missing stops the manager; none given, a key
// of this process.
func TestParseRunnerKeyFile(t *testing.T) {
	dir := t.TempDir()
	good, short := filepath.Join(dir, "key"), filepath.Join(dir, "short")
	if err := os.WriteFile(good, []byte("0123456789abcdef0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(short, []byte("too short"), 0o600); err != nil {
		t.Fatal(err)
	}
	none := func(string) string { return "" }
	s, err := parseFlags([]string{"--runner-key-file=" + good}, none)
	if err != nil {
		t.Fatal(err)
	}
	if string(s.reconciler.RunnerKey) != "0123456789abcdef0123456789abcdef0123" {
		t.Errorf("runner key %q", s.reconciler.RunnerKey)
	}
	for _, f := range []string{short, filepath.Join(dir, "absent")} {
		if _, err := parseFlags([]string{"--runner-key-file=" + f}, none); err == nil || !strings.Contains(err.Error(), "--runner-key-file") {
			t.Errorf("%s: %v", f, err)
		}
	}
	a, _ := parseFlags(nil, none)
	b, _ := parseFlags(nil, none)
	if len(a.reconciler.RunnerKey) != 32 || string(a.reconciler.RunnerKey) == string(b.reconciler.RunnerKey) {
		t.Errorf("keys of their own: %x, %x", a.reconciler.RunnerKey, b.reconciler.RunnerKey)
	}
}
