// LOOKUP, FORGET, GETATTR, SETATTR, ACCESS, READLINK, STATFS.
//
// Each answers natively where the fast path can (fastpath_attr.c,
// fastpath_setattr.c: state JavaScript published) and otherwise asks
// JavaScript, which stays the specification. The request's path stays
// locked until its answer, so a rename never changes it in between.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "fastpath/dataplane.h"
#include "fastpath/fastpath.h"
#include "session/ops.h"
#include "session/ops_steps.h"

// ---- requests that only need a path and answer an errno ------------------------------

// ---- LOOKUP, FORGET ---------------------------------------------------------------

void hs_ll_lookup (fuse_req_t req, fuse_ino_t parent, const char *name) {
  hs_op_t *op = op_new(req, HOMESFS_OP_GETATTR);
  if (op == NULL) return;
  if ((op->dir = op_node(op, parent)) == NULL) return;
  if (op_name_ok(op, name) != 0) return;
  if ((op->name = strdup(name)) == NULL) return op_reply_err(op, -ENOMEM);
  if (op_lock(op, op->dir, name, 0) != 0) return;
  op_getattr_path(op, op->path, op_reply_lookup);
}

void hs_ll_forget (fuse_req_t req, fuse_ino_t ino, unsigned long nlookup) {
  hs_node_forget(ino, nlookup);
  fuse_reply_none(req);
}

void hs_ll_forget_multi (fuse_req_t req, size_t count, struct fuse_forget_data *forgets) {
  for (size_t i = 0; i < count; i++) hs_node_forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

// ---- GETATTR ----------------------------------------------------------------------

static void attr_then (hs_op_t *op, int res, const struct stat *st) {
  if (res != 0) return op_reply_err(op, res);
  op_reply_attr(op, st);
}

void hs_ll_getattr (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  hs_op_t *op = op_new(req, HOMESFS_OP_GETATTR);
  if (op == NULL) return;
  if ((op->node = op_node(op, ino)) == NULL) return;
  if (fi != NULL) {
    // fstat: a handle needs no name (a file unlinked while open has none).
    struct stat st;
    if (hs_fastpath_fgetattr(fi->fh, &st) == 0) return op_reply_attr(op, &st);
    if (op_lock_nullok(op, op->node) != 0) return;
    return op_fgetattr(op, op->path, fi->fh, attr_then);
  }
  if (op_lock(op, op->node, NULL, 0) != 0) return;
  op_getattr_path(op, op->path, attr_then);
}

// ---- SETATTR: chmod, chown, truncate, utimens in libfuse's order, then getattr --------

static void setattr_js (hs_op_t *op, uint32_t jsop) {
  op->call.op = jsop;
  op_js(op, ops_setattr_args, ops_setattr_done);
}

void ops_setattr_next (hs_op_t *op) {
  int set = op->to_set;
  if (op->path == NULL && (set & ~FUSE_SET_ATTR_SIZE) != 0) return op_reply_err(op, -ENOENT);
  if (set & FUSE_SET_ATTR_MODE) {
    op->to_set &= ~FUSE_SET_ATTR_MODE;
    op->mode = op->attr.st_mode;
    if (hs_fastpath_chmod(op->path, op->mode) == 0) return ops_setattr_next(op);
    return setattr_js(op, HOMESFS_OP_CHMOD);
  }
  if (set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
    op->to_set &= ~(FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID);
    op->uid = (set & FUSE_SET_ATTR_UID) ? (uint32_t) op->attr.st_uid : (uint32_t) -1;
    op->gid = (set & FUSE_SET_ATTR_GID) ? (uint32_t) op->attr.st_gid : (uint32_t) -1;
    if (hs_fastpath_chown(op->path, op->uid, op->gid) == 0) return ops_setattr_next(op);
    return setattr_js(op, HOMESFS_OP_CHOWN);
  }
  if (set & FUSE_SET_ATTR_SIZE) {
    op->to_set &= ~FUSE_SET_ATTR_SIZE;
    op->size = op->attr.st_size;
    // An open file's size whose charge C owns is changed here (dataplane_write.c), as its writes are.
    if (op->has_fi && hs_dp_truncate(op->fi.fh, (int64_t) op->size)) return ops_setattr_next(op);
    return setattr_js(op, op->has_fi ? HOMESFS_OP_FTRUNCATE : HOMESFS_OP_TRUNCATE);
  }
  if (set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME)) {
    op->to_set &= ~(FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW);
    struct timespec *a = &op->attr.st_atim, *m = &op->attr.st_mtim;
    if (set & FUSE_SET_ATTR_ATIME_NOW) a->tv_nsec = UTIME_NOW;
    else if (!(set & FUSE_SET_ATTR_ATIME)) a->tv_nsec = UTIME_OMIT;
    if (set & FUSE_SET_ATTR_MTIME_NOW) m->tv_nsec = UTIME_NOW;
    else if (!(set & FUSE_SET_ATTR_MTIME)) m->tv_nsec = UTIME_OMIT;
    const struct timespec tv[2] = { *a, *m };
    if (hs_fastpath_utimens(op->path, tv) == 0) return ops_setattr_next(op);
    return setattr_js(op, HOMESFS_OP_UTIMENS);
  }
  if (op->has_fi) return op_fgetattr(op, op->path, op->fi.fh, attr_then);
  op_getattr_path(op, op->path, attr_then);
}

void hs_ll_setattr (fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, struct fuse_file_info *fi) {
  hs_op_t *op = op_new(req, HOMESFS_OP_CHMOD);
  if (op == NULL) return;
  if ((op->node = op_node(op, ino)) == NULL) return;
  op->attr = *attr;
  op->to_set = to_set;
  if (fi != NULL) {
    op->fi = *fi;
    op->has_fi = 1;
  }
  // ftruncate alone needs no name; everything else is done by path, as libfuse 2.9 did.
  if (fi != NULL && to_set == FUSE_SET_ATTR_SIZE) {
    if (op_lock_nullok(op, op->node) != 0) return;
  } else if (op_lock(op, op->node, NULL, 0) != 0) {
    return;
  }
  ops_setattr_next(op);
}

// ---- ACCESS, READLINK, STATFS ---------------------------------------------------------

void hs_ll_access (fuse_req_t req, fuse_ino_t ino, int mask) {
  hs_op_t *op = op_new(req, HOMESFS_OP_ACCESS);
  if (op == NULL) return;
  if ((op->node = op_node(op, ino)) == NULL) return;
  if (op_lock(op, op->node, NULL, 0) != 0) return;
  op->mask = (uint32_t) mask;
  op_js(op, ops_path_args, ops_errno_done);
}

void hs_ll_readlink (fuse_req_t req, fuse_ino_t ino) {
  hs_op_t *op = op_new(req, HOMESFS_OP_READLINK);
  if (op == NULL) return;
  if ((op->node = op_node(op, ino)) == NULL) return;
  if (op_lock(op, op->node, NULL, 0) != 0) return;
  op_js(op, ops_path_args, ops_readlink_done);
}

void hs_ll_statfs (fuse_req_t req, fuse_ino_t ino) {
  hs_op_t *op = op_new(req, HOMESFS_OP_STATFS);
  if (op == NULL) return;
  if ((op->node = op_node(op, ino)) == NULL) return;
  if (op_lock(op, op->node, NULL, 0) != 0) return;
  op_js(op, ops_path_args, ops_statfs_done);
}
