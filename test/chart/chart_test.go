// Package chart checks what the Helm chart and config/default render: the
// rights the operator gets, how its Pod runs, that local actions are off
// unless asked for, and that a real API server accepts every object.
package chart

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/looprun/looprun/test/fixture"
)

// manifest is a rendered set of objects, by kind.
type manifest struct {
	objects []*unstructured.Unstructured
}

func parse(t *testing.T, rendered []byte) *manifest {
	t.Helper()
	m := &manifest{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	for {
		var o map[string]any
		if err := dec.Decode(&o); err != nil {
			if errors.Is(err, io.EOF) {
				return m
			}
			t.Fatalf("rendered YAML: %v", err)
		}
		if o != nil {
			m.objects = append(m.objects, &unstructured.Unstructured{Object: o})
		}
	}
}

func (m *manifest) all(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range m.objects {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// one converts the only object of a kind whose name ends with suffix.
func one[T any](t *testing.T, m *manifest, kind, suffix string) *T {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, o := range m.all(kind) {
		if strings.HasSuffix(o.GetName(), suffix) {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %s objects named *%s, want 1", len(found), kind, suffix)
	}
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(found[0].Object, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func repoRoot(t *testing.T) string {
	root, err := fixture.Root()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	root := repoRoot(t)
	bin := os.Getenv("HELM")
	if bin == "" {
		bin = filepath.Join(root, "bin", "helm")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no helm at %s: run make helm (make test does)", bin)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

func render(t *testing.T, set ...string) *manifest {
	args := []string{"template", "looprun", "charts/looprun", "--namespace", "looprun-system", "--include-crds"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return parse(t, helm(t, args...))
}

func kustomize(t *testing.T, img string) *manifest {
	t.Helper()
	assets, err := fixture.UseAssets()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(repoRoot(t), "hack", "deploy.sh"), "render")
	cmd.Env = append(os.Environ(), "IMG="+img, "KUBECTL="+filepath.Join(assets, "kubectl"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/deploy.sh render: %v\n%s", err, stderr.String())
	}
	return parse(t, out)
}

// generatedRules are the manager's rules that controller-gen wrote from the
// +kubebuilder:rbac markers.
func generatedRules(t *testing.T) []rbacv1.PolicyRule {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(b, &role); err != nil {
		t.Fatal(err)
	}
	return role.Rules
}

func managerContainer(t *testing.T, d *appsv1.Deployment) corev1.Container {
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "manager" {
			return c
		}
	}
	t.Fatal("no manager container")
	return corev1.Container{}
}

func TestHelmLint(t *testing.T) {
	helm(t, "lint", "--strict", "charts/looprun")
}

func TestChartDefaults(t *testing.T) {
	m := render(t)
	role := one[rbacv1.ClusterRole](t, m, "ClusterRole", "-manager")
	if !equalRules(role.Rules, generatedRules(t)) {
		t.Errorf("the chart's manager rules differ from the markers' (run make manifests):\n%v", role.Rules)
	}
	checkLeastPrivilege(t, role.Rules)
	if n := len(m.all("ClusterRoleBinding")); n != 2 { // manager, metrics auth
		t.Errorf("%d ClusterRoleBindings, want 2", n)
	}

	d := one[appsv1.Deployment](t, m, "Deployment", "looprun")
	c := managerContainer(t, d)
	checkPodSecurity(t, d, c)
	for _, want := range []string{"--leader-elect", "--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s",
		"--leader-elect-retry-period=2s", "--metrics-secure", "--metrics-bind-address=:8443",
		"--entrypoint-image=ghcr.io/looprun/looprun:0.1.0", "--runner-image=docker.io/library/bash:5.2", "--zap-log-level=info"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("manager args lack %s: %v", want, c.Args)
		}
	}
	if slices.Contains(c.Args, "--allow-local-actions") {
		t.Error("local actions are on by default")
	}
	if c.Image != "ghcr.io/looprun/looprun:0.1.0" || !slices.Equal(c.Command, []string{"/manager"}) {
		t.Errorf("image %s command %v", c.Image, c.Command)
	}
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Error("the manager needs liveness and readiness probes")
	}
	svc := one[corev1.Service](t, m, "Service", "-metrics")
	if svc.Spec.Ports[0].Port != 8443 {
		t.Errorf("metrics service port %d", svc.Spec.Ports[0].Port)
	}
	crd := one[apiextensionsv1.CustomResourceDefinition](t, m, "CustomResourceDefinition", "loops.looprun.io")
	if crd.Spec.Names.ShortNames[0] != "lp" {
		t.Errorf("CRD short names %v", crd.Spec.Names.ShortNames)
	}
	tpl := one[apiextensionsv1.CustomResourceDefinition](t, m, "CustomResourceDefinition", "looptemplates.looprun.io")
	if tpl.Spec.Names.ShortNames[0] != "lpt" || tpl.Spec.Scope != apiextensionsv1.NamespaceScoped {
		t.Errorf("LoopTemplate CRD: short names %v, scope %s", tpl.Spec.Names.ShortNames, tpl.Spec.Scope)
	}
	lps := one[apiextensionsv1.CustomResourceDefinition](t, m, "CustomResourceDefinition", "loopschedules.looprun.io")
	if lps.Spec.Names.ShortNames[0] != "lps" || lps.Spec.Scope != apiextensionsv1.NamespaceScoped || lps.Spec.Versions[0].Subresources.Status == nil {
		t.Errorf("LoopSchedule CRD: short names %v, scope %s, subresources %v", lps.Spec.Names.ShortNames, lps.Spec.Scope, lps.Spec.Versions[0].Subresources)
	}
}

func TestChartValues(t *testing.T) {
	m := render(t, "allowLocalActions=true", "watchNamespaces={team-a,team-b}", "image.tag=v9", "entrypointImage=registry.example/entry:v9",
		"agent.image=registry.example/agent:1", "logLevel=debug", "replicas=2", "metrics.enabled=false",
		"llm.allowedBaseURLs={https://llm.example/v1,https://other.example}", "llm.maxTimeout=30s", "llm.apiKeySecret.name=llm-key",
		"leaderElection.leaseDuration=6s", "leaderElection.renewDeadline=4s", "leaderElection.retryPeriod=1s",
		"prices.in-house.input=1", "prices.in-house.output=2", "tracing.otlpEndpoint=http://collector.obs:4318")
	d := one[appsv1.Deployment](t, m, "Deployment", "looprun")
	c := managerContainer(t, d)
	for _, want := range []string{"--allow-local-actions", "--watch-namespaces=team-a,team-b", "--entrypoint-image=registry.example/entry:v9",
		"--agent-image=registry.example/agent:1", "--zap-log-level=debug", "--metrics-bind-address=0",
		"--llm-allowed-base-urls=https://llm.example/v1,https://other.example", "--llm-max-timeout=30s",
		"--leader-elect-lease-duration=6s", "--leader-elect-renew-deadline=4s", "--leader-elect-retry-period=1s",
		`--prices={"models":{"in-house":{"input":1,"output":2}}}`, "--otlp-endpoint=http://collector.obs:4318"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("manager args lack %s: %v", want, c.Args)
		}
	}
	if i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "ANTHROPIC_API_KEY" }); i < 0 ||
		c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.SecretKeyRef == nil || c.Env[i].ValueFrom.SecretKeyRef.Name != "llm-key" {
		t.Errorf("the operator's key is not read from its Secret: %+v", c.Env)
	}
	if c.Image != "ghcr.io/looprun/looprun:v9" || *d.Spec.Replicas != 2 {
		t.Errorf("image %s, replicas %d", c.Image, *d.Spec.Replicas)
	}
	// Watching some namespaces grants the manager's rights there only.
	var bound []string
	for _, o := range m.all("RoleBinding") {
		if strings.HasSuffix(o.GetName(), "-manager") {
			bound = append(bound, o.GetNamespace())
		}
	}
	slices.Sort(bound)
	if !slices.Equal(bound, []string{"team-a", "team-b"}) {
		t.Errorf("manager RoleBindings in %v, want team-a and team-b", bound)
	}
	// (The model gateway, installed by the judge's key, has one of its
	// own: token reviews are cluster-wide.)
	for _, o := range m.all("ClusterRoleBinding") {
		if o.GetName() != "looprun-gateway-review" {
			t.Errorf("ClusterRoleBinding %s with watched namespaces and no metrics", o.GetName())
		}
	}
	for _, o := range m.all("Service") {
		if o.GetName() != "looprun-gateway" {
			t.Errorf("Service %s with metrics disabled", o.GetName())
		}
	}
}

func TestKustomizeMatchesChart(t *testing.T) {
	m := kustomize(t, "registry.example:5000/team/looprun:v1.2.3")
	role := one[rbacv1.ClusterRole](t, m, "ClusterRole", "-manager-role")
	if !equalRules(role.Rules, generatedRules(t)) {
		t.Error("config/default's manager rules differ from the markers'")
	}
	d := one[appsv1.Deployment](t, m, "Deployment", "controller-manager")
	c := managerContainer(t, d)
	checkPodSecurity(t, d, c)
	if c.Image != "registry.example:5000/team/looprun:v1.2.3" {
		t.Errorf("make deploy IMG=... gave image %s", c.Image)
	}
	for _, e := range c.Env {
		if e.Name == "LOOPRUN_ENTRYPOINT_IMAGE" && e.Value != c.Image {
			t.Errorf("entrypoint image %s, operator image %s: make deploy IMG=... sets both", e.Value, c.Image)
		}
	}
	if slices.Contains(c.Args, "--allow-local-actions") || !slices.Contains(c.Args, "--leader-elect") {
		t.Errorf("config/default args %v", c.Args)
	}
}

// TestAPIServerAccepts creates everything both installs render, dry-run,
// on a real API server: schemas, RBAC and the CRD must all validate.
func TestAPIServerAccepts(t *testing.T) {
	_, c := fixture.Start(t, false)
	ctx := context.Background()
	for _, ns := range []string{"looprun-system", "team-a", "team-b"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	sets := map[string]*manifest{
		"chart defaults":     render(t),
		"chart with values":  render(t, "watchNamespaces={team-a,team-b}", "allowLocalActions=true"),
		"chart with gateway": render(t, "gateway.apiKeySecret.name=model-key", "defaultEgress=Restricted"),
		"chart for a platform": render(t, "replicas=2", "shards={blue}", "llm.apiKeySecret.name=model-key", "cloudEvents.sink=https://sink.example",
			"cloudEvents.headersSecret.name=sink-auth", "tracing.headersSecret.name=otel-auth", "extraArgs={--prices-file=/etc/prices/prices.yaml}",
			"extraVolumes[0].name=prices", "extraVolumes[0].configMap.name=prices", "extraVolumeMounts[0].name=prices",
			"extraVolumeMounts[0].mountPath=/etc/prices", "podDisruptionBudget.minAvailable=1"),
		"kustomize (IMG=...)": kustomize(t, "registry.example/looprun:v1"),
	}
	for name, m := range sets {
		for _, o := range m.objects {
			if o.GetKind() == "Namespace" {
				continue // created above
			}
			if err := c.Create(ctx, o.DeepCopy(), client.DryRunAll); err != nil {
				t.Errorf("%s: %s %s: %v", name, o.GetKind(), o.GetName(), err)
			}
		}
	}
}

// checkLeastPrivilege: no wildcards, no escalation verbs, impersonation of
// service accounts only (to read what a Loop names as the Loop), and no
// access to Secrets but creating one (a Warm Loop's runner key).
func checkLeastPrivilege(t *testing.T, rules []rbacv1.PolicyRule) {
	for _, r := range rules {
		for _, v := range append(append(slices.Clone(r.Verbs), r.Resources...), r.APIGroups...) {
			if v == "*" {
				t.Errorf("wildcard in rule %v", r)
			}
		}
		for _, v := range r.Verbs {
			if v == "escalate" || v == "bind" {
				t.Errorf("verb %s in rule %v", v, r)
			}
			if v == "impersonate" && (!slices.Equal(r.Resources, []string{"serviceaccounts"}) || !slices.Equal(r.Verbs, []string{"impersonate"})) {
				t.Errorf("impersonation beyond service accounts in rule %v", r)
			}
		}
		// Secrets: create only (a Warm Loop's runner key, which the
		// operator derives and never reads back); never read or change one.
		if slices.Contains(r.Resources, "secrets") && !slices.Equal(r.Verbs, []string{"create"}) {
			t.Errorf("the operator may read or change Secrets: %v", r)
		}
	}
}

func checkPodSecurity(t *testing.T, d *appsv1.Deployment, c corev1.Container) {
	ps := d.Spec.Template.Spec.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", ps)
	}
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil ||
		!*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container security context %+v", sc)
	}
	for _, e := range []string{"POD_NAMESPACE", "SERVICE_ACCOUNT_NAME"} {
		if !slices.ContainsFunc(c.Env, func(v corev1.EnvVar) bool { return v.Name == e && v.ValueFrom != nil }) {
			t.Errorf("the manager lacks %s from the downward API (it refuses action Pods its own identity with it)", e)
		}
	}
}

func equalRules(a, b []rbacv1.PolicyRule) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !slices.Equal(a[i].APIGroups, b[i].APIGroups) || !slices.Equal(a[i].Resources, b[i].Resources) ||
			!slices.Equal(a[i].Verbs, b[i].Verbs) || !slices.Equal(a[i].NonResourceURLs, b[i].NonResourceURLs) {
			return false
		}
	}
	return true
}

