// The JS-main-thread side of inval.c: its exports and what they call.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fuse_lowlevel.h>
#include "abi.h"
#include "session/inval.h"
#include "session/nodes.h"
#include "sys/napi_args.h"

// hs_session_invalidate(kind, path): HOMESFS_INVAL_PATH the name and its node,
// _TREE every node at or below it, _ENTRY the name only. -> entries queued,
// or -errno (never waits for the kernel).
NAPI_METHOD(hs_inval_js) {
  NAPI_ARGV(2)
  NAPI_ARGV_UINT32(kind, 0)
  size_t len = 0;
  if (napi_get_value_string_utf8(env, argv[1], NULL, 0, &len) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "hs_session_invalidate(kind, path): path is a string");
    return NULL;
  }
  char *path = malloc(len + 1);
  int res = -ENOMEM;
  if (path != NULL) {
    napi_get_value_string_utf8(env, argv[1], path, len + 1, &len);
    res = kind == HOMESFS_INVAL_PATH ? hs_inval_path(path) : kind == HOMESFS_INVAL_TREE ? hs_inval_tree(path) : kind == HOMESFS_INVAL_ENTRY ? hs_inval_entry(path) : -EINVAL;
    free(path);
  }
  napi_value out;
  napi_create_int32(env, res, &out);
  return out;
}

// Counters as a JS array of numbers.
static napi_value counts_js (napi_env env, const uint64_t *v, uint32_t n) {
  napi_value out, x;
  napi_create_array_with_length(env, n, &out);
  for (uint32_t i = 0; i < n; i++) {
    napi_create_double(env, (double) v[i], &x);
    napi_set_element(env, out, i, x);
  }
  return out;
}

// -> [queued, sent, not cached, failed, pending]
NAPI_METHOD(hs_inval_stats_js) {
  hs_inval_stats_t s;
  hs_inval_stats(&s);
  const uint64_t v[5] = { s.queued, s.sent, s.not_cached, s.failed, s.pending };
  return counts_js(env, v, 5);
}

// -> [queued, done]: entries are sent in the order queued, so everything
// queued before a call that read `queued` is sent once done reaches it.
NAPI_METHOD(hs_inval_progress_js) {
  uint64_t v[2];
  hs_inval_progress(&v[0], &v[1]);
  return counts_js(env, v, 2);
}

void hs_inval_export (napi_env env, napi_value exports) {
  hs_export_fn(env, exports, "hs_session_invalidate", hs_inval_js);
  hs_export_fn(env, exports, "hs_session_inval_stats", hs_inval_stats_js);
  hs_export_fn(env, exports, "hs_session_inval_progress", hs_inval_progress_js);
}
