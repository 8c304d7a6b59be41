// The JS-main-thread steps of ops_dirs.c's requests: their JavaScript arguments and what JavaScript answered (see ops_steps.h).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "fastpath/dirhandles.h"
#include "fastpath/fastpath.h"
#include "sys/utf8.h"
#include "session/handles.h"
#include "session/dirs.h"
#include "session/ops.h"
#include "session/ops_steps.h"

// The i-th entry's stat as JavaScript gave it: a full stat, a mode alone (d_type), or nothing.
static const struct stat *entry_stat (napi_env env, napi_value stats, uint32_t i, struct stat *st) {
  napi_value v;
  napi_valuetype t = napi_undefined;
  if (stats == NULL || napi_get_element(env, stats, i, &v) != napi_ok || napi_typeof(env, v, &t) != napi_ok) return NULL;
  if (t == napi_number) {
    uint32_t mode = 0;
    napi_get_value_uint32(env, v, &mode);
    if (mode == 0) return NULL;
    memset(st, 0, sizeof(*st));
    st->st_mode = mode;
    st->st_ino = HS_UNKNOWN_INO;
    return st;
  }
  return t == napi_object && hs_stat_from_js(env, v, st) == 0 ? st : NULL;
}

size_t ops_readdir_args (napi_env env, hs_call_t *c, napi_value *argv) {
  hs_op_t *op = (hs_op_t *) c;
  argv[0] = hs_js_str(env, op->path);
  argv[1] = hs_js_num(env, (double) op->offset);
  return 2;
}

static uint32_t array_len (napi_env env, napi_value v) {
  bool is = false;
  uint32_t n = 0;
  if (v != NULL && napi_is_array(env, v, &is) == napi_ok && is) napi_get_array_length(env, v, &n);
  return n;
}

void ops_readdir_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  hs_op_t *op = (hs_op_t *) c;
  hs_dh_t *dh = op->dh;
  if (res < 0) return op_reply_err(op, res);
  // On this thread a READDIRPLUS's entries carry no attributes (ops_dirs_plus.c).
  if (op->plus) op->plus = 2;
  pthread_mutex_lock(&dh->mu);
  napi_value names = n >= 1 ? values[0] : NULL, stats = n >= 2 ? values[1] : NULL, offs = n >= 3 ? values[2] : NULL;
  uint32_t count = array_len(env, names);
  if (array_len(env, stats) != count) stats = NULL;
  bool streamed = false;
  if (offs != NULL) napi_is_array(env, offs, &streamed);
  uint32_t noffs = array_len(env, offs);
  ops_dir_fill_t f = { op->req, op->data, 0, op->len, dh, 0 };
  if (!streamed) {
    dh->len = 0;
    dh->filled = 1;
  }
  char name[1024];
  for (uint32_t i = 0; i < count; i++) {
    napi_value v;
    size_t len = 0;
    if (napi_get_element(env, names, i, &v) != napi_ok) break;
    if (napi_get_value_string_utf8(env, v, name, sizeof(name), &len) != napi_ok) continue;
    struct stat st;
    const struct stat *stp = entry_stat(env, stats, i, &st);
    if (streamed) {
      int64_t off = 0;
      // An entry without a usable offset would restart the listing: stop there.
      if (i >= noffs || napi_get_element(env, offs, i, &v) != napi_ok || napi_get_value_int64(env, v, &off) != napi_ok || off <= 0) break;
      if (ops_dir_fill(&f, name, stp, (off_t) off) != 0) break;
    } else if (ops_dir_append(dh, op->req, name, stp != NULL ? stp : &(struct stat) { .st_ino = HS_UNKNOWN_INO }) != 0) {
      dh->filled = 0;
      return ops_dir_reply_err_unlock(op, dh, -ENOMEM);
    }
  }
  if (!streamed) return ops_dir_reply_slice(op, dh);
  ops_dir_reply_list(op, f.out, f.len);
  pthread_mutex_unlock(&dh->mu);
  op_finish(op);
}

size_t ops_fsyncdir_args (napi_env env, hs_call_t *c, napi_value *argv) {
  hs_op_t *op = (hs_op_t *) c;
  argv[0] = hs_js_str(env, op->path);
  argv[1] = hs_js_bool(env, op->datasync);
  return 2;
}

void ops_fsyncdir_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  (void) env; (void) values; (void) n;
  op_reply_err((hs_op_t *) c, res > 0 ? 0 : res);
}
