// The fast path's N-API side shared by every control call: argument
// helpers, fastpath_stats, and the table of exports. Locks: stats reads the
// slot count under fp_open_lock, then the table sizes and the pins under
// fp_lock's read lock (never both at once); counters are atomics.

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



// fastpath_stats() -> { enabled, answered, fallbacks, negative, unlinkAnswered, unlinkFallbacks, unlinkSlowFrees, readdirAnswered, readdirFallbacks, fgetattrAnswered, fgetattrFallbacks, ..., homes, inodes, handles, inFlight, retiredHomes }
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
  hs_js_set_num(env, out, "unlinkAnswered", (double) __atomic_load_n(&fp_uanswered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "unlinkFallbacks", (double) __atomic_load_n(&fp_ufallbacks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "unlinkSlowFrees", (double) __atomic_load_n(&fp_ubig, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "readdirAnswered", (double) __atomic_load_n(&fp_ranswered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "readdirFallbacks", (double) __atomic_load_n(&fp_rfallbacks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "fgetattrAnswered", (double) __atomic_load_n(&fp_fanswered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "fgetattrFallbacks", (double) __atomic_load_n(&fp_ffallbacks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "utimensAnswered", (double) __atomic_load_n(&fp_tanswered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "chmodAnswered", (double) __atomic_load_n(&fp_canswered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "chownAnswered", (double) __atomic_load_n(&fp_oanswered_chown, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "setattrFallbacks", (double) __atomic_load_n(&fp_sfallbacks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "createAnswered", (double) __atomic_load_n(&fp_canswered_create, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "createFallbacks", (double) __atomic_load_n(&fp_cfallbacks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "openAnswered", (double) __atomic_load_n(&fp_oanswered, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "openClosedNatively", (double) __atomic_load_n(&fp_oclosed, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "openFallbacks", (double) __atomic_load_n(&fp_ofallbacks, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "writesDecided", (double) __atomic_load_n(&fp_wdecided, __ATOMIC_RELAXED));
  hs_js_set_num(env, out, "writeDecisionFallbacks", (double) __atomic_load_n(&fp_wfallbacks, __ATOMIC_RELAXED));
  pthread_mutex_lock(&fp_open_lock);
  hs_js_set_num(env, out, "credits", fp_credit_count);
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


void homesfs_fastpath_export (napi_env env, napi_value exports) {
  pthread_once(&fp_once, fp_init_lock);
  hs_export_fn(env, exports, "fastpath_set_home", fp_set_home);
  hs_export_fn(env, exports, "fastpath_remove_home", fp_remove_home);
  hs_export_fn(env, exports, "fastpath_set_mutable", fp_set_mutable);
  hs_export_fn(env, exports, "fastpath_inode", fp_inode);
  hs_export_fn(env, exports, "fastpath_inode_size", fp_inode_size);
  hs_export_fn(env, exports, "fastpath_wl_delegate", fp_wl_delegate);
  hs_export_fn(env, exports, "fastpath_wl_revoke", fp_wl_revoke);
  hs_export_fn(env, exports, "fastpath_wl_size", fp_wl_size);
  hs_export_fn(env, exports, "fastpath_set_write_credit", fp_set_write_credit);
  hs_export_fn(env, exports, "fastpath_set_handle", fp_set_handle);
  hs_export_fn(env, exports, "fastpath_remove_handle", fp_remove_handle);
  hs_export_fn(env, exports, "fastpath_set_reserved", fp_set_reserved);
  hs_export_fn(env, exports, "fastpath_set_open", fp_set_open);
  hs_export_fn(env, exports, "fastpath_set_attr_ops", fp_set_attr_ops);
  hs_export_fn(env, exports, "fastpath_grant", fp_grant);
  hs_export_fn(env, exports, "fastpath_set_create", fp_set_create);
  hs_export_fn(env, exports, "fastpath_grant_create", fp_grant_create);
  hs_export_fn(env, exports, "fastpath_reclaim", fp_reclaim);
  hs_export_fn(env, exports, "fastpath_take_opens", fp_take_opens);
  hs_export_fn(env, exports, "fastpath_set_free_inline_max", fp_set_free_inline_max);
  hs_export_fn(env, exports, "fastpath_enable", fp_enable);
  hs_export_fn(env, exports, "fastpath_clear", fp_clear);
  hs_export_fn(env, exports, "fastpath_stats", fp_stats);
}
