#!/bin/sh
# Install the Debian/Ubuntu packages raidlab needs (scripts/system-packages.txt).
# Idempotent: only missing packages are installed; apt-get update runs only when needed.
set -eu
here=$(dirname "$0")
pkgs=$(grep -v '^\s*#' "$here/system-packages.txt" | grep -v '^\s*$' | tr '\n' ' ')
missing=""
for p in $pkgs; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
if [ -z "$missing" ]; then
    echo "system packages: all present"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "system packages missing:$missing" >&2
    echo "run as root: apt-get install -y$missing" >&2
    exit 2
fi
echo "installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
