// Handles across daemons (handles.h): the epoch in every handle the kernel
// holds, a dead daemon's handles reopened on first use, and the requests the
// kernel sends again after a resume.
//
// Why the epoch: after a crash the kernel still holds the dead daemon's
// handles, and the new daemon numbers its own from the same small integers.
// Without the epoch a READ on the dead daemon's handle 7 would read whatever
// the new daemon opened as 7: another file, maybe another home's.
//
// Lock: d_mu guards the dead-handle map (kernel handle -> our handle, or a
// reopen in progress, which others wait for on d_cond). Never held across a
// reopen (that waits for JavaScript). Counters are atomics.
//
// Invariant: a dead handle maps to at most one handle of ours; the first
// request to need it reopens, the others wait for that reopen; the mapping
// goes at the dead handle's RELEASE (the kernel sends none after it).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "session/handles.h"
#include "session/nodes.h"

#ifndef FUSE_UNIQUE_RESEND
#define FUSE_UNIQUE_RESEND (1ULL << 63)
#endif

__thread uint64_t hs_req_unique;
static uint32_t h_epoch;  // atomic
static uint64_t h_resent, h_refused, h_reopened;  // atomics

void hs_fh_set_epoch (uint32_t epoch) {
  __atomic_store_n(&h_epoch, epoch & 0xffff, __ATOMIC_SEQ_CST);
}

uint32_t hs_fh_epoch (void) {
  return __atomic_load_n(&h_epoch, __ATOMIC_RELAXED);
}

void hs_handles_stats (uint64_t *resent, uint64_t *refused, uint64_t *reopened) {
  *resent = __atomic_load_n(&h_resent, __ATOMIC_RELAXED);
  *refused = __atomic_load_n(&h_refused, __ATOMIC_RELAXED);
  *reopened = __atomic_load_n(&h_reopened, __ATOMIC_RELAXED);
}

// ---- the dead handles' map ---------------------------------------------------------

typedef struct dead {
  struct dead *next;
  uint64_t kfh;
  uint64_t inner;
  int state;   // 1 ready, 0 being reopened
} dead_t;

#define D_BUCKETS 1024
static pthread_mutex_t d_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t d_cond = PTHREAD_COND_INITIALIZER;
static dead_t *d_tab[D_BUCKETS];

static dead_t **d_slot (uint64_t kfh) {
  dead_t **pp = &d_tab[(kfh ^ (kfh >> 17)) % D_BUCKETS];
  while (*pp != NULL && (*pp)->kfh != kfh) pp = &(*pp)->next;
  return pp;
}

void hs_handles_clear (void) {
  pthread_mutex_lock(&d_mu);
  for (size_t b = 0; b < D_BUCKETS; b++) {
    while (d_tab[b] != NULL) {
      dead_t *d = d_tab[b];
      d_tab[b] = d->next;
      free(d);
    }
  }
  pthread_mutex_unlock(&d_mu);
}

int hs_handles_export (uint64_t **pairs, size_t *count) {
  pthread_mutex_lock(&d_mu);
  size_t n = 0;
  for (size_t b = 0; b < D_BUCKETS; b++)
    for (dead_t *d = d_tab[b]; d != NULL; d = d->next) n += d->state == 1;
  uint64_t *out = malloc((n > 0 ? n : 1) * 2 * sizeof(uint64_t));
  if (out == NULL) {
    pthread_mutex_unlock(&d_mu);
    return -ENOMEM;
  }
  size_t i = 0;
  for (size_t b = 0; b < D_BUCKETS; b++)
    for (dead_t *d = d_tab[b]; d != NULL; d = d->next) {
      if (d->state != 1) continue;
      out[2 * i] = d->kfh;
      out[2 * i + 1] = d->inner;
      i++;
    }
  pthread_mutex_unlock(&d_mu);
  *pairs = out;
  *count = n;
  return 0;
}

