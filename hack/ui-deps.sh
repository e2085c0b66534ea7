#!/usr/bin/env bash
# Installs what make test-ui drives: Debian's chromium (a browser test
# tool's own browser download cannot work here). Needs root and apt.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "make test-ui needs /usr/bin/chromium: apt-get install chromium (as root)" >&2
	exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