// Each shard gets a Deployment of its own that runs only its Loops; the
// first Deployment keeps the Loops without a shard.
func TestChartShards(t *testing.T) {
	m := render(t, "shards={blue,green}")
	if n := len(m.all("Deployment")); n != 3 {
		t.Fatalf("%d Deployments, want one and one per shard", n)
	}
	plain := managerContainer(t, one[appsv1.Deployment](t, m, "Deployment", "looprun"))
	if slices.ContainsFunc(plain.Args, func(a string) bool { return strings.HasPrefix(a, "--shard") }) {
		t.Errorf("the unsharded manager has a shard: %v", plain.Args)
	}
	for _, shard := range []string{"blue", "green"} {
		d := one[appsv1.Deployment](t, m, "Deployment", "-shard-"+shard)
		c := managerContainer(t, d)
		if !slices.Contains(c.Args, "--shard="+shard) || !slices.Contains(c.Args, "--leader-elect") {
			t.Errorf("shard %s: args %v", shard, c.Args)
		}
		if d.Spec.Selector.MatchLabels["looprun.io/shard"] != shard || d.Spec.Template.Labels["looprun.io/shard"] != shard {
			t.Errorf("shard %s: selector %v, Pod labels %v", shard, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
		}
		// No Deployment's selector matches another's Pods.
		for _, other := range m.all("Deployment") {
			od := &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(other.Object, od); err != nil {
				t.Fatal(err)
			}
			sel, err := metav1.LabelSelectorAsSelector(od.Spec.Selector)
			if err != nil {
				t.Fatal(err)
			}
			if od.Name != d.Name && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Errorf("Deployment %s selects the Pods of %s", od.Name, d.Name)
			}
		}
	}
}

