package chart

import (
	"cmp"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// What a platform team expects of the chart: a ServiceMonitor, metrics of
// every shard, extra args and volumes, credentials of the event sink and
// the trace collector from Secrets, RBAC of its own, disruption budgets.

// as converts a rendered object.
func as[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// refused renders with values the chart must refuse, and returns what
// helm said.
func refused(t *testing.T, set ...string) string {
	t.Helper()
	root := repoRoot(t)
	args := []string{"template", "looprun", "charts/looprun", "--namespace", "looprun-system"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(cmp.Or(os.Getenv("HELM"), filepath.Join(root, "bin", "helm")), args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("--set %v rendered", set)
	}
	return string(out)
}

// podsOf are the Pod labels of every Deployment rendered, by name.
func podsOf(t *testing.T, m *manifest) map[string]labels.Set {
	out := map[string]labels.Set{}
	for _, o := range m.all("Deployment") {
		out[o.GetName()] = as[appsv1.Deployment](t, o).Spec.Template.Labels
	}
	return out
}

// The metrics Service selects the Pods of every manager Deployment, each
// shard's included, and no other Pod (the gateway's, the web view's).
func TestChartMetricsSelectsShards(t *testing.T) {
	m := render(t, "shards={blue,green}", "llm.apiKeySecret.name=judge-key", "ui.enabled=true")
	svc := one[corev1.Service](t, m, "Service", "-metrics")
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	managers := 0
	for name, pod := range podsOf(t, m) {
		isManager := name == "looprun" || strings.HasPrefix(name, "looprun-shard-")
		if isManager {
			managers++
		}
		if sel.Matches(pod) != isManager {
			t.Errorf("the metrics Service (selector %v) on the Pods of %s (%v): %v", svc.Spec.Selector, name, pod, sel.Matches(pod))
		}
	}
	if managers != 3 {
		t.Errorf("%d manager Deployments, want 3", managers)
	}
}

// Off by default; on, a ServiceMonitor scrapes the metrics Service (and
// only it) over HTTPS with Prometheus' own token, as the metrics-reader
// ClusterRole lets it.
func TestChartServiceMonitor(t *testing.T) {
	if n := len(render(t).all("ServiceMonitor")); n != 0 {
		t.Errorf("%d ServiceMonitors by default", n)
	}
	m := render(t, "metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=kps", "metrics.serviceMonitor.interval=1m",
		"llm.apiKeySecret.name=judge-key", "ui.enabled=true")
	sms := m.all("ServiceMonitor")
	if len(sms) != 1 {
		t.Fatalf("%d ServiceMonitors", len(sms))
	}
	sm := sms[0]
	if sm.GetAPIVersion() != "monitoring.coreos.com/v1" || sm.GetNamespace() != "looprun-system" || sm.GetLabels()["release"] != "kps" {
		t.Errorf("ServiceMonitor %s/%s %s, labels %v", sm.GetNamespace(), sm.GetName(), sm.GetAPIVersion(), sm.GetLabels())
	}
	match, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	namespaces, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
	if !slices.Equal(namespaces, []string{"looprun-system"}) {
		t.Errorf("namespaces %v", namespaces)
	}
	metricsSvc := one[corev1.Service](t, m, "Service", "-metrics")
	for _, o := range m.all("Service") {
		if selected := labels.SelectorFromSet(match).Matches(labels.Set(o.GetLabels())); selected != (o.GetName() == metricsSvc.Name) {
			t.Errorf("the ServiceMonitor (%v) selects Service %s: %v", match, o.GetName(), selected)
		}
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("endpoints %v", endpoints)
	}
	ep := endpoints[0].(map[string]any)
	skip, _, _ := unstructured.NestedBool(ep, "tlsConfig", "insecureSkipVerify")
	if ep["port"] != metricsSvc.Spec.Ports[0].Name || ep["scheme"] != "https" || ep["path"] != "/metrics" || ep["interval"] != "1m" ||
		ep["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" || !skip {
		t.Errorf("endpoint %v (the Service's port %s)", ep, metricsSvc.Spec.Ports[0].Name)
	}
	one[rbacv1.ClusterRole](t, m, "ClusterRole", "-metrics-reader")

	// A token from a Secret instead of the file, and a verified certificate.
	own := render(t, "metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.bearerTokenFile=", "metrics.serviceMonitor.namespace=monitoring",
		"metrics.serviceMonitor.authorization.credentials.name=prom-token", "metrics.serviceMonitor.authorization.credentials.key=token",
		"metrics.serviceMonitor.tlsConfig.insecureSkipVerify=false", "metrics.serviceMonitor.tlsConfig.serverName=looprun-metrics")
	if sms = own.all("ServiceMonitor"); len(sms) != 1 || sms[0].GetNamespace() != "monitoring" {
		t.Fatalf("ServiceMonitors %v", sms)
	}
	endpoints, _, _ = unstructured.NestedSlice(sms[0].Object, "spec", "endpoints")
	ep = endpoints[0].(map[string]any)
	secret, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "name")
	server, _, _ := unstructured.NestedString(ep, "tlsConfig", "serverName")
	if _, ok := ep["bearerTokenFile"]; ok || secret != "prom-token" || server != "looprun-metrics" {
		t.Errorf("endpoint %v", ep)
	}
	if out := refused(t, "metrics.enabled=false", "metrics.serviceMonitor.enabled=true"); !strings.Contains(out, "metrics.enabled") {
		t.Errorf("a ServiceMonitor without metrics: %s", out)
	}
}

// Extra args, env and volumes reach the manager (every shard's) and the
// gateway: a price table from a ConfigMap, a CA bundle.
func TestChartExtras(t *testing.T) {
	set := []string{"shards={blue}", "llm.apiKeySecret.name=judge-key"}
	for _, p := range []string{"", "gateway."} {
		set = append(set, p+"extraArgs={--prices-file=/etc/looprun/prices/prices.yaml}",
			p+"extraEnv[0].name=SSL_CERT_FILE", p+"extraEnv[0].value=/etc/looprun/ca/ca.crt",
			p+"extraVolumes[0].name=prices", p+"extraVolumes[0].configMap.name=looprun-prices",
			p+"extraVolumes[1].name=ca", p+"extraVolumes[1].configMap.name=company-ca",
			p+"extraVolumeMounts[0].name=prices", p+"extraVolumeMounts[0].mountPath=/etc/looprun/prices", p+"extraVolumeMounts[0].readOnly=true",
			p+"extraVolumeMounts[1].name=ca", p+"extraVolumeMounts[1].mountPath=/etc/looprun/ca")
	}
	m := render(t, set...)
	if n := len(m.all("Deployment")); n != 3 {
		t.Fatalf("%d Deployments", n)
	}
	for _, o := range m.all("Deployment") {
		spec := as[appsv1.Deployment](t, o).Spec.Template.Spec
		c := spec.Containers[0]
		if !slices.Contains(c.Args, "--prices-file=/etc/looprun/prices/prices.yaml") {
			t.Errorf("%s: args %v", o.GetName(), c.Args)
		}
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "SSL_CERT_FILE" && e.Value == "/etc/looprun/ca/ca.crt" }) {
			t.Errorf("%s: env %v", o.GetName(), c.Env)
		}
		if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
			return v.Name == "prices" && v.ConfigMap != nil && v.ConfigMap.Name == "looprun-prices"
		}) {
			t.Errorf("%s: volumes %v", o.GetName(), spec.Volumes)
		}
		if !slices.ContainsFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool {
			return v.Name == "prices" && v.MountPath == "/etc/looprun/prices" && v.ReadOnly
		}) {
			t.Errorf("%s: mounts %v", o.GetName(), c.VolumeMounts)
		}
		for _, mount := range c.VolumeMounts {
			if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name }) {
				t.Errorf("%s: %s is mounted but no volume", o.GetName(), mount.Name)
			}
		}
	}
	// Without extras the manager has one volume: its runner key.
	if v := one[appsv1.Deployment](t, render(t), "Deployment", "looprun").Spec.Template.Spec.Volumes; len(v) != 1 || v[0].Name != "runner-key" {
		t.Errorf("volumes by default: %v", v)
	}
	for _, p := range []string{"", "gateway."} {
		if out := refused(t, "llm.apiKeySecret.name=k", "prices.in-house.input=1", p+"extraArgs={--prices-file=/p}"); !strings.Contains(out, "one price table") {
			t.Errorf("prices and %sextraArgs --prices-file: %s", p, out)
		}
	}
}

