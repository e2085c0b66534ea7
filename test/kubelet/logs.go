package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ServeLogs makes container logs readable through the API server, as a
// kubelet's do: it serves /containerLogs/NAMESPACE/POD/CONTAINER over HTTPS
// (a self-signed certificate: the API server checks none unless told to)
// and registers the fake Node with that endpoint. c reads Pods and writes
// the Node (an uncached client: it may run before the kubelet's manager
// starts). It stops with ctx.
func (k *Kubelet) ServeLogs(ctx context.Context, c client.Client) error {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { k.containerLogs(c, w, r) }))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv.Listener = l
	srv.StartTLS()
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	_, portText, err := net.SplitHostPort(l.Addr().String())
	if err != nil {
		return err
	}
	port, err := strconv.ParseInt(portText, 10, 32)
	if err != nil {
		return err
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: NodeName}}
	if err := c.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
		return err
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
	return c.Status().Update(ctx, node)
}

// containerLogs answers GET /containerLogs/NAMESPACE/POD/CONTAINER[?follow=true].
func (k *Kubelet) containerLogs(c client.Client, w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/containerLogs/"), "/")
	if len(parts) != 3 {
		http.NotFound(w, r)
		return
	}
	pod := &corev1.Pod{}
	if err := c.Get(r.Context(), client.ObjectKey{Namespace: parts[0], Name: parts[1]}, pod); err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	path := filepath.Join(k.Dir, "pods", string(pod.UID), parts[2]+".log")
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, fmt.Sprintf("container %s of pod %s has no log", parts[2], parts[1]), http.StatusNotFound)
		return
	}
	defer f.Close()
	follow := r.URL.Query().Get("follow") == "true"
	flusher, _ := w.(http.Flusher)
	for {
		_, err := io.Copy(w, f)
		if err != nil && !errors.Is(err, io.EOF) {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		if !follow || !k.isRunning(pod) {
			_, _ = io.Copy(w, f) // what was written before it ended
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (k *Kubelet) isRunning(pod *corev1.Pod) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.running[pod.UID]
	return ok
}
