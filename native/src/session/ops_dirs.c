// OPENDIR, READDIR, RELEASEDIR, FSYNCDIR.
//
// An open directory is a record of ours (the kernel's fh is its number in a
// table, so that a successor can be handed the records under the same
// numbers): who opened it and where, the
// count dirhandles.c keeps for the caller's caps, and, only for a listing
// JavaScript answers whole, that listing. A streamed listing (the binding's
// own, fastpath_attr.c, or JavaScript's with offsets) keeps nothing between
// requests: each READDIR is filled from the kernel's offset into one reply.
//
// Lock: a record's `mu` guards its listing. A READDIR holds it while it reads
// or fills the listing and until its reply is written (threads that share a
// directory descriptor can send two READDIRs of one record at once), and
// RELEASEDIR takes it before the record is freed (the kernel may send it the
// moment a READDIR's reply is read, before the replying thread is back).
// A READDIR that goes to JavaScript holds nothing meanwhile. dt_mu guards
// the table (fh -> record); it is taken before a record's mu (the export),
// never while one is held.
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
#include "session/proto.h"

int ops_dir_fill (void *ctx, const char *name, const struct stat *st, off_t off) {
  ops_dir_fill_t *f = ctx;
  struct stat unknown;
  if (st == NULL) {
    memset(&unknown, 0, sizeof(unknown));
    unknown.st_ino = HS_UNKNOWN_INO;
    st = &unknown;
  }
  if (off == 0) {
    if (!f->whole) f->dh->len = 0;
    f->whole = 1;
    return ops_dir_append(f->dh, f->req, name, st) != 0;
  }
  size_t need = fuse_add_direntry(f->req, NULL, 0, name, NULL, 0);
  if (need > f->size - f->len) return 1;
  fuse_add_direntry(f->req, f->out + f->len, f->size - f->len, name, st, off);
  f->len += need;
  return 0;
}

// Appends an entry to a whole listing (its offset: where the next one starts).
int ops_dir_append (hs_dh_t *dh, fuse_req_t req, const char *name, const struct stat *st) {
  size_t need = fuse_add_direntry(req, NULL, 0, name, NULL, 0);
  if (dh->len + need > dh->size) {
    size_t nsize = dh->size == 0 ? 4096 : dh->size;
    while (nsize < dh->len + need) nsize *= 2;
    char *n = realloc(dh->contents, nsize);
    if (n == NULL) return -ENOMEM;
    dh->contents = n;
    dh->size = nsize;
  }
  fuse_add_direntry(req, dh->contents + dh->len, need, name, st, (off_t) (dh->len + need));
  dh->len += need;
  return 0;
}

void ops_dir_reply_list (hs_op_t *op, const char *list, size_t len) {
  if (op->plus) return ops_dir_reply_plus(op, list, len, op->plus == 1);
  if (op->req != NULL) fuse_reply_buf(op->req, len > 0 ? list : NULL, len);
  op->req = NULL;
}

// Under dh->mu: the part of a whole listing from the request's offset; unlocks.
void ops_dir_reply_slice (hs_op_t *op, hs_dh_t *dh) {
  size_t off = (size_t) op->offset, size = op->len;
  if (off >= dh->len) size = 0;
  // READDIRPLUS's entries are larger: the rest of the listing, cut to fit there.
  else if (op->plus) size = dh->len - off;
  else if (off + size > dh->len) size = dh->len - off;
  ops_dir_reply_list(op, size > 0 ? dh->contents + off : NULL, size);
  pthread_mutex_unlock(&dh->mu);
  op_finish(op);
}

// Under dh->mu: answers err and unlocks.
void ops_dir_reply_err_unlock (hs_op_t *op, hs_dh_t *dh, int err) {
  pthread_mutex_unlock(&dh->mu);
  op_reply_err(op, err);
}

// ---- the table of open directories: fh -> record ---------------------------------------
// The kernel's fh is an index here (plus one), not a pointer, so a successor
// can be handed the records under the same numbers (lock order: see the top).

static pthread_mutex_t dt_mu = PTHREAD_MUTEX_INITIALIZER;  // the table; before a record's mu
static hs_dh_t **dt;
static uint64_t dt_cap, dt_used, dt_next;

// The record under a new number, or 0 (no memory).
uint64_t hs_dt_put (hs_dh_t *dh, uint64_t want) {
  pthread_mutex_lock(&dt_mu);
  uint64_t id = 0;
  if (want != 0 && want > dt_cap) {
    uint64_t ncap = dt_cap == 0 ? 256 : dt_cap;
    while (ncap < want) ncap *= 2;
    hs_dh_t **n = realloc(dt, ncap * sizeof(*n));
    if (n != NULL) {
      memset(n + dt_cap, 0, (ncap - dt_cap) * sizeof(*n));
      dt = n;
      dt_cap = ncap;
    }
  }
  if (want != 0) {
    if (want <= dt_cap && dt[want - 1] == NULL) id = want;
  } else {
    if (dt_used == dt_cap) {
      uint64_t ncap = dt_cap == 0 ? 256 : dt_cap * 2;
      hs_dh_t **n = realloc(dt, ncap * sizeof(*n));
      if (n != NULL) {
        memset(n + dt_cap, 0, (ncap - dt_cap) * sizeof(*n));
        dt = n;
        dt_cap = ncap;
      }
    }
    for (uint64_t k = 0; k < dt_cap && id == 0; k++) {
      uint64_t i = (dt_next + k) % dt_cap;
      if (dt[i] == NULL) id = i + 1;
    }
  }
  if (id != 0) {
    dt[id - 1] = dh;
    dt_used++;
    dt_next = id % (dt_cap == 0 ? 1 : dt_cap);
  }
  pthread_mutex_unlock(&dt_mu);
  return id;
}

