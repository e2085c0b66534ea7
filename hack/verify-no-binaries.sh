#!/usr/bin/env bash
# Fails when a tracked file is a compiled binary (an executable or object
# file that go build left behind and git add picked up). Scripts and text
# are fine; so are the test stubs, which are shell scripts.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
while IFS= read -r -d '' f; do
	[ -f "$f" ] || continue
	magic=$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')
	case "$magic" in
	7f454c46 | cffaedfe | cefaedfe | feedfacf | feedface | 4d5a*) # ELF, Mach-O, PE
		echo "tracked binary: $f (remove it and ignore it in .gitignore)" >&2
		bad=1
		;;
	esac
done < <(git ls-files -z)
exit $bad
