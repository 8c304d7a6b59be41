# Sourced by scripts/test-systemd.sh: podman set up the way that works on this
# kind of host (README "Under systemd", docs/crash-survival-and-upgrade.md "Tested under a real systemd"): runc (crun
# fails on hybrid cgroups), cgroupfs, a file events log, and the shell's hard
# limits as the containers' ulimits (root cannot raise them; nproc at most
# conmon's).
# Exports CONTAINERS_CONF; defines systemd_image (builds the image once, by name).
SYSTEMD_IMAGE="${SYSTEMD_IMAGE:-localhost/homesfs-systemd:bookworm-1}"
containers_conf() {
  local dir="$1" nofile nproc
  mkdir -p "$dir"
  nofile="$(ulimit -Hn)"
  # runc sets the container's limits from conmon, which podman starts with nproc
  # 32768 (measured here): a higher nproc is refused (EPERM) even below the shell's.
  nproc="$(ulimit -Hu)"
  if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then nproc=32768; fi
  cat > "$dir/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
[network]
network_backend = "netavark"
CONF
  export CONTAINERS_CONF="$dir/containers.conf"
}
# Debian's systemd as PID 1 and what the daemon and the scenario need: nothing
# but Debian's packages, from the mirror apt already uses. Node comes from the
# host at run time (scripts/test-systemd.sh), not from the image.
systemd_image() {
  if podman image exists "$SYSTEMD_IMAGE"; then echo "image $SYSTEMD_IMAGE: cached"; return 0; fi
  local mirror root t0
  # one-line sources.list or deb822 .sources (either may be missing)
  mirror="$( (grep -rhoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null || true) | head -1 | tr -d ' ')"
  mirror="${mirror:-http://deb.debian.org/debian}"
  root="$(mktemp -d /var/tmp/homesfs-debootstrap-XXXXXX)"
  t0=$SECONDS
  debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,libfuse2,libnss-systemd,procps bookworm "$root" "$mirror" >"$root.log" 2>&1 \
    || { tail -20 "$root.log"; rm -rf "$root" "$root.log"; return 1; }
  echo "debootstrap: $((SECONDS - t0)) s"
  # No getty or udev work in a container; the journal stays in memory.
  rm -f "$root"/etc/systemd/system/getty.target.wants/* 
  t0=$SECONDS
  tar -C "$root" -c . | podman import --change 'CMD ["/sbin/init"]' - "$SYSTEMD_IMAGE" >/dev/null
  echo "import: $((SECONDS - t0)) s"
  rm -rf "$root" "$root.log"
}
