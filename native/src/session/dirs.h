// The open-directory table (session/ops_dirs.c): fh -> record, shared with
// the handover's serializer (handover/dirs_handover.c). Any thread; dt_mu
// (the table) is taken before a record's mu, never while one is held.
#ifndef HOMESFS_DIRS_H
#define HOMESFS_DIRS_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  pthread_mutex_t mu;
  uint32_t uid;          // who opened it, and where: counted again after a handover
  char *path;
  uint64_t count_fh;     // dirhandles.c's token, 0: none
  char *contents;        // a whole listing, as direntries
  size_t len, size;
  int filled;
} hs_dh_t;

// The record under number `want` (0: any free one): that number, or 0 (no
// memory, or `want` taken).
uint64_t hs_dt_put (hs_dh_t *dh, uint64_t want);
// The record numbered id (taken out of the table when remove), or NULL.
hs_dh_t *hs_dt_get (uint64_t id, int remove);
// Frees a record no longer in the table, giving its count back (dirhandles.c).
void hs_dh_free (hs_dh_t *dh);
// *count: the records in the table; then fn(ctx, fh, dh) for each, under dt_mu and the record's mu. 0, or fn's first nonzero return.
int hs_dt_each (int (*fn) (void *ctx, uint64_t fh, hs_dh_t *dh), void *ctx, uint64_t *count);
#endif
