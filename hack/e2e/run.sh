#!/usr/bin/env bash
# make test-e2e: sets up what the end-to-end tests need (Debian packages, the
# Kubernetes binaries, the images), starts a one-node cluster, runs the specs
# of test/e2e against it and always tears the cluster down.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ $(id -u) != 0 ]]; then
	echo "make test-e2e runs containerd and a kubelet: it needs root" >&2
	exit 1
fi
need=()
for p in containerd runc containernetworking-plugins iptables openssl busybox-static bash-static; do
	dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if ((${#need[@]})); then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
export E2E_DIR=${E2E_DIR:-$PWD/bin/e2e}
kube=$(hack/setup-envtest.sh node)
# What an earlier run left (it was killed, say) goes first.
hack/e2e/cluster.sh down
# One set of build flags for the images, the CLI and the specs (those of
# the Dockerfile: static, trimmed paths), so that each package is compiled
# once.
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath"
go run ./test/e2e/mkimages -out "$E2E_DIR/images" >/dev/null
trap 'hack/e2e/cluster.sh down' EXIT
hack/e2e/cluster.sh up
KUBECONFIG=$E2E_DIR/admin.kubeconfig PATH=$kube:$PATH HELM=${HELM:-$PWD/bin/helm} \
	go test -tags e2e -count=1 -timeout "${E2E_TIMEOUT:-30m}" ./test/e2e/ -ginkgo.label-filter="${E2E_LABELS:-!chaos}" "$@"
