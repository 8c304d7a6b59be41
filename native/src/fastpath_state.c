// The fast path's tables and their lock (fastpath_internal.h has the lock
// map): the homes, the inodes open in JS, the handles JS published for
// fgetattr and the reserved names; their lookups, the confined walk's
// helpers every op shares, the policy generation, and JS's publication into
// them (fastpath_set_home, _remove_home, _set_mutable, _inode, _inode_size,
// _set_handle, _remove_handle, _set_reserved, _enable, _clear).
// Invariants: a table changes, and an entry is freed, only under the write
// lock; a home's descriptor is C's own dup, closed only there; a home's
// replacement or removal moves the policy generation and gives its slots
// back to JS.

#include "fastpath_internal.h"

pthread_rwlock_t fp_lock;
pthread_once_t fp_once = PTHREAD_ONCE_INIT;
fp_home_t *fp_homes[FP_HOME_BUCKETS];
fp_inode_t *fp_inodes[FP_INODE_BUCKETS];

fp_handle_t *fp_handles[FP_HANDLE_BUCKETS];
uint32_t fp_handle_count = 0;
static fp_reserved_t fp_reserved[FP_MAX_RESERVED];
static size_t fp_reserved_n = 0;
uint32_t fp_home_count = 0;
uint32_t fp_inode_count = 0;
int fp_enabled = 0;          // atomic

// The policy generation (fastpath.h): starts at 1 (0 means "JavaScript's" in
// dataplane.c), written under the write lock, read atomically.
uint64_t fp_policy_gen = 1;

uint64_t homesfs_fastpath_policy_gen (void) {
  return __atomic_load_n(&fp_policy_gen, __ATOMIC_ACQUIRE);
}

// Under the write lock: no native open is between reading its home's flags and reading this.
void fp_policy_moved_locked (void) {
  __atomic_add_fetch(&fp_policy_gen, 1, __ATOMIC_ACQ_REL);
}

void fp_init_lock (void) {
  pthread_rwlockattr_t attr;
  pthread_rwlockattr_init(&attr);
  // JS publishes rarely and must not wait behind a stream of lookups.
  pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init(&fp_lock, &attr);
  pthread_rwlockattr_destroy(&attr);
}

uint32_t fp_hash (const char *s, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) { h ^= (unsigned char) s[i]; h *= 16777619u; }
  return h;
}

uint32_t fp_inode_bucket (uint64_t dev, uint64_t ino) {
  uint64_t x = ino * 0x9E3779B97F4A7C15ull ^ dev;
  return (uint32_t) (x >> 40) % FP_INODE_BUCKETS;
}

// Under (at least) the read lock.
fp_home_t * fp_find_home (const char *prefix, size_t n, uint32_t h) {
  for (fp_home_t *e = fp_homes[h % FP_HOME_BUCKETS]; e != NULL; e = e->next) {
    if (e->hash == h && e->prefix_len == n && memcmp(e->prefix, prefix, n) == 0) return e;
  }
  return NULL;
}

fp_inode_t * fp_find_inode (uint64_t dev, uint64_t ino) {
  for (fp_inode_t *e = fp_inodes[fp_inode_bucket(dev, ino)]; e != NULL; e = e->next) {
    if (e->dev == dev && e->ino == ino) return e;
  }
  return NULL;
}

int fp_inode_open (uint64_t dev, uint64_t ino) {
  return fp_find_inode(dev, ino) != NULL;
}

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

static void fp_drop_pending (fp_home_t *e) {
  if (e->pending_ref != NULL) napi_delete_reference(e->env, e->pending_ref);
  e->pending_ref = NULL;
  e->pending = NULL;
}

static void fp_free_home (fp_home_t *e) {
  fp_return_credits(e);
  fp_drop_pending(e);
  close(e->fd);
  free(e->prefix);
  free(e);
}

