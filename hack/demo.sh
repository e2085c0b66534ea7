#!/usr/bin/env bash
# demo.sh: starts the dev cluster and the operator, applies config/samples,
# and shows the Loop progressing to completion with kubectl get loops -w.
#
# Actions run as Pods, the production path: the test kubelet (test/kubelet)
# stands in for a node and runs each Pod's containers as local processes.
# LOCAL=1 runs them as processes of the operator instead (--allow-local-actions).
set -euo pipefail
cd "$(dirname "$0")/.."
kubectl=bin/k8s/kubectl
export KUBECONFIG=$PWD/bin/dev/kubeconfig
hack/dev-cluster.sh up
go build -o bin/manager ./cmd/manager
CGO_ENABLED=0 go build -o bin/entrypoint ./cmd/entrypoint
go build -o bin/test-kubelet ./test/kubelet/cmd/test-kubelet
workdir=$(mktemp -d)
pids=()
watch=""
cleanup() {
	[[ -n $watch ]] && kill "$watch" 2>/dev/null || true
	kill "${pids[@]}" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$workdir"
	hack/dev-cluster.sh down
}
trap cleanup EXIT
flags=(--metrics-bind-address 0 --health-probe-bind-address 0)
if [[ ${LOCAL:-} == 1 ]]; then
	bin/manager "${flags[@]}" --allow-local-actions --local-workdir "$workdir" >bin/dev/manager.log 2>&1 &
	pids+=($!)
else
	# The images are names only: the test kubelet runs bin/entrypoint for
	# /entrypoint and the action's command with this machine's bash.
	bin/test-kubelet --dir "$workdir" --entrypoint bin/entrypoint >bin/dev/test-kubelet.log 2>&1 &
	pids+=($!)
	bin/manager "${flags[@]}" --entrypoint-image looprun.local/looprun:dev --runner-image looprun.local/bash:dev >bin/dev/manager.log 2>&1 &
	pids+=($!)
	# A cluster's controllers make each namespace's default service account;
	# the dev cluster has none of them.
	$kubectl get serviceaccount default >/dev/null 2>&1 || $kubectl create serviceaccount default >/dev/null
fi
$kubectl apply -k config/samples
$kubectl get loops -w &
watch=$!
$kubectl wait --for=condition=Ready --timeout=120s loop/fix-until-clean >/dev/null
sleep 0.5
kill "$watch" 2>/dev/null || true
watch=""
echo
$kubectl get loop fix-until-clean -o wide
echo
echo "events of the run (kubectl get configmap fix-until-clean-events-1):"
$kubectl get configmap fix-until-clean-events-1 -o jsonpath='{.data.events\.jsonl}' | cut -c1-150
if [[ ${LOCAL:-} != 1 ]]; then
	echo
	echo "action Pods kept for kubectl logs (spec.history.keepPods):"
	$kubectl get pods -l looprun.io/loop=fix-until-clean -L looprun.io/iteration,looprun.io/state
	last=$($kubectl get pods -l looprun.io/loop=fix-until-clean -o name | tail -1)
	echo
	echo "the result the entrypoint left in the termination message of $last:"
	$kubectl get "$last" -o jsonpath='{.status.containerStatuses[0].state.terminated.message}'
	echo
fi
