// The fast path's N-API side shared by every control call: argument
// helpers, fastpath_stats, and the table of exports. Locks: stats reads the
// slot count under fp_open_lock, then the table sizes and the pins under
// fp_lock's read lock (never both at once); counters are atomics.

#include "fastpath/fastpath_internal.h"

// ---------------------------------------------------------------------------
// The control plane (JS thread).

char * fp_string (napi_env env, napi_value v, size_t *len) {
  size_t n = 0;
  if (napi_get_value_string_utf8(env, v, NULL, 0, &n) != napi_ok) return NULL;
  char *s = malloc(n + 1);
  if (s == NULL) return NULL;
  napi_get_value_string_utf8(env, v, s, n + 1, &n);
  if (strlen(s) != n) { free(s); return NULL; }
  *len = n;
  return s;
}

int fp_u64 (napi_env env, napi_value v, uint64_t *out) {
  napi_valuetype t;
  if (napi_typeof(env, v, &t) != napi_ok) return 0;
  if (t == napi_bigint) {
    bool lossless = false;
    if (napi_get_value_bigint_uint64(env, v, out, &lossless) != napi_ok) return 0;
    return lossless;
  }
  if (t == napi_number) {
    double d;
    napi_get_value_double(env, v, &d);
    if (!(d >= 0) || d > 9007199254740991.0 || (double) (uint64_t) d != d) return 0;
    *out = (uint64_t) d;
    return 1;
  }
  return 0;
}

// The prologue of every call about one home, (prefix, token, ...): argv
// filled with `want` arguments, the prefix returned (the caller frees it) and
// the token in *token; NULL with a TypeError (usage) pending.
char * fp_prefix_token (napi_env env, napi_callback_info info, size_t want, napi_value *argv, size_t *plen, double *token, const char *usage) {
  size_t argc = want;
  char *prefix = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) == napi_ok && argc >= want &&
      (prefix = fp_string(env, argv[0], plen)) != NULL && napi_get_value_double(env, argv[1], token) == napi_ok) {
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

// A boolean for JS, the answer of most control calls.
napi_value fp_bool (napi_env env, int v) {
  napi_value out;
  napi_get_boolean(env, v, &out);
  return out;
}

static void fp_set_number (napi_env env, napi_value obj, const char *name, double v) {
  napi_value n;
  napi_create_double(env, v, &n);
  napi_set_named_property(env, obj, name, n);
}

// fastpath_stats() -> { enabled, answered, fallbacks, negative, unlinkAnswered, unlinkFallbacks, unlinkSlowFrees, readdirAnswered, readdirFallbacks, fgetattrAnswered, fgetattrFallbacks, ..., homes, inodes, handles, inFlight, retiredHomes }
// inFlight: native ops holding a published home now (its pins); retiredHomes:
// homes withdrawn or replaced that a native op still holds.
static napi_value fp_stats (napi_env env, napi_callback_info info) {
  napi_value out, b;
  napi_create_object(env, &out);
  napi_get_boolean(env, __atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE) != 0, &b);
  napi_set_named_property(env, out, "enabled", b);
  fp_set_number(env, out, "answered", (double) __atomic_load_n(&fp_answered, __ATOMIC_RELAXED));
  fp_set_number(env, out, "fallbacks", (double) __atomic_load_n(&fp_fallbacks, __ATOMIC_RELAXED));
  fp_set_number(env, out, "negative", (double) __atomic_load_n(&fp_negative, __ATOMIC_RELAXED));
  fp_set_number(env, out, "unlinkAnswered", (double) __atomic_load_n(&fp_uanswered, __ATOMIC_RELAXED));
  fp_set_number(env, out, "unlinkFallbacks", (double) __atomic_load_n(&fp_ufallbacks, __ATOMIC_RELAXED));
  fp_set_number(env, out, "unlinkSlowFrees", (double) __atomic_load_n(&fp_ubig, __ATOMIC_RELAXED));
  fp_set_number(env, out, "readdirAnswered", (double) __atomic_load_n(&fp_ranswered, __ATOMIC_RELAXED));
  fp_set_number(env, out, "readdirFallbacks", (double) __atomic_load_n(&fp_rfallbacks, __ATOMIC_RELAXED));
  fp_set_number(env, out, "fgetattrAnswered", (double) __atomic_load_n(&fp_fanswered, __ATOMIC_RELAXED));
  fp_set_number(env, out, "fgetattrFallbacks", (double) __atomic_load_n(&fp_ffallbacks, __ATOMIC_RELAXED));
  fp_set_number(env, out, "utimensAnswered", (double) __atomic_load_n(&fp_tanswered, __ATOMIC_RELAXED));
  fp_set_number(env, out, "chmodAnswered", (double) __atomic_load_n(&fp_canswered, __ATOMIC_RELAXED));
  fp_set_number(env, out, "chownAnswered", (double) __atomic_load_n(&fp_oanswered_chown, __ATOMIC_RELAXED));
  fp_set_number(env, out, "setattrFallbacks", (double) __atomic_load_n(&fp_sfallbacks, __ATOMIC_RELAXED));
  fp_set_number(env, out, "createAnswered", (double) __atomic_load_n(&fp_canswered_create, __ATOMIC_RELAXED));
  fp_set_number(env, out, "createFallbacks", (double) __atomic_load_n(&fp_cfallbacks, __ATOMIC_RELAXED));
  fp_set_number(env, out, "openAnswered", (double) __atomic_load_n(&fp_oanswered, __ATOMIC_RELAXED));
  fp_set_number(env, out, "openClosedNatively", (double) __atomic_load_n(&fp_oclosed, __ATOMIC_RELAXED));
  fp_set_number(env, out, "openFallbacks", (double) __atomic_load_n(&fp_ofallbacks, __ATOMIC_RELAXED));
  fp_set_number(env, out, "writesDecided", (double) __atomic_load_n(&fp_wdecided, __ATOMIC_RELAXED));
  fp_set_number(env, out, "writeDecisionFallbacks", (double) __atomic_load_n(&fp_wfallbacks, __ATOMIC_RELAXED));
  pthread_mutex_lock(&fp_open_lock);
  fp_set_number(env, out, "credits", fp_credit_count);
  pthread_mutex_unlock(&fp_open_lock);
  pthread_rwlock_rdlock(&fp_lock);
  uint32_t homes = fp_home_count;
  fp_set_number(env, out, "homes", homes);
  fp_set_number(env, out, "inodes", fp_inode_count);
  fp_set_number(env, out, "handles", fp_handle_count);
  pthread_rwlock_unlock(&fp_lock);
  fp_set_number(env, out, "inFlight", fp_pins_held());
  uint32_t alive = __atomic_load_n(&fp_homes_alive, __ATOMIC_RELAXED);
  fp_set_number(env, out, "retiredHomes", alive > homes ? alive - homes : 0);
  return out;
}

