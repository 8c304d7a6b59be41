// The steps every session op shares (see ops.h): the request record, nodes
// and paths, the replies, and getattr after a change (the native answer
// first, JavaScript's otherwise).
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

hs_conf_t hs_conf = { 1.0, 1.0, 0.0, 0, 0 };

hs_op_t *op_new (fuse_req_t req, uint32_t jsop) {
  hs_op_t *op = calloc(1, sizeof(*op));
  if (op == NULL) {
    if (req != NULL) fuse_reply_err(req, ENOMEM);
    return NULL;
  }
  op->req = req;
  op->call.op = jsop;
  if (req != NULL) {
    const struct fuse_ctx *cx = fuse_req_ctx(req);
    op->call.uid = (uint32_t) cx->uid;
    op->call.gid = (uint32_t) cx->gid;
    op->call.pid = (uint32_t) cx->pid;
    // Called on the worker that passed the request through the filter, while libfuse decodes it.
    op->unique = hs_req_unique;
  }
  return op;
}

void op_finish (hs_op_t *op) {
  // Answered (every op_finish follows the reply): no resend of it will come.
  if (op->kept) hs_node_answered(op->unique);
  // A resent OPEN or CREATE that failed this time (the kernel holds no handle):
  // the open its first run counted is taken back.
  else if (op->unique & HS_UNIQUE_RESEND) hs_node_refused(op->unique);
  if (op->locked) hs_path_unlock(&op->pl);
  if (op->locked2) hs_path_unlock(&op->pl2);
  hs_node_put(op->node);
  hs_node_put(op->dir);
  hs_node_put(op->dir2);
  hs_node_put(op->home);
  free(op->name);
  free(op->name2);
  free(op->path);
  free(op->path2);
  free(op->data);
  free(op->spath);
  free(op);
}

void op_reply_err (hs_op_t *op, int err) {
  if (op->req != NULL) fuse_reply_err(op->req, err < 0 ? -err : err);
  op_finish(op);
}

// How long the kernel may keep the attributes answered: none for those
// JavaScript marked volatile (they change with no request the kernel sees).
static double attr_timeout (const hs_op_t *op) {
  return op->attr_volatile ? 0 : hs_conf.attr_timeout;
}

void op_reply_attr (hs_op_t *op, const struct stat *st) {
  if (op->req != NULL) fuse_reply_attr(op->req, st, attr_timeout(op));
  op_finish(op);
}

int op_entry (hs_op_t *op, hs_node_t *dir, const char *name, const struct stat *st) {
  memset(&op->e, 0, sizeof(op->e));
  uint64_t nodeid = 0;
  int err = hs_node_found(dir, name, (uint64_t) st->st_ino, st->st_mode, (uint32_t) st->st_nlink, &nodeid);
  if (err != 0) return err;
  op->e.ino = nodeid;
  op->e.attr = *st;
  op->e.attr_timeout = attr_timeout(op);
  op->e.entry_timeout = hs_conf.entry_timeout;
  return 0;
}

void op_reply_entry (hs_op_t *op, hs_node_t *dir, const char *name, const struct stat *st) {
  int err = op_entry(op, dir, name, st);
  if (err != 0) return op_reply_err(op, err);
  // The kernel did not take the entry (the request was interrupted): that lookup never counted.
  if (op->req != NULL && fuse_reply_entry(op->req, &op->e) == -ENOENT) hs_node_forget(op->e.ino, 1);
  op_finish(op);
}

// ENOENT: a negative entry the kernel may keep, when the configuration allows it.
static void reply_lookup_err (hs_op_t *op, int err) {
  if (err == -ENOENT && hs_conf.negative_timeout > 0 && op->req != NULL) {
    struct fuse_entry_param e;
    memset(&e, 0, sizeof(e));
    e.entry_timeout = hs_conf.negative_timeout;
    fuse_reply_entry(op->req, &e);
    return op_finish(op);
  }
  op_reply_err(op, err);
}

void op_reply_lookup (hs_op_t *op, int res, const struct stat *st) {
  if (res != 0) return reply_lookup_err(op, res);
  op_reply_entry(op, op->dir, op->name, st);
}

hs_node_t *op_node (hs_op_t *op, fuse_ino_t ino) {
  hs_node_t *n = hs_node_get(ino);
  if (n == NULL) op_reply_err(op, -ESTALE);
  return n;
}

int op_lock (hs_op_t *op, hs_node_t *dir, const char *name, int wlock) {
  int err = hs_path_lock(dir, name, wlock, &op->path, &op->pl);
  if (err != 0) {
    op_reply_err(op, err);
    return -1;
  }
  op->locked = 1;
  return 0;
}

int op_lock_nullok (hs_op_t *op, hs_node_t *n) {
  int err = hs_path_lock(n, NULL, 0, &op->path, &op->pl);
  if (err == -ENOENT) {
    op->path = NULL;
    return 0;
  }
  if (err != 0) {
    op_reply_err(op, err);
    return -1;
  }
  op->locked = 1;
  return 0;
}

int op_name_ok (hs_op_t *op, const char *name) {
  if (hs_utf8_valid(name)) return 0;
  op_reply_err(op, -EILSEQ);
  return -1;
}

void op_js (hs_op_t *op, hs_call_args_fn args, hs_call_done_fn done) {
  op->call.args = args;
  op->call.done = done;
  hs_bridge_post(&op->call);
}

// ---- getattr steps ------------------------------------------------------------------

static void getattr_js (hs_op_t *op, uint32_t jsop, const char *path) {
  free(op->spath);
  op->spath = path != NULL ? strdup(path) : NULL;
  if (path != NULL && op->spath == NULL) return op->then(op, -ENOMEM, NULL);
  op->call.op = jsop;
  op_js(op, ops_getattr_args, ops_getattr_done);
}

void op_getattr_path (hs_op_t *op, const char *path, op_stat_then then) {
  struct stat st;
  op->then = then;
  int fp = hs_fastpath_getattr(path, &st);
  if (fp != HOMESFS_FASTPATH_FALLBACK) return then(op, fp, &st);
  getattr_js(op, HOMESFS_OP_GETATTR, path);
}

void op_fgetattr (hs_op_t *op, const char *path, uint64_t fh, op_stat_then then) {
  struct stat st;
  op->then = then;
  op->fh = fh;
  if (hs_fastpath_fgetattr(fh, &st) == 0) return then(op, 0, &st);
  getattr_js(op, HOMESFS_OP_FGETATTR, path);
}
