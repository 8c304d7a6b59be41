// Requests the kernel may send again (nodes.h, hs_node_opened_by): the
// changes of the open count whose answer may not have reached the kernel,
// kept by the request's unique until the answer is written.
//
// Why: the journal records an open or a release before its answer (so every
// answer the kernel saw is journaled), and after a crash the kernel resends
// every request read but not answered (FUSE_NOTIFY_RESEND: the same unique,
// bit 63 set; a request whose answer reached the kernel is never resent).
// OPEN, CREATE and RELEASE run again when resent, so without this a kill
// between the record and the answer counted the open twice (the file's last
// release never comes, its hidden name stays for ever) or the release twice
// (the hidden name of a file still open is unlinked, and a later crash
// loses it).
//
// The entries are the table's state, journaled like the rest: OPENED and
// RELEASED carry the unique (the entry goes in), ANSWERED and REFUSED take
// it out, and a snapshot is followed by one PENDING record per entry (in its
// memfd before its header commits), so the entries survive compactions and
// any number of crashes. An entry whose answer was written but whose
// ANSWERED record was not (a kill in between) stays for good: at most one
// per thread that was between the two at the kill, a few dozen bytes each.
//
// Lock: hs_nt.mu guards the entries (each is made or dropped with the table
// change it names).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdlib.h>

#include "session/nodes_internal.h"

#define EFF_BUCKETS 256
static nt_eff_t *eff_tab[EFF_BUCKETS];
static uint64_t eff_count;

static nt_eff_t **eff_slot (uint64_t unique) {
  nt_eff_t **pp = &eff_tab[(unique ^ (unique >> 8) ^ (unique >> 20)) % EFF_BUCKETS];
  while (*pp != NULL && (*pp)->unique != unique) pp = &(*pp)->next;
  return pp;
}

nt_eff_t *nt_eff_find (uint64_t unique) {
  return *eff_slot(unique);
}

void nt_eff_put (uint64_t unique, uint32_t kind, uint64_t nodeid) {
  nt_eff_t **pp = eff_slot(unique);
  if (*pp == NULL) {
    if ((*pp = calloc(1, sizeof(nt_eff_t))) == NULL) return;
    (*pp)->unique = unique;
    eff_count++;
  }
  (*pp)->kind = kind;
  (*pp)->nodeid = nodeid;
}

int nt_eff_del (uint64_t unique) {
  nt_eff_t **pp = eff_slot(unique), *e = *pp;
  if (e == NULL) return 0;
  *pp = e->next;
  free(e);
  eff_count--;
  return 1;
}

void nt_eff_clear (void) {
  for (size_t b = 0; b < EFF_BUCKETS; b++) {
    while (eff_tab[b] != NULL) {
      nt_eff_t *e = eff_tab[b];
      eff_tab[b] = e->next;
      free(e);
    }
  }
  eff_count = 0;
}

int nt_eff_each (int (*fn) (const nt_eff_t *e, void *ctx), void *ctx) {
  for (size_t b = 0; b < EFF_BUCKETS; b++) {
    for (const nt_eff_t *e = eff_tab[b]; e != NULL; e = e->next) {
      int err = fn(e, ctx);
      if (err != 0) return err;
    }
  }
  return 0;
}

void hs_node_answered (uint64_t unique) {
  uint64_t u = unique & ~HS_UNIQUE_RESEND;
  if (u == 0) return;
  pthread_mutex_lock(&hs_nt.mu);
  if (nt_eff_del(u) && hs_nt.journal != NULL) nt_jr_value(HS_JR_ANSWERED, u);
  nt_unlock();
}

// The open taken back leaves no hidden name behind: the node a CREATE made
// cannot be hidden before the CREATE is answered (the kernel holds the
// directory's lock for the whole CREATE, so no UNLINK or RENAME through the
// mount reaches the name, and a file just made has no other).
void hs_node_refused (uint64_t unique) {
  uint64_t u = unique & ~HS_UNIQUE_RESEND;
  int32_t gone = 0;
  if (u == 0) return;
  pthread_mutex_lock(&hs_nt.mu);
  nt_eff_t *e = nt_eff_find(u);
  if (e != NULL) {
    if (e->kind == HS_JR_OPENED) {
      hs_node_t *n = hs_nt.id_tab != NULL ? nt_id_find(e->nodeid) : NULL;
      if (n != NULL && n->open_count > 0 && --n->open_count == 0) gone = nt_family_end(n);
    }
    nt_eff_del(u);
    if (hs_nt.journal != NULL) nt_jr_value(HS_JR_REFUSED, u);
  }
  nt_unlock();
  nt_close_backing(gone);
}

uint64_t hs_nodes_pending (void) {
  pthread_mutex_lock(&hs_nt.mu);
  uint64_t n = eff_count;
  nt_unlock();
  return n;
}
