// UTIMENS, CHMOD and CHOWN by path in a home JS published them for
// (hs_fastpath_set_attr_ops). Each pins its home from its check to its change
// and decides from the flags and masks it pinned; a change of them returns
// only once no op that pinned the old ones is still running (fp_home_change),
// so none is past its check with flags JS has since withdrawn. No lock is
// held across the syscalls (a chmod on a frozen backing holds up this home's
// changes, nothing else).

#include "fastpath/fastpath_internal.h"

uint64_t fp_utimens_answered = 0;   // utimens, atomic
uint64_t fp_chmod_answered = 0;   // chmod, atomic
uint64_t fp_chown_answered = 0;  // chown, atomic
uint64_t fp_sfallbacks = 0;  // utimens and chmod (only counted in homes JS opened for them), atomic

// ---- SETATTR by path: UTIMENS, CHMOD and CHOWN -----------------------------------
// JS's utimens (attr.ts) is utimensat(AT_SYMLINK_NOFOLLOW) of one validated
// name below the confined parent, with no decision at all; its chmod is
// chmodDecision on the node's mode, then chmod of the node through its O_PATH
// descriptor, nothing for a symlink. Both are done here, below a home JS
// published them for, on the same walk as unlink: the parent by openat2
// (RESOLVE_BENEATH|NO_SYMLINKS|NO_XDEV), the name as one component. The home
// itself, the daemon's levels, reserved names (.homesfs, libfuse's hidden
// names: JS finds those by their handles) and any error go to JS, which
// repeats the call (both are idempotent: a failed one changed nothing) and
// maps and logs the errno.
// chown (profile chown: owner-only): only the no-op JS answers with success,
// a chown to the home's owner (or -1) of a node that exists; the refusal of
// any other stays JS's (it is logged and counted).
// chown (profile chown: allow): lchown of the name, as JS does.

// The home published for `want`, pinned, and the parent directory of the
// last component of `rel` (its own O_PATH descriptor, or the home's): 0, or
// fallback (nothing held).
static int fp_attr_begin (const char *path, uint32_t want, fp_pin_t *pin, int *pfd_out, const char **name_out) {
  if (!__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE)) return HOMESFS_FASTPATH_FALLBACK;
  size_t plen;
  const char *rel;
  if (fp_split_path(path, &plen, &rel) != 0) return HOMESFS_FASTPATH_FALLBACK;
  const char *last_slash = strrchr(rel, '/');
  if (!fp_pin(path, plen, rel, pin)) return HOMESFS_FASTPATH_FALLBACK;
  if ((pin->pol.attr_flags & want) == 0) { fp_unpin(pin); return HOMESFS_FASTPATH_FALLBACK; }
  int pfd = pin->names_ok ? fp_open_parent(pin->home->fd, rel, last_slash) : -1;
  if (pfd < 0) {
    fp_unpin(pin);
    __atomic_add_fetch(&fp_sfallbacks, 1, __ATOMIC_RELAXED);
    return HOMESFS_FASTPATH_FALLBACK;
  }
  *pfd_out = pfd;
  *name_out = last_slash ? last_slash + 1 : rel;
  return 0;
}

static int fp_attr_end (fp_pin_t *pin, int pfd, int done, uint64_t *counter) {
  if (pfd != pin->home->fd) close(pfd);
  fp_unpin(pin);
  __atomic_add_fetch(done ? counter : &fp_sfallbacks, 1, __ATOMIC_RELAXED);
  return done ? 0 : HOMESFS_FASTPATH_FALLBACK;
}

int hs_fastpath_utimens (const char *path, const struct timespec tv[2]) {
  fp_pin_t pin;
  int pfd;
  const char *name;
  if (fp_attr_begin(path, HOMESFS_ATTR_UTIMENS, &pin, &pfd, &name) != 0) return HOMESFS_FASTPATH_FALLBACK;
  // The node must be on the home's device, as every node JS touches.
  struct stat st;
  int done = fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && (uint64_t) st.st_dev == pin.home->dev &&
             utimensat(pfd, name, tv, AT_SYMLINK_NOFOLLOW) == 0;
  return fp_attr_end(&pin, pfd, done, &fp_utimens_answered);
}

int hs_fastpath_chown (const char *path, uint32_t uid, uint32_t gid) {
  fp_pin_t pin;
  int pfd;
  const char *name;
  if (fp_attr_begin(path, HOMESFS_ATTR_CHOWN_OWNER | HOMESFS_ATTR_CHOWN_ALLOW, &pin, &pfd, &name) != 0) return HOMESFS_FASTPATH_FALLBACK;
  const fp_home_t *home = pin.home;
  int done = 0;
  if ((pin.pol.attr_flags & HOMESFS_ATTR_CHOWN_ALLOW) != 0) {
    done = fchownat(pfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) == 0;
  } else if ((uid == UINT32_MAX || uid == home->uid) && (gid == UINT32_MAX || gid == home->gid)) {
    struct stat st;
    done = fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && (uint64_t) st.st_dev == home->dev;
  }
  return fp_attr_end(&pin, pfd, done, &fp_chown_answered);
}

int hs_fastpath_chmod (const char *path, uint32_t mode) {
  fp_pin_t pin;
  int pfd;
  const char *name;
  if (fp_attr_begin(path, HOMESFS_ATTR_CHMOD, &pin, &pfd, &name) != 0) return HOMESFS_FASTPATH_FALLBACK;
  int done = 0;
  int node = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (node >= 0 && fstat(node, &st) == 0 && (uint64_t) st.st_dev == pin.home->dev) {
    if (S_ISLNK(st.st_mode)) {
      done = 1; // Linux has no symlink modes: JS answers success and changes nothing
    } else {
      uint32_t want = mode & pin.pol.chmod_m;
      if (want == ((uint32_t) st.st_mode & pin.pol.chmod_k)) {
        done = 1;
      } else {
        // chmod through the O_PATH descriptor's magic link acts on that inode, never on a name.
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", node);
        done = chmod(proc, (mode_t) want) == 0;
      }
    }
  }
  if (node >= 0) close(node);
  return fp_attr_end(&pin, pfd, done, &fp_chmod_answered);
}

struct fp_attr_change { uint32_t flags, m, k; };

static void fp_change_attr_ops (fp_home_t *e, void *arg) {
  const struct fp_attr_change *c = arg;
  e->pol.attr_flags = c->flags;
  e->pol.chmod_m = c->m;
  e->pol.chmod_k = c->k;
}

int fp_home_set_attr_ops (const char *prefix, size_t n, double token, uint32_t flags, uint32_t m, uint32_t k) {
  struct fp_attr_change c = { flags, m, k };
  return fp_home_change(prefix, n, token, fp_change_attr_ops, &c);
}
