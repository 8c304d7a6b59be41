// The JS-main-thread steps of ops_files.c's requests: their JavaScript arguments and what JavaScript answered (see ops_steps.h).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "session/channel.h"
#include "fastpath/dataplane.h"
#include "fastpath/fastpath.h"
#include "session/handles.h"
#include "session/ops.h"
#include "session/ops_steps.h"

size_t ops_file_args (napi_env env, hs_call_t *c, napi_value *argv) {
  hs_op_t *op = (hs_op_t *) c;
  argv[0] = hs_js_str(env, op->path);
  switch (op->call.op) {
    case HOMESFS_OP_OPEN:
      argv[1] = hs_js_u32(env, op->flags);
      napi_create_bigint_uint64(env, op->reopen_ino, &argv[2]);
      return 3;
    case HOMESFS_OP_CREATE:
      argv[1] = hs_js_u32(env, op->mode);
      argv[2] = hs_js_u32(env, op->flags);
      return 3;
    case HOMESFS_OP_READ:
      argv[1] = hs_js_num(env, (double) op->fh);
      argv[2] = hs_js_num(env, (double) op->len);
      argv[3] = hs_js_num(env, (double) op->offset);
      return 4;
    case HOMESFS_OP_WRITE: {
      void *copy = NULL;
      argv[1] = hs_js_num(env, (double) op->fh);
      // JavaScript gets its own copy: it may keep it after the answer.
      napi_create_buffer_copy(env, op->len, op->data, &copy, &argv[2]);
      argv[3] = hs_js_num(env, (double) op->offset);
      return 4;
    }
    case HOMESFS_OP_FSYNC:
      argv[1] = hs_js_num(env, (double) op->fh);
      argv[2] = hs_js_bool(env, op->datasync);
      return 3;
    case HOMESFS_OP_FALLOCATE:
      argv[1] = hs_js_num(env, (double) op->fh);
      argv[2] = hs_js_u32(env, op->mode);
      argv[3] = hs_js_num(env, (double) op->offset);
      argv[4] = hs_js_num(env, (double) op->length);
      return 5;
    case HOMESFS_OP_UNLINK:
      // Only the release's: the hidden name of a node whose last handle went (src/fs/hidden.ts).
      argv[1] = hs_js_u32(env, 1);
      return 2;
    default: // FLUSH, RELEASE
      argv[1] = hs_js_num(env, (double) op->fh);
      return 2;
  }
}

void ops_released_quietly (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  (void) env; (void) res; (void) values; (void) n;
  op_finish((hs_op_t *) c);
}

void ops_open_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  hs_op_t *op = (hs_op_t *) c;
  if (res < 0) return op_reply_err(op, res);
  uint32_t fh = hs_arg_u32_or(env, values, n, 0, 0);
  // fh 0 means "no handle": the kernel would send 0 anyway.
  op->fi.fh = fh;
  ops_apply_open_opts(&op->fi, hs_arg_u32_or(env, values, n, 1, 0));
  ops_open_reply(op);
}

void ops_create_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  hs_op_t *op = (hs_op_t *) c;
  if (res < 0) return op_reply_err(op, res);
  op->fi.fh = hs_arg_u32_or(env, values, n, 0, 0);
  ops_apply_open_opts(&op->fi, hs_arg_u32_or(env, values, n, 1, 0));
  op_fgetattr(op, op->path, op->fi.fh, ops_create_then);
}

void ops_read_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  hs_op_t *op = (hs_op_t *) c;
  if (res < 0) return op_reply_err(op, res);
  size_t got = 0;
  const char *bytes = n >= 1 ? hs_arg_bytes(env, values[0], &got) : NULL;
  if ((size_t) res > op->len) return op_reply_err(op, -ERANGE);
  if (res > 0 && (bytes == NULL || got < (size_t) res)) return op_reply_err(op, -EIO);
  fuse_reply_buf(op->req, bytes, (size_t) res);
  op_finish(op);
}

void ops_write_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  (void) env; (void) values; (void) n;
  hs_op_t *op = (hs_op_t *) c;
  if (res < 0) return op_reply_err(op, res);
  if ((size_t) res > op->len) return op_reply_err(op, -EIO);
  fuse_reply_write(op->req, (size_t) res);
  op_finish(op);
}

void ops_release_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  (void) env; (void) res; (void) values; (void) n;
  hs_op_t *op = (hs_op_t *) c;
  if (op->call.op == HOMESFS_OP_FLUSH) {
    // RELEASE with FUSE_RELEASE_FLUSH: the flush is done, now the release (the kernel ignores both answers).
    op->call.op = HOMESFS_OP_RELEASE;
    if (hs_fastpath_release(op->fh) || hs_dp_release(op->fh)) return ops_release_node(op);
    return op_js(op, ops_file_args, ops_release_done);
  }
  ops_release_node(op);
}

void ops_reopen_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  hs_op_t *op = (hs_op_t *) c;
  ops_reopen_wait_t *w = op->dh;
  uint64_t fh = res < 0 ? 0 : hs_arg_u32_or(env, values, n, 0, 0);
  op_finish(op);
  pthread_mutex_lock(&w->mu);
  w->res = res < 0 ? res : 0;
  w->fh = fh;
  w->done = 1;
  pthread_cond_signal(&w->cond);
  pthread_mutex_unlock(&w->mu);
}