int hs_handles_import (const uint64_t *pairs, size_t count) {
  dead_t **made = calloc(count > 0 ? count : 1, sizeof(*made));
  if (made == NULL) return -ENOMEM;
  for (size_t i = 0; i < count; i++) {
    if ((made[i] = calloc(1, sizeof(dead_t))) == NULL) {
      for (size_t k = 0; k < i; k++) free(made[k]);
      free(made);
      return -ENOMEM;
    }
    made[i]->kfh = pairs[2 * i];
    made[i]->inner = pairs[2 * i + 1];
    made[i]->state = 1;
  }
  int err = 0;
  size_t in = 0;
  pthread_mutex_lock(&d_mu);
  for (; in < count; in++) {
    dead_t **pp = d_slot(made[in]->kfh);
    if (*pp != NULL) {
      err = -EEXIST;
      break;
    }
    *pp = made[in];
  }
  // All or nothing: the ones put in go again.
  if (err != 0) {
    for (size_t k = 0; k < in; k++) {
      dead_t **pp = d_slot(made[k]->kfh);
      *pp = (*pp)->next;
    }
  }
  pthread_mutex_unlock(&d_mu);
  if (err != 0) for (size_t i = 0; i < count; i++) free(made[i]);
  free(made);
  return err;
}

#define HS_FLAGS_UNKNOWN (-1)
static int reopen_widest (uint64_t nodeid, const struct fuse_in_header *h, uint64_t *inner);

// Our handle for a dead one: the existing mapping, or a reopen (once, others
// wait). `dir`: a directory handle. 0 and *inner, or -errno (nothing kept:
// the next request tries again).
static int dead_map (uint64_t kfh, int dir, uint64_t nodeid, int flags, const struct fuse_in_header *h, uint64_t *inner) {
  pthread_mutex_lock(&d_mu);
  dead_t **pp = d_slot(kfh);
  while (*pp != NULL && (*pp)->state == 0) {
    pthread_cond_wait(&d_cond, &d_mu);
    pp = d_slot(kfh);
  }
  if (*pp != NULL) {
    *inner = (*pp)->inner;
    pthread_mutex_unlock(&d_mu);
    return 0;
  }
  dead_t *d = calloc(1, sizeof(*d));
  if (d == NULL) {
    pthread_mutex_unlock(&d_mu);
    return -ENOMEM;
  }
  d->kfh = kfh;
  *pp = d;
  pthread_mutex_unlock(&d_mu);
  int err = dir ? hs_reopen_dir(nodeid, h->uid, inner)
              : flags == HS_FLAGS_UNKNOWN ? reopen_widest(nodeid, h, inner)
              : hs_reopen_file(nodeid, flags, h->uid, h->gid, h->pid, inner);
  pthread_mutex_lock(&d_mu);
  pp = d_slot(kfh);
  if (err == 0) {
    (*pp)->inner = *inner;
    (*pp)->state = 1;
    __atomic_add_fetch(&h_reopened, 1, __ATOMIC_RELAXED);
  } else {
    dead_t *gone = *pp;
    *pp = gone->next;
    free(gone);
  }
  pthread_cond_broadcast(&d_cond);
  pthread_mutex_unlock(&d_mu);
  return err;
}

// The mapping of a dead handle (removed with `take`: its RELEASE): 1 and *inner, else 0.
static int dead_find (uint64_t kfh, int take, uint64_t *inner) {
  pthread_mutex_lock(&d_mu);
  dead_t **pp = d_slot(kfh);
  while (*pp != NULL && (*pp)->state == 0) {
    pthread_cond_wait(&d_cond, &d_mu);
    pp = d_slot(kfh);
  }
  dead_t *d = *pp;
  if (d != NULL) {
    *inner = d->inner;
    if (take) {
      *pp = d->next;
      free(d);
    }
  }
  pthread_mutex_unlock(&d_mu);
  return d != NULL;
}

// ---- the filter ----------------------------------------------------------------------