// The key of the gateway is the default agent key, and the judge's key is
// the gateway's when it has none of its own: setting only
// llm.apiKeySecret installs the gateway, the only Pod that mounts it, and
// points the manager (and so every agent Pod) at it.
func TestChartDefaultAgentKey(t *testing.T) {
	m := render(t, "llm.apiKeySecret.name=team-key")
	gw := one[appsv1.Deployment](t, m, "Deployment", "looprun-gateway")
	if v := gw.Spec.Template.Spec.Volumes[0]; v.Secret == nil || v.Secret.SecretName != "team-key" {
		t.Errorf("the gateway's key volume %+v", v)
	}
	mc := managerContainer(t, one[appsv1.Deployment](t, m, "Deployment", "looprun"))
	if !slices.Contains(mc.Args, "--gateway-url=http://looprun-gateway.looprun-system.svc:8080") {
		t.Errorf("the manager is not pointed at the gateway: %v", mc.Args)
	}
	// The manager holds it for the judge only; nothing names it to agents.
	for _, e := range mc.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.Name != "ANTHROPIC_API_KEY" {
			t.Errorf("the manager gets %s from a Secret", e.Name)
		}
	}
	for _, a := range mc.Args {
		if strings.Contains(a, "team-key") {
			t.Errorf("the key's Secret is named to the manager: %s", a)
		}
	}
	for _, o := range m.all("Deployment") {
		for _, v := range as[appsv1.Deployment](t, o).Spec.Template.Spec.Volumes {
			if v.Secret != nil && o.GetName() != gw.Name && v.Name != "runner-key" {
				t.Errorf("%s mounts Secret %s", o.GetName(), v.Secret.SecretName)
			}
		}
	}
}

