package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeFlags parses args as looprun's root command would, with $KUBECONFIG
// naming a kubeconfig of two contexts ("one", the current, in namespace
// "first"; "two" in "second"), and returns what the cluster commands would
// connect with.
func kubeFlags(t *testing.T, args ...string) (*kube, error) {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["a"] = &clientcmdapi.Cluster{Server: "https://a.example:6443"}
	kc.Clusters["b"] = &clientcmdapi.Cluster{Server: "https://b.example:6443"}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "from-kubeconfig"}
	kc.Contexts["one"] = &clientcmdapi.Context{Cluster: "a", AuthInfo: "admin", Namespace: "first"}
	kc.Contexts["two"] = &clientcmdapi.Context{Cluster: "b", AuthInfo: "admin", Namespace: "second"}
	kc.CurrentContext = "one"
	path := filepath.Join(t.TempDir(), "config")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", path)
	k := &kube{}
	root := newRootCommand(k)
	return k, root.PersistentFlags().Parse(args)
}

// TestKubeFlags: kubectl's flags reach the client configuration the cluster
// commands use: the context and namespace, a server and token, an
// identity to impersonate, a request timeout.
func TestKubeFlags(t *testing.T) {
	for _, tc := range []struct {
		name                string
		args                []string
		host, token, as, ns string
		groups              []string
		timeout             time.Duration
		insecure            bool
		nsFlag              string
	}{
		{name: "the kubeconfig's current context", host: "https://a.example:6443", token: "from-kubeconfig", ns: "first"},
		{name: "--context and -n", args: []string{"--context", "two", "-n", "mine"},
			host: "https://b.example:6443", token: "from-kubeconfig", ns: "mine", nsFlag: "mine"},
		{name: "--server and --token", args: []string{"--server", "https://c.example", "--token", "t0ken", "--insecure-skip-tls-verify"},
			host: "https://c.example", token: "t0ken", ns: "first", insecure: true},
		{name: "--as and --as-group", args: []string{"--as", "alice", "--as-group", "devs", "--as-group", "ops"},
			host: "https://a.example:6443", token: "from-kubeconfig", ns: "first", as: "alice", groups: []string{"devs", "ops"}},
		{name: "--request-timeout", args: []string{"--request-timeout", "7s", "--namespace", "x"},
			host: "https://a.example:6443", token: "from-kubeconfig", ns: "x", timeout: 7 * time.Second, nsFlag: "x"},
		{name: "--cluster and --user", args: []string{"--cluster", "b", "--user", "admin"},
			host: "https://b.example:6443", token: "from-kubeconfig", ns: "first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := kubeFlags(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			cfg, ns, err := k.restConfig()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tc.host || cfg.BearerToken != tc.token || ns != tc.ns {
				t.Errorf("host %q, token %q, namespace %q; want %q, %q, %q", cfg.Host, cfg.BearerToken, ns, tc.host, tc.token, tc.ns)
			}
			if cfg.Impersonate.UserName != tc.as || !slices.Equal(cfg.Impersonate.Groups, tc.groups) {
				t.Errorf("impersonating %q %q; want %q %q", cfg.Impersonate.UserName, cfg.Impersonate.Groups, tc.as, tc.groups)
			}
			if cfg.Timeout != tc.timeout {
				t.Errorf("timeout %v, want %v", cfg.Timeout, tc.timeout)
			}
			if cfg.Insecure != tc.insecure {
				t.Errorf("insecure %v, want %v", cfg.Insecure, tc.insecure)
			}
			if got := k.namespaceFlag(); got != tc.nsFlag {
				t.Errorf("namespace flag %q, want %q", got, tc.nsFlag)
			}
		})
	}
}

// TestKubeFlagsKubeconfig: --kubeconfig wins over $KUBECONFIG (one that is
// not there is an error), and a timeout that is no duration is an error.
func TestKubeFlagsKubeconfig(t *testing.T) {
	k, err := kubeFlags(t, "--kubeconfig", filepath.Join(t.TempDir(), "missing"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := k.restConfig(); err == nil {
		t.Fatal("a missing --kubeconfig gave a configuration")
	}
	k, err = kubeFlags(t, "--request-timeout", "soon")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := k.restConfig(); err == nil {
		t.Fatal("--request-timeout soon gave a configuration")
	}
}

// With no kubeconfig at all, the CLI says how to name a cluster, not
// client-go's hint at KUBERNETES_MASTER.
func TestNoKubeconfigSaysHowToNameACluster(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	t.Setenv("HOME", t.TempDir())
	k := &kube{}
	_, _, err := k.restConfig()
	if err == nil || strings.Contains(err.Error(), "KUBERNETES_MASTER") || !strings.Contains(err.Error(), "set KUBECONFIG") {
		t.Fatalf("error: %v", err)
	}
}
