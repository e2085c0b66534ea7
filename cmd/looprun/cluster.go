package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/looprun/looprun/api/v1alpha1"
)

// kube is how the cluster commands reach the cluster: kubectl's flags
// (client-go's override flags: --kubeconfig, --context, -n, --as, --token,
// --server, --request-timeout, ...) and kubeconfig loading rules.
type kube struct {
	// loading finds the kubeconfig: --kubeconfig, else $KUBECONFIG, else
	// ~/.kube/config.
	loading *clientcmd.ClientConfigLoadingRules
	// overrides are what the flags say over the kubeconfig.
	overrides clientcmd.ConfigOverrides
	// plugin is true when looprun runs as kubectl-loop: bare names then
	// always mean Loops in the cluster.
	plugin bool
	// now is the clock (tests fix it).
	now func() time.Time
	// loopsDir is where local runs are (--loops-dir), named when a Loop
	// is not found but a local run of its name is.
	loopsDir string

	scheme *runtime.Scheme
	c      client.WithWatch
	cs     kubernetes.Interface
	ns     string
}

// bind adds kubectl's cluster flags to root, persistent as kubectl's are.
func (k *kube) bind(root *cobra.Command) {
	f := root.PersistentFlags()
	k.loading = clientcmd.NewDefaultClientConfigLoadingRules()
	f.StringVar(&k.loading.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "", "path to the kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
	clientcmd.BindOverrideFlags(&k.overrides, f, clientcmd.RecommendedConfigOverrideFlags(""))
}

// namespaceFlag is the namespace -n named, "" when none was named.
func (k *kube) namespaceFlag() string { return k.overrides.Context.Namespace }

// restConfig is the client configuration the kubeconfig and the flags
// make, and the namespace the commands use (-n, else the context's).
func (k *kube) restConfig() (*rest.Config, string, error) {
	if k.loading == nil {
		k.loading = clientcmd.NewDefaultClientConfigLoadingRules()
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(k.loading, &k.overrides)
	cfg, err := cc.ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		// client-go's own words point at KUBERNETES_MASTER, which nothing reads.
		return nil, "", errors.New("no cluster to talk to: no kubeconfig names one (set KUBECONFIG, write ~/.kube/config, or give --kubeconfig or --server)")
	}
	if err != nil {
		return nil, "", fmt.Errorf("no cluster to talk to: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", err
	}
	return cfg, ns, nil
}

// connect builds the clients once.
func (k *kube) connect() error {
	if k.c != nil {
		return nil
	}
	cfg, ns, err := k.restConfig()
	if err != nil {
		return err
	}
	k.ns = ns
	k.scheme = runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(k.scheme))
	utilruntime.Must(v1alpha1.AddToScheme(k.scheme))
	if k.c, err = client.NewWithWatch(cfg, client.Options{Scheme: k.scheme}); err != nil {
		return err
	}
	k.cs, err = kubernetes.NewForConfig(cfg)
	return err
}

func (k *kube) key(name string) client.ObjectKey {
	return client.ObjectKey{Namespace: k.ns, Name: name}
}

func (k *kube) clock() time.Time {
	if k.now != nil {
		return k.now()
	}
	return time.Now()
}

// getLoop connects and reads a Loop, with an error a user can act on.
func (k *kube) getLoop(ctx context.Context, name string) (*v1alpha1.Loop, error) {
	if err := k.connect(); err != nil {
		if hint := k.localRunHint(name); hint != "" {
			return nil, fmt.Errorf("%w%s", err, hint)
		}
		return nil, err
	}
	loop := &v1alpha1.Loop{}
	if err := k.c.Get(ctx, k.key(name), loop); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, k.notInCluster(name)
		}
		return nil, err
	}
	return loop, nil
}

// loopTarget reads a command argument: loop/NAME (also loops/, lp/,
// loop.looprun.io/) always names a Loop in the cluster; a bare NAME does
// when clusterDefault (or when run as kubectl-loop), else a local run.
func (k *kube) loopTarget(arg string, clusterDefault bool) (name string, cluster bool) {
	if kind, name, ok := strings.Cut(arg, "/"); ok {
		switch kind {
		case "loop", "loops", "lp", "loop.looprun.io", "loops.looprun.io":
			return name, true
		}
	}
	return arg, clusterDefault || k.plugin
}

// localOrLoop is the target of a command with --local: the local run NAME
// when the flag is given (as kubectl loop too, where a bare NAME is
// otherwise a Loop), else as loopTarget says with a Loop by default.
func (k *kube) localOrLoop(arg string, local bool) (name string, cluster bool) {
	name, cluster = k.loopTarget(arg, true)
	if local && name == arg {
		return arg, false
	}
	return name, cluster
}

// request sets the looprun.io/request annotation to what req makes of a
// nonce, which makes a repeated request a new one.
func (k *kube) request(ctx context.Context, name string, req func(nonce string) string) error {
	loop, err := k.getLoop(ctx, name)
	if err != nil {
		return err
	}
	patch := client.MergeFrom(loop.DeepCopy())
	if loop.Annotations == nil {
		loop.Annotations = map[string]string{}
	}
	loop.Annotations[v1alpha1.RequestAnnotation] = req(strconv.FormatInt(k.clock().UnixNano(), 10))
	return k.c.Patch(ctx, loop, patch)
}

func orNone(s string) string { return cmp.Or(s, "<none>") }
