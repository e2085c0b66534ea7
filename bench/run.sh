#!/usr/bin/env bash
# Runs the benchmarks; bench/RESULTS.md records what they measured. Each
# benchmark exits non-zero when it misses its target; all of them run.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
echo "== local engine: per-iteration overhead (target: <= 0.3 ms above raw spawn)"
go run ./bench/loopbench "$@" || status=1
echo
echo "== agent steps: stream-json over plain text per iteration (target: <= 0.5 ms), memory on 1 GiB"
go run ./bench/agentbench || status=1
echo
echo "== operator: overhead per transition and throughput against a real API server"
KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)" go run ./bench/operatorbench || status=1
echo
echo "== operator: overhead per Pod step with the test kubelet, next to local actions"
KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)" go run ./bench/podbench || status=1
echo
echo "== operator: 10,000 Loops (9,000 idle, 1,000 running), memory, throughput, restart"
KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)" go run ./bench/scalebench || status=1
echo
echo "== operator: one tenant's 1,500 queued Loops and 300 schedules against another namespace's"
KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)" go run ./bench/tenantbench || status=1
echo
echo "== checkpoints: save and load p95 of a run state with 100 captures of 4 KiB"
KUBEBUILDER_ASSETS="$(hack/setup-envtest.sh)" go run ./bench/checkpointbench || status=1
exit $status