static void fp_export (napi_env env, napi_value exports, const char *name, napi_callback fn) {
  napi_value f;
  napi_create_function(env, name, NAPI_AUTO_LENGTH, fn, NULL, &f);
  napi_set_named_property(env, exports, name, f);
}

void homesfs_fastpath_export (napi_env env, napi_value exports) {
  pthread_once(&fp_once, fp_init_lock);
  fp_export(env, exports, "fastpath_set_home", fp_set_home);
  fp_export(env, exports, "fastpath_remove_home", fp_remove_home);
  fp_export(env, exports, "fastpath_set_mutable", fp_set_mutable);
  fp_export(env, exports, "fastpath_inode", fp_inode);
  fp_export(env, exports, "fastpath_inode_size", fp_inode_size);
  fp_export(env, exports, "fastpath_wl_delegate", fp_wl_delegate);
  fp_export(env, exports, "fastpath_wl_revoke", fp_wl_revoke);
  fp_export(env, exports, "fastpath_wl_size", fp_wl_size);
  fp_export(env, exports, "fastpath_set_write_credit", fp_set_write_credit);
  fp_export(env, exports, "fastpath_set_handle", fp_set_handle);
  fp_export(env, exports, "fastpath_remove_handle", fp_remove_handle);
  fp_export(env, exports, "fastpath_set_reserved", fp_set_reserved);
  fp_export(env, exports, "fastpath_set_open", fp_set_open);
  fp_export(env, exports, "fastpath_set_attr_ops", fp_set_attr_ops);
  fp_export(env, exports, "fastpath_grant", fp_grant);
  fp_export(env, exports, "fastpath_set_create", fp_set_create);
  fp_export(env, exports, "fastpath_grant_create", fp_grant_create);
  fp_export(env, exports, "fastpath_reclaim", fp_reclaim);
  fp_export(env, exports, "fastpath_take_opens", fp_take_opens);
  fp_export(env, exports, "fastpath_set_free_inline_max", fp_set_free_inline_max);
  fp_export(env, exports, "fastpath_enable", fp_enable);
  fp_export(env, exports, "fastpath_clear", fp_clear);
  fp_export(env, exports, "fastpath_stats", fp_stats);
}
