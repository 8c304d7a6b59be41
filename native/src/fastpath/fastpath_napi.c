// The fast path's JavaScript side (JS main thread): every export of
// fastpath_*.c, the prologue they share (fp_prefix_token), and
// hs_fastpath_stats. Locks are fastpath_internal.h's: a publication takes
// fp_lock's write lock (and fp_open_lock for the slot lists, fp_wlock for an
// inode's write state); stats reads the slot count under fp_open_lock, then
// the table sizes and the pins under fp_lock's read lock (never both at
// once); counters are atomics.
#include "fastpath/fastpath_internal.h"

// ---------------------------------------------------------------------------
// The control plane (JS thread).

// The prologue of every call about one home, (prefix, token, ...): argv
// filled with `want` arguments, the prefix returned (the caller frees it) and
// the token in *token; NULL with a TypeError (usage) pending.
char * fp_prefix_token (napi_env env, napi_callback_info info, size_t want, napi_value *argv, size_t *plen, double *token, const char *usage) {
  size_t argc = want;
  char *prefix = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) == napi_ok && argc >= want &&
      (prefix = hs_arg_string(env, argv[0], plen)) != NULL && napi_get_value_double(env, argv[1], token) == napi_ok) {
    return prefix;
  }
  free(prefix);
  napi_throw_type_error(env, "EINVAL", usage);
  return NULL;
}

// A holder of JS's BigInt64Array `array` (data[0..len)), which it keeps
// alive by a napi reference (fp_acct_t); NULL with an exception pending.
fp_acct_t * fp_acct_of_js (napi_env env, napi_value array, int64_t *data, size_t len) {
  napi_ref ref = NULL;
  if (napi_create_reference(env, array, 1, &ref) != napi_ok) {
    napi_throw_error(env, "EINVAL", "fastpath: cannot keep the accounting array");
    return NULL;
  }
  fp_acct_t *a = fp_acct_wrap(data, len, env, ref);
  if (a == NULL) {
    napi_delete_reference(env, ref);
    napi_throw_error(env, "ENOMEM", "fastpath: out of memory");
  }
  return a;
}

