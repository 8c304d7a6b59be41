// OPEN, CREATE, READ, WRITE, FLUSH, RELEASE, FSYNC, FALLOCATE.
//
// Opens and creates are answered natively where the fast path was granted
// slots for them (fastpath_open.c, fastpath_create.c), reads and writes
// where the data plane has the handle (dataplane.c), no-op flushes and
// releases from the flush gate and the release queue; everything else is
// JavaScript's. Handle requests name no path for their answer: the path they
// pass is only for JavaScript's log lines (peeked, not locked), and a file
// unlinked while open has none.
//
// Invariant: a node's open count (nodes.c) rises before the open's reply and
// falls at its RELEASE, so an unlink or rename-over of a file still open
// hides it instead of removing its last name. Each change is made under the
// request's unique and kept until the answer (op_finish), so that the same
// request resent after a crash (its answer never reached the kernel) does not
// make it twice (nodes.h, hs_node_opened_by).
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
#include "abi.h"
#include "session/handles.h"
#include "session/ops.h"
#include "session/ops_steps.h"
#include "session/passthrough.h"
#include "session/proto.h"

#define STEP_MKNOD 1

// A handle op: its node referenced and its path peeked, or answered (-1).
static int op_handle (hs_op_t *op, fuse_ino_t ino, const struct fuse_file_info *fi) {
  if ((op->node = op_node(op, ino)) == NULL) return -1;
  op->fi = *fi;
  op->has_fi = 1;
  op->fh = fi->fh;
  op->path = hs_path_peek(op->node);
  return 0;
}

// ---- releasing a handle nobody else will -----------------------------------------

void hs_release_handle (hs_op_t *from, uint64_t fh, const char *path) {
  if (hs_fastpath_release(fh) || hs_dp_release(fh)) return;
  hs_op_t *op = op_new(NULL, HOMESFS_OP_RELEASE);
  if (op == NULL) return; // the handle stays open until the daemon exits: nothing better is left
  op->call.uid = from->call.uid;
  op->call.gid = from->call.gid;
  op->call.pid = from->call.pid;
  op->fh = fh;
  op->path = path != NULL ? strdup(path) : NULL;
  op_js(op, ops_file_args, ops_released_quietly);
}

// ---- the I/O mode of an open (passthrough) ----------------------------------------
//
// Which opens are passed through: an open is a plain reader when it is
// read-only and JavaScript published its handle for native reads (its home's
// content needs no look at the data: src/fs/publication.ts, DP_READ), plain
// when every access it has is published so (DP_READ for reading, DP_WRITE for
// writing: the daemon decides each write from its offset and length alone),
// and under policy otherwise (a text home). A plain reader that begins its
// node's family is passed through; the rest follow the family (nodes.h).
// A policy open is refused in a passed-through family: the mmap such an open
// would get maps the backing file, which no content check sees.

static int backing_id_of (int fd, void *ctx) {
  int32_t id = hs_pt_backing_open(fd);
  *(int32_t *) ctx = id > 0 ? id : 0;
  return 0;
}

