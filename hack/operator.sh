#!/usr/bin/env bash
# operator.sh: runs the operator against the dev cluster (make dev-up) in
# the foreground, with actions as Pods: the test kubelet (test/kubelet)
# stands in for a node and runs each Pod's containers as processes of this
# machine, so `kubectl get pods`, `kubectl logs`, `looprun logs` and the web
# view's Pod panel show them. LOCAL=1 runs actions as processes of the
# operator instead (--allow-local-actions), with no Pods. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
export KUBECONFIG=$PWD/bin/dev/kubeconfig
[[ -s $KUBECONFIG ]] || { echo "no dev cluster: run make dev-up first" >&2; exit 1; }
kubectl=bin/k8s/kubectl
echo "building the operator, the entrypoint and the test kubelet ..." >&2
go build -o bin/manager ./cmd/manager
CGO_ENABLED=0 go build -o bin/entrypoint ./cmd/entrypoint
go build -o bin/test-kubelet ./test/kubelet/cmd/test-kubelet
workdir=${WORKDIR:-$PWD/bin/dev/node}
mkdir -p "$workdir"
flags=(--metrics-bind-address 0 --health-probe-bind-address 0)
if [[ ${LOCAL:-} == 1 ]]; then
	exec bin/manager "${flags[@]}" --allow-local-actions --local-workdir "$workdir"
fi
kubelet=""
trap '[[ -n $kubelet ]] && kill "$kubelet" 2>/dev/null; wait 2>/dev/null || true' EXIT
trap 'exit 130' INT TERM
# The images are names only: the test kubelet runs bin/entrypoint for
# /entrypoint and the action's command with this machine's bash.
bin/test-kubelet --dir "$workdir" --entrypoint "$PWD/bin/entrypoint" >bin/dev/test-kubelet.log 2>&1 &
kubelet=$!
# A cluster's controllers make each namespace's default service account;
# the dev cluster has none of them.
$kubectl get serviceaccount default >/dev/null 2>&1 || $kubectl create serviceaccount default >/dev/null
echo "operator running; actions run as Pods on the test kubelet (log: bin/dev/test-kubelet.log)" >&2
bin/manager "${flags[@]}" --entrypoint-image looprun.local/looprun:dev --runner-image looprun.local/bash:dev
