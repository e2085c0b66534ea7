#!/usr/bin/env bash
# Fails when a fuzz target of the repository is missing from the Makefile's
# FUZZ_TARGETS, so that make test's short fuzz run covers every target.
set -euo pipefail
cd "$(dirname "$0")/.."
listed=$(make -s --no-print-directory print-fuzz-targets | tr ' ' '\n' | sed '/^$/d' | sort)
found=$(git ls-files -co --exclude-standard '*_test.go' | xargs grep -l '^func Fuzz' | while read -r f; do
	for name in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed 's/^func //'); do
		echo "./$(dirname "$f"):$name"
	done
done | sort)
if [ "$listed" != "$found" ]; then
	echo "FUZZ_TARGETS in the Makefile and the fuzz targets in the code differ:"
	diff <(echo "$listed") <(echo "$found") || true
	exit 1
fi
