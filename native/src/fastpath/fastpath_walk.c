// The confined walk every native op shares: which components a path below a
// home may have (none empty, ".", "..", reserved for JavaScript or too long),
// where a home ends in a path, and openat2 with RESOLVE_BENEATH and no
// symlinks, mount crossings or magic links. And the reserved names JS
// publishes (hs_fastpath_set_reserved).
// Lock: the reserved names change only under fp_lock's write lock and are
// read under its read lock (fp_components_ok's callers hold it).

#include "fastpath/fastpath_internal.h"

fp_reserved_t fp_reserved[FP_MAX_RESERVED];
size_t fp_reserved_n = 0;

static int fp_reserved_name (const char *c, size_t n) {
  for (size_t i = 0; i < fp_reserved_n; i++) {
    const fp_reserved_t *r = &fp_reserved[i];
    if (r->prefix ? (n >= r->len && memcmp(c, r->name, r->len) == 0) : (n == r->len && memcmp(c, r->name, n) == 0)) return 1;
  }
  return 0;
}

// Every component below the home: non-empty, not "." or "..", not reserved,
// not longer than the home's limit. Under the read lock.
int fp_components_ok (const char *rel, uint32_t max_name) {
  const char *c = rel;
  for (;;) {
    const char *slash = strchr(c, '/');
    size_t n = slash ? (size_t) (slash - c) : strlen(c);
    if (n == 0 || n > max_name) return 0;
    if (c[0] == '.' && (n == 1 || (n == 2 && c[1] == '.'))) return 0;
    if (fp_reserved_name(c, n)) return 0;
    if (!slash) return 1;
    c = slash + 1;
  }
}

// A path below a home, "/<tenant>/<key>/<rel>": 0 with the home's prefix
// length (its key in fp_homes) and rel (never empty); -1 for anything else
// (the root, a tenant, a home itself: JS's).
int fp_split_path (const char *path, size_t *plen, const char **rel) {
  if (path == NULL || path[0] != '/') return -1;
  const char *t_end = strchr(path + 1, '/');
  if (t_end == NULL) return -1;
  const char *k_end = strchr(t_end + 1, '/');
  if (k_end == NULL || k_end[1] == 0) return -1;
  *plen = (size_t) (k_end - path);
  *rel = k_end + 1;
  return 0;
}

// The confined walk: openat2 of rel below dirfd (a home's descriptor) with
// flags, refusing ".." out of it, any symlink, mount crossing or magic link
// on the way. A descriptor, or -1 with errno set.
int fp_openat2 (int dirfd, const char *rel, uint64_t flags) {
  struct open_how how;
  memset(&how, 0, sizeof(how));
  how.flags = flags;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS;
#ifdef HOMESFS_TEST_HOOKS
  int fail = __atomic_load_n(&fp_test_openat2_errno, __ATOMIC_RELAXED);
  if (fail != 0) { errno = fail; return -1; }
#endif
  return (int) syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));
}

// The directory holding rel's last component (last_slash: its last '/', or
// NULL): home_fd itself, or its own O_PATH descriptor by the confined walk;
// -1 when there is none.
int fp_open_parent (int home_fd, const char *rel, const char *last_slash) {
  if (last_slash == NULL) return home_fd;
  char *prel = strndup(rel, (size_t) (last_slash - rel));
  int pfd = prel == NULL ? -1 : fp_openat2(home_fd, prel, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  free(prel);
  return pfd;
}

// profiles.ts symlinkTargetInsideHome's relative branch, the link's directory
// `depth` levels below the home root: a leading ".." climbs the link's own
// directory chain (real directories) and is counted exactly; one after a
// named component is outside, since the kernel resolves ".." physically and
// the component may itself be a link. test/unit/link-inside.test.ts holds it
// equal to TypeScript's.
int fp_link_inside (uint32_t depth, const char *target) {
  if (target == NULL || target[0] == 0 || target[0] == '/') return 0;
  int64_t d = depth;
  int named = 0;
  const char *c = target;
  for (;;) {
    const char *slash = strchr(c, '/');
    size_t n = slash ? (size_t) (slash - c) : strlen(c);
    if (n == 2 && c[0] == '.' && c[1] == '.') {
      if (named || --d < 0) return 0;
    } else if (n != 0 && !(n == 1 && c[0] == '.')) {
      named = 1;
      d++;
    }
    if (!slash) return 1;
    c = slash + 1;
  }
}
