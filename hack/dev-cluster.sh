#!/usr/bin/env bash
# dev-cluster.sh up|down: a local kube-apiserver and etcd with the Loop CRD,
# in the background, with an admin kubeconfig at bin/dev/kubeconfig.
set -euo pipefail
cd "$(dirname "$0")/.."
dev=bin/dev
pidfile=$dev/devcluster.pid
case "${1:-}" in
up)
	if [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
		echo "dev cluster already running (kubeconfig $dev/kubeconfig)"
		exit 0
	fi
	mkdir -p "$dev"
	KUBEBUILDER_ASSETS=$(hack/setup-envtest.sh)
	export KUBEBUILDER_ASSETS
	go build -o "$dev/devcluster" ./hack/devcluster
	rm -f "$dev/kubeconfig"
	nohup "$dev/devcluster" -write-kubeconfig "$dev/kubeconfig" >"$dev/devcluster.log" 2>&1 &
	echo $! >"$pidfile"
	for _ in $(seq 1 120); do
		[[ -s $dev/kubeconfig ]] && break
		if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
			cat "$dev/devcluster.log" >&2
			exit 1
		fi
		sleep 0.5
	done
	[[ -s $dev/kubeconfig ]] || { echo "dev cluster did not start; see $dev/devcluster.log" >&2; exit 1; }
	echo "dev cluster up: export KUBECONFIG=$PWD/$dev/kubeconfig"
	;;
down)
	if [[ -f $pidfile ]]; then
		pid=$(cat "$pidfile")
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
		rm -f "$pidfile"
	fi
	echo "dev cluster down"
	;;
*)
	echo "usage: $0 up|down" >&2
	exit 2
	;;
esac