// Counts the open of op->fi.fh on node n under its mode and sets the answer's
// flags for it. 0, or -ETXTBSY: refused, nothing counted.
static int open_io (hs_op_t *op, hs_node_t *n) {
  // Never negotiated: no node has a family to keep.
  if (hs_proto_get().flags2 == 0) {
    hs_node_opened_by(n, op->unique);
    return 0;
  }
  int acc = op->fi.flags & O_ACCMODE;
  uint32_t dp = 0;
  int32_t new_id = 0, id = 0, spare = 0;
  int begin = acc == O_RDONLY && S_ISREG(hs_node_type(hs_node_id(n))) && hs_pt_may_begin() && hs_node_family_free(n);
  hs_dp_published(op->fi.fh, &dp, begin ? backing_id_of : NULL, &new_id);
  int need = HS_OPEN_POLICY;
  if (acc == O_RDONLY && (dp & HOMESFS_DP_READ)) need = HS_OPEN_PLAIN_READER;
  else if (acc == O_WRONLY && (dp & HOMESFS_DP_WRITE)) need = HS_OPEN_PLAIN;
  else if (acc == O_RDWR && (dp & HOMESFS_DP_READ) && (dp & HOMESFS_DP_WRITE)) need = HS_OPEN_PLAIN;
  int mode = hs_node_open_mode(n, op->unique, need, new_id, &id, &spare);
  hs_pt_backing_close(spare);
  hs_pt_count(mode);
  if (mode == HS_IO_REFUSE) return -ETXTBSY;
  if (mode == HS_IO_PT || mode == HS_IO_PT_DIRECT) {
    // The kernel refuses a passed-through open with any flag but
    // FOPEN_DIRECT_IO and FOPEN_NOFLUSH (FOPEN_PASSTHROUGH_MASK, Linux fs/fuse/iomode.c).
    op->fi.direct_io = mode == HS_IO_PT_DIRECT;
    op->fi.keep_cache = 0;
    op->fi.nonseekable = 0;
    hs_pt_mark(hs_fh_out(op->fi.fh), id);
  }
  return 0;
}

// ---- OPEN ---------------------------------------------------------------------------

void ops_apply_open_opts (struct fuse_file_info *fi, uint32_t opts) {
  fi->direct_io = (opts & HOMESFS_OPEN_OPT_DIRECT_IO) ? 1 : 0;
  fi->keep_cache = (opts & HOMESFS_OPEN_OPT_KEEP_CACHE) ? 1 : 0;
  fi->nonseekable = (opts & HOMESFS_OPEN_OPT_NONSEEKABLE) ? 1 : 0;
}

void ops_open_reply (hs_op_t *op) {
  if (hs_conf.kernel_cache) op->fi.keep_cache = 1;
  // Under the request's unique: a resent OPEN whose first run counted this open does not again.
  hs_noflush_after_open(0, &op->fi);
  if (open_io(op, op->node) != 0) {
    hs_noflush_after_open(-1, NULL);
    hs_release_handle(op, op->fi.fh, op->path);
    return op_reply_err(op, -ETXTBSY);
  }
  op->kept = 1;
  struct fuse_file_info out = op->fi;
  out.fh = hs_fh_out(op->fi.fh);
  if (fuse_reply_open(op->req, &out) == -ENOENT) {
    // The open was interrupted: the kernel will never release this handle.
    char *hidden = NULL;
    hs_release_handle(op, op->fi.fh, op->path);
    if (hs_node_released(op->node, &hidden)) free(hidden);
  }
  op_finish(op);
}

void hs_ll_open (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  hs_op_t *op = op_new(req, HOMESFS_OP_OPEN);
  if (op == NULL) return;
  if ((op->node = op_node(op, ino)) == NULL) return;
  op->fi = *fi;
  op->flags = (uint32_t) fi->flags;
  if (op_lock(op, op->node, NULL, 0) != 0) return;
  uint64_t fh = 0;
  int dio = 0;
  if (hs_fastpath_open(op->path, fi->flags, op->call.uid, &fh, &dio) == 0) {
    op->fi.fh = fh;
    op->fi.direct_io = dio ? 1 : 0;
    op->fi.keep_cache = 0;
    op->fi.nonseekable = 0;
    return ops_open_reply(op);
  }
  op_js(op, ops_file_args, ops_open_done);
}

// ---- CREATE (and MKNOD of a regular file) ---------------------------------------------