// The sink's and the collector's credentials come from Secrets: a file
// the manager reads for each event, and OpenTelemetry's headers variable;
// neither is in the Pod's args.
func TestChartCollectorHeaders(t *testing.T) {
	m := render(t, "cloudEvents.sink=https://events.example/looprun", "cloudEvents.headersSecret.name=sink-auth",
		"tracing.otlpEndpoint=https://otel.example:4318", "tracing.headersSecret.name=otel-auth", "tracing.headersSecret.key=h")
	d := one[appsv1.Deployment](t, m, "Deployment", "looprun")
	spec, c := d.Spec.Template.Spec, managerContainer(t, d)
	if !slices.Contains(c.Args, "--cloudevents-headers-file=/var/run/looprun/cloudevents/headers") {
		t.Errorf("args %v", c.Args)
	}
	if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "cloudevents-headers" && v.Secret != nil && v.Secret.SecretName == "sink-auth" && v.Secret.Items[0].Key == "headers"
	}) || !slices.ContainsFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool {
		return v.Name == "cloudevents-headers" && v.MountPath == "/var/run/looprun/cloudevents" && v.ReadOnly
	}) {
		t.Errorf("the sink's headers: volumes %v, mounts %v", spec.Volumes, c.VolumeMounts)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "OTEL_EXPORTER_OTLP_TRACES_HEADERS" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil &&
			e.ValueFrom.SecretKeyRef.Name == "otel-auth" && e.ValueFrom.SecretKeyRef.Key == "h"
	}) {
		t.Errorf("the collector's headers: env %v", c.Env)
	}
	for _, a := range c.Args {
		if strings.Contains(a, "sink-auth") || strings.Contains(a, "otel-auth") {
			t.Errorf("a Secret in the args: %s", a)
		}
	}
	// The manager knows the flag the chart passes.
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "cmd", "manager", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), `"cloudevents-headers-file"`) {
		t.Error("the manager has no --cloudevents-headers-file")
	}
	// Without a sink, no headers.
	if v := one[appsv1.Deployment](t, render(t, "cloudEvents.headersSecret.name=sink-auth"), "Deployment", "looprun").Spec.Template.Spec.Volumes; len(v) != 1 {
		t.Errorf("headers without a sink: %v", v)
	}
}

var rbacKinds = []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}

