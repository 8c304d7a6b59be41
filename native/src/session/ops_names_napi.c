// The JS-main-thread steps of ops_names.c's requests: their JavaScript arguments and what JavaScript answered (see ops_steps.h).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>
#include "fastpath/fastpath.h"
#include "session/ops.h"
#include "session/ops_steps.h"

size_t ops_name_args (napi_env env, hs_call_t *c, napi_value *argv) {
  hs_op_t *op = (hs_op_t *) c;
  switch (op->call.op) {
    case HOMESFS_OP_MKDIR:
      argv[0] = hs_js_str(env, op->path);
      argv[1] = hs_js_u32(env, op->mode);
      return 2;
    case HOMESFS_OP_MKNOD:
      argv[0] = hs_js_str(env, op->path);
      argv[1] = hs_js_u32(env, op->mode);
      argv[2] = hs_js_u32(env, op->rdev);
      return 3;
    case HOMESFS_OP_SYMLINK:
      argv[0] = hs_js_str(env, op->data);
      argv[1] = hs_js_str(env, op->path);
      return 2;
    case HOMESFS_OP_LINK:
      argv[0] = hs_js_str(env, op->path);
      argv[1] = hs_js_str(env, op->path2);
      return 2;
    case HOMESFS_OP_RENAME:
      // [from, to, hide, flags]: hide 0 (a hiding is ops_hide_args), flags renameat2's
      argv[0] = hs_js_str(env, op->path);
      argv[1] = hs_js_str(env, op->path2);
      argv[2] = hs_js_u32(env, 0);
      argv[3] = hs_js_u32(env, op->flags);
      return 4;
    default: // UNLINK, RMDIR
      argv[0] = hs_js_str(env, op->path);
      return 1;
  }
}

void ops_made_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  (void) env; (void) values; (void) n;
  hs_op_t *op = (hs_op_t *) c;
  if (res < 0) return op_reply_err(op, res);
  op_getattr_path(op, op->call.op == HOMESFS_OP_LINK ? op->path2 : op->path, ops_entry_then);
}

void ops_removed_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  (void) env; (void) values; (void) n;
  hs_op_t *op = (hs_op_t *) c;
  // Whatever became of it, before the answer (fastpath_dircache.c).
  if (op->call.op == HOMESFS_OP_RMDIR) hs_fastpath_dirs_moved();
  if (res < 0) return op_reply_err(op, res);
  hs_node_removed(op->dir, op->name);
  op_reply_err(op, 0);
}

// The hidden name's rename went through: the node keeps only that name.
void ops_hidden_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  (void) env; (void) values; (void) n;
  hs_op_t *op = (hs_op_t *) c;
  if (res < 0) return op_reply_err(op, res);
  hs_node_t *victim = op->step == 0 ? op->pl.wnode : op->pl2.wnode;
  hs_node_t *dir = op->step == 0 ? op->dir : op->dir2;
  const char *name = op->step == 0 ? op->name : op->name2;
  // op->data holds the hidden name, which goes to the home's root; for a rename, path2 was the target's path and stays so.
  if (hs_node_renamed(dir, name, op->home, op->data) != 0) return op_reply_err(op, -ENOMEM);
  char *now = NULL;
  if (victim != NULL && hs_node_hide_done(victim, &now)) {
    // Released meanwhile: its orphan goes now, then the request goes on.
    free(op->spath);
    op->spath = now;
    op->call.op = HOMESFS_OP_UNLINK;
    return op_js(op, ops_hidden_gone_args, ops_hidden_gone_done);
  }
  ops_hide_went_on(op);
}

size_t ops_hidden_gone_args (napi_env env, hs_call_t *c, napi_value *argv) {
  hs_op_t *op = (hs_op_t *) c;
  argv[0] = hs_js_str(env, op->spath);
  argv[1] = hs_js_u32(env, 1);  // the session's unlink of a hidden name (src/fs/hidden.ts)
  return 2;
}

void ops_hidden_gone_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  (void) env; (void) res; (void) values; (void) n;
  ops_hide_went_on((hs_op_t *) c);
}

size_t ops_hide_args (napi_env env, hs_call_t *c, napi_value *argv) {
  hs_op_t *op = (hs_op_t *) c;
  argv[0] = hs_js_str(env, op->step == 0 ? op->path : op->path2);
  argv[1] = hs_js_str(env, op->spath);
  argv[2] = hs_js_u32(env, 1);  // a hiding: JavaScript takes it as the unlink it is (src/fs/hidden.ts)
  return 3;
}

void ops_renamed_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  (void) env; (void) values; (void) n;
  hs_op_t *op = (hs_op_t *) c;
  // A directory may have moved, whatever the result says (fastpath_dircache.c).
  hs_fastpath_dirs_moved();
  if (res < 0) return op_reply_err(op, res);
  // JavaScript swapped the two names (it refuses any other flags): so does the table.
  int err = op->flags == RENAME_EXCHANGE ? hs_node_exchanged(op->dir, op->name, op->dir2, op->name2)
                                         : hs_node_renamed(op->dir, op->name, op->dir2, op->name2);
  op_reply_err(op, err);
}
