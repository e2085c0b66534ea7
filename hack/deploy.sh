#!/usr/bin/env bash
# deploy.sh apply|delete|render: deploys config/default with the operator
# image IMG (default ghcr.io/looprun/looprun:latest) to the cluster of the
# current kubeconfig, removes it, or prints the manifests.
#
# The image is set through a kustomize overlay written to bin/deploy, so that
# nothing under config/ changes: the manager container and the entrypoint
# image that action Pods copy /entrypoint from are the same image.
set -euo pipefail
cd "$(dirname "$0")/.."
img=${IMG:-ghcr.io/looprun/looprun:latest}
kubectl=${KUBECTL:-bin/k8s/kubectl}
if [[ ! -x $kubectl ]]; then
	hack/setup-envtest.sh >/dev/null # builds bin/k8s/kubectl too
fi
name=${img%:*} tag=${img##*:}
if [[ $name == "$img" || $tag == */* ]]; then
	name=$img tag=latest
fi
overlay=bin/deploy
mkdir -p "$overlay"
cat >"$overlay/kustomization.yaml" <<YAML
# Written by hack/deploy.sh for IMG=$img.
resources:
  - ../../config/default
  - ../../config/approval
images:
  - name: ghcr.io/looprun/looprun
    newName: $name
    newTag: "$tag"
patches:
  - patch: |
      apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: looprun-controller-manager
        namespace: looprun-system
      spec:
        template:
          spec:
            containers:
              - name: manager
                env:
                  - name: LOOPRUN_ENTRYPOINT_IMAGE
                    value: "$img"
YAML
case ${1:-} in
render) "$kubectl" kustomize "$overlay" ;;
apply) "$kubectl" kustomize "$overlay" | "$kubectl" apply --server-side -f - ;;
delete) "$kubectl" kustomize "$overlay" | "$kubectl" delete --ignore-not-found --wait=false -f - ;;
*)
	echo "usage: $0 apply|delete|render" >&2
	exit 2
	;;
esac
