package main

// looprun version: the client's version and, when a cluster answers, the
// Kubernetes API server's and the operator's.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/looprun/looprun/internal/version"
)

// How looprun version finds the operator: the chart labels its manager
// Deployment app.kubernetes.io/name=looprun and app.kubernetes.io/version
// (the chart's appVersion, the version the Makefile links into looprun),
// in whatever namespace it was installed into; the manager's container is
// named manager (the web view's Deployment, labelled alike, runs a
// container named ui).
const (
	operatorSelector  = "app.kubernetes.io/name=looprun"
	operatorVersion   = "app.kubernetes.io/version"
	operatorContainer = "manager"
)

// versionTimeout bounds the look at the cluster when --request-timeout
// sets no bound: a kubeconfig that points nowhere must not hold version.
const versionTimeout = 5 * time.Second

// versionOptions are looprun version's flags.
type versionOptions struct {
	k      *kube
	client bool
	output string

	out, errOut io.Writer
}

// versionReport is what looprun version prints; -o json and yaml print it
// as it is.
type versionReport struct {
	ClientVersion version.Info `json:"clientVersion"`
	// ServerVersion is the Kubernetes API server's, nil when none answered.
	ServerVersion *k8sversion.Info `json:"serverVersion,omitempty"`
	// Operators are the operator's Deployments found (one per shard).
	Operators []operatorInfo `json:"operatorVersions,omitempty"`
	// Problem says why the server's or the operator's version is missing.
	Problem string `json:"problem,omitempty"`
}

// operatorInfo is one Deployment of the operator.
type operatorInfo struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Version is its app.kubernetes.io/version label.
	Version string `json:"version"`
	// Image is its manager container's image.
	Image string `json:"image"`
}

func newVersionCommand(k *kube) *cobra.Command {
	o := &versionOptions{k: k}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print looprun's version and, when a cluster answers, the API server's and the operator's",
		Long: "Print the version of this looprun (its release, the commit it was built from, the Go\n" +
			"that built it) and, unless --client, the versions of the cluster the kubeconfig names:\n" +
			"the Kubernetes API server's, and the operator's, read from the Deployments labelled\n" +
			operatorSelector + " (as the chart installs it) in any namespace, or in\n" +
			"the current one when you may not list them all. When no cluster answers it says so\n" +
			"on one line and exits 0.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.out, o.errOut = cmd.OutOrStdout(), cmd.ErrOrStderr()
			if err := o.validate(); err != nil {
				return err
			}
			return o.run(cmd.Context())
		},
	}
	cmd.Flags().BoolVar(&o.client, "client", false, "only the client's version: do not look at the cluster")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "output format: json or yaml")
	return cmd
}

func (o *versionOptions) validate() error {
	switch o.output {
	case "", "json", "yaml":
		return nil
	}
	return fmt.Errorf("--output %q: want json or yaml", o.output)
}

func (o *versionOptions) run(ctx context.Context) error {
	rep := versionReport{ClientVersion: version.Get()}
	if !o.client {
		o.k.serverVersions(ctx, &rep)
	}
	return o.print(&rep)
}

// serverVersions adds the API server's and the operator's versions to rep,
// or why they are not there.
func (k *kube) serverVersions(ctx context.Context, rep *versionReport) {
	cfg, ns, err := k.restConfig()
	if err != nil {
		rep.Problem = err.Error()
		return
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = versionTimeout
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		rep.Problem = err.Error()
		return
	}
	if rep.ServerVersion, err = cs.Discovery().ServerVersion(); err != nil {
		rep.Problem = fmt.Sprintf("no cluster answers at %s: %v", cfg.Host, err)
		return
	}
	rep.Operators, err = findOperators(ctx, cs, ns)
	switch {
	case err != nil:
		rep.Problem = "operator: " + err.Error()
	case len(rep.Operators) == 0:
		rep.Problem = fmt.Sprintf("no operator found: no Deployment labelled %s with a %s container", operatorSelector, operatorContainer)
	}
}

// findOperators lists the operator's Deployments in all namespaces, or in
// ns when listing all is forbidden.
func findOperators(ctx context.Context, cs kubernetes.Interface, ns string) ([]operatorInfo, error) {
	opts := metav1.ListOptions{LabelSelector: operatorSelector}
	list, err := cs.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, opts)
	if apierrors.IsForbidden(err) {
		list, err = cs.AppsV1().Deployments(ns).List(ctx, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot list Deployments: %w", err)
	}
	var found []operatorInfo
	for _, d := range list.Items {
		if image, ok := managerImage(&d); ok {
			found = append(found, operatorInfo{Namespace: d.Namespace, Name: d.Name, Version: d.Labels[operatorVersion], Image: image})
		}
	}
	return found, nil
}

// managerImage is the image of a Deployment's manager container.
func managerImage(d *appsv1.Deployment) (string, bool) {
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == operatorContainer {
			return c.Image, true
		}
	}
	return "", false
}

func (o *versionOptions) print(rep *versionReport) error {
	if o.output != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil && o.output == "yaml" {
			b, err = yaml.JSONToYAML(b)
		}
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(o.out, strings.TrimRight(string(b), "\n"))
		return err
	}
	c := rep.ClientVersion
	commit := c.GitCommit
	if commit == "" {
		commit = "unknown"
	} else if c.GitTreeState == "dirty" {
		commit += " (with uncommitted changes)"
	}
	fmt.Fprintf(o.out, "Client Version: %s\nGit Commit: %s\nGo Version: %s %s\n", c.Version, commit, c.GoVersion, c.Platform)
	if rep.ServerVersion != nil {
		fmt.Fprintf(o.out, "Server Version: %s\n", rep.ServerVersion.GitVersion)
	}
	for _, op := range rep.Operators {
		fmt.Fprintf(o.out, "Operator Version: %s (deployment %s/%s, image %s)\n", orNone(op.Version), op.Namespace, op.Name, op.Image)
	}
	switch {
	case rep.Problem == "":
	case rep.ServerVersion == nil:
		fmt.Fprintf(o.out, "Server: %s\n", firstLine(rep.Problem))
	default:
		fmt.Fprintf(o.out, "Operator: %s\n", firstLine(rep.Problem))
	}
	return nil
}
