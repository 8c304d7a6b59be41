// The JS-main-thread side of dirhandles.c: its exports and what they call.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <node_api.h>
#include "sys/napi_args.h"
#include "fastpath/dirhandles.h"

// Fuse.setDirHandleCaps(perUid, all)
NAPI_METHOD(hs_fastpath_set_dir_caps_js) {
  NAPI_ARGV(2)
  uint32_t per_uid = 0, all = 0;
  if (napi_get_value_uint32(env, argv[0], &per_uid) != napi_ok || napi_get_value_uint32(env, argv[1], &all) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "setDirHandleCaps: two counts");
    return NULL;
  }
  hs_dh_set_caps(per_uid, all);
  return NULL;
}

// A home prefix argument: "" for none; false when it is no string or too long.
static int dh_prefix_arg (napi_env env, napi_value v, char *buf, size_t size) {
  size_t len = 0;
  return napi_get_value_string_utf8(env, v, buf, size, &len) == napi_ok && len < size - 1;
}

// Fuse.setOpenFileCounts(uid, uidFiles, prefix, homeFiles, homeCap, total, capPerUid, capAll)
NAPI_METHOD(hs_fastpath_set_open_files_js) {
  NAPI_ARGV(8)
  uint32_t n[8] = { 0 };
  char prefix[4096];
  int ok = dh_prefix_arg(env, argv[2], prefix, sizeof(prefix));
  for (int i = 0; i < 8 && ok; i++) if (i != 2 && napi_get_value_uint32(env, argv[i], &n[i]) != napi_ok) ok = 0;
  if (!ok) {
    napi_throw_type_error(env, "EINVAL", "setOpenFileCounts: uid, count, prefix and five counts");
    return NULL;
  }
  hs_dh_set_files(n[0], n[1], prefix, n[3], n[4], n[5], n[6], n[7]);
  return NULL;
}

// Fuse.dirHandleCounts(uid, prefix) -> [uid's, the home's, all]
NAPI_METHOD(hs_fastpath_dir_counts_js) {
  NAPI_ARGV(2)
  uint32_t uid = 0;
  char prefix[4096];
  if (napi_get_value_uint32(env, argv[0], &uid) != napi_ok || !dh_prefix_arg(env, argv[1], prefix, sizeof(prefix))) {
    napi_throw_type_error(env, "EINVAL", "dirHandleCounts: uid and prefix");
    return NULL;
  }
  uint64_t c[3];
  hs_dh_counts(uid, prefix, c);
  napi_value out, v;
  napi_create_array_with_length(env, 3, &out);
  for (uint32_t i = 0; i < 3; i++) {
    napi_create_double(env, (double) c[i], &v);
    napi_set_element(env, out, i, v);
  }
  return out;
}

// Fuse.dirHandleStats() -> { open, refused }
NAPI_METHOD(hs_fastpath_dir_stats_js) {
  uint64_t open = 0, refused = 0;
  hs_dh_stats(&open, &refused);
  napi_value out;
  napi_create_object(env, &out);
  hs_js_set_num(env, out, "open", (double) open);
  hs_js_set_num(env, out, "refused", (double) refused);
  return out;
}

void hs_dirhandles_export (napi_env env, napi_value exports) {
  hs_export_fn(env, exports, "hs_fastpath_set_dir_caps", hs_fastpath_set_dir_caps_js);
  hs_export_fn(env, exports, "hs_fastpath_set_open_files", hs_fastpath_set_open_files_js);
  hs_export_fn(env, exports, "hs_fastpath_dir_counts", hs_fastpath_dir_counts_js);
  hs_export_fn(env, exports, "hs_fastpath_dir_stats", hs_fastpath_dir_stats_js);
}