void ops_create_then (hs_op_t *op, int res, const struct stat *st) {
  if (res == 0 && !S_ISREG(st->st_mode)) res = -EIO;
  if (res == 0) res = op_entry(op, op->dir, op->name, st);
  if (res != 0) {
    hs_release_handle(op, op->fi.fh, op->path);
    return op_reply_err(op, res);
  }
  hs_node_t *n = hs_node_get(op->e.ino);
  if (op->step == STEP_MKNOD) {
    // mknod answers the entry; the file it made is closed again.
    hs_release_handle(op, op->fi.fh, op->path);
    if (fuse_reply_entry(op->req, &op->e) == -ENOENT) hs_node_forget(op->e.ino, 1);
    hs_node_put(n);
    return op_finish(op);
  }
  if (hs_conf.kernel_cache) op->fi.keep_cache = 1;
  hs_noflush_after_open(0, &op->fi);
  if (n != NULL) {
    if (open_io(op, n) != 0) {
      // A CREATE of a name that existed, in a passed-through family.
      hs_noflush_after_open(-1, NULL);
      hs_release_handle(op, op->fi.fh, op->path);
      // The entry is not answered: the lookup op_entry counted goes again.
      hs_node_forget(op->e.ino, 1);
      hs_node_put(n);
      return op_reply_err(op, -ETXTBSY);
    }
    op->kept = 1;
    // An O_TMPFILE's file is hidden from the start (JavaScript made it at its
    // home's orphan): its last release unlinks it, unless a LINK named it.
    if (op->tmpfile) hs_node_mark_hidden(n);
  }
  struct fuse_file_info out = op->fi;
  out.fh = hs_fh_out(op->fi.fh);
  if (fuse_reply_create(op->req, &op->e, &out) == -ENOENT) {
    char *hidden = NULL;
    hs_release_handle(op, op->fi.fh, op->path);
    if (n != NULL && hs_node_released(n, &hidden)) free(hidden);
    hs_node_forget(op->e.ino, 1);
  }
  hs_node_put(n);
  op_finish(op);
}

static void create_go (hs_op_t *op) {
  uint64_t fh = 0;
  int dio = 0, presented = 0;
  struct stat st;
  // An O_TMPFILE's file is made by JavaScript only (at the home's orphan, never in a directory).
  if (!op->tmpfile && hs_fastpath_create(op->path, op->mode, (int) op->flags, op->call.uid, op->call.gid, &fh, &dio, &st, &presented) == 0) {
    op->fi.fh = fh;
    op->fi.direct_io = dio ? 1 : 0;
    op->fi.keep_cache = 0;
    op->fi.nonseekable = 0;
    // The file's fstat once owned, presented as an fgetattr of the handle would (fastpath_create.c).
    if (presented) {
      op->fh = fh;
      return ops_create_then(op, 0, &st);
    }
    return op_fgetattr(op, op->path, fh, ops_create_then);
  }
  op->call.op = HOMESFS_OP_CREATE;
  op_js(op, ops_file_args, ops_create_done);
}

void hs_create_for_mknod (hs_op_t *op) {
  op->step = STEP_MKNOD;
  op->flags = O_CREAT | O_EXCL | O_WRONLY;
  memset(&op->fi, 0, sizeof(op->fi));
  op->fi.flags = (int) op->flags;
  create_go(op);
}

// An O_TMPFILE open (proto.c: a TMPFILE decoded as a CREATE named "/"): the
// file is made under a hidden name at the home's root, as a file unlinked
// while open keeps one (nodes.h), and JavaScript makes it straight at the
// home's orphan (src/fs/file.ts), so no listing ever shows it. The flags
// JavaScript gets keep HOMESFS_OPEN_TMPFILE, which marks it.
// glibc: O_TMPFILE is __O_TMPFILE, which is 020000000 | O_DIRECTORY.
_Static_assert(HOMESFS_OPEN_TMPFILE == (O_TMPFILE & ~O_DIRECTORY), "abi.h OPEN_TMPFILE is O_TMPFILE without O_DIRECTORY");

