// The open directories handed to a successor (session/ops_dirs.c's table as
// bytes): hs_dirs_export on the old daemon, once its workers are paused at a
// request boundary; hs_dirs_import on the successor before it serves. Both
// run on the JS main thread (session.c's exports); the table's locks are
// session/dirs.h's (dt_mu, then a record's mu, taken by hs_dt_each).
//
// Layout: u64 count; per record u64 fh, u32 uid, u32 filled, u32 path length,
// u64 listing length, the path, the listing (a whole listing the kernel may
// still read from an offset into it).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fastpath/dirhandles.h"
#include "session/dirs.h"
#include "session/ops.h"

static int put_bytes (char **buf, size_t *len, size_t *cap, const void *v, size_t n) {
  if (*len + n > *cap) {
    size_t ncap = *cap == 0 ? 4096 : *cap;
    while (ncap < *len + n) ncap *= 2;
    char *nb = realloc(*buf, ncap);
    if (nb == NULL) return -ENOMEM;
    *buf = nb;
    *cap = ncap;
  }
  memcpy(*buf + *len, v, n);
  *len += n;
  return 0;
}

typedef struct {
  char *buf;
  size_t len, cap;
} out_t;

static int put_record (void *ctx, uint64_t fh, hs_dh_t *dh) {
  out_t *o = ctx;
  int err = 0;
  uint64_t clen = dh->filled ? dh->len : 0;
  uint32_t uid = dh->uid, filled = (uint32_t) dh->filled, plen = (uint32_t) strlen(dh->path);
  err |= put_bytes(&o->buf, &o->len, &o->cap, &fh, sizeof(fh));
  err |= put_bytes(&o->buf, &o->len, &o->cap, &uid, sizeof(uid));
  err |= put_bytes(&o->buf, &o->len, &o->cap, &filled, sizeof(filled));
  err |= put_bytes(&o->buf, &o->len, &o->cap, &plen, sizeof(plen));
  err |= put_bytes(&o->buf, &o->len, &o->cap, &clen, sizeof(clen));
  err |= put_bytes(&o->buf, &o->len, &o->cap, dh->path, plen);
  if (clen > 0) err |= put_bytes(&o->buf, &o->len, &o->cap, dh->contents, clen);
  return err;
}

int hs_dirs_export (char **out, size_t *outlen) {
  out_t o = { NULL, 0, 0 };
  uint64_t count = 0;
  // the count's place, filled once the table has been walked under its lock
  int err = put_bytes(&o.buf, &o.len, &o.cap, &count, sizeof(count));
  if (err == 0) err = hs_dt_each(put_record, &o, &count);
  if (err != 0) {
    free(o.buf);
    return -ENOMEM;
  }
  memcpy(o.buf, &count, sizeof(count));
  *out = o.buf;
  *outlen = o.len;
  return 0;
}

// The largest fh a successor takes (the table is an array of that many).
#define DT_MAX_FH (1u << 20)

typedef struct {
  uint64_t fh, clen;
  uint32_t uid, filled, plen;
  const char *path, *contents;
} dt_rec_t;

// The next record of a buffer, checked: 0, or -EINVAL.
static int dt_take (const char *buf, size_t len, size_t *at, dt_rec_t *r) {
#define TAKE(v) do { if (len - *at < sizeof(v)) return -EINVAL; memcpy(&(v), buf + *at, sizeof(v)); *at += sizeof(v); } while (0)
  TAKE(r->fh); TAKE(r->uid); TAKE(r->filled); TAKE(r->plen); TAKE(r->clen);
#undef TAKE
  if (r->fh == 0 || r->fh > DT_MAX_FH || r->plen == 0 || r->plen > 65536) return -EINVAL;
  if (len - *at < r->plen || len - *at - r->plen < r->clen) return -EINVAL;
  r->path = buf + *at;
  r->contents = buf + *at + r->plen;
  *at += r->plen + r->clen;
  if (r->path[0] != '/' || memchr(r->path, '\0', r->plen) != NULL) return -EINVAL;
  return 0;
}

static hs_dh_t *dh_of (const dt_rec_t *r) {
  hs_dh_t *dh = calloc(1, sizeof(*dh));
  if (dh == NULL || (dh->path = strndup(r->path, r->plen)) == NULL) {
    free(dh);
    return NULL;
  }
  if (r->clen > 0) {
    if ((dh->contents = malloc(r->clen)) == NULL) {
      free(dh->path);
      free(dh);
      return NULL;
    }
    memcpy(dh->contents, r->contents, r->clen);
    dh->len = dh->size = r->clen;
  }
  dh->filled = r->filled != 0;
  dh->uid = r->uid;
  pthread_mutex_init(&dh->mu, NULL);
  return dh;
}

// Removes the records of buf's first `n` (an import that failed).
static void dt_unput (const char *buf, size_t len, uint64_t n) {
  size_t at = sizeof(uint64_t);
  dt_rec_t r;
  for (uint64_t k = 0; k < n && dt_take(buf, len, &at, &r) == 0; k++) {
    hs_dh_t *dh = hs_dt_get(r.fh, 1);
    if (dh != NULL) hs_dh_free(dh);
  }
}

// Counts each again under its caller and home (caps passed meanwhile are not
// enforced on handles already open). Checked whole first; then all or
// nothing: 0, -EINVAL for a malformed buffer or an fh taken, -ENOMEM.
int hs_dirs_import (const char *buf, size_t len) {
  size_t at = 0;
  uint64_t count;
  dt_rec_t r;
  if (len < sizeof(count)) return -EINVAL;
  memcpy(&count, buf, sizeof(count));
  at = sizeof(count);
  for (uint64_t k = 0; k < count; k++) {
    if (dt_take(buf, len, &at, &r) != 0) return -EINVAL;
  }
  if (at != len) return -EINVAL;
  at = sizeof(count);
  for (uint64_t k = 0; k < count; k++) {
    dt_take(buf, len, &at, &r);
    hs_dh_t *dh = dh_of(&r);
    int err = dh == NULL ? -ENOMEM : 0;
    if (dh != NULL && hs_dh_take(dh->uid, dh->path, &dh->count_fh) != 0) dh->count_fh = 0;
    if (dh != NULL && hs_dt_put(dh, r.fh) != r.fh) {
      hs_dh_free(dh);
      err = -EINVAL;
    }
    if (err != 0) {
      dt_unput(buf, len, k);
      return err;
    }
  }
  return 0;
}