// rbac.create=false renders no RBAC object at all (a platform team grants
// the rights); the service accounts stay and the Pods run as them.
func TestChartRBACCreate(t *testing.T) {
	set := []string{"llm.apiKeySecret.name=judge-key", "ui.enabled=true", "watchNamespaces={team-a}"}
	on := render(t, set...)
	for _, kind := range rbacKinds {
		if len(on.all(kind)) == 0 {
			t.Errorf("no %s with rbac.create", kind)
		}
	}
	off := render(t, append(set, "rbac.create=false")...)
	for _, kind := range rbacKinds {
		for _, o := range off.all(kind) {
			t.Errorf("rbac.create=false renders %s %s", kind, o.GetName())
		}
	}
	var accounts []string
	for _, o := range off.all("ServiceAccount") {
		accounts = append(accounts, o.GetName())
	}
	slices.Sort(accounts)
	if !slices.Equal(accounts, []string{"looprun", "looprun-gateway", "looprun-ui"}) {
		t.Errorf("service accounts %v", accounts)
	}
	for _, o := range off.all("Deployment") {
		if sa := as[appsv1.Deployment](t, o).Spec.Template.Spec.ServiceAccountName; !slices.Contains(accounts, sa) {
			t.Errorf("%s runs as %s, which is not rendered", o.GetName(), sa)
		}
	}
	// The platform's own account for the manager.
	theirs := render(t, "rbac.create=false", "serviceAccount.create=false", "serviceAccount.name=platform-looprun")
	if n := len(theirs.all("ServiceAccount")); n != 0 {
		t.Errorf("%d ServiceAccounts with serviceAccount.create=false", n)
	}
	if sa := one[appsv1.Deployment](t, theirs, "Deployment", "looprun").Spec.Template.Spec.ServiceAccountName; sa != "platform-looprun" {
		t.Errorf("the manager runs as %s", sa)
	}
}

// A PodDisruptionBudget per manager Deployment (each shard's) when there
// are several replicas, and for the gateway (two replicas by default); each
// selects only its Deployment's Pods.
func TestChartPodDisruptionBudgets(t *testing.T) {
	if n := len(render(t).all("PodDisruptionBudget")); n != 0 {
		t.Errorf("%d PodDisruptionBudgets with one replica and no gateway", n)
	}
	m := render(t, "replicas=2", "shards={blue}", "llm.apiKeySecret.name=judge-key")
	pods := podsOf(t, m)
	budgets := m.all("PodDisruptionBudget")
	if len(budgets) != 3 {
		t.Fatalf("%d PodDisruptionBudgets, want the two managers' and the gateway's", len(budgets))
	}
	for _, o := range budgets {
		pdb := as[policyv1.PodDisruptionBudget](t, o)
		if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
			t.Errorf("%s: %+v", pdb.Name, pdb.Spec)
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		for name, pod := range pods {
			if sel.Matches(pod) != (name == pdb.Name) {
				t.Errorf("PodDisruptionBudget %s on the Pods of %s: %v", pdb.Name, name, sel.Matches(pod))
			}
		}
	}
	none := render(t, "replicas=2", "llm.apiKeySecret.name=judge-key", "podDisruptionBudget.enabled=false", "gateway.podDisruptionBudget.enabled=false")
	if n := len(none.all("PodDisruptionBudget")); n != 0 {
		t.Errorf("%d PodDisruptionBudgets turned off", n)
	}
	asked := render(t, "podDisruptionBudget.enabled=true", "podDisruptionBudget.minAvailable=50%")
	pdb := one[policyv1.PodDisruptionBudget](t, asked, "PodDisruptionBudget", "looprun")
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.String() != "50%" || pdb.Spec.MaxUnavailable != nil {
		t.Errorf("minAvailable 50%%: %+v", pdb.Spec)
	}
}

// The operator's runner key (Warm mode): a Secret the chart makes once and
// keeps (helm.sh/resource-policy: keep, reused on upgrade through lookup),
// mounted as a file the manager reads; runnerKey.existingSecret brings one's
// own, and then the chart makes none.
func TestChartRunnerKey(t *testing.T) {
	m := render(t)
	secret := one[corev1.Secret](t, m, "Secret", "looprun-runner-key")
	if len(secret.Data["key"]) < 32 || secret.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("runner key Secret: %d bytes, annotations %v", len(secret.Data["key"]), secret.Annotations)
	}
	d := one[appsv1.Deployment](t, m, "Deployment", "looprun")
	if c := managerContainer(t, d); !slices.Contains(c.Args, "--runner-key-file=/var/run/looprun/runner-key/key") {
		t.Errorf("args %v", c.Args)
	}
	if v := d.Spec.Template.Spec.Volumes; len(v) != 1 || v[0].Secret == nil || v[0].Secret.SecretName != "looprun-runner-key" {
		t.Errorf("volumes %v", v)
	}

	m = render(t, "runnerKey.existingSecret=team-runner-key")
	if s := m.all("Secret"); len(s) != 0 {
		t.Errorf("a Secret made beside an existing one: %v", s[0].GetName())
	}
	d = one[appsv1.Deployment](t, m, "Deployment", "looprun")
	if v := d.Spec.Template.Spec.Volumes; len(v) != 1 || v[0].Secret.SecretName != "team-runner-key" {
		t.Errorf("volumes %v", v)
	}
}
