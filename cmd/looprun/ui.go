package main

import (
	"fmt"
	"os/signal"

	"github.com/spf13/cobra"

	"github.com/looprun/looprun/internal/ui"
)

func newUICommand(g *globals, k *kube) *cobra.Command {
	var listen string
	var allowHosts []string
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve a live web view of the local runs and the cluster's Loops (state graph, where each run is, timeline)",
		Long: `Serve a web view of the runs under --loops-dir on this machine: each
loop's state graph with the state it is in, how often each edge was taken,
what each state last printed and decided, and a timeline of the run, kept
up to date as the runs move (server-sent events from the runs' files).
With a kubeconfig (as kubectl finds it), the cluster's Loops are there too,
read with your own credentials: what your RBAC lets you list and get
(all namespaces, or -n NAMESPACE's), and the log of the Pod a state ran in.
It only reads, but for one thing: an approval a run waits for can be
answered on the page, as looprun approve and reject answer it (as you, with
the verb approve on a cluster's Loop), and only from this machine. It
prints the URL it serves; it listens on localhost unless told otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), stopSignals...)
			defer stop()
			srv := &ui.Server{LoopsDir: g.loopsDir, Files: g.fileOptions(), User: whoami(), AllowedHosts: allowHosts}
			if err := k.connect(); err == nil {
				srv.Cluster = &ui.Cluster{Client: k.c, Namespace: k.namespaceFlag(), Pods: k.cs}
			} else {
				fmt.Fprintf(cmd.ErrOrStderr(), "looprun ui: local runs only (%v)\n", err)
			}
			return ui.Serve(ctx, listen, srv.Handler(), func(url string) {
				fmt.Fprintf(cmd.OutOrStdout(), "looprun ui: %s (Ctrl-C stops it)\n", url)
			})
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "address to serve at, HOST:PORT (port 0: a free one)")
	cmd.Flags().StringSliceVar(&allowHosts, "allow-host", nil, "a host name requests may name besides localhost and IP addresses (an Ingress's); every other name is refused, against DNS rebinding")
	return cmd
}
