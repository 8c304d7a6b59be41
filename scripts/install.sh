#!/usr/bin/env bash
# Everything homesfs needs on a fresh Debian 12 machine, as root: libfuse 2 (runtime
# and headers for the native build), the programs the tests drive, the npm
# dependencies, the patched FUSE binding (npm ci's postinstall: GNU patch, then
# node-gyp) and the build. systemd: systemd-analyze verifies the unit in the tests,
# systemd-notify is how the daemon tells systemd it is ready.
# Debian's "fuse" package (fusermount) is deliberately NOT installed: it conflicts
# with fuse3, and as root homesfs mounts and unmounts without it.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
need=()
for pkg in libfuse2 libfuse-dev pkg-config g++ make python3 python3-venv openssh-client patch git tar diffutils util-linux sqlite3 procps strace systemd; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
npm ci --no-audit --no-fund
npm run build
