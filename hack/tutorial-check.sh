#!/usr/bin/env bash
# tutorial-check.sh: runs the commands of docs/tutorial.md's by-hand
# cluster walk (the ```sh blocks between its tutorial-check markers),
# exactly as written and in order, in a fresh clone of this repository's
# HEAD under a temporary directory, and fails at the first command that
# fails. The kube binaries already built (bin/k8s) are reused; nothing
# else of this tree is.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/looprun-tutorial.XXXXXX")
clone=$tmp/looprun
git clone -q "$repo" "$clone"
if [[ -d $repo/bin/k8s ]]; then
	mkdir -p "$clone/bin"
	cp -a "$repo/bin/k8s" "$clone/bin/k8s"
fi
script=$tmp/walk.sh
{
	echo 'set -euo pipefail -m'
	echo 'cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; make dev-down >/dev/null 2>&1 || true; }'
	echo 'trap cleanup EXIT'
	echo 'set -x'
	awk '
		/<!-- tutorial-check: begin -->/ { on = 1; next }
		/<!-- tutorial-check: end -->/ { on = 0 }
		on && /^```sh$/ { code = 1; next }
		code && /^```$/ { code = 0; next }
		code { print }
	' "$clone/docs/tutorial.md"
} >"$script"
echo "tutorial-check: walking docs/tutorial.md in $clone" >&2
cd "$clone"
status=0
timeout --foreground 20m bash "$script" || status=$?
if [[ $status -ne 0 ]]; then
	echo "tutorial-check: FAILED (exit $status); the operator's log:" >&2
	tail -40 bin/dev/operator.log >&2 || true
	exit 1
fi
rm -rf "$tmp"
echo "tutorial-check: every command of the tutorial's cluster walk ran" >&2