// err: a positive errno (0: success).
static void answer (struct fuse_chan *ch, uint64_t unique, int err) {
  struct fuse_out_header out = { .len = sizeof(out), .error = -err, .unique = unique };
  struct iovec iov = { &out, sizeof(out) };
  fuse_chan_send(ch, &iov, 1);
}

// A request the kernel sent again whose first run may have changed the tree:
// doing it twice could fail where once succeeded (EEXIST, ENOENT). A WRITE
// is not one: it names a dead daemon's handle, reopened without O_APPEND
// (reopen_flags), so it lands where the kernel says, once or twice alike.
static int not_idempotent (const struct fuse_in_header *h, const char *arg, size_t alen) {
  switch (h->opcode) {
    case FUSE_SYMLINK: case FUSE_MKNOD: case FUSE_MKDIR: case FUSE_UNLINK: case FUSE_RMDIR:
    case FUSE_RENAME: case FUSE_RENAME2: case FUSE_LINK: case FUSE_SETXATTR: case FUSE_REMOVEXATTR:
      return 1;
    case FUSE_CREATE: {
      struct fuse_create_in in;
      if (alen < sizeof(in.flags)) return 1;
      memcpy(&in.flags, arg, sizeof(in.flags));
      return (in.flags & O_EXCL) != 0;
    }
    default:
      return 0;
  }
}

// Where a request's handle is (the offset in its argument), or -1: none.
static long fh_offset (const struct fuse_in_header *h, const char *arg, size_t alen, int *dir) {
  *dir = 0;
  switch (h->opcode) {
    case FUSE_READDIR: case FUSE_READDIRPLUS: case FUSE_RELEASEDIR: case FUSE_FSYNCDIR:
      *dir = 1;
      return 0;
    case FUSE_READ: case FUSE_WRITE: case FUSE_RELEASE: case FUSE_FSYNC: case FUSE_FLUSH:
    case FUSE_GETLK: case FUSE_SETLK: case FUSE_SETLKW: case FUSE_FALLOCATE:
      return 0;
    case FUSE_GETATTR: {
      uint32_t flags;
      if (alen < sizeof(struct fuse_getattr_in)) return -1;
      memcpy(&flags, arg, sizeof(flags));
      return (flags & FUSE_GETATTR_FH) ? (long) offsetof(struct fuse_getattr_in, fh) : -1;
    }
    case FUSE_SETATTR: {
      uint32_t valid;
      if (alen < sizeof(struct fuse_setattr_in)) return -1;
      memcpy(&valid, arg, sizeof(valid));
      return (valid & FATTR_FH) ? (long) offsetof(struct fuse_setattr_in, fh) : -1;
    }
    default:
      return -1;
  }
}

// The open flags a dead handle is reopened with: what READ and WRITE say the
// file was opened with (f_flags, its access mode included), or
// HS_FLAGS_UNKNOWN for the rest (FSYNC, FALLOCATE, locks carry none). Never
// O_APPEND: the kernel already puts an append at its size of the file
// (generic_write_checks, the size every write through the mount updates), so
// writing at the request's offset is the same append, and the same bytes if
// it comes again.
static int reopen_flags (const struct fuse_in_header *h, const char *arg, size_t alen) {
  uint32_t flags = 0;
  if ((h->opcode != FUSE_READ && h->opcode != FUSE_WRITE) || alen < sizeof(struct fuse_write_in)) return HS_FLAGS_UNKNOWN;
  memcpy(&flags, arg + offsetof(struct fuse_read_in, flags), sizeof(flags));
  if (h->opcode == FUSE_WRITE) memcpy(&flags, arg + offsetof(struct fuse_write_in, flags), sizeof(flags));
  return (int) (flags & ~(uint32_t) (O_CREAT | O_EXCL | O_TRUNC | O_NOCTTY | O_APPEND));
}

