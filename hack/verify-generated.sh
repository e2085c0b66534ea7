#!/usr/bin/env bash
# Fails when generated files in the work tree differ from what the generators
# produce now. The files are regenerated either way.
set -euo pipefail
cd "$(dirname "$0")/.."
snapshot=$(mktemp -d)
trap 'rm -rf "$snapshot"' EXIT
generated() { git ls-files -co --exclude-standard -- '*zz_generated*.go' config/crd/bases config/rbac/role.yaml charts/looprun/crds charts/looprun/files docs/reference; }
for f in $(generated); do mkdir -p "$snapshot/$(dirname "$f")"; cp "$f" "$snapshot/$f"; done
make --no-print-directory manifests generate docs >/dev/null
stale=0
for f in $(generated); do
	if ! cmp -s "$f" "$snapshot/$f"; then
		echo "stale generated file: $f (run make manifests generate docs and commit it)" >&2
		stale=1
	fi
done
exit $stale