// Under the write lock: unlink and free the entry for prefix (if token matches, or any with token < 0).
static int fp_remove_locked (const char *prefix, size_t n, double token) {
  uint32_t h = fp_hash(prefix, n);
  fp_home_t **pp = &fp_homes[h % FP_HOME_BUCKETS];
  for (fp_home_t *e = *pp; e != NULL; pp = &e->next, e = e->next) {
    if (e->hash == h && e->prefix_len == n && memcmp(e->prefix, prefix, n) == 0) {
      if (token >= 0 && e->token != token) return 0;
      *pp = e->next;
      fp_policy_moved_locked();
      fp_free_home(e);
      fp_home_count--;
      return 1;
    }
  }
  return 0;
}

// fastpath_set_home(prefix, fd, dev, uid, gid, ownerFromStat, maxName, types, masks: Uint32Array(32), token)
napi_value fp_set_home (napi_env env, napi_callback_info info) {
  size_t argc = 10;
  napi_value argv[10];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 10) FP_THROW("fastpath_set_home: 10 arguments");
  size_t plen = 0;
  char *prefix = fp_string(env, argv[0], &plen);
  if (prefix == NULL || plen < 4 || prefix[0] != '/') { free(prefix); FP_THROW("fastpath_set_home: prefix is /<tenant>/<key>"); }
  int32_t fd = -1;
  uint64_t dev = 0;
  uint32_t uid = 0, gid = 0, max_name = 0, types = 0;
  bool from_stat = false;
  double token = 0;
  void *data = NULL;
  size_t len = 0;
  napi_typedarray_type tt;
  napi_value ab;
  size_t off = 0;
  if (napi_get_value_int32(env, argv[1], &fd) != napi_ok || fd < 0 ||
      !fp_u64(env, argv[2], &dev) ||
      napi_get_value_uint32(env, argv[3], &uid) != napi_ok ||
      napi_get_value_uint32(env, argv[4], &gid) != napi_ok ||
      napi_get_value_bool(env, argv[5], &from_stat) != napi_ok ||
      napi_get_value_uint32(env, argv[6], &max_name) != napi_ok ||
      napi_get_value_uint32(env, argv[7], &types) != napi_ok ||
      napi_get_typedarray_info(env, argv[8], &tt, &len, &data, &ab, &off) != napi_ok || tt != napi_uint32_array || len < 32 ||
      napi_get_value_double(env, argv[9], &token) != napi_ok || !(token >= 0)) {
    free(prefix);
    FP_THROW("fastpath_set_home: bad arguments");
  }
  fp_home_t *e = calloc(1, sizeof(*e));
  if (e == NULL) { free(prefix); napi_throw_error(env, "ENOMEM", "fastpath_set_home: out of memory"); return NULL; }
  // C's own descriptor: closed only here, under the write lock.
  e->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (e->fd < 0) {
    int err = errno;
    free(prefix); free(e);
    napi_throw_error(env, err == EBADF ? "EBADF" : "EMFILE", "fastpath_set_home: cannot dup the home descriptor");
    return NULL;
  }
  const uint32_t *m = (const uint32_t *) data;
  e->prefix = prefix;
  e->prefix_len = plen;
  e->hash = fp_hash(prefix, plen);
  e->dev = dev;
  e->uid = uid;
  e->gid = gid;
  e->owner_from_stat = from_stat ? 1 : 0;
  e->max_name = max_name > 255 ? 255 : max_name;
  e->types = types & 0xffff;
  for (int i = 0; i < 16; i++) { e->keep[i] = m[i] & 07777; e->or[i] = m[16 + i] & 07777; }
  e->token = token;
  pthread_rwlock_wrlock(&fp_lock);
  if (fp_remove_locked(prefix, plen, -1) == 0) { /* new */ }
  e->next = fp_homes[e->hash % FP_HOME_BUCKETS];
  fp_homes[e->hash % FP_HOME_BUCKETS] = e;
  fp_home_count++;
  pthread_rwlock_unlock(&fp_lock);
  return NULL;
}

// fastpath_remove_home(prefix, token) -> removed? (token < 0: whatever is published)
napi_value fp_remove_home (napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2) FP_THROW("fastpath_remove_home: 2 arguments");
  size_t plen = 0;
  double token = -1;
  char *prefix = fp_string(env, argv[0], &plen);
  if (prefix == NULL || napi_get_value_double(env, argv[1], &token) != napi_ok) { free(prefix); FP_THROW("fastpath_remove_home: bad arguments"); }
  pthread_rwlock_wrlock(&fp_lock);
  int removed = fp_remove_locked(prefix, plen, token);
  pthread_rwlock_unlock(&fp_lock);
  free(prefix);
  return fp_bool(env, removed != 0);
}