static void tmpfile_create (hs_op_t *op, hs_node_t *dir, mode_t mode, struct fuse_file_info *fi) {
  char hidden[64];
  op->tmpfile = 1;
  // The directory it was opened in must be in a home (the daemon's own levels make nothing).
  if ((op->dir = hs_node_home(dir)) == NULL) return op_reply_err(op, -EOPNOTSUPP);
  hs_node_tmp_name(op->dir, hidden, sizeof(hidden));
  if ((op->name = strdup(hidden)) == NULL) return op_reply_err(op, -ENOMEM);
  op->fi = *fi;
  op->mode = (uint32_t) mode;
  // O_TMPFILE is __O_TMPFILE | O_DIRECTORY: the file is made with O_CREAT | O_EXCL, the mark kept.
  op->flags = ((uint32_t) fi->flags & ~(uint32_t) O_DIRECTORY) | O_CREAT | O_EXCL | HOMESFS_OPEN_TMPFILE;
  if (op_lock(op, op->dir, hidden, 0) != 0) return;
  create_go(op);
}

void hs_ll_create (fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi) {
  hs_op_t *op = op_new(req, HOMESFS_OP_CREATE);
  if (op == NULL) return;
  if (hs_proto_tmpfile()) {
    hs_node_t *dir = op_node(op, parent);
    if (dir == NULL) return;
    tmpfile_create(op, dir, mode, fi);
    return hs_node_put(dir);
  }
  if ((op->dir = op_node(op, parent)) == NULL) return;
  if (op_name_ok(op, name) != 0) return;
  if ((op->name = strdup(name)) == NULL) return op_reply_err(op, -ENOMEM);
  op->fi = *fi;
  op->mode = (uint32_t) mode;
  op->flags = (uint32_t) fi->flags;
  if (op_lock(op, op->dir, name, 0) != 0) return;
  create_go(op);
}

// ---- READ, WRITE ----------------------------------------------------------------------

void hs_ll_read (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
  // A read the data plane serves needs no record: the buffer is this thread's.
  static __thread char *buf;
  static __thread size_t buf_size;
  if (buf_size < size) {
    char *nb = realloc(buf, size);
    if (nb != NULL) {
      buf = nb;
      buf_size = size;
    }
  }
  int res = 0;
  if (buf_size >= size && hs_dp_read(fi->fh, buf, size, off, &res)) {
    if (res < 0) fuse_reply_err(req, -res);
    else fuse_reply_buf(req, buf, (size_t) res);
    return;
  }
  hs_op_t *op = op_new(req, HOMESFS_OP_READ);
  if (op == NULL) return;
  if (op_handle(op, ino, fi) != 0) return;
  op->len = size;
  op->offset = off;
  op_js(op, ops_file_args, ops_read_done);
}

void hs_ll_write (fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
  hs_op_t *op = op_new(req, HOMESFS_OP_WRITE);
  if (op == NULL) return;
  if (op_handle(op, ino, fi) != 0) return;
  int res = 0;
  const uint32_t caller[3] = { op->call.uid, op->call.gid, op->call.pid };
  if (hs_dp_write(op->path, fi->fh, buf, size, off, caller, &res)) {
    if (res < 0) return op_reply_err(op, res);
    fuse_reply_write(req, (size_t) res);
    return op_finish(op);
  }
  // The request's buffer is libfuse's until this returns: JavaScript's copy is made from one of our own.
  if ((op->data = malloc(size > 0 ? size : 1)) == NULL) return op_reply_err(op, -ENOMEM);
  memcpy(op->data, buf, size);
  op->len = size;
  op->offset = off;
  op_js(op, ops_file_args, ops_write_done);
}

// ---- FLUSH, RELEASE, FSYNC, FALLOCATE -------------------------------------------------

void hs_ll_flush (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  if (hs_flush_is_noop(fi)) {
    fuse_reply_err(req, 0);
    return;
  }
  hs_op_t *op = op_new(req, HOMESFS_OP_FLUSH);
  if (op == NULL) return;
  if (op_handle(op, ino, fi) != 0) return;
  op_js(op, ops_file_args, ops_errno_done);
}

// After the handle is released: a hidden name whose last handle this was goes too.
void ops_release_node (hs_op_t *op) {
  char *hidden = NULL;
  // Under the request's unique: a resent RELEASE whose first run took this release off does not again.
  int last = hs_node_released_by(op->node, &hidden, op->unique);
  op->kept = 1;
  if (!last) return op_reply_err(op, 0);
  free(op->path);
  op->path = hidden;
  op->call.op = HOMESFS_OP_UNLINK;
  op_js(op, ops_file_args, ops_errno_done);
}

