// The JS-main-thread steps of ops_common.c's requests: their JavaScript arguments and what JavaScript answered (see ops_steps.h).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "fastpath/fastpath.h"
#include "sys/utf8.h"
#include "session/handles.h"
#include "session/ops.h"
#include "session/ops_steps.h"

size_t ops_getattr_args (napi_env env, hs_call_t *c, napi_value *argv) {
  hs_op_t *op = (hs_op_t *) c;
  argv[0] = hs_js_str(env, op->spath);
  if (op->call.op == HOMESFS_OP_GETATTR) return 1;
  argv[1] = hs_js_num(env, (double) op->fh);
  return 2;
}

// values: the stat, then (optional) true when its attributes are volatile.
void ops_getattr_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  hs_op_t *op = (hs_op_t *) c;
  struct stat st;
  if (res == 0) res = n >= 1 ? hs_stat_from_js(env, values[0], &st) : -EIO;
  bool vol = false;
  op->attr_volatile = res == 0 && n >= 2 && napi_get_value_bool(env, values[1], &vol) == napi_ok && vol;
  op->then(op, res > 0 ? -EIO : res, &st);
}

// JavaScript's answer is the errno (a count is success): the reply of most ops.
void ops_errno_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  (void) env; (void) values; (void) n;
  op_reply_err((hs_op_t *) c, res > 0 ? 0 : res);
}