// fastpath_set_mutable(prefix, token, pending: BigInt64Array(2) | null) -> set?
// pending: C may unlink in that home and adds what leaves it there; null: C
// may not (returns once no native unlink of that home is in flight: the write lock).
napi_value fp_set_mutable (napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3) FP_THROW("fastpath_set_mutable: 3 arguments");
  size_t plen = 0;
  double token = -1;
  char *prefix = fp_string(env, argv[0], &plen);
  if (prefix == NULL || napi_get_value_double(env, argv[1], &token) != napi_ok) { free(prefix); FP_THROW("fastpath_set_mutable: bad arguments"); }
  napi_valuetype t = napi_undefined;
  napi_typeof(env, argv[2], &t);
  int64_t *data = NULL;
  size_t data_len = 0;
  if (t != napi_null) {
    napi_typedarray_type tt;
    size_t len = 0, off = 0;
    napi_value ab;
    void *d = NULL;
    if (napi_get_typedarray_info(env, argv[2], &tt, &len, &d, &ab, &off) != napi_ok || tt != napi_bigint64_array || len < 2) {
      free(prefix);
      FP_THROW("fastpath_set_mutable: pending is a BigInt64Array of 2, or null");
    }
    data = (int64_t *) d;
    data_len = len;
  }
  napi_ref ref = NULL;
  if (data != NULL && napi_create_reference(env, argv[2], 1, &ref) != napi_ok) { free(prefix); FP_THROW("fastpath_set_mutable: cannot keep the array"); }
  int set = 0;
  int64_t *was = NULL;
  size_t was_len = 0;
  uint32_t h = fp_hash(prefix, plen);
  pthread_rwlock_wrlock(&fp_lock);
  fp_home_t *e = fp_find_home(prefix, plen, h);
  if (e != NULL && e->token == token) {
    // Creates need a mutable home (a rescan walks a still tree): made immutable, its create slots go back.
    if (data == NULL) fp_return_create_credits(e);
    was = e->pending;
    was_len = e->pending_len;
    fp_drop_pending(e);
    e->pending = data;
    e->pending_len = data != NULL ? data_len : 0;
    e->pending_ref = ref;
    e->env = env;
    ref = NULL;
    set = 1;
  }
  pthread_rwlock_unlock(&fp_lock);
  // Made immutable: a create that passed its check before is finishing (it
  // needs the write lock to register): wait until it is queued for JS, so the
  // caller's next settle adopts every file made in the home before now.
  if (data == NULL) {
    pthread_mutex_lock(&fp_open_lock);
    while (fp_creates_inflight > 0) pthread_cond_wait(&fp_creates_done, &fp_open_lock);
    pthread_mutex_unlock(&fp_open_lock);
    // And writes decided here that took byte credit before JS took it back
    // (the caller did, ledger.ts reclaimBytes): once they have settled, every
    // byte they added is in the array for the ledger's next takePending.
    if (was != NULL && was_len >= HOMESFS_ACCT_LEN) fp_wl_wait_home(was);
  }
  if (ref != NULL) napi_delete_reference(env, ref);
  free(prefix);
  return fp_bool(env, set != 0);
}

// fastpath_inode_size(dev, ino, size): the size JS charges an inode it holds
// open (every change of its record). Nothing when the inode is not tracked.
napi_value fp_inode_size (napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  uint64_t dev = 0, ino = 0;
  double size = -1;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3 ||
      !fp_u64(env, argv[0], &dev) || !fp_u64(env, argv[1], &ino) ||
      napi_get_value_double(env, argv[2], &size) != napi_ok || !(size >= 0) || size > 9007199254740991.0) {
    FP_THROW("fastpath_inode_size: (dev, ino, size >= 0)");
  }
  uint64_t bits;
  memcpy(&bits, &size, sizeof(bits));
  pthread_rwlock_rdlock(&fp_lock);
  fp_inode_t *e = fp_find_inode(dev, ino);
  if (e != NULL) {
    __atomic_store_n(&e->size_bits, bits, __ATOMIC_RELEASE);
    __atomic_store_n(&e->has_size, 1, __ATOMIC_RELEASE);
  }
  pthread_rwlock_unlock(&fp_lock);
  return NULL;
}