// A value the chart does not know, or of the wrong shape, fails the
// install with the value named (values.schema.json), instead of rendering
// as if it were not there.
func TestChartRefusesUnknownValues(t *testing.T) {
	root := repoRoot(t)
	bin := cmp.Or(os.Getenv("HELM"), filepath.Join(root, "bin", "helm"))
	for _, set := range []string{"watchNamespace=foo", "replicas=two", "logLevel=verbose", "llm.maxTimeout=soon", "watchNamespaces={Team_A}", "leaderElection.leaseDuration=15", "prices=bogus", "tracing.otlpEndpoint=collector:4318",
		"rbac.create=maybe", "podDisruptionBudget.maxUnavailable=half", "metrics.serviceMonitor.interval=soon", "extraArgs=--x", "cloudEvents.headersSecret.key="} {
		cmd := exec.Command(bin, "template", "looprun", "charts/looprun", "--set", set)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		name, _, _ := strings.Cut(set, "=")
		if err == nil || !strings.Contains(string(out), name[strings.LastIndex(name, ".")+1:]) {
			t.Errorf("--set %s: rendered (%v) or did not name the value:\n%s", set, err, out)
		}
	}
}

// The dashboard is off by default; on, it is a ConfigMap Grafana's sidecar
// loads, holding a dashboard whose every query reads a metric the operator
// serves.
func TestChartDashboard(t *testing.T) {
	if n := len(render(t).all("ConfigMap")); n != 0 {
		t.Errorf("%d ConfigMaps rendered by default", n)
	}
	cm := one[corev1.ConfigMap](t, render(t, "dashboard.enabled=true", "dashboard.namespace=monitoring"), "ConfigMap", "-dashboard")
	if cm.Labels["grafana_dashboard"] != "1" || cm.Namespace != "monitoring" {
		t.Errorf("labels %v, namespace %q", cm.Labels, cm.Namespace)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(cm.Data["looprun.json"]), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	served := map[string]bool{}
	for _, f := range []string{"metrics.go", "metrics_loops.go"} {
		src, err := os.ReadFile(filepath.Join(repoRoot(t), "controllers", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range metricName.FindAllString(string(src), -1) {
			served[m] = true
		}
	}
	queried := 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, q := range p.Targets {
			for _, m := range metricName.FindAllString(q.Expr, -1) {
				queried++
				if name := strings.TrimSuffix(m, "_bucket"); !served[name] {
					t.Errorf("panel %q reads %s, which the operator does not serve", p.Title, name)
				}
			}
		}
	}
	if queried < 10 {
		t.Errorf("only %d metric reads in the dashboard", queried)
	}
}

var metricName = regexp.MustCompile(`looprun_[a-z_]+[a-z]`)

// The in-cluster web view is off by default; on, it runs looprun ui as a
// service account of its own that can only read Loops and ConfigMaps, and
// its Pods are not the operator's (no Service or selector of the operator
// picks them).
func TestChartUI(t *testing.T) {
	if off := render(t); len(off.all("ClusterRole")) > 0 {
		for _, r := range off.all("ClusterRole") {
			if strings.HasSuffix(r.GetName(), "-ui") {
				t.Fatalf("the web view is on by default: %s", r.GetName())
			}
		}
	}
	m := render(t, "ui.enabled=true", "ui.namespace=team-a")
	d := one[appsv1.Deployment](t, m, "Deployment", "looprun-ui")
	c := d.Spec.Template.Spec.Containers[0]
	if c.Command[0] != "/usr/local/bin/looprun" || !slices.Contains(c.Args, "ui") || !slices.Contains(c.Args, "--listen=0.0.0.0:8080") ||
		!slices.Contains(c.Args, "--namespace=team-a") || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Fatalf("ui container %+v", c)
	}
	if d.Spec.Template.Spec.ServiceAccountName != "looprun-ui" || d.Spec.Template.Labels["app.kubernetes.io/name"] != "looprun-ui" {
		t.Fatalf("ui Pod %+v", d.Spec.Template)
	}
	role := one[rbacv1.ClusterRole](t, m, "ClusterRole", "looprun-ui")
	reads := map[string]bool{}
	for _, r := range role.Rules {
		for _, v := range r.Verbs {
			if v != "get" && v != "list" && v != "watch" {
				t.Errorf("the web view may %s %v", v, r.Resources)
			}
		}
		for _, res := range r.Resources {
			reads[res] = true
		}
	}
	for _, res := range []string{"loops", "configmaps", "pods", "pods/log"} {
		if !reads[res] {
			t.Errorf("the web view cannot read %s: %v", res, role.Rules)
		}
	}
	svc := one[corev1.Service](t, m, "Service", "looprun-ui")
	if svc.Spec.Selector["app.kubernetes.io/name"] != "looprun-ui" || svc.Spec.Type != "" && svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Fatalf("ui Service %+v", svc.Spec)
	}
	operator := one[appsv1.Deployment](t, m, "Deployment", "looprun")
	if operator.Spec.Selector.MatchLabels["app.kubernetes.io/name"] == "looprun-ui" {
		t.Fatal("the operator's selector picks the web view")
	}
}

