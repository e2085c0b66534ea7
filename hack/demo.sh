#!/usr/bin/env bash
# demo.sh: starts the dev cluster and the operator, applies config/samples,
# and shows the Loop progressing to completion with kubectl get loops -w.
set -euo pipefail
cd "$(dirname "$0")/.."
kubectl=bin/k8s/kubectl
export KUBECONFIG=$PWD/bin/dev/kubeconfig
hack/dev-cluster.sh up
go build -o bin/manager ./cmd/manager
workdir=$(mktemp -d)
bin/manager --allow-local-actions --local-workdir "$workdir" --metrics-bind-address 0 --health-probe-bind-address 0 >bin/dev/manager.log 2>&1 &
manager=$!
watch=""
cleanup() {
	[[ -n $watch ]] && kill "$watch" 2>/dev/null || true
	kill "$manager" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$workdir"
	hack/dev-cluster.sh down
}
trap cleanup EXIT
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
