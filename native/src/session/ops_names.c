// MKNOD, MKDIR, SYMLINK, LINK, UNLINK, RMDIR, RENAME: the requests that make
// or remove names.
//
// Every new name is answered with the entry a getattr of it gives (the node
// found or made for its inode: one node per inode, so LINK answers the node
// the other names already have). Removals take the removed node's tree lock
// exclusively. A file still open whose last name goes is renamed to a hidden
// name instead (libfuse 2.9's way, which the daemon implements: the hidden
// name is served from an open handle and unlinked at the last release).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fastpath/fastpath.h"
#include "session/ops.h"

static void rename_go (hs_op_t *op);
static void hide_went_on (hs_op_t *op);
static size_t hidden_gone_args (napi_env env, hs_call_t *c, napi_value *argv);
static void hidden_gone_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);

static size_t name_args (napi_env env, hs_call_t *c, napi_value *argv) {
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
    case HOMESFS_OP_RENAME:
      argv[0] = hs_js_str(env, op->path);
      argv[1] = hs_js_str(env, op->path2);
      return 2;
    default: // UNLINK, RMDIR
      argv[0] = hs_js_str(env, op->path);
      return 1;
  }
}

// ---- new names: the JavaScript op, then the entry of the name it made -------------------

static void entry_then (hs_op_t *op, int res, const struct stat *st) {
  if (res != 0) return op_reply_err(op, res);
  op_reply_entry(op, op->dir, op->name, st);
}

static void made_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  (void) env; (void) values; (void) n;
  hs_op_t *op = (hs_op_t *) c;
  if (res < 0) return op_reply_err(op, res);
  op_getattr_path(op, op->call.op == HOMESFS_OP_LINK ? op->path2 : op->path, entry_then);
}

// The request's directory, name and locked path, or it was answered (-1).
static int op_named (hs_op_t *op, fuse_ino_t parent, const char *name, int wlock) {
  if ((op->dir = op_node(op, parent)) == NULL) return -1;
  if (op_name_ok(op, name) != 0) return -1;
  if ((op->name = strdup(name)) == NULL) {
    op_reply_err(op, -ENOMEM);
    return -1;
  }
  return op_lock(op, op->dir, name, wlock);
}

void hs_ll_mknod (fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev) {
  hs_op_t *op = op_new(req, HOMESFS_OP_MKNOD);
  if (op == NULL) return;
  if (op_named(op, parent, name, 0) != 0) return;
  op->mode = (uint32_t) mode;
  op->rdev = (uint32_t) rdev;
  // A regular file is made by the create op (its policy, its charge), as libfuse 2.9 did.
  if (S_ISREG(mode)) return hs_create_for_mknod(op);
  op_js(op, name_args, made_done);
}

void hs_ll_mkdir (fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
  hs_op_t *op = op_new(req, HOMESFS_OP_MKDIR);
  if (op == NULL) return;
  if (op_named(op, parent, name, 0) != 0) return;
  op->mode = (uint32_t) mode;
  op_js(op, name_args, made_done);
}

void hs_ll_symlink (fuse_req_t req, const char *link, fuse_ino_t parent, const char *name) {
  hs_op_t *op = op_new(req, HOMESFS_OP_SYMLINK);
  if (op == NULL) return;
  if (op_name_ok(op, link) != 0) return;
  if ((op->data = strdup(link)) == NULL) return op_reply_err(op, -ENOMEM);
  if (op_named(op, parent, name, 0) != 0) return;
  op_js(op, name_args, made_done);
}

void hs_ll_link (fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname) {
  hs_op_t *op = op_new(req, HOMESFS_OP_LINK);
  if (op == NULL) return;
  if ((op->node = op_node(op, ino)) == NULL) return;
  if ((op->dir = op_node(op, newparent)) == NULL) return;
  if (op_name_ok(op, newname) != 0) return;
  if ((op->name = strdup(newname)) == NULL) return op_reply_err(op, -ENOMEM);
  int err = hs_path_lock2(op->node, NULL, op->dir, newname, 0, &op->path, &op->path2, &op->pl, &op->pl2);
  if (err != 0) return op_reply_err(op, err);
  op->locked = op->locked2 = 1;
  op_js(op, name_args, made_done);
}

// ---- removals ---------------------------------------------------------------------

static void removed_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  (void) env; (void) values; (void) n;
  hs_op_t *op = (hs_op_t *) c;
  if (res < 0) return op_reply_err(op, res);
  hs_node_removed(op->dir, op->name);
  op_reply_err(op, 0);
}

// The hidden name's rename went through: the node keeps only that name.
static void hidden_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
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
    return op_js(op, hidden_gone_args, hidden_gone_done);
  }
  hide_went_on(op);
}

// The request a hiding served goes on: a rename's own rename, or the unlink's answer.
static void hide_went_on (hs_op_t *op) {
  if (op->step == 1) {
    // The target is out of the way: now the rename itself.
    op->step = 2;
    free(op->spath);
    op->spath = NULL;
    return rename_go(op);
  }
  op_reply_err(op, 0);
}