hs_dh_t *hs_dt_get (uint64_t id, int remove) {
  pthread_mutex_lock(&dt_mu);
  hs_dh_t *dh = id >= 1 && id <= dt_cap ? dt[id - 1] : NULL;
  if (dh != NULL && remove) {
    dt[id - 1] = NULL;
    dt_used--;
  }
  pthread_mutex_unlock(&dt_mu);
  return dh;
}

void hs_dh_free (hs_dh_t *dh) {
  pthread_mutex_destroy(&dh->mu);
  if (dh->count_fh != 0) hs_dh_give(dh->count_fh);
  free(dh->path);
  free(dh->contents);
  free(dh);
}

// ---- OPENDIR, RELEASEDIR ----------------------------------------------------------------

// The kernel keeps a directory's listing (since Linux 4.20) when the open is
// answered with FOPEN_CACHE_DIR; FOPEN_KEEP_CACHE keeps it across opens. It
// drops it by itself when a change through the mount touches the directory
// (create, unlink, rename, ...: the directory's version moves) or its mtime
// is seen to change; the daemon's own changes drop it through inval.c (a
// directory's invalidation takes its pages, where the listing lives). Modes
// are the kernel's to check (default_permissions), at every opendir, so a
// cached listing is no wider than the one it replaces. libfuse 2.9's
// fuse_reply_open knows neither flag, so the reply is built here (the layout
// of the kernel's fuse_open_out). Only when names may be kept at all
// (entry_timeout > 0): a daemon asked to answer every lookup answers every
// listing too.
#define HS_FOPEN_KEEP_CACHE (1u << 1)
#define HS_FOPEN_CACHE_DIR (1u << 3)
struct hs_open_out { uint64_t fh; uint32_t open_flags; uint32_t padding; };

static int reply_opendir (fuse_req_t req, const struct fuse_file_info *fi) {
  if (hs_conf.entry_timeout <= 0 || hs_conf.attr_timeout <= 0) {
    struct fuse_file_info kfi = *fi;
    kfi.fh = hs_fh_out(fi->fh);
    return fuse_reply_open(req, &kfi);
  }
  struct hs_open_out out = { .fh = hs_fh_out(fi->fh), .open_flags = HS_FOPEN_KEEP_CACHE | HS_FOPEN_CACHE_DIR, .padding = 0 };
  return fuse_reply_buf(req, (const char *) &out, sizeof(out));
}

void hs_ll_opendir (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  hs_op_t *op = op_new(req, HOMESFS_OP_READDIR);
  if (op == NULL) return;
  if ((op->node = op_node(op, ino)) == NULL) return;
  if (op_lock(op, op->node, NULL, 0) != 0) return;
  hs_dh_t *dh = calloc(1, sizeof(*dh));
  if (dh == NULL || (dh->path = strdup(op->path)) == NULL) {
    free(dh);
    return op_reply_err(op, -ENOMEM);
  }
  dh->uid = op->call.uid;
  int err = hs_dh_take(op->call.uid, op->path, &dh->count_fh);
  if (err != 0) {
    free(dh->path);
    free(dh);
    return op_reply_err(op, err);
  }
  pthread_mutex_init(&dh->mu, NULL);
  op->fi = *fi;
  if ((op->fi.fh = hs_dt_put(dh, 0)) == 0) {
    hs_dh_free(dh);
    return op_reply_err(op, -ENOMEM);
  }
  if (reply_opendir(req, &op->fi) == -ENOENT) hs_dh_free(hs_dt_get(op->fi.fh, 1));
  op_finish(op);
}

void hs_ll_releasedir (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
  (void) ino;
  hs_dh_t *dh = hs_dt_get(fi->fh, 1);
  if (dh != NULL) {
    // A READDIR whose reply was just read may still be writing it.
    pthread_mutex_lock(&dh->mu);
    pthread_mutex_unlock(&dh->mu);
    hs_dh_free(dh);
  }
  fuse_reply_err(req, 0);
}

// ---- READDIR ------------------------------------------------------------------------

