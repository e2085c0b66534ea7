package main

import (
	"encoding/json"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestVersionClient: --client prints the client's version alone; with no
// cluster to ask, version says so on one line and exits 0.
func TestVersionClient(t *testing.T) {
	dir := t.TempDir()
	r := looprun(t, dir, "version", "--client")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Client Version: ") || !strings.Contains(r.stdout, "Go Version: "+runtime.Version()) || strings.Contains(r.stdout, "Server") {
		t.Errorf("version --client: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	r = looprun(t, dir, "version", "--kubeconfig", filepath.Join(dir, "none"))
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[3], "Server: no cluster to talk to") {
		t.Errorf("version with no cluster: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	if r := looprun(t, dir, "version", "-o", "table"); r.code != 1 {
		t.Errorf("version -o table: exit %d", r.code)
	}
}

// TestVersionCluster: version reads the API server's version and the
// operator's from a Deployment labelled as the chart labels it; the web
// view's Deployment, labelled alike, is not taken for the operator.
func TestVersionCluster(t *testing.T) {
	f := startCluster(t)
	ns := f.namespace(t)
	dir := t.TempDir()
	for name, container := range map[string]string{"looprun": "manager", "looprun-ui": "ui"} {
		sel := map[string]string{"app.kubernetes.io/name": name}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
				"app.kubernetes.io/name": "looprun", "app.kubernetes.io/version": "9.8.7",
			}},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: sel},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: sel},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: container, Image: "ghcr.io/looprun/looprun:9.8.7"}}},
				},
			},
		}
		if err := f.c.Create(t.Context(), d); err != nil {
			t.Fatal(err)
		}
	}

	var rep versionReport
	out := f.ok(t, dir, ns, "version", "-o", "json")
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if rep.ServerVersion == nil || rep.ServerVersion.GitVersion == "" {
		t.Errorf("version -o json has no server version: %s", out)
	}
	var mine []operatorInfo
	for _, op := range rep.Operators {
		if op.Namespace == ns {
			mine = append(mine, op)
		}
	}
	want := operatorInfo{Namespace: ns, Name: "looprun", Version: "9.8.7", Image: "ghcr.io/looprun/looprun:9.8.7"}
	if len(mine) != 1 || mine[0] != want {
		t.Errorf("operators in %s: %+v, want %+v", ns, mine, want)
	}

	text := f.ok(t, dir, ns, "version")
	for _, line := range []string{"Server Version: " + rep.ServerVersion.GitVersion, "Operator Version: 9.8.7 (deployment " + ns + "/looprun, image ghcr.io/looprun/looprun:9.8.7)"} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("version lacks %q:\n%s", line, text)
		}
	}
}