static size_t hidden_gone_args (napi_env env, hs_call_t *c, napi_value *argv) {
  hs_op_t *op = (hs_op_t *) c;
  argv[0] = hs_js_str(env, op->spath);
  argv[1] = hs_js_u32(env, 1);  // the session's unlink of a hidden name (src/fs/hidden.ts)
  return 2;
}

static void hidden_gone_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  (void) env; (void) res; (void) values; (void) n;
  hide_went_on((hs_op_t *) c);
}

static size_t hide_args (napi_env env, hs_call_t *c, napi_value *argv) {
  hs_op_t *op = (hs_op_t *) c;
  argv[0] = hs_js_str(env, op->step == 0 ? op->path : op->path2);
  argv[1] = hs_js_str(env, op->spath);
  argv[2] = hs_js_u32(env, 1);  // a hiding: JavaScript takes it as the unlink it is (src/fs/hidden.ts)
  return 3;
}

// The length of the home's part of `path` ("/tenant/key"), or 0.
static size_t home_prefix (const char *path) {
  int slashes = 0;
  for (size_t i = 0; path[i] != 0; i++) {
    if (path[i] == '/' && ++slashes == 3) return i;
  }
  return 0;
}

// Renames (dir, name), at `path`, to a free hidden name at its home's root
// (JavaScript's rename, told it is a hiding, which takes it as the unlink it
// is). At the home's root the hidden name's path can always be built, whatever
// becomes of the directory the file was in (removed, renamed) before the last
// release, which unlinks the hidden name.
static void hide (hs_op_t *op, hs_node_t *dir, const char *name, const char *path) {
  char hidden[64];
  size_t dlen = home_prefix(path);
  hs_node_put(op->home);
  if (dlen == 0 || (op->home = hs_node_home(dir)) == NULL) return op_reply_err(op, -EIO);
  if (hs_node_hidden_name(dir, name, op->home, hidden, sizeof(hidden)) != 0) return op_reply_err(op, -EBUSY);
  free(op->data);
  free(op->spath);
  op->data = strdup(hidden);
  op->spath = malloc(dlen + 1 + strlen(hidden) + 1);
  if (op->data == NULL || op->spath == NULL) return op_reply_err(op, -ENOMEM);
  memcpy(op->spath, path, dlen);
  op->spath[dlen] = '/';
  strcpy(op->spath + dlen + 1, hidden);
  op->call.op = HOMESFS_OP_RENAME;
  op_js(op, hide_args, hidden_done);
}

void hs_ll_unlink (fuse_req_t req, fuse_ino_t parent, const char *name) {
  hs_op_t *op = op_new(req, HOMESFS_OP_UNLINK);
  if (op == NULL) return;
  if (op_named(op, parent, name, 1) != 0) return;
  if (!hs_conf.hard_remove && hs_node_must_hide(op->dir, name)) return hide(op, op->dir, name, op->path);
  if (hs_fastpath_unlink(op->path) == 0) {
    hs_node_removed(op->dir, name);
    return op_reply_err(op, 0);
  }
  op_js(op, name_args, removed_done);
}

void hs_ll_rmdir (fuse_req_t req, fuse_ino_t parent, const char *name) {
  hs_op_t *op = op_new(req, HOMESFS_OP_RMDIR);
  if (op == NULL) return;
  if (op_named(op, parent, name, 1) != 0) return;
  op_js(op, name_args, removed_done);
}

// ---- RENAME ---------------------------------------------------------------------------

static void renamed_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  (void) env; (void) values; (void) n;
  hs_op_t *op = (hs_op_t *) c;
  if (res < 0) return op_reply_err(op, res);
  int err = hs_node_renamed(op->dir, op->name, op->dir2, op->name2);
  op_reply_err(op, err);
}

static void rename_go (hs_op_t *op) {
  op->call.op = HOMESFS_OP_RENAME;
  op_js(op, name_args, renamed_done);
}

void hs_ll_rename (fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent, const char *newname) {
  hs_op_t *op = op_new(req, HOMESFS_OP_RENAME);
  if (op == NULL) return;
  if ((op->dir = op_node(op, parent)) == NULL) return;
  if ((op->dir2 = op_node(op, newparent)) == NULL) return;
  if (op_name_ok(op, name) != 0 || op_name_ok(op, newname) != 0) return;
  op->name = strdup(name);
  op->name2 = strdup(newname);
  if (op->name == NULL || op->name2 == NULL) return op_reply_err(op, -ENOMEM);
  int err = hs_path_lock2(op->dir, name, op->dir2, newname, 1, &op->path, &op->path2, &op->pl, &op->pl2);
  if (err != 0) return op_reply_err(op, err);
  op->locked = op->locked2 = 1;
  // An open file renamed over keeps a hidden name until its last close.
  if (!hs_conf.hard_remove && hs_node_must_hide(op->dir2, newname)) {
    op->step = 1;
    return hide(op, op->dir2, newname, op->path2);
  }
  rename_go(op);
}
