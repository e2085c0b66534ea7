#!/usr/bin/env bash
# Builds the envtest binaries (kube-apiserver, etcd, kubectl) from source
# through the Go module proxy, since prebuilt ones cannot be downloaded here,
# and caches them in bin/k8s/. Prints the directory (for KUBEBUILDER_ASSETS).
#
#   hack/setup-envtest.sh          kube-apiserver, etcd, kubectl (make test)
#   hack/setup-envtest.sh node     and kubelet, kube-scheduler,
#                                  kube-controller-manager (make test-e2e)
#
#   kube-apiserver, kubectl: k8s.io/kubernetes with every staging module
#                            replaced by the same-named module at the same
#                            minor release
#   etcd:                    go.etcd.io/etcd/server/v3, etcdmain.Main
set -euo pipefail
cd "$(dirname "$0")/.."
KUBE_VERSION=${KUBE_VERSION:-1.36.3}
ETCD_VERSION=${ETCD_VERSION:-3.5.17}
out=${ENVTEST_DIR:-$PWD/bin/k8s}
stamp="$out/.versions"
want="kube $KUBE_VERSION etcd $ETCD_VERSION stamped"
binaries=(kube-apiserver kubectl)
if [[ ${1:-} == node ]]; then
	binaries+=(kubelet kube-scheduler kube-controller-manager)
	want+=" node"
fi
have=true
for b in "${binaries[@]}" etcd; do [[ -x $out/$b ]] || have=false; done
# A node build holds everything the envtest build does.
if $have && [[ "$(cat "$stamp" 2>/dev/null)" == "$want"* ]]; then
	echo "$out"
	exit 0
fi
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log() { echo "setup-envtest: $*" >&2; }

staging=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
	cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
	cri-client cri-streaming csi-translation-lib dynamic-resource-allocation endpointslice externaljwt
	kms kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
	mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller streaming)

# What an earlier build made at these versions is kept: a node build after
# an envtest one builds only the node's binaries.
base="kube $KUBE_VERSION etcd $ETCD_VERSION stamped"
todo=()
for b in "${binaries[@]}"; do
	[[ -x $out/$b && "$(cat "$stamp" 2>/dev/null)" == "$base"* ]] || todo+=("$b")
done
want_etcd=true
[[ -x $out/etcd && "$(cat "$stamp" 2>/dev/null)" == "$base"* ]] && want_etcd=false
start=$SECONDS
since() { echo "$((SECONDS - start))s"; }
what="${todo[*]:-}"
$want_etcd && what+=" etcd"
log "building from source, once: ${what# } (all of them take 15 to 25 minutes on 2 cores)"
[[ ${#todo[@]} -eq 0 ]] || (
	log "downloading the modules of k8s.io/kubernetes v$KUBE_VERSION"
	mkdir -p "$work/kube"
	cd "$work/kube"
	{
		echo "module looprun.local/envtest-kube"
		echo
		echo "go 1.26"
		echo
		echo "require k8s.io/kubernetes v$KUBE_VERSION"
		echo
		echo "replace ("
		for m in "${staging[@]}"; do echo "	k8s.io/$m => k8s.io/$m v0.${KUBE_VERSION#1.}"; done
		echo ")"
	} >go.mod
	{
		printf '//go:build tools\n\npackage tools\n\nimport (\n'
		for b in "${todo[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$b"; done
		printf ')\n'
	} >tools.go
	GOFLAGS=-mod=mod go mod tidy >&2
	# The version is stamped as the release builds do: the apiserver derives
	# its compatibility version (and so which features it serves) from it.
	minor=${KUBE_VERSION#1.}
	minor=${minor%%.*}
	ldflags=""
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $pkg.gitVersion=v$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
		ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
	done
	n=0
	for b in "${todo[@]}"; do
		n=$((n + 1))
		log "building $b ($n of ${#todo[@]}, $(since) so far)"
		CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/$b" "k8s.io/kubernetes/cmd/$b"
	done
)

# etcd is the same in both builds: a node build after an envtest one keeps it.
$want_etcd && (
	log "building etcd v$ETCD_VERSION ($(since) so far)"
	mkdir -p "$work/etcd"
	cd "$work/etcd"
	cat >go.mod <<MOD
module looprun.local/envtest-etcd

go 1.26

require go.etcd.io/etcd/server/v3 v$ETCD_VERSION
MOD
	cat >main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
	GOFLAGS=-mod=mod go mod tidy >&2
	CGO_ENABLED=0 go build -trimpath -o "$out/etcd" .
)
echo "$want" >"$stamp"
log "done in $(since): $out"
echo "$out"