// fastpath_inode(dev, ino, delta): delta +1 when JS starts tracking an open inode, -1 when it stops.
napi_value fp_inode (napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  uint64_t dev = 0, ino = 0;
  int32_t delta = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3 ||
      !fp_u64(env, argv[0], &dev) || !fp_u64(env, argv[1], &ino) ||
      napi_get_value_int32(env, argv[2], &delta) != napi_ok || (delta != 1 && delta != -1)) {
    FP_THROW("fastpath_inode: (dev, ino, +1|-1)");
  }
  fp_inode_t *fresh = delta > 0 ? calloc(1, sizeof(*fresh)) : NULL;
  if (delta > 0 && fresh == NULL) { napi_throw_error(env, "ENOMEM", "fastpath_inode: out of memory"); return NULL; }
  fp_inode_t *gone = NULL;
  uint32_t b = fp_inode_bucket(dev, ino);
  pthread_rwlock_wrlock(&fp_lock);
  fp_inode_t **pp = &fp_inodes[b];
  fp_inode_t *e = *pp;
  for (; e != NULL; pp = &e->next, e = e->next) if (e->dev == dev && e->ino == ino) break;
  if (delta > 0) {
    if (e != NULL) {
      e->count++;
    } else {
      fresh->dev = dev; fresh->ino = ino; fresh->count = 1;
      fresh->next = fp_inodes[b];
      fp_inodes[b] = fresh;
      fp_inode_count++;
      fresh = NULL;
    }
  } else if (e != NULL && --e->count == 0) {
    *pp = e->next;
    gone = e;
    fp_inode_count--;
  }
  pthread_rwlock_unlock(&fp_lock);
  free(fresh);
  free(gone);
  return NULL;
}

fp_handle_t * fp_unlink_handle_locked (uint64_t fh) {
  fp_handle_t **pp = &fp_handles[fh % FP_HANDLE_BUCKETS];
  for (fp_handle_t *e = *pp; e != NULL; pp = &e->next, e = e->next) {
    if (e->fh == fh) {
      *pp = e->next;
      fp_handle_count--;
      return e;
    }
  }
  return NULL;
}

// fastpath_set_handle(fh, fd, uid, gid, ownerFromStat, types, masks: Uint32Array(32)): publish or replace.
napi_value fp_set_handle (napi_env env, napi_callback_info info) {
  size_t argc = 7;
  napi_value argv[7];
  uint32_t fh = 0, uid = 0, gid = 0, types = 0;
  int32_t fd = -1;
  bool from_stat = false;
  void *data = NULL;
  size_t len = 0, off = 0;
  napi_typedarray_type tt;
  napi_value ab;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 7 ||
      napi_get_value_uint32(env, argv[0], &fh) != napi_ok || fh == 0 ||
      napi_get_value_int32(env, argv[1], &fd) != napi_ok || fd < 0 ||
      napi_get_value_uint32(env, argv[2], &uid) != napi_ok ||
      napi_get_value_uint32(env, argv[3], &gid) != napi_ok ||
      napi_get_value_bool(env, argv[4], &from_stat) != napi_ok ||
      napi_get_value_uint32(env, argv[5], &types) != napi_ok ||
      napi_get_typedarray_info(env, argv[6], &tt, &len, &data, &ab, &off) != napi_ok || tt != napi_uint32_array || len < 32) {
    FP_THROW("fastpath_set_handle: bad arguments");
  }
  fp_handle_t *e = calloc(1, sizeof(*e));
  if (e == NULL) { napi_throw_error(env, "ENOMEM", "fastpath_set_handle: out of memory"); return NULL; }
  const uint32_t *m = (const uint32_t *) data;
  e->fh = fh;
  e->fd = fd;
  e->uid = uid;
  e->gid = gid;
  e->owner_from_stat = from_stat ? 1 : 0;
  e->types = types & 0xffff;
  for (int i = 0; i < 16; i++) { e->keep[i] = m[i] & 07777; e->or[i] = m[16 + i] & 07777; }
  pthread_rwlock_wrlock(&fp_lock);
  fp_handle_t *old = fp_unlink_handle_locked(fh);
  e->next = fp_handles[fh % FP_HANDLE_BUCKETS];
  fp_handles[fh % FP_HANDLE_BUCKETS] = e;
  fp_handle_count++;
  pthread_rwlock_unlock(&fp_lock);
  free(old);
  return NULL;
}

