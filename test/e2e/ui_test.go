//go:build e2e

package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
)

var _ = Describe("The web view in the cluster (chart ui.enabled) on a real node", func() {
	It("serves the cluster's Loops and their Pods' logs, read as its own read-only service account", func() {
		installOperator("e2e", "ui.enabled=true")
		DeferCleanup(func() { installOperator("e2e") })
		ns := newNamespace()
		key := create(ns, "shown", v1alpha1.LoopSpec{Initial: "work", States: map[string]v1alpha1.State{
			"work": {Action: "echo working; echo from-the-pod-log", Next: "done"}, "done": {Terminal: true}}})
		waitFinished(key, 3*time.Minute)

		var ip string
		Eventually(func(g Gomega) {
			pods := &corev1.PodList{}
			g.Expect(k8sClient.List(bg, pods, client.InNamespace(operatorNS), client.MatchingLabels{"app.kubernetes.io/name": "looprun-ui"})).To(Succeed())
			g.Expect(pods.Items).To(HaveLen(1))
			p := pods.Items[0]
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
			g.Expect(p.Status.PodIP).NotTo(BeEmpty())
			ip = p.Status.PodIP
		}, 2*time.Minute, time.Second).Should(Succeed())
		base := "http://" + ip + ":8080"
		fetch := func(path string) (int, string) {
			resp, err := http.Get(base + path)
			if err != nil {
				return 0, err.Error()
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		var list struct {
			Loops []struct{ Source, Namespace, Name, Phase string }
		}
		Eventually(func(g Gomega) {
			code, body := fetch("/api/loops")
			g.Expect(code).To(Equal(http.StatusOK), body)
			g.Expect(json.Unmarshal([]byte(body), &list)).To(Succeed())
			found := false
			for _, l := range list.Loops {
				found = found || l.Source == "cluster" && l.Namespace == ns && l.Name == "shown" && l.Phase == "Completed"
			}
			g.Expect(found).To(BeTrue(), body)
		}, time.Minute, time.Second).Should(Succeed())
		code, body := fetch("/api/loops/cluster/" + ns + "/shown")
		Expect(code).To(Equal(http.StatusOK), body)
		Expect(body).To(And(ContainSubstring(`"name":"work"`), ContainSubstring(`"state":"done"`)))
		code, body = fetch("/api/loops/cluster/" + ns + "/shown/timeline")
		Expect(code).To(Equal(http.StatusOK), body)
		Expect(body).To(ContainSubstring(`"state":"work"`))
		// A state's panel: the Pod it ran in last and its log, read by the
		// kubelet of this node through the API server.
		code, body = fetch("/api/loops/cluster/" + ns + "/shown/states/work/pod")
		Expect(code).To(Equal(http.StatusOK), body)
		var pl struct{ Pod, Phase, Log, Problem string }
		Expect(json.Unmarshal([]byte(body), &pl)).To(Succeed())
		Expect(pl.Pod).To(HavePrefix("shown-"), body)
		Expect(pl.Phase).NotTo(BeEmpty(), body) // the kubelet may not have said Succeeded yet
		Expect(pl.Log).To(ContainSubstring("from-the-pod-log"), body)
		Expect(pl.Problem).To(BeEmpty(), body)
		code, body = fetch("/")
		Expect(code).To(Equal(http.StatusOK))
		Expect(strings.Contains(body, "/assets/app.js")).To(BeTrue(), body)
	})
})
