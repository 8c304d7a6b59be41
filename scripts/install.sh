#!/usr/bin/env bash
# Everything homesfs needs on a fresh Debian 12 machine, as root: libfuse 2 (runtime
# and headers for the native build), the programs the tests drive, the npm
# dependencies, the native addon (npm ci's postinstall: node-gyp against the
# system libfuse) and the build. systemd: systemd-analyze verifies the unit in the tests,
# systemd-notify is how the daemon tells systemd it is ready.
# Debian's "fuse" package (fusermount) is deliberately NOT installed: it conflicts
# with fuse3, and as root homesfs mounts and unmounts without it.
# --run (scripts/demo.sh): only what running needs: no test packages, no container
# images, and npm ci only when package-lock.json changed since the last one.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
run_only=0
[ "${1:-}" = "--run" ] && run_only=1
# What a node needs to build and run homesfs: README "On a node > Install" has
# this list, no more and no less, on its apt line (test/unit/install-docs.test.ts).
runtime=(libfuse2 util-linux libnss-systemd)
build=(libfuse-dev pkg-config g++ make python3)
# What the tests drive besides: git, ssh, sqlite, strace, e2fsprogs, systemd
# (systemd-analyze verifies the unit), pip and setuptools (the cache test builds
# an sdist whose wheel lands in a home).
# podman and debootstrap: test/integration/systemd-real.test.ts runs homesfs under
# Debian's systemd as PID 1 in a container (scripts/test-systemd.sh; podman 4.3
# with runc, as test/systemd/containers.sh configures it).
tests=(python3-venv openssh-client git tar diffutils e2fsprogs sqlite3 procps strace systemd python3-pip python3-setuptools
  podman buildah runc catatonit netavark aardvark-dns iptables debootstrap)
need=()
wanted=("${runtime[@]}" "${build[@]}")
[ "$run_only" = 1 ] || wanted+=("${tests[@]}")
for pkg in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-upgrade --no-install-recommends "${need[@]}"
fi
# Owner names: the daemon publishes systemd userdb records in /run/userdb, which
# nss-systemd reads (libnss-systemd's postinst adds "systemd" to these lines; a
# hand-edited nsswitch.conf may lack it). Idempotent.
for db in passwd group; do
  if ! grep -Eq "^${db}:.*[[:space:]]systemd([[:space:]]|$)" /etc/nsswitch.conf; then
    sed -i -E "s/^(${db}:.*)$/\1 systemd/" /etc/nsswitch.conf
  fi
done
stamp=node_modules/.homesfs-npm-ci
lock="$(sha256sum package-lock.json native/binding.gyp | sha256sum | cut -d' ' -f1)"
if [ "$run_only" = 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$lock" ] && [ -z "$(find native/src -newer "$stamp" -print -quit)" ]; then
  echo "install.sh: npm dependencies and the native addon are current (package-lock.json and native/src unchanged)"
else
  npm ci --no-audit --no-fund
  echo "$lock" > "$stamp"
fi
npm run build
[ "$run_only" = 1 ] && exit 0
# The systemd test's base image (debootstrap of Debian 12 with its systemd, from
# the mirror apt uses; about 100 s once, then kept by name), and the Kubernetes image on it.
(
  # shellcheck source=../test/systemd/containers.sh
  source test/systemd/containers.sh
  conf="$(mktemp -d)"
  trap 'rm -rf "$conf"' EXIT
  containers_conf "$conf"
  systemd_image
  # The Kubernetes image (test/integration/kubernetes.test.ts plays the manifests on it):
  # built on that base with this machine's Node.js, about 135 s once, then from podman's
  # layer cache (an edit under src/ rebuilds from npm pack on).
  deploy/kubernetes/local-image.sh >/dev/null
)