// A reopen for a request that does not say how the file was opened (an
// FSYNC before any READ or WRITE since the crash): the mapping serves every
// later request of the handle, a WRITE included, so it is opened for as much
// as the caller may: read-write, else write-only, else read-only. No wider
// than the caller's own descriptor in effect: the kernel checks that
// descriptor's mode before it sends a READ or a WRITE.
static int reopen_widest (uint64_t nodeid, const struct fuse_in_header *h, uint64_t *inner) {
  static const int modes[] = { O_RDWR, O_WRONLY, O_RDONLY };
  int err = -EACCES;
  for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
    err = hs_reopen_file(nodeid, modes[i], h->uid, h->gid, h->pid, inner);
    if (err != -EACCES && err != -EPERM && err != -EROFS && err != -ETXTBSY) return err;
  }
  return err;
}

// A dead daemon's handle in a request: replaced by ours (reopened if need
// be), or the request answered. 1: answered.
static int redirect (char *fhp, uint64_t kfh, int dir, const struct fuse_in_header *h, const char *arg, size_t alen, struct fuse_chan *ch) {
  uint64_t inner = 0;
  switch (h->opcode) {
    case FUSE_RELEASE: case FUSE_RELEASEDIR:
      // Never reopened: 0 (no handle) still lets the release drop the node's open count.
      if (!dead_find(kfh, 1, &inner)) inner = 0;
      break;
    case FUSE_FLUSH:
      // Nothing was written through a handle never reopened: nothing to flush.
      if (!dead_find(kfh, 0, &inner)) {
        answer(ch, h->unique, 0);
        return 1;
      }
      break;
    case FUSE_GETATTR: case FUSE_SETATTR: {
      // By path instead: the flag that names the handle is cleared.
      uint32_t bits;
      memcpy(&bits, arg, sizeof(bits));
      bits &= h->opcode == FUSE_GETATTR ? ~(uint32_t) FUSE_GETATTR_FH : ~(uint32_t) FATTR_FH;
      memcpy((char *) arg, &bits, sizeof(bits));
      break;
    }
    default: {
      int err = dead_map(kfh, dir, h->nodeid, reopen_flags(h, arg, alen), h, &inner);
      if (err != 0) {
        answer(ch, h->unique, -err);
        return 1;
      }
    }
  }
  memcpy(fhp, &inner, sizeof(inner));
  return 0;
}

int hs_handles_filter (char *buf, size_t len, struct fuse_chan *ch) {
  hs_req_unique = 0;
  if (len < sizeof(struct fuse_in_header)) return 0;
  struct fuse_in_header h;
  memcpy(&h, buf, sizeof(h));
  hs_req_unique = h.unique;
  char *arg = buf + sizeof(h);
  size_t alen = len - sizeof(h);
  if (h.unique & FUSE_UNIQUE_RESEND) {
    __atomic_add_fetch(&h_resent, 1, __ATOMIC_RELAXED);
    if (not_idempotent(&h, arg, alen)) {
      __atomic_add_fetch(&h_refused, 1, __ATOMIC_RELAXED);
      // The kernel gets no handle: an open the first run counted (a CREATE's) is taken back, before the answer.
      hs_node_refused(h.unique);
      answer(ch, h.unique, EIO);
      return 1;
    }
  }
  int dir = 0;
  long at = fh_offset(&h, arg, alen, &dir);
  if (at < 0 || (size_t) at + sizeof(uint64_t) > alen) return 0;
  uint64_t kfh;
  memcpy(&kfh, arg + at, sizeof(kfh));
  if (kfh == 0) return 0;
  uint32_t epoch = (uint32_t) (kfh >> HS_FH_EPOCH_SHIFT);
  if (epoch == hs_fh_epoch()) {
    uint64_t inner = kfh & HS_FH_INNER_MASK;
    memcpy(arg + at, &inner, sizeof(inner));
    return 0;
  }
  return redirect(arg + at, kfh, dir, &h, arg, alen, ch);
}
