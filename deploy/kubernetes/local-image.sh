#!/usr/bin/env bash
# Builds the homesfs image on a machine with no container registry, from nothing but
# Debian's and npm's packages, with podman (Debian's 4.3), as root:
#
#   deploy/kubernetes/local-image.sh [IMAGE]      # default localhost/homesfs:<version>
#
# 1. The Debian 12 base: debootstrap from the mirror apt uses, imported into podman's
#    store once and kept by name (test/systemd/containers.sh; scripts/install.sh makes
#    it, and the systemd test uses the same one).
# 2. Two Node.js bases on it, made from the Node.js that runs here (`command -v node`,
#    with its npm and its headers): one to build in (node, npm, headers: node-gyp
#    finds them, nothing is downloaded), one to run in (node only). Same Node.js in both
#    stages, as the addon needs.
# 3. deploy/kubernetes/Dockerfile, unchanged, with those two as its BUILD_BASE and
#    RUNTIME_BASE: apt-get from Debian, npm ci and npm pack from npm, as with the official
#    images.
# The image's name is the last line printed. Later runs reuse every layer whose input
# did not change (podman's layer cache).
set -euo pipefail
cd "$(dirname "$0")/../.."
export DEBIAN_FRONTEND=noninteractive
need=()
for pkg in podman buildah runc catatonit netavark aardvark-dns iptables debootstrap; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  # --no-install-recommends: a plain install swaps Debian's fuse for fuse3.
  apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

version="$(node -p 'require("./package.json").version')"
image="${1:-localhost/homesfs:$version}"
tmp="$(mktemp -d /var/tmp/homesfs-image-XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
# podman configured as it works on this kind of host (runc, cgroupfs, ...), unless the
# caller set its own.
# shellcheck source=../../test/systemd/containers.sh
source test/systemd/containers.sh
[ -n "${CONTAINERS_CONF:-}" ] || containers_conf "$tmp/conf"
t0=$SECONDS

# 1. Debian 12 from debootstrap (kept by name; about 100 s the first time).
systemd_image >&2
base="$SYSTEMD_IMAGE"

# 2. Node.js from this machine (and its npm's registry and CA file: the build stage's
#    npm reaches npm's registry as this machine's does).
node_bin="$(readlink -f "$(command -v node)")"
node_version="$(node -p process.version)"
case "$node_version" in v20.*) ;; *) echo "local-image: Node.js 20 wanted, $node_version runs here" >&2; exit 2 ;; esac
prefix="$(dirname "$(dirname "$node_bin")")"
npm_dir="$prefix/lib/node_modules/npm"
headers="$prefix/include/node"
test -f "$npm_dir/bin/npm-cli.js" || { echo "local-image: npm not found at $npm_dir" >&2; exit 2; }
test -f "$headers/node_api.h" || { echo "local-image: Node.js headers not found at $headers" >&2; exit 2; }
# The tags name the base and the Node.js, so a new base or Node.js makes new ones.
base_id="$(podman image inspect --format '{{.Id}}' "$base" | cut -c1-12)"
node_build="localhost/homesfs-node-build:$node_version-$base_id"
node_run="localhost/homesfs-node-run:$node_version-$base_id"
if ! podman image exists "$node_build" || ! podman image exists "$node_run"; then
  ctx="$tmp/node"
  mkdir -p "$ctx/bin" "$ctx/lib/node_modules" "$ctx/include"
  cp "$node_bin" "$ctx/bin/node"
  cp -a "$npm_dir" "$ctx/lib/node_modules/npm"
  cp -a "$headers" "$ctx/include/node"
  # npm inside builds as npm here does: the same registry, and the same CA file if
  # this machine's npm names one (a mirror or a TLS proxy with its own CA).
  cafile="$(npm config get cafile)"
  if [ -n "$cafile" ] && [ "$cafile" != null ] && [ -f "$cafile" ]; then
    cp "$cafile" "$ctx/npm-ca.crt"
  else
    : > "$ctx/npm-ca.crt"
  fi
  registry="$(npm config get registry)"
  cat > "$ctx/Containerfile.build" <<EOF
FROM $base
COPY bin/node /usr/local/bin/node
COPY lib/node_modules/npm /usr/local/lib/node_modules/npm
COPY include/node /usr/local/include/node
COPY npm-ca.crt /usr/local/etc/npm-ca.crt
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \\
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \\
 && node --version && npm --version
ENV npm_config_nodedir=/usr/local npm_config_update_notifier=false npm_config_registry=$registry
$( [ -s "$ctx/npm-ca.crt" ] && echo 'ENV npm_config_cafile=/usr/local/etc/npm-ca.crt' )
CMD ["node"]
EOF
  cat > "$ctx/Containerfile.run" <<EOF
FROM $base
COPY bin/node /usr/local/bin/node
RUN node --version
CMD ["node"]
EOF
  podman build -q --network none -f "$ctx/Containerfile.build" -t "$node_build" "$ctx" >&2
  podman build -q --network none -f "$ctx/Containerfile.run" -t "$node_run" "$ctx" >&2
fi

# 3. The image, from the Dockerfile clusters with a registry use.
podman build --network host \
  --build-arg BUILD_BASE="$node_build" --build-arg RUNTIME_BASE="$node_run" \
  -f deploy/kubernetes/Dockerfile -t "$image" . >&2
podman run --rm --network none "$image" homesfs --version >&2
echo "local-image: built in $((SECONDS - t0)) s" >&2
echo "$image"