void hs_ll_release (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  hs_op_t *op = op_new(req, HOMESFS_OP_RELEASE);
  if (op == NULL) return;
  if ((op->node = op_node(op, ino)) == NULL) return;
  op->fi = *fi;
  op->fh = fi->fh;
  // No handle: a dead daemon's that was never reopened; only the node's open count goes.
  if (fi->fh == 0) return ops_release_node(op);
  if (fi->flush && !hs_flush_is_noop(fi)) {
    op->path = hs_path_peek(op->node);
    op->call.op = HOMESFS_OP_FLUSH;
    return op_js(op, ops_file_args, ops_release_done);
  }
  if (hs_fastpath_release(fi->fh) || hs_dp_release(fi->fh)) return ops_release_node(op);
  op->path = hs_path_peek(op->node);
  op_js(op, ops_file_args, ops_release_done);
}

void hs_ll_fsync (fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
  hs_op_t *op = op_new(req, HOMESFS_OP_FSYNC);
  if (op == NULL) return;
  if (op_handle(op, ino, fi) != 0) return;
  op->datasync = datasync;
  op_js(op, ops_file_args, ops_errno_done);
}

void hs_ll_fallocate (fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length, struct fuse_file_info *fi) {
  hs_op_t *op = op_new(req, HOMESFS_OP_FALLOCATE);
  if (op == NULL) return;
  if (op_handle(op, ino, fi) != 0) return;
  op->mode = (uint32_t) mode;
  op->offset = offset;
  op->length = length;
  op_js(op, ops_file_args, ops_errno_done);
}

// ---- reopening a dead daemon's handle (handles.c) ------------------------------------

// An open as JavaScript's OPEN does it, told it reopens a dead handle (the
// node's inode number: JavaScript refuses a file that is not that inode, or
// that the caller could not open), on this worker, waiting for JavaScript:
// no reply, no open count (the node's count still holds the dead daemon's
// open, which the handle's RELEASE takes back). Never the fast path's open,
// which knows neither check. The wait is bounded by JavaScript's open; it
// happens once per dead handle, after a crash only (native-notes).
int hs_reopen_file (uint64_t nodeid, int flags, uint32_t uid, uint32_t gid, uint32_t pid, uint64_t *inner) {
  hs_node_t *n = hs_node_get(nodeid);
  if (n == NULL) return -ESTALE;
  char *path = NULL;
  hs_plock_t pl;
  int err = hs_path_lock(n, NULL, 0, &path, &pl);
  if (err != 0) {
    hs_node_put(n);
    return err;
  }
  uint64_t fh = 0;
  uint64_t ino = hs_node_ino(n);
  if (ino == 0) err = -EIO;  // no inode to hold the reopen to
  else {
    ops_reopen_wait_t w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0 };
    hs_op_t *op = op_new(NULL, HOMESFS_OP_OPEN);
    if (op == NULL) err = -ENOMEM;
    else {
      op->call.uid = uid;
      op->call.gid = gid;
      op->call.pid = pid;
      op->flags = (uint32_t) flags;
      op->reopen_ino = ino;
      op->dh = &w;
      if ((op->path = strdup(path)) == NULL) {
        op_finish(op);
        err = -ENOMEM;
      } else {
        op_js(op, ops_file_args, ops_reopen_done);
        pthread_mutex_lock(&w.mu);
        while (!w.done) pthread_cond_wait(&w.cond, &w.mu);
        pthread_mutex_unlock(&w.mu);
        err = w.res;
        fh = w.fh;
      }
    }
  }
  hs_path_unlock(&pl);
  free(path);
  hs_node_put(n);
  // A handle JavaScript answers "no handle" (0) for cannot stand for the dead one.
  if (err == 0 && fh == 0) err = -EIO;
  if (err == 0) *inner = fh;
  return err;
}