void hs_ll_readdir (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
  hs_op_t *op = op_new(req, HOMESFS_OP_READDIR);
  if (op == NULL) return;
  hs_dh_t *dh = hs_dt_get(fi->fh, 0);
  if (dh == NULL) return op_reply_err(op, -EBADF);
  op->dh = dh;
  op->offset = off;
  op->len = size;
  if (hs_proto_plus()) {
    op->plus = 1;
    // The directory whose names the entries' lookups are in (none: no attributes).
    op->dir = hs_node_get(ino);
  }
  pthread_mutex_lock(&dh->mu);
  // SUS: a rewound listing is read again.
  if (off == 0) dh->filled = 0;
  if (dh->filled) return ops_dir_reply_slice(op, dh);
  if ((op->node = hs_node_get(ino)) == NULL) return ops_dir_reply_err_unlock(op, dh, -ESTALE);
  int err = hs_path_lock(op->node, NULL, 0, &op->path, &op->pl);
  if (err == 0) op->locked = 1;
  else if (err != -ENOENT) return ops_dir_reply_err_unlock(op, dh, err);
  if ((op->data = malloc(size > 0 ? size : 1)) == NULL) return ops_dir_reply_err_unlock(op, dh, -ENOMEM);
  ops_dir_fill_t f = { req, op->data, 0, size, dh, 0 };
  if (op->path == NULL) {
    // A directory removed while a process still lists it: empty, as on any filesystem.
    struct stat st = { .st_ino = HS_UNKNOWN_INO, .st_mode = S_IFDIR };
    if (off == 0 && ops_dir_fill(&f, ".", &st, 1) == 0) ops_dir_fill(&f, "..", &st, 2);
    ops_dir_reply_list(op, f.out, f.len);
    pthread_mutex_unlock(&dh->mu);
    return op_finish(op);
  }
  int fr = hs_fastpath_readdir(op->path, &f, ops_dir_fill, off, hs_utf8_valid_n);
  if (fr != HOMESFS_FASTPATH_FALLBACK) {
    if (fr < 0) return ops_dir_reply_err_unlock(op, dh, fr);
    if (f.whole) {
      dh->filled = 1;
      return ops_dir_reply_slice(op, dh);
    }
    ops_dir_reply_list(op, f.out, f.len);
    pthread_mutex_unlock(&dh->mu);
    return op_finish(op);
  }
  pthread_mutex_unlock(&dh->mu);
  op_js(op, ops_readdir_args, ops_readdir_done);
}

// ---- FSYNCDIR ---------------------------------------------------------------------------

void hs_ll_fsyncdir (fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
  (void) fi;
  hs_op_t *op = op_new(req, HOMESFS_OP_FSYNCDIR);
  if (op == NULL) return;
  if ((op->node = op_node(op, ino)) == NULL) return;
  if (op_lock_nullok(op, op->node) != 0) return;
  // A directory removed while open has nothing left to flush.
  if (op->path == NULL) return op_reply_err(op, 0);
  op->datasync = datasync;
  op_js(op, ops_fsyncdir_args, ops_fsyncdir_done);
}

// Under dt_mu, then each record's mu (the order everywhere): a READDIR still
// filling one is seen whole or not at all. Stops at the first nonzero return.
int hs_dt_each (int (*fn) (void *ctx, uint64_t fh, hs_dh_t *dh), void *ctx, uint64_t *count) {
  int err = 0;
  pthread_mutex_lock(&dt_mu);
  *count = dt_used;
  for (uint64_t i = 0; i < dt_cap && err == 0; i++) {
    hs_dh_t *dh = dt[i];
    if (dh == NULL) continue;
    pthread_mutex_lock(&dh->mu);
    err = fn(ctx, i + 1, dh);
    pthread_mutex_unlock(&dh->mu);
  }
  pthread_mutex_unlock(&dt_mu);
  return err;
}

void hs_dirs_clear (void) {
  pthread_mutex_lock(&dt_mu);
  hs_dh_t **tab = dt;
  uint64_t cap = dt_cap;
  dt = NULL;
  dt_cap = dt_used = dt_next = 0;
  pthread_mutex_unlock(&dt_mu);
  for (uint64_t i = 0; i < cap; i++) {
    if (tab[i] != NULL) hs_dh_free(tab[i]);
  }
  free(tab);
}

// ---- reopening a dead daemon's directory handle (handles.c) --------------------------

// An open as OPENDIR makes it, with no reply: the caller's descriptor count
// taken as at any open (so a dead daemon's directories count again).
int hs_reopen_dir (uint64_t nodeid, uint32_t uid, uint64_t *inner) {
  hs_node_t *n = hs_node_get(nodeid);
  if (n == NULL) return -ESTALE;
  char *path = NULL;
  hs_plock_t pl;
  int err = hs_path_lock(n, NULL, 0, &path, &pl);
  hs_dh_t *dh = NULL;
  if (err == 0 && ((dh = calloc(1, sizeof(*dh))) == NULL || (dh->path = strdup(path)) == NULL)) err = -ENOMEM;
  if (err == 0) {
    dh->uid = uid;
    err = hs_dh_take(uid, path, &dh->count_fh);
  }
  if (err == 0) {
    pthread_mutex_init(&dh->mu, NULL);
    if ((*inner = hs_dt_put(dh, 0)) == 0) {
      hs_dh_free(dh);
      err = -ENOMEM;
    }
    dh = NULL;
  }
  if (dh != NULL) {
    free(dh->path);
    free(dh);
  }
  if (path != NULL) {
    hs_path_unlock(&pl);
    free(path);
  }
  hs_node_put(n);
  return err;
}
