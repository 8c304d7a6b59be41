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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fastpath/fastpath.h"
#include "session/ops.h"
#include "session/ops_steps.h"
#include "session/proto.h"

static void rename_go (hs_op_t *op);

// ---- new names: the JavaScript op, then the entry of the name it made -------------------

void ops_entry_then (hs_op_t *op, int res, const struct stat *st) {
  if (res != 0) return op_reply_err(op, res);
  op_reply_entry(op, op->dir, op->name, st);
}

// A name the binding made at `path`: answered with the node it presented, or,
// where it left that to JS (an inode JS holds open and has not sized), with
// the entry a getattr of the path gives.
static void made_then (hs_op_t *op, const char *path, int presented, const struct stat *st) {
  if (presented) return ops_entry_then(op, 0, st);
  op_getattr_path(op, path, ops_entry_then);
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
  op_js(op, ops_name_args, ops_made_done);
}

void hs_ll_mkdir (fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
  struct stat st;
  int presented = 0;
  hs_op_t *op = op_new(req, HOMESFS_OP_MKDIR);
  if (op == NULL) return;
  if (op_named(op, parent, name, 0) != 0) return;
  op->mode = (uint32_t) mode;
  // Made in C where JS published it may be (fastpath_create.c); answered, as
  // JS's mkdir is, with the entry a getattr of the new path gives: the binding
  // presents the node it made as that getattr would (fp_present_node).
  if (hs_fastpath_mkdir(op->path, op->mode, op->call.uid, op->call.gid, &st, &presented) == 0) return made_then(op, op->path, presented, &st);
  op_js(op, ops_name_args, ops_made_done);
}

void hs_ll_symlink (fuse_req_t req, const char *link, fuse_ino_t parent, const char *name) {
  struct stat st;
  int presented = 0;
  hs_op_t *op = op_new(req, HOMESFS_OP_SYMLINK);
  if (op == NULL) return;
  if (op_name_ok(op, link) != 0) return;
  if ((op->data = strdup(link)) == NULL) return op_reply_err(op, -ENOMEM);
  if (op_named(op, parent, name, 0) != 0) return;
  // Made in C where JS published it may be (fastpath_create.c), answered as a mkdir made there is.
  if (hs_fastpath_symlink(op->path, link, op->call.uid, op->call.gid, &st, &presented) == 0) return made_then(op, op->path, presented, &st);
  op_js(op, ops_name_args, ops_made_done);
}

void hs_ll_link (fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname) {
  struct stat st;
  int presented = 0;
  hs_op_t *op = op_new(req, HOMESFS_OP_LINK);
  if (op == NULL) return;
  if ((op->node = op_node(op, ino)) == NULL) return;
  if ((op->dir = op_node(op, newparent)) == NULL) return;
  if (op_name_ok(op, newname) != 0) return;
  if ((op->name = strdup(newname)) == NULL) return op_reply_err(op, -ENOMEM);
  int err = hs_path_lock2(op->node, NULL, op->dir, newname, 0, &op->path, &op->path2, &op->pl, &op->pl2);
  if (err != 0) return op_reply_err(op, err);
  op->locked = op->locked2 = 1;
  // Linked in C where JS published it may be (fastpath_create.c); answered, as
  // after JS's link, with the entry a getattr of the new path gives (the
  // node the file's other names already have).
  if (hs_fastpath_link(op->path, op->path2, op->call.uid, op->call.gid, &st, &presented) == 0) return made_then(op, op->path2, presented, &st);
  op_js(op, ops_name_args, ops_made_done);
}

// ---- removals ---------------------------------------------------------------------

// The request a hiding served goes on: a rename's own rename, or the unlink's answer.
void ops_hide_went_on (hs_op_t *op) {
  if (op->step == 1) {
    // The target is out of the way: now the rename itself.
    op->step = 2;
    free(op->spath);
    op->spath = NULL;
    return rename_go(op);
  }
  op_reply_err(op, 0);
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
  op_js(op, ops_hide_args, ops_hidden_done);
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
  op_js(op, ops_name_args, ops_removed_done);
}

void hs_ll_rmdir (fuse_req_t req, fuse_ino_t parent, const char *name) {
  hs_op_t *op = op_new(req, HOMESFS_OP_RMDIR);
  if (op == NULL) return;
  if (op_named(op, parent, name, 1) != 0) return;
  if (hs_fastpath_rmdir(op->path) == 0) {
    hs_fastpath_dirs_moved();
    hs_node_removed(op->dir, name);
    return op_reply_err(op, 0);
  }
  op_js(op, ops_name_args, ops_removed_done);
}

// ---- RENAME ---------------------------------------------------------------------------

static void rename_go (hs_op_t *op) {
  op->call.op = HOMESFS_OP_RENAME;
  op_js(op, ops_name_args, ops_renamed_done);
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
  // renameat2's flags (a RENAME2 that proto.c rewrote on this thread; 0 for a
  // plain RENAME). Which flags are allowed is JavaScript's decision, logged
  // like any refusal (src/fs/dir.ts): EINVAL for any but NOREPLACE or
  // EXCHANGE alone. The table follows only what JavaScript did.
  op->flags = hs_req_rename_flags;
  // An open file renamed over keeps a hidden name until its last close. With
  // flags nothing is renamed over (NOREPLACE fails on an existing target,
  // EXCHANGE keeps both), so nothing is hidden.
  if (op->flags == 0 && !hs_conf.hard_remove && hs_node_must_hide(op->dir2, newname)) {
    op->step = 1;
    return hide(op, op->dir2, newname, op->path2);
  }
  // A regular file renamed within its home where JS published it may be
  // (fastpath_unlink.c: nothing open is renamed or replaced there, so nothing
  // is hidden): the table follows as after JavaScript's rename.
  if (op->flags != RENAME_EXCHANGE && hs_fastpath_rename(op->path, op->path2, op->flags) == 0) {
    return op_reply_err(op, hs_node_renamed(op->dir, op->name, op->dir2, op->name2));
  }
  rename_go(op);
}