// The model gateway is installed whenever it has a key (its own or the
// judge's), as its own Deployment and service account with none of the
// manager's rights; only it mounts the key; the manager is pointed at it.
func TestChartGateway(t *testing.T) {
	for _, r := range render(t).all("Deployment") {
		if strings.HasSuffix(r.GetName(), "-gateway") {
			t.Fatalf("a gateway without a key: %s", r.GetName())
		}
	}
	if m := render(t, "llm.apiKeySecret.name=judge-key", "gateway.enabled=false"); len(m.all("Deployment")) != 1 {
		t.Errorf("gateway.enabled=false installs %d Deployments", len(m.all("Deployment")))
	}
	m := render(t, "llm.apiKeySecret.name=judge-key")
	d := one[appsv1.Deployment](t, m, "Deployment", "looprun-gateway")
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	if spec.ServiceAccountName != "looprun-gateway" || c.Command[0] != "/gateway" || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Fatalf("gateway Pod %+v", spec)
	}
	for _, want := range []string{"--upstream=https://api.anthropic.com", "--allowed-upstreams=https://api.anthropic.com",
		"--api-key-file=/var/run/looprun/upstream-key/api-key", "--audience=looprun-gateway", "--ledger-namespace=looprun-system",
		"--operator-service-account=looprun-system:looprun", "--journal-dir=/var/lib/looprun-gateway"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("gateway args %q lack %s", c.Args, want)
		}
	}
	if len(spec.Volumes) != 2 || spec.Volumes[0].Secret == nil || spec.Volumes[0].Secret.SecretName != "judge-key" {
		t.Errorf("the gateway's key volume %+v", spec.Volumes)
	}
	// The journal outlives the container (a killed gateway ships it when it
	// starts again) on a volume of its own, the root file system read-only.
	if len(spec.Volumes) == 2 && (spec.Volumes[1].EmptyDir == nil || spec.Volumes[1].Name != "journal") {
		t.Errorf("the gateway's journal volume %+v", spec.Volumes[1])
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "journal" && m.MountPath == "/var/lib/looprun-gateway" && !m.ReadOnly
	}) {
		t.Errorf("the journal is not mounted where --journal-dir says: %+v", c.VolumeMounts)
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			t.Errorf("the key is in the gateway's environment: %s", e.Name)
		}
	}
	role := one[rbacv1.ClusterRole](t, m, "ClusterRole", "looprun-gateway")
	review := one[rbacv1.ClusterRole](t, m, "ClusterRole", "looprun-gateway-review")
	for _, r := range append(role.Rules, review.Rules...) {
		for _, v := range r.Verbs {
			if v != "get" && v != "list" && v != "watch" && (v != "create" || !slices.Equal(r.Resources, []string{"tokenreviews"})) {
				t.Errorf("the gateway may %s %v cluster-wide", v, r.Resources)
			}
		}
		if slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "configmaps") {
			t.Errorf("the gateway may read %v cluster-wide", r.Resources)
		}
	}
	local := one[rbacv1.Role](t, m, "Role", "looprun-gateway-ledgers")
	if local.Namespace != "looprun-system" || !slices.Equal(local.Rules[0].Resources, []string{"configmaps"}) {
		t.Errorf("the gateway's Role %+v", local)
	}
	svc := one[corev1.Service](t, m, "Service", "looprun-gateway")
	if svc.Spec.Selector["app.kubernetes.io/name"] != "looprun-gateway" || svc.Spec.Ports[0].Port != 8080 {
		t.Errorf("gateway Service %+v", svc.Spec)
	}
	mc := managerContainer(t, one[appsv1.Deployment](t, m, "Deployment", "looprun"))
	for _, want := range []string{"--gateway-url=http://looprun-gateway.looprun-system.svc:8080", "--gateway-audience=looprun-gateway",
		"--gateway-selector=app.kubernetes.io/name=looprun-gateway,app.kubernetes.io/instance=looprun"} {
		if !slices.Contains(mc.Args, want) {
			t.Errorf("manager args %q lack %s", mc.Args, want)
		}
	}
	own := render(t, "gateway.apiKeySecret.name=gw-key", "gateway.apiKeySecret.key=k", "llm.apiKeySecret.name=judge-key",
		"gateway.url=http://10.97.0.50:8080", "gateway.service.clusterIP=10.97.0.50")
	gs := one[appsv1.Deployment](t, own, "Deployment", "looprun-gateway").Spec.Template.Spec
	if gs.Volumes[0].Secret.SecretName != "gw-key" || !slices.Contains(gs.Containers[0].Args, "--api-key-file=/var/run/looprun/upstream-key/k") {
		t.Errorf("the gateway's own key: %+v %q", gs.Volumes, gs.Containers[0].Args)
	}
	if !slices.Contains(managerContainer(t, one[appsv1.Deployment](t, own, "Deployment", "looprun")).Args, "--gateway-url=http://10.97.0.50:8080") {
		t.Error("gateway.url is not the manager's --gateway-url")
	}

	// Watching some namespaces, the gateway reads Pods and Loops there only.
	watched := render(t, "llm.apiKeySecret.name=judge-key", "watchNamespaces={team-a,team-b}")
	var where []string
	for _, o := range watched.all("RoleBinding") {
		if o.GetName() == "looprun-gateway" {
			where = append(where, o.GetNamespace())
		}
	}
	slices.Sort(where)
	if !slices.Equal(where, []string{"team-a", "team-b"}) {
		t.Errorf("gateway RoleBindings in %v", where)
	}
	for _, o := range watched.all("ClusterRoleBinding") {
		if o.GetName() == "looprun-gateway" {
			t.Error("the gateway reads every namespace's Pods though the operator watches two")
		}
	}
	// The manager reads and drops ledgers in the release namespace, watched or not.
	reader := one[rbacv1.RoleBinding](t, watched, "RoleBinding", "looprun-gateway-ledger-reader")
	if reader.Namespace != "looprun-system" || reader.Subjects[0].Name != "looprun" || reader.RoleRef.Name != "looprun-gateway-ledger-reader" {
		t.Errorf("the manager's ledger rights %+v", reader)
	}
	if !slices.Contains(one[appsv1.Deployment](t, watched, "Deployment", "looprun-gateway").Spec.Template.Spec.Containers[0].Args, "--watch-namespaces=team-a,team-b") {
		t.Error("the gateway is not told the watched namespaces")
	}
}
