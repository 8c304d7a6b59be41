#!/usr/bin/env bash
# homesfs under a real systemd (Debian 12's systemd 252 as PID 1 in a podman
# container on this machine): the shipped unit, its fd store, Restart= and
# ExecReload=, with agents at work in a home (test/systemd/scenario.mjs says
# what is checked). Needs what scripts/install.sh installs (the build in dist/
# and native/addon/) and, the first time, podman and debootstrap (installed
# here from Debian; never Debian's "fuse" package). The base image is built
# once (debootstrap from the mirror apt uses) and kept by name
# ($SYSTEMD_IMAGE); each run stages this checkout's build and another build
# of it (another build id) and installs them in a fresh container.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
export DEBIAN_FRONTEND=noninteractive
t_all=$SECONDS
need=()
for pkg in podman buildah runc catatonit netavark aardvark-dns iptables debootstrap; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  # --no-install-recommends: a plain install swaps Debian's fuse for fuse3.
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
test -f dist/cli/homesfs.js && ls native/addon/*.node >/dev/null || { echo "build first: ./scripts/install.sh (or npm ci && npm run build)" >&2; exit 2; }

tmp="$(mktemp -d /var/tmp/homesfs-systemd-XXXXXX)"
name="homesfs-systemd-$$"
cleanup() {
  # podman stop (SIGRTMIN+3 to systemd: the unit stops and unmounts); podman kill would leave a stale mount.
  podman stop -t 60 "$name" >/dev/null 2>&1 || true
  podman rm -f "$name" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
# shellcheck source=../test/systemd/containers.sh
source test/systemd/containers.sh
containers_conf "$tmp/conf"

t=$SECONDS
systemd_image
echo "image: $((SECONDS - t)) s"

# Two builds: a (this checkout) and b (the same with another version string: another build id).
t=$SECONDS
stage="$tmp/stage"
mkdir -p "$stage/a/native" "$stage/test"
cp -a package.json dist systemd "$stage/a/"
cp -a native/addon "$stage/a/native/"
# production dependencies only, as npm install -g would put them
mkdir -p "$stage/a/node_modules"
npm ls --omit=dev --all --parseable 2>/dev/null | tail -n +2 | while read -r dir; do
  rel="${dir#"$root"/}"
  mkdir -p "$stage/a/$(dirname "$rel")"
  cp -a "$dir" "$stage/a/$rel"
done
cp -a "$stage/a" "$stage/b"
sed -i -E "s/export const VERSION = [^;]+;/export const VERSION = 'systemd-upgrade';/" "$stage/b/dist/version.js"
grep -q "systemd-upgrade" "$stage/b/dist/version.js"
cp "$(command -v node)" "$stage/node"
cp test/systemd/agent.mjs test/systemd/scenario.mjs "$stage/test/"
chmod -R a+rX "$stage"
echo "staged two builds: $((SECONDS - t)) s"

t=$SECONDS
podman run -d --name "$name" --systemd=always --privileged --device /dev/fuse --network none \
  -v "$stage:/stage:ro" "$SYSTEMD_IMAGE" /sbin/init >/dev/null
state=''
for _ in $(seq 1 120); do
  state="$(podman exec "$name" systemctl is-system-running 2>/dev/null || true)"
  case "$state" in running|degraded) break ;; esac
  sleep 0.5
done
echo "systemd up ($state): $((SECONDS - t)) s"
case "$state" in running|degraded) ;; *) podman logs "$name" | tail -20; exit 1 ;; esac

t=$SECONDS
status=0
podman exec "$name" /stage/node /stage/test/scenario.mjs || status=$?
echo "scenario: $((SECONDS - t)) s"
if [ "$status" -ne 0 ]; then
  echo "--- journal of homesfs.service (last 80 lines) ---"
  podman exec "$name" journalctl -q -u homesfs --no-pager -o cat | tail -80 || true
fi
echo "systemd test: $([ "$status" -eq 0 ] && echo passed || echo FAILED) in $((SECONDS - t_all)) s"
exit "$status"
