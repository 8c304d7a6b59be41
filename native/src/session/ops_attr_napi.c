// The JS-main-thread steps of ops_attr.c's requests: their JavaScript arguments and what JavaScript answered (see ops_steps.h).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "fastpath/fastpath.h"
#include "session/ops.h"
#include "session/ops_steps.h"

size_t ops_path_args (napi_env env, hs_call_t *c, napi_value *argv) {
  hs_op_t *op = (hs_op_t *) c;
  argv[0] = hs_js_str(env, op->path);
  switch (op->call.op) {
    case HOMESFS_OP_ACCESS: argv[1] = hs_js_u32(env, op->mask); return 2;
    default: return 1;
  }
}

size_t ops_setattr_args (napi_env env, hs_call_t *c, napi_value *argv) {
  hs_op_t *op = (hs_op_t *) c;
  argv[0] = hs_js_str(env, op->path);
  switch (op->call.op) {
    case HOMESFS_OP_CHMOD:
      argv[1] = hs_js_u32(env, op->mode);
      return 2;
    case HOMESFS_OP_CHOWN:
      argv[1] = hs_js_u32(env, op->uid);
      argv[2] = hs_js_u32(env, op->gid);
      return 3;
    case HOMESFS_OP_TRUNCATE:
      argv[1] = hs_js_num(env, (double) op->size);
      return 2;
    case HOMESFS_OP_FTRUNCATE:
      argv[1] = hs_js_num(env, (double) op->fi.fh);
      argv[2] = hs_js_num(env, (double) op->size);
      return 3;
    default: { // UTIMENS
      argv[1] = hs_js_time(env, &op->attr.st_atim);
      argv[2] = hs_js_time(env, &op->attr.st_mtim);
      return 3;
    }
  }
}

void ops_setattr_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  (void) env; (void) values; (void) n;
  hs_op_t *op = (hs_op_t *) c;
  if (res < 0) return op_reply_err(op, res);
  ops_setattr_next(op);
}

void ops_readlink_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  hs_op_t *op = (hs_op_t *) c;
  if (res < 0) return op_reply_err(op, res);
  char target[PATH_MAX + 1];
  size_t len = 0;
  if (n < 1 || napi_get_value_string_utf8(env, values[0], target, sizeof(target), &len) != napi_ok) return op_reply_err(op, -EIO);
  fuse_reply_readlink(op->req, target);
  op_finish(op);
}

void ops_statfs_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  hs_op_t *op = (hs_op_t *) c;
  struct statvfs sv;
  if (res == 0) res = n >= 1 ? hs_statvfs_from_js(env, values[0], &sv) : -EIO;
  if (res < 0) return op_reply_err(op, res);
  fuse_reply_statfs(op->req, &sv);
  op_finish(op);
}