// hs_fastpath_stats() -> { enabled, answered, fallbacks, negative, unlinkAnswered, unlinkFallbacks, unlinkSlowFrees, readdirAnswered, readdirFallbacks, fgetattrAnswered, fgetattrFallbacks, ..., homes, inodes, handles, inFlight, retiredHomes }
// inFlight: native ops holding a published home now (its pins); retiredHomes:
// homes withdrawn or replaced that a native op still holds.
static napi_value fp_stats (napi_env env, napi_callback_info info) {
  napi_value out, b;
  napi_create_object(env, &out);
  napi_get_boolean(env, __atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE) != 0, &b);
  napi_set_named_property(env, out, "enabled", b);
  hs_js_set_num(env, out, "answered", (double) __atomic_load_n(&fp_answered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "fallbacks", (double) __atomic_load_n(&fp_fallbacks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "negative", (double) __atomic_load_n(&fp_negative, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "dirCacheHits", (double) __atomic_load_n(&fp_dc_hits, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "dirCacheWalks", (double) __atomic_load_n(&fp_dc_walks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "dirCacheHeld", (double) __atomic_load_n(&fp_dc_held, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "unlinkAnswered", (double) __atomic_load_n(&fp_uanswered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "unlinkFallbacks", (double) __atomic_load_n(&fp_ufallbacks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "unlinkSlowFrees", (double) __atomic_load_n(&fp_ubig, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "readdirAnswered", (double) __atomic_load_n(&fp_ranswered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "readdirFallbacks", (double) __atomic_load_n(&fp_rfallbacks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "fgetattrAnswered", (double) __atomic_load_n(&fp_fanswered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "fgetattrFallbacks", (double) __atomic_load_n(&fp_ffallbacks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "utimensAnswered", (double) __atomic_load_n(&fp_utimens_answered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "chmodAnswered", (double) __atomic_load_n(&fp_chmod_answered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "chownAnswered", (double) __atomic_load_n(&fp_chown_answered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "setattrFallbacks", (double) __atomic_load_n(&fp_sfallbacks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "createAnswered", (double) __atomic_load_n(&fp_canswered_create, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "createFallbacks", (double) __atomic_load_n(&fp_cfallbacks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "mkdirAnswered", (double) __atomic_load_n(&fp_manswered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "mkdirFallbacks", (double) __atomic_load_n(&fp_mfallbacks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "symlinkAnswered", (double) __atomic_load_n(&fp_symanswered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "symlinkFallbacks", (double) __atomic_load_n(&fp_symfallbacks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "linkAnswered", (double) __atomic_load_n(&fp_lanswered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "linkFallbacks", (double) __atomic_load_n(&fp_lfallbacks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "rmdirAnswered", (double) __atomic_load_n(&fp_rdanswered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "rmdirFallbacks", (double) __atomic_load_n(&fp_rdfallbacks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "renameAnswered", (double) __atomic_load_n(&fp_rnanswered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "renameFallbacks", (double) __atomic_load_n(&fp_rnfallbacks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "openAnswered", (double) __atomic_load_n(&fp_oanswered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "openClosedNatively", (double) __atomic_load_n(&fp_oclosed, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "createClosedNatively", (double) __atomic_load_n(&fp_cclosed, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "homeAnswered", (double) __atomic_load_n(&fp_home_answered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "settleAsks", (double) __atomic_load_n(&fp_settle_asks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "openFallbacks", (double) __atomic_load_n(&fp_ofallbacks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "writesDecided", (double) __atomic_load_n(&fp_wdecided, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "writeDecisionFallbacks", (double) __atomic_load_n(&fp_wfallbacks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "truncatesDecided", (double) __atomic_load_n(&fp_tdecided, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "truncateFallbacks", (double) __atomic_load_n(&fp_tfallbacks, __ATOMIC_RELAXED));
  pthread_mutex_lock(&fp_open_lock);
  hs_js_set_num(env, out, "openSlots", fp_slot_count);
  pthread_mutex_unlock(&fp_open_lock);
  pthread_rwlock_rdlock(&fp_lock);
  uint32_t homes = fp_home_count;
  hs_js_set_num(env, out, "homes", homes);
  hs_js_set_num(env, out, "inodes", fp_inode_count);
  hs_js_set_num(env, out, "handles", fp_handle_count);
  pthread_rwlock_unlock(&fp_lock);
  hs_js_set_num(env, out, "inFlight", fp_pins_held());
  uint32_t alive = __atomic_load_n(&fp_homes_alive, __ATOMIC_RELAXED);
  hs_js_set_num(env, out, "retiredHomes", alive > homes ? alive - homes : 0);
  return out;
}

void hs_fastpath_export (napi_env env, napi_value exports) {
  pthread_once(&fp_once, fp_init_lock);
  hs_export_fn(env, exports, "hs_fastpath_set_home", fp_set_home);
  hs_export_fn(env, exports, "hs_fastpath_remove_home", fp_remove_home);
  hs_export_fn(env, exports, "hs_fastpath_set_mutable", fp_set_mutable);
  hs_export_fn(env, exports, "hs_fastpath_inode", fp_inode);
  hs_export_fn(env, exports, "hs_fastpath_inode_size", fp_inode_size);
  hs_export_fn(env, exports, "hs_fastpath_home_checked", fp_home_checked_js);
  hs_export_fn(env, exports, "hs_fastpath_wl_delegate", fp_wl_delegate);
  hs_export_fn(env, exports, "hs_fastpath_wl_revoke", fp_wl_revoke);
  hs_export_fn(env, exports, "hs_fastpath_wl_size", fp_wl_size);
  hs_export_fn(env, exports, "hs_fastpath_set_write_credit", fp_set_write_credit);
  hs_export_fn(env, exports, "hs_fastpath_set_handle", fp_set_handle);
  hs_export_fn(env, exports, "hs_fastpath_remove_handle", fp_remove_handle);
  hs_export_fn(env, exports, "hs_fastpath_set_reserved", fp_set_reserved);
  hs_export_fn(env, exports, "hs_fastpath_set_open", fp_set_open);
  hs_export_fn(env, exports, "hs_fastpath_set_attr_ops", fp_set_attr_ops);
  hs_export_fn(env, exports, "hs_fastpath_grant", fp_grant);
  hs_export_fn(env, exports, "hs_fastpath_set_create", fp_set_create);
  hs_export_fn(env, exports, "hs_fastpath_grant_create", fp_grant_create);
  hs_export_fn(env, exports, "hs_fastpath_set_mkdir", fp_set_mkdir);
  hs_export_fn(env, exports, "hs_fastpath_set_symlink", fp_set_symlink);
  hs_export_fn(env, exports, "hs_fastpath_symlink_inside", fp_symlink_inside);
  hs_export_fn(env, exports, "hs_fastpath_set_link", fp_set_link);
  hs_export_fn(env, exports, "hs_fastpath_set_rename", fp_set_rename);
  hs_export_fn(env, exports, "hs_fastpath_reclaim", fp_reclaim);
  hs_export_fn(env, exports, "hs_fastpath_take_opens", fp_take_opens);
  hs_export_fn(env, exports, "hs_fastpath_set_settle_handler", fp_set_settle_handler);
  hs_export_fn(env, exports, "hs_fastpath_set_free_inline_max", fp_set_free_inline_max);
  hs_export_fn(env, exports, "hs_fastpath_set_rmdir", fp_set_rmdir);
  hs_export_fn(env, exports, "hs_fastpath_set_dircache", fp_set_dircache);
  hs_export_fn(env, exports, "hs_fastpath_set_truncate", fp_set_truncate);
  hs_export_fn(env, exports, "hs_fastpath_enable", fp_enable);
  hs_export_fn(env, exports, "hs_fastpath_clear", fp_clear);
  hs_export_fn(env, exports, "hs_fastpath_stats", fp_stats);
}

// hs_fastpath_set_home(prefix, fd, dev, uid, gid, ownerFromStat, maxName, types, masks: Uint32Array(32), token)
napi_value fp_set_home (napi_env env, napi_callback_info info) {
  fp_reap();
  NAPI_ARGV(10)
  if (argc < 10) FP_THROW("hs_fastpath_set_home: 10 arguments");
  size_t plen = 0;
  char *prefix = hs_arg_string(env, argv[0], &plen);
  if (prefix == NULL || plen < 4 || prefix[0] != '/') { free(prefix); FP_THROW("hs_fastpath_set_home: prefix is /<tenant>/<key>"); }
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
      !hs_arg_u64(env, argv[2], &dev) ||
      napi_get_value_uint32(env, argv[3], &uid) != napi_ok ||
      napi_get_value_uint32(env, argv[4], &gid) != napi_ok ||
      napi_get_value_bool(env, argv[5], &from_stat) != napi_ok ||
      napi_get_value_uint32(env, argv[6], &max_name) != napi_ok ||
      napi_get_value_uint32(env, argv[7], &types) != napi_ok ||
      napi_get_typedarray_info(env, argv[8], &tt, &len, &data, &ab, &off) != napi_ok || tt != napi_uint32_array || len < 2 * HOMESFS_MODE_TYPES ||
      napi_get_value_double(env, argv[9], &token) != napi_ok || !(token >= 0)) {
    free(prefix);
    FP_THROW("hs_fastpath_set_home: bad arguments");
  }
  // C's own descriptor: closed with the home, at its last reference.
  fp_home_t *e = fp_home_new(prefix, plen, fd);
  free(prefix);
  if (e == NULL) {
    int err = errno;
    napi_throw_error(env, err == ENOMEM ? "ENOMEM" : err == EBADF ? "EBADF" : "EMFILE", err == ENOMEM ? "hs_fastpath_set_home: out of memory" : "hs_fastpath_set_home: cannot dup the home descriptor");
    return NULL;
  }
  const uint32_t *m = (const uint32_t *) data;
  e->dev = dev;
  e->uid = uid;
  e->gid = gid;
  e->owner_from_stat = from_stat ? 1 : 0;
  e->max_name = max_name > HOMESFS_NAME_MAX ? HOMESFS_NAME_MAX : max_name;
  e->types = types & ((1u << HOMESFS_MODE_TYPES) - 1);
  for (int i = 0; i < HOMESFS_MODE_TYPES; i++) { e->keep[i] = m[i] & 07777; e->or[i] = m[HOMESFS_MODE_TYPES + i] & 07777; }
  e->token = token;
  fp_home_publish(e);
  return NULL;
}

// hs_fastpath_remove_home(prefix, token) -> removed? (token < 0: whatever is
// published). Returns once no native op of it is past its checks.
napi_value fp_remove_home (napi_env env, napi_callback_info info) {
  fp_reap();
  napi_value argv[2];
  size_t plen = 0;
  double token = -1;
  char *prefix = fp_prefix_token(env, info, 2, argv, &plen, &token, "hs_fastpath_remove_home: (prefix, token)");
  if (prefix == NULL) return NULL;
  int removed = fp_home_remove(prefix, plen, token);
  free(prefix);
  return hs_js_bool(env, removed != 0);
}

// hs_fastpath_set_mutable(prefix, token, pending: BigInt64Array(2) | null) -> set?
// pending: C may unlink in that home and adds what leaves it there; null: C
// may not (returns once no native unlink or create of that home is in flight,
// and no write decided here with its array).
napi_value fp_set_mutable (napi_env env, napi_callback_info info) {
  fp_reap();
  napi_value argv[3];
  size_t plen = 0;
  double token = -1;
  char *prefix = fp_prefix_token(env, info, 3, argv, &plen, &token, "hs_fastpath_set_mutable: (prefix, token, pending)");
  if (prefix == NULL) return NULL;
  napi_valuetype t = napi_undefined;
  napi_typeof(env, argv[2], &t);
  fp_acct_t *a = NULL;
  if (t != napi_null) {
    napi_typedarray_type tt;
    size_t len = 0, off = 0;
    napi_value ab;
    void *d = NULL;
    if (napi_get_typedarray_info(env, argv[2], &tt, &len, &d, &ab, &off) != napi_ok || tt != napi_bigint64_array || len < 2) {
      free(prefix);
      FP_THROW("hs_fastpath_set_mutable: pending is a BigInt64Array of 2, or null");
    }
    a = fp_acct_of_js(env, argv[2], (int64_t *) d, len);
    if (a == NULL) { free(prefix); return NULL; }
  }
  int set = fp_home_set_pending(prefix, plen, token, a);
  free(prefix);
  fp_reap();
  return hs_js_bool(env, set != 0);
}

// hs_fastpath_home_checked(prefix, token, ms) -> published?: JS found the
// home's backing directory in place, and its check stands for ms more (a
// GETATTR of the home itself is answered natively until then).
napi_value fp_home_checked_js (napi_env env, napi_callback_info info) {
  napi_value argv[3];
  size_t plen = 0;
  double token = -1, ms = -1;
  char *prefix = fp_prefix_token(env, info, 3, argv, &plen, &token, "hs_fastpath_home_checked: (prefix, token, ms)");
  if (prefix == NULL) return NULL;
  if (napi_get_value_double(env, argv[2], &ms) != napi_ok || !(ms >= 0) || ms > 60000) {
    free(prefix);
    FP_THROW("hs_fastpath_home_checked: ms is 0..60000");
  }
  int found = fp_home_checked(prefix, plen, token, ms);
  free(prefix);
  return hs_js_bool(env, found);
}

// hs_fastpath_inode_size(dev, ino, size): the size JS charges an inode it holds
// open (every change of its record). Nothing when the inode is not tracked.
napi_value fp_inode_size (napi_env env, napi_callback_info info) {
  NAPI_ARGV(3)
  uint64_t dev = 0, ino = 0;
  double size = -1;
  if (argc < 3 ||
      !hs_arg_u64(env, argv[0], &dev) || !hs_arg_u64(env, argv[1], &ino) ||
      napi_get_value_double(env, argv[2], &size) != napi_ok || !(size >= 0) || size > HS_JS_MAX_SAFE) {
    FP_THROW("hs_fastpath_inode_size: (dev, ino, size >= 0)");
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

// hs_fastpath_inode(dev, ino, delta): delta +1 when JS starts tracking an open inode, -1 when it stops.
napi_value fp_inode (napi_env env, napi_callback_info info) {
  fp_reap();
  NAPI_ARGV(3)
  uint64_t dev = 0, ino = 0;
  int32_t delta = 0;
  if (argc < 3 ||
      !hs_arg_u64(env, argv[0], &dev) || !hs_arg_u64(env, argv[1], &ino) ||
      napi_get_value_int32(env, argv[2], &delta) != napi_ok || (delta != 1 && delta != -1)) {
    FP_THROW("hs_fastpath_inode: (dev, ino, +1|-1)");
  }
  if (fp_inode_delta(dev, ino, delta) != 0) napi_throw_error(env, "ENOMEM", "hs_fastpath_inode: out of memory");
  return NULL;
}

// hs_fastpath_set_handle(fh, fd, uid, gid, ownerFromStat, types, masks: Uint32Array(32)): publish or replace.
napi_value fp_set_handle (napi_env env, napi_callback_info info) {
  NAPI_ARGV(7)
  uint32_t fh = 0, uid = 0, gid = 0, types = 0;
  int32_t fd = -1;
  bool from_stat = false;
  void *data = NULL;
  size_t len = 0, off = 0;
  napi_typedarray_type tt;
  napi_value ab;
  if (argc < 7 ||
      napi_get_value_uint32(env, argv[0], &fh) != napi_ok || fh == 0 ||
      napi_get_value_int32(env, argv[1], &fd) != napi_ok || fd < 0 ||
      napi_get_value_uint32(env, argv[2], &uid) != napi_ok ||
      napi_get_value_uint32(env, argv[3], &gid) != napi_ok ||
      napi_get_value_bool(env, argv[4], &from_stat) != napi_ok ||
      napi_get_value_uint32(env, argv[5], &types) != napi_ok ||
      napi_get_typedarray_info(env, argv[6], &tt, &len, &data, &ab, &off) != napi_ok || tt != napi_uint32_array || len < 2 * HOMESFS_MODE_TYPES) {
    FP_THROW("hs_fastpath_set_handle: bad arguments");
  }
  fp_handle_t *e = calloc(1, sizeof(*e));
  if (e == NULL) { napi_throw_error(env, "ENOMEM", "hs_fastpath_set_handle: out of memory"); return NULL; }
  const uint32_t *m = (const uint32_t *) data;
  e->fh = fh;
  e->fd = fd;
  e->uid = uid;
  e->gid = gid;
  e->owner_from_stat = from_stat ? 1 : 0;
  e->types = types & ((1u << HOMESFS_MODE_TYPES) - 1);
  for (int i = 0; i < HOMESFS_MODE_TYPES; i++) { e->keep[i] = m[i] & 07777; e->or[i] = m[HOMESFS_MODE_TYPES + i] & 07777; }
  fp_handle_publish(e);
  return NULL;
}

// hs_fastpath_remove_handle(fh): before JS closes the handle's descriptor.
napi_value fp_remove_handle (napi_env env, napi_callback_info info) {
  NAPI_ARGV(1)
  uint32_t fh = 0;
  if (argc < 1 || napi_get_value_uint32(env, argv[0], &fh) != napi_ok) {
    FP_THROW("hs_fastpath_remove_handle: a handle number");
  }
  fp_handle_remove(fh);
  return NULL;
}

// hs_fastpath_enable(on): off, every getattr goes to JS (the table is kept).
napi_value fp_enable (napi_env env, napi_callback_info info) {
  NAPI_ARGV(1)
  bool on = false;
  if (argc < 1 || napi_get_value_bool(env, argv[0], &on) != napi_ok) {
    FP_THROW("hs_fastpath_enable: a boolean");
  }
  __atomic_store_n(&fp_enabled, on ? 1 : 0, __ATOMIC_RELEASE);
  return NULL;
}

// hs_fastpath_clear(): every home and open inode dropped (shutdown, tests).
napi_value fp_clear (napi_env env, napi_callback_info info) {
  fp_clear_all();
  fp_reap();
  return NULL;
}

// hs_fastpath_set_open(prefix, token, flags) -> set? Read-only opens of that
// home answered here (flags & 1; 2: publish them for native reads; 4:
// direct_io), or not (0: every slot granted so far goes back, queued for
// takeOpens). Returns once no native open of the home is past its checks
// with the old flags (fp_home_change).
napi_value fp_set_open (napi_env env, napi_callback_info info) {
  napi_value argv[3];
  size_t plen = 0;
  double token = -1;
  uint32_t flags = 0;
  const char *usage = "hs_fastpath_set_open: (prefix, token, OPEN_* flags)";
  const uint32_t known = HOMESFS_OPEN_ON | HOMESFS_OPEN_DP_READ | HOMESFS_OPEN_DIRECT_IO | HOMESFS_OPEN_DP_WRITE;
  char *prefix = fp_prefix_token(env, info, 3, argv, &plen, &token, usage);
  if (prefix == NULL) return NULL;
  if (napi_get_value_uint32(env, argv[2], &flags) != napi_ok || (flags & ~known) != 0) { free(prefix); FP_THROW(usage); }
  int set = fp_home_set_open(prefix, plen, token, flags);
  free(prefix);
  return hs_js_bool(env, set != 0);
}

// hs_fastpath_grant(prefix, token, fh, uid) -> granted? One open-file slot JS
// took for caller uid, with the handle number JS reserved for it. False
// (nothing kept) when the home is not open for native opens.
napi_value fp_grant (napi_env env, napi_callback_info info) {
  return fp_grant_slot(env, info, 0);
}

// hs_fastpath_grant / hs_fastpath_grant_create: (prefix, token, fh, uid) -> granted?
napi_value fp_grant_slot (napi_env env, napi_callback_info info, int create) {
  napi_value argv[4];
  size_t plen = 0;
  double token = -1;
  uint32_t fh = 0, uid = 0;
  const char *usage = create ? "hs_fastpath_grant_create: (prefix, token, fh > 0, uid)" : "hs_fastpath_grant: (prefix, token, fh > 0, uid)";
  char *prefix = fp_prefix_token(env, info, 4, argv, &plen, &token, usage);
  if (prefix == NULL) return NULL;
  if (napi_get_value_uint32(env, argv[2], &fh) != napi_ok || fh == 0 || napi_get_value_uint32(env, argv[3], &uid) != napi_ok) {
    free(prefix);
    FP_THROW(usage);
  }
  int granted = fp_slot_grant(prefix, plen, token, fh, uid, create);
  free(prefix);
  if (granted < 0) { napi_throw_error(env, "ENOMEM", create ? "hs_fastpath_grant_create: out of memory" : "hs_fastpath_grant: out of memory"); return NULL; }
  return hs_js_bool(env, granted != 0);
}

// hs_fastpath_reclaim() -> how many: every home's unused slots back to JS
// (queued for takeOpens), e.g. when a cap would refuse an open otherwise.
napi_value fp_reclaim (napi_env env, napi_callback_info info) {
  uint32_t before = 0;
  pthread_rwlock_rdlock(&fp_lock);
  pthread_mutex_lock(&fp_open_lock);
  before = fp_slot_count;
  fp_slot_gen++;  // even with no list to empty: a slot on its way back to one goes to JS
  for (size_t i = 0; i < FP_HOME_BUCKETS && fp_slot_count > 0; i++) {
    for (fp_home_t *e = fp_homes[i]; e != NULL; e = e->next) {
      fp_return_list_locked(&e->slots, HOMESFS_REC_UNUSED);
      fp_return_list_locked(&e->cslots, HOMESFS_REC_UNUSED_CREATE);
    }
  }
  pthread_mutex_unlock(&fp_open_lock);
  pthread_rwlock_unlock(&fp_lock);
  napi_value out;
  napi_create_uint32(env, before, &out);
  return out;
}

// hs_fastpath_take_opens() -> BigUint64Array [kind, fh, fd, published, dev, ino, oflags, ...]
// (kind 1: opened here, adopt it; 2: a slot given back unused; 3: created here,
// adopt it and commit its inode; 4: a create slot given back), oldest first; null when none.
napi_value fp_take_opens (napi_env env, napi_callback_info info) {
  fp_reap();
  return hq_take_to_js(env, &fp_opens, &fp_open_lock, &fp_closing_gate, napi_biguint64_array, sizeof(uint64_t), 7, fp_open_fill);
}

// hs_fastpath_wl_delegate(dev, ino, size, acct: BigInt64Array(8)) -> kept?
// From now on C owns the inode's charged size (starting at size) and decides
// the growth of its writes from acct's byte credit, which it keeps a reference of.
// Only for an inode JS tracks and has taken back (or never handed over): JS
// calls it at the end of its own size change, so no write decided here is in
// flight on it.
napi_value fp_wl_delegate (napi_env env, napi_callback_info info) {
  fp_reap();
  NAPI_ARGV(4)
  uint64_t dev = 0, ino = 0;
  double size = -1;
  napi_typedarray_type tt;
  size_t len = 0, off = 0;
  napi_value ab;
  void *d = NULL;
  if (argc < 4 ||
      !hs_arg_u64(env, argv[0], &dev) || !hs_arg_u64(env, argv[1], &ino) ||
      napi_get_value_double(env, argv[2], &size) != napi_ok || !(size >= 0) || size > HS_JS_MAX_SAFE ||
      napi_get_typedarray_info(env, argv[3], &tt, &len, &d, &ab, &off) != napi_ok || tt != napi_bigint64_array || len < HOMESFS_ACCT_LEN) {
    FP_THROW("hs_fastpath_wl_delegate: (dev, ino, size >= 0, BigInt64Array(8))");
  }
  fp_acct_t *a = fp_acct_of_inode(dev, ino, (int64_t *) d);
  if (a == NULL && (a = fp_acct_of_js(env, argv[3], (int64_t *) d, len)) == NULL) return NULL;
  int kept = fp_wl_delegate_to(dev, ino, size, a);
  fp_acct_put(a);
  fp_reap();
  return hs_js_bool(env, kept != 0);
}

// hs_fastpath_wl_revoke(dev, ino) -> fp_wl_take_back's answer.
napi_value fp_wl_revoke (napi_env env, napi_callback_info info) {
  NAPI_ARGV(2)
  uint64_t dev = 0, ino = 0;
  if (argc < 2 || !hs_arg_u64(env, argv[0], &dev) || !hs_arg_u64(env, argv[1], &ino)) {
    FP_THROW("hs_fastpath_wl_revoke: (dev, ino)");
  }
  return hs_js_num(env, fp_wl_take_back(dev, ino));
}

// hs_fastpath_wl_size(dev, ino) -> the charged size while C owns it, else -1.
napi_value fp_wl_size (napi_env env, napi_callback_info info) {
  NAPI_ARGV(2)
  uint64_t dev = 0, ino = 0;
  if (argc < 2 || !hs_arg_u64(env, argv[0], &dev) || !hs_arg_u64(env, argv[1], &ino)) {
    FP_THROW("hs_fastpath_wl_size: (dev, ino)");
  }
  double out_size = -1;
  pthread_rwlock_rdlock(&fp_lock);
  fp_inode_t *e = fp_find_inode(dev, ino);
  if (e != NULL) {
    pthread_mutex_lock(&fp_wlock);
    if (e->deleg != 0) out_size = fp_bits_double(__atomic_load_n(&e->size_bits, __ATOMIC_ACQUIRE));
    pthread_mutex_unlock(&fp_wlock);
  }
  pthread_rwlock_unlock(&fp_lock);
  return hs_js_num(env, out_size);
}

// hs_fastpath_set_write_credit(prefix, token, on) -> set? Files made here in
// that home start handed over (their first writes decided here too).
napi_value fp_set_write_credit (napi_env env, napi_callback_info info) {
  napi_value argv[3];
  size_t plen = 0;
  double token = -1;
  bool on = false;
  const char *usage = "hs_fastpath_set_write_credit: (prefix, token, on)";
  char *prefix = fp_prefix_token(env, info, 3, argv, &plen, &token, usage);
  if (prefix == NULL) return NULL;
  if (napi_get_value_bool(env, argv[2], &on) != napi_ok) { free(prefix); FP_THROW(usage); }
  int set = fp_home_set_write_credit(prefix, plen, token, on);
  free(prefix);
  return hs_js_bool(env, set != 0);
}

// hs_fastpath_set_reserved(names: string[]): components only JS answers; "x*" = every name beginning with x.
napi_value fp_set_reserved (napi_env env, napi_callback_info info) {
  NAPI_ARGV(1)
  bool is_array = false;
  uint32_t n = 0;
  if (argc < 1 ||
      napi_is_array(env, argv[0], &is_array) != napi_ok || !is_array ||
      napi_get_array_length(env, argv[0], &n) != napi_ok || n > FP_MAX_RESERVED) {
    FP_THROW("hs_fastpath_set_reserved: an array of at most 32 names");
  }
  fp_reserved_t next[FP_MAX_RESERVED];
  for (uint32_t i = 0; i < n; i++) {
    napi_value v;
    size_t len = 0;
    napi_get_element(env, argv[0], i, &v);
    if (napi_get_value_string_utf8(env, v, next[i].name, FP_RESERVED_LEN, &len) != napi_ok || len == 0 || len >= FP_RESERVED_LEN - 1) {
      FP_THROW("hs_fastpath_set_reserved: names are non-empty strings shorter than 62 bytes");
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

// hs_fastpath_set_rmdir(on): RMDIR in mutable homes (fp_rmdir_on, fastpath_unlink.c).
napi_value fp_set_rmdir (napi_env env, napi_callback_info info) {
  NAPI_ARGV(1)
  bool on = false;
  if (argc < 1 || napi_get_value_bool(env, argv[0], &on) != napi_ok) FP_THROW("hs_fastpath_set_rmdir: a boolean");
  __atomic_store_n(&fp_rmdir_on, on ? 1 : 0, __ATOMIC_RELAXED);
  return NULL;
}

// hs_fastpath_set_dircache(on): directory descriptors kept for GETATTR
// (fp_dc_on, fastpath_dircache.c); turned off, every kept one is closed.
napi_value fp_set_dircache (napi_env env, napi_callback_info info) {
  NAPI_ARGV(1)
  bool on = false;
  if (argc < 1 || napi_get_value_bool(env, argv[0], &on) != napi_ok) FP_THROW("hs_fastpath_set_dircache: a boolean");
  // Stored before the forget takes the cache's lock: an insert under that lock after it sees it off.
  __atomic_store_n(&fp_dc_on, on ? 1 : 0, __ATOMIC_RELEASE);
  if (!on) fp_dc_forget(0, 1);
  return NULL;
}

// hs_fastpath_set_truncate(on): FTRUNCATE of delegated inodes (fp_truncate_on, fastpath_write.c).
napi_value fp_set_truncate (napi_env env, napi_callback_info info) {
  NAPI_ARGV(1)
  bool on = false;
  if (argc < 1 || napi_get_value_bool(env, argv[0], &on) != napi_ok) FP_THROW("hs_fastpath_set_truncate: a boolean");
  __atomic_store_n(&fp_truncate_on, on ? 1 : 0, __ATOMIC_RELEASE);
  return NULL;
}

// hs_fastpath_set_free_inline_max(bytes): see fp_free_inline_max.
napi_value fp_set_free_inline_max (napi_env env, napi_callback_info info) {
  NAPI_ARGV(1)
  double v = -1;
  if (argc < 1 || napi_get_value_double(env, argv[0], &v) != napi_ok || !(v >= 0)) {
    FP_THROW("hs_fastpath_set_free_inline_max: a byte count >= 0");
  }
  __atomic_store_n(&fp_free_inline_max, (uint64_t) v, __ATOMIC_RELAXED);
  return NULL;
}

// A holder of JS's array data[0..len) (ref: the napi reference that keeps it,
// NULL for C's own), with one reference, the caller's. NULL without memory.
fp_acct_t * fp_acct_wrap (int64_t *data, size_t len, napi_env env, napi_ref ref) {
  fp_acct_t *a = calloc(1, sizeof(*a));
  if (a == NULL) return NULL;
  a->data = data;
  a->len = len;
  a->refs = 1;
  a->env = env;
  a->ref = ref;
  return a;
}

// hs_fastpath_set_attr_ops(prefix, token, flags, chmodM, chmodK) -> set? UTIMENS
// (flags & 1), CHMOD (flags & 2: new mode = asked & chmodM, unchanged when
// equal to current & chmodK) and CHOWN (flags & 4: owner-only's no-op; 8:
// allow's lchown) by path answered here, or not (0). Returns once none of
// that home is past its checks with the old flags (fp_home_change).
napi_value fp_set_attr_ops (napi_env env, napi_callback_info info) {
  napi_value argv[5];
  size_t plen = 0;
  double token = -1;
  uint32_t flags = 0, m = 0, k = 0;
  const char *usage = "hs_fastpath_set_attr_ops: (prefix, token, ATTR_* flags (not both chown kinds), chmodM, chmodK)";
  const uint32_t chowns = HOMESFS_ATTR_CHOWN_OWNER | HOMESFS_ATTR_CHOWN_ALLOW;
  const uint32_t known = HOMESFS_ATTR_UTIMENS | HOMESFS_ATTR_CHMOD | chowns;
  char *prefix = fp_prefix_token(env, info, 5, argv, &plen, &token, usage);
  if (prefix == NULL) return NULL;
  if (napi_get_value_uint32(env, argv[2], &flags) != napi_ok || (flags & ~known) != 0 || (flags & chowns) == chowns ||
      napi_get_value_uint32(env, argv[3], &m) != napi_ok || (m & ~07777u) != 0 ||
      napi_get_value_uint32(env, argv[4], &k) != napi_ok || (k & ~07777u) != 0) {
    free(prefix);
    FP_THROW(usage);
  }
  int set = fp_home_set_attr_ops(prefix, plen, token, flags, m, k);
  free(prefix);
  return hs_js_bool(env, set != 0);
}

// hs_fastpath_set_create(prefix, token, on, modeM, modeOr, maxDepth, ownerIsCaller) -> set?
// CREATE answered here (while the home is also open for native opens and
// mutable), the new file's mode (asked & modeM) | modeOr, at most maxDepth
// components deep (0: any). Off gives every create slot back. Returns once no
// native create of the home is past its checks with the old settings.
napi_value fp_set_create (napi_env env, napi_callback_info info) {
  napi_value argv[7];
  size_t plen = 0;
  double token = -1;
  bool on = false, caller_owns = false;
  uint32_t m = 0, or = 0, depth = 0;
  const char *usage = "hs_fastpath_set_create: (prefix, token, on, modeM, modeOr: permission bits, maxDepth, ownerIsCaller)";
  char *prefix = fp_prefix_token(env, info, 7, argv, &plen, &token, usage);
  if (prefix == NULL) return NULL;
  if (napi_get_value_bool(env, argv[2], &on) != napi_ok ||
      napi_get_value_uint32(env, argv[3], &m) != napi_ok || (m & ~07777u) != 0 ||
      napi_get_value_uint32(env, argv[4], &or) != napi_ok || (or & ~0777u) != 0 ||
      napi_get_value_uint32(env, argv[5], &depth) != napi_ok ||
      napi_get_value_bool(env, argv[6], &caller_owns) != napi_ok) {
    free(prefix);
    FP_THROW(usage);
  }
  int set = fp_home_set_create(prefix, plen, token, on, m, or, depth, caller_owns);
  free(prefix);
  return hs_js_bool(env, set != 0);
}

// hs_fastpath_set_mkdir(prefix, token, on, modeM, modeOr) -> set?
// MKDIR answered here while creates are too (hs_fastpath_set_create), with a
// create slot's inode, the new directory's mode (asked & modeM) | modeOr.
// Returns once no native mkdir of the home is past its checks with the old
// settings.
napi_value fp_set_mkdir (napi_env env, napi_callback_info info) {
  napi_value argv[5];
  size_t plen = 0;
  double token = -1;
  bool on = false;
  uint32_t m = 0, or = 0;
  const char *usage = "hs_fastpath_set_mkdir: (prefix, token, on, modeM, modeOr: permission bits)";
  char *prefix = fp_prefix_token(env, info, 5, argv, &plen, &token, usage);
  if (prefix == NULL) return NULL;
  if (napi_get_value_bool(env, argv[2], &on) != napi_ok ||
      napi_get_value_uint32(env, argv[3], &m) != napi_ok || (m & ~07777u) != 0 ||
      napi_get_value_uint32(env, argv[4], &or) != napi_ok || (or & ~07777u) != 0) {
    free(prefix);
    FP_THROW(usage);
  }
  int set = fp_home_set_mkdir(prefix, plen, token, on, m, or);
  free(prefix);
  return hs_js_bool(env, set != 0);
}

// hs_fastpath_set_symlink(prefix, token, rule) -> set?
// SYMLINK answered here while creates are too: rule 0 never, 1 relative
// targets that stay in the home, 2 any target (fastpath_internal.h). Returns
// once no native symlink of the home is past its checks with the old rule.
napi_value fp_set_symlink (napi_env env, napi_callback_info info) {
  napi_value argv[3];
  size_t plen = 0;
  double token = -1;
  uint32_t rule = 0;
  const char *usage = "hs_fastpath_set_symlink: (prefix, token, rule: 0, 1 or 2)";
  char *prefix = fp_prefix_token(env, info, 3, argv, &plen, &token, usage);
  if (prefix == NULL) return NULL;
  if (napi_get_value_uint32(env, argv[2], &rule) != napi_ok || rule > 2) {
    free(prefix);
    FP_THROW(usage);
  }
  int set = fp_home_set_symlink(prefix, plen, token, rule);
  free(prefix);
  return hs_js_bool(env, set != 0);
}

// hs_fastpath_set_link(prefix, token, on) -> set?
// LINK within the home answered here while creates are (hs_fastpath_set_create),
// with a create slot's inode; JS turns it on only where the profile allows
// hard links. Returns once no native link of the home is past its checks
// with the old setting.
napi_value fp_set_link (napi_env env, napi_callback_info info) {
  napi_value argv[3];
  size_t plen = 0;
  double token = -1;
  bool on = false;
  const char *usage = "hs_fastpath_set_link: (prefix, token, on)";
  char *prefix = fp_prefix_token(env, info, 3, argv, &plen, &token, usage);
  if (prefix == NULL) return NULL;
  if (napi_get_value_bool(env, argv[2], &on) != napi_ok) {
    free(prefix);
    FP_THROW(usage);
  }
  int set = fp_home_set_link(prefix, plen, token, on);
  free(prefix);
  return hs_js_bool(env, set != 0);
}

// hs_fastpath_symlink_inside(depth, target) -> boolean: fp_link_inside, for
// the test that holds it equal to profiles.ts symlinkTargetInsideHome.
napi_value fp_symlink_inside (napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  uint32_t depth = 0;
  char target[4096];
  size_t len = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_uint32(env, argv[0], &depth) != napi_ok ||
      napi_get_value_string_utf8(env, argv[1], target, sizeof(target), &len) != napi_ok || len + 1 >= sizeof(target)) {
    FP_THROW("hs_fastpath_symlink_inside: (depth, target: a string under 4 KiB)");
  }
  return hs_js_bool(env, fp_link_inside(depth, target) != 0);
}

// hs_fastpath_set_rename(prefix, token, on, maxDepth) -> set?
// RENAME of a regular file within the home answered here while it is mutable,
// the target's depth at most maxDepth (0: no limit). Returns once no native
// rename of the home is past its checks with the old settings.
napi_value fp_set_rename (napi_env env, napi_callback_info info) {
  napi_value argv[4];
  size_t plen = 0;
  double token = -1;
  bool on = false;
  uint32_t depth = 0;
  const char *usage = "hs_fastpath_set_rename: (prefix, token, on, maxDepth)";
  char *prefix = fp_prefix_token(env, info, 4, argv, &plen, &token, usage);
  if (prefix == NULL) return NULL;
  if (napi_get_value_bool(env, argv[2], &on) != napi_ok || napi_get_value_uint32(env, argv[3], &depth) != napi_ok) {
    free(prefix);
    FP_THROW(usage);
  }
  int set = fp_home_set_rename(prefix, plen, token, on, depth);
  free(prefix);
  return hs_js_bool(env, set != 0);
}

// hs_fastpath_grant_create(prefix, token, fh, uid) -> granted? One create slot:
// an open-file slot JS took for uid, an inode its ledger reserved, and a
// handle number. False (nothing kept) when the home is not open for creates.
napi_value fp_grant_create (napi_env env, napi_callback_info info) {
  return fp_grant_slot(env, info, 1);
}