// fastpath_remove_handle(fh): before JS closes the handle's descriptor.
napi_value fp_remove_handle (napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  uint32_t fh = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 || napi_get_value_uint32(env, argv[0], &fh) != napi_ok) {
    FP_THROW("fastpath_remove_handle: a handle number");
  }
  pthread_rwlock_wrlock(&fp_lock);
  fp_handle_t *old = fp_unlink_handle_locked(fh);
  pthread_rwlock_unlock(&fp_lock);
  free(old);
  return NULL;
}

// fastpath_set_reserved(names: string[]): components only JS answers; "x*" = every name beginning with x.
napi_value fp_set_reserved (napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  bool is_array = false;
  uint32_t n = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_is_array(env, argv[0], &is_array) != napi_ok || !is_array ||
      napi_get_array_length(env, argv[0], &n) != napi_ok || n > FP_MAX_RESERVED) {
    FP_THROW("fastpath_set_reserved: an array of at most 32 names");
  }
  fp_reserved_t next[FP_MAX_RESERVED];
  for (uint32_t i = 0; i < n; i++) {
    napi_value v;
    size_t len = 0;
    napi_get_element(env, argv[0], i, &v);
    if (napi_get_value_string_utf8(env, v, next[i].name, FP_RESERVED_LEN, &len) != napi_ok || len == 0 || len >= FP_RESERVED_LEN - 1) {
      FP_THROW("fastpath_set_reserved: names are non-empty strings shorter than 62 bytes");
    }
    next[i].prefix = next[i].name[len - 1] == '*';
    if (next[i].prefix) next[i].name[--len] = 0;
    next[i].len = len;
  }
  pthread_rwlock_wrlock(&fp_lock);
  memcpy(fp_reserved, next, sizeof(fp_reserved_t) * n);
  fp_reserved_n = n;
  pthread_rwlock_unlock(&fp_lock);
  return NULL;
}

// fastpath_enable(on): off, every getattr goes to JS (the table is kept).
napi_value fp_enable (napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  bool on = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 || napi_get_value_bool(env, argv[0], &on) != napi_ok) {
    FP_THROW("fastpath_enable: a boolean");
  }
  __atomic_store_n(&fp_enabled, on ? 1 : 0, __ATOMIC_RELEASE);
  return NULL;
}

// fastpath_clear(): every home and open inode dropped (shutdown, tests).
napi_value fp_clear (napi_env env, napi_callback_info info) {
  pthread_rwlock_wrlock(&fp_lock);
  for (size_t i = 0; i < FP_HOME_BUCKETS; i++) {
    fp_home_t *e = fp_homes[i];
    fp_homes[i] = NULL;
    while (e != NULL) { fp_home_t *n = e->next; fp_free_home(e); e = n; }
  }
  for (size_t i = 0; i < FP_INODE_BUCKETS; i++) {
    fp_inode_t *e = fp_inodes[i];
    fp_inodes[i] = NULL;
    while (e != NULL) { fp_inode_t *n = e->next; free(e); e = n; }
  }
  for (size_t i = 0; i < FP_HANDLE_BUCKETS; i++) {
    fp_handle_t *e = fp_handles[i];
    fp_handles[i] = NULL;
    while (e != NULL) { fp_handle_t *n = e->next; free(e); e = n; }
  }
  fp_home_count = 0;
  fp_inode_count = 0;
  fp_handle_count = 0;
  pthread_rwlock_unlock(&fp_lock);
  return NULL;
}
