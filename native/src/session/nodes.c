// The session's node table (see nodes.h for the invariants): its indexes
// and what the kernel's lookups, forgets, removals, renames and releases do
// to it. Paths and their locks are in nodes_paths.c, the handover's bytes in
// nodes_handover.c, the invalidations' lookups in nodes_resolve.c; all of
// them share nodes_internal.h.
//
// Lock: hs_nt.mu guards everything here: the three indexes (node ID, presented
// inode number, alias by parent and name), every node's counts, aliases and
// tree lock, and the queue of requests waiting for a path. It is held only
// for table work (hashing, copying names), never across a system call, a
// wait for JavaScript or another lock; waiting for a path releases it
// (pthread_cond_wait).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "abi.h"
#include "session/hidden_name.h"
#include "session/nodes_internal.h"

hs_nt_t hs_nt = { .mu = PTHREAD_MUTEX_INITIALIZER, .next_id = HS_ROOT_ID + 1 };

static size_t hash64 (uint64_t v) {
  v ^= v >> 33; v *= 0xff51afd7ed558ccdULL; v ^= v >> 33;
  return (size_t) v;
}

static size_t hash_name (uint64_t parent, const char *name, size_t len) {
  uint64_t h = 1469598103934665603ULL ^ parent;
  for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char) name[i]) * 1099511628211ULL;
  return hash64(h);
}

// Grows a chained table to twice its buckets when it holds more entries than
// buckets. `link` is the offset of the chain pointer, `key` hashes an entry.
static void rehash (void ***tab, size_t *size, size_t count, size_t link, size_t (*key) (void *)) {
  if (count < *size) return;
  size_t nsize = *size * 2;
  void **ntab = calloc(nsize, sizeof(void *));
  if (ntab == NULL) return; // longer chains, still correct
  for (size_t b = 0; b < *size; b++) {
    void *e = (*tab)[b];
    while (e != NULL) {
      void *next = *(void **) ((char *) e + link);
      size_t h = key(e) & (nsize - 1);
      *(void **) ((char *) e + link) = ntab[h];
      ntab[h] = e;
      e = next;
    }
  }
  free(*tab);
  *tab = ntab;
  *size = nsize;
}

static size_t id_key (void *e) { return hash64(((hs_node_t *) e)->nodeid); }
static size_t ino_key (void *e) { return hash64(((hs_node_t *) e)->ino); }
static size_t alias_key (void *e) {
  hs_alias_t *a = e;
  return hash_name(a->parent->nodeid, a->name, a->len);
}

// Grows a chained table to at least `want` buckets.
static void presize (void ***tab, size_t *size, size_t want, size_t link, size_t (*key) (void *)) {
  while (*size < want) {
    size_t before = *size;
    rehash(tab, size, *size, link, key);
    if (*size == before) return;  // no memory: longer chains, still correct
  }
}

void nt_presize (size_t count) {
  presize((void ***) &hs_nt.id_tab, &hs_nt.id_size, count, offsetof(hs_node_t, id_next), id_key);
  presize((void ***) &hs_nt.ino_tab, &hs_nt.ino_size, count, offsetof(hs_node_t, ino_next), ino_key);
  presize((void ***) &hs_nt.alias_tab, &hs_nt.alias_size, count, offsetof(hs_alias_t, hnext), alias_key);
}

// Prefetch hints (nodes_internal.h): they read the indexes and change
// nothing. Thread: the recovering thread, which alone writes the table
// then (a replay, without hs_nt.mu), or an import, under it.
static void prefetch_slot (int stage, void **slot) {
  if (stage == 0) __builtin_prefetch(slot);
  else {
    void *e = *(void *volatile *) slot;
    if (e != NULL) __builtin_prefetch(e);
  }
}

void nt_prefetch_found (int stage, uint64_t parent, const char *name, size_t len, uint64_t ino, uint64_t id) {
  prefetch_slot(stage, (void **) &hs_nt.alias_tab[hash_name(parent, name, len) & (hs_nt.alias_size - 1)]);
  if (ino != 0) prefetch_slot(stage, (void **) &hs_nt.ino_tab[hash64(ino) & (hs_nt.ino_size - 1)]);
  prefetch_slot(stage, (void **) &hs_nt.id_tab[hash64(id) & (hs_nt.id_size - 1)]);
}

void nt_prefetch_id (int stage, uint64_t id) {
  prefetch_slot(stage, (void **) &hs_nt.id_tab[hash64(id) & (hs_nt.id_size - 1)]);
}

hs_node_t *nt_id_find (uint64_t nodeid) {
  for (hs_node_t *n = hs_nt.id_tab[hash64(nodeid) & (hs_nt.id_size - 1)]; n != NULL; n = n->id_next) {
    if (n->nodeid == nodeid) return n;
  }
  return NULL;
}

void nt_id_add (hs_node_t *n) {
  rehash((void ***) &hs_nt.id_tab, &hs_nt.id_size, hs_nt.id_count, offsetof(hs_node_t, id_next), id_key);
  size_t h = hash64(n->nodeid) & (hs_nt.id_size - 1);
  n->id_next = hs_nt.id_tab[h];
  hs_nt.id_tab[h] = n;
  hs_nt.id_count++;
}

// A node named by a hidden name never joins the index: its inode has no name
// left (JavaScript unlinked it), so its number is the backing filesystem's to
// give again once the last descriptor closes, a dead daemon's included; a new
// file with that number, in any home, must never become this node. (Decided
// by the name, not the hidden flag, so that a table rebuilt from a snapshot
// and the live one agree.)
void nt_ino_add (hs_node_t *n) {
  if (n->in_ino || n->ino == 0 || nt_hidden_named(n)) return;
  rehash((void ***) &hs_nt.ino_tab, &hs_nt.ino_size, hs_nt.ino_count, offsetof(hs_node_t, ino_next), ino_key);
  size_t h = hash64(n->ino) & (hs_nt.ino_size - 1);
  n->ino_next = hs_nt.ino_tab[h];
  hs_nt.ino_tab[h] = n;
  n->in_ino = 1;
  hs_nt.ino_count++;
}

void nt_ino_del (hs_node_t *n) {
  if (!n->in_ino) return;
  hs_node_t **pp = &hs_nt.ino_tab[hash64(n->ino) & (hs_nt.ino_size - 1)];
  while (*pp != n) pp = &(*pp)->ino_next;
  *pp = n->ino_next;
  n->in_ino = 0;
  hs_nt.ino_count--;
}

hs_node_t *nt_ino_find (uint64_t ino) {
  for (hs_node_t *n = hs_nt.ino_tab[hash64(ino) & (hs_nt.ino_size - 1)]; n != NULL; n = n->ino_next) {
    if (n->ino == ino) return n;
  }
  return NULL;
}

hs_alias_t *nt_alias_find_n (hs_node_t *parent, const char *name, size_t len) {
  for (hs_alias_t *a = hs_nt.alias_tab[hash_name(parent->nodeid, name, len) & (hs_nt.alias_size - 1)]; a != NULL; a = a->hnext) {
    if (a->parent == parent && a->len == len && memcmp(a->name, name, len) == 0) return a;
  }
  return NULL;
}

void nt_alias_del (hs_alias_t *a) {
  hs_alias_t **pp = &hs_nt.alias_tab[alias_key(a) & (hs_nt.alias_size - 1)];
  while (*pp != a) pp = &(*pp)->hnext;
  *pp = a->hnext;
  hs_nt.alias_count--;
  hs_node_t *n = a->node;
  for (pp = &n->aliases; *pp != a; pp = &(*pp)->next) {}
  *pp = a->next;
  // The last name gone: the inode number may be reused by a new file.
  if (n->aliases == NULL) nt_ino_del(n);
  hs_node_t *parent = a->parent;
  free(a);
  parent->refs--;
  nt_node_free_if_unused(parent);
}

int nt_alias_add (hs_node_t *parent, const char *name, hs_node_t *n) {
  size_t len = strlen(name);
  hs_alias_t *a = malloc(sizeof(*a) + len + 1);
  if (a == NULL) return -ENOMEM;
  a->parent = parent;
  a->node = n;
  a->len = len;
  memcpy(a->name, name, len + 1);
  parent->refs++;
  rehash((void ***) &hs_nt.alias_tab, &hs_nt.alias_size, hs_nt.alias_count, offsetof(hs_alias_t, hnext), alias_key);
  size_t h = alias_key(a) & (hs_nt.alias_size - 1);
  a->hnext = hs_nt.alias_tab[h];
  hs_nt.alias_tab[h] = a;
  hs_nt.alias_count++;
  // Appended: the first name (the one paths are built from) stays while a request may hold it.
  hs_alias_t **pp = &n->aliases;
  while (*pp != NULL) pp = &(*pp)->next;
  a->next = NULL;
  *pp = a;
  return 0;
}

// Its names are gone by then (a forget removes them first); any left are
// removed before it is freed.
void nt_node_free_if_unused (hs_node_t *n) {
  if (n == NULL || n == hs_nt.root || n->nlookup != 0 || n->refs != 0) return;
  n->refs++; // its aliases' removal must not come back here
  while (n->aliases != NULL) nt_alias_del(n->aliases);
  n->refs--;
  // Forgotten by the kernel with releases still to come: no file of it is open there.
  nt_close_backing(nt_family_end(n));
  nt_ino_del(n);
  hs_node_t **pp = &hs_nt.id_tab[hash64(n->nodeid) & (hs_nt.id_size - 1)];
  while (*pp != n) pp = &(*pp)->id_next;
  *pp = n->id_next;
  hs_nt.id_count--;
  free(n);
}

static hs_node_t *node_new (uint64_t ino, uint32_t type) {
  hs_node_t *n = calloc(1, sizeof(*n));
  if (n == NULL) return NULL;
  n->nodeid = hs_nt.next_id++;
  n->ino = ino;
  n->type = type;
  nt_id_add(n);
  nt_ino_add(n);
  return n;
}

void hs_nodes_init (void) {
  pthread_mutex_lock(&hs_nt.mu);
  if (hs_nt.id_tab == NULL) {
    hs_nt.id_size = hs_nt.ino_size = hs_nt.alias_size = 1024;
    hs_nt.id_tab = calloc(hs_nt.id_size, sizeof(void *));
    hs_nt.ino_tab = calloc(hs_nt.ino_size, sizeof(void *));
    hs_nt.alias_tab = calloc(hs_nt.alias_size, sizeof(void *));
    if (hs_nt.id_tab == NULL || hs_nt.ino_tab == NULL || hs_nt.alias_tab == NULL) abort();
    hs_nt.root = calloc(1, sizeof(*hs_nt.root));
    if (hs_nt.root == NULL) abort();
    hs_nt.root->nodeid = HS_ROOT_ID;
    hs_nt.root->type = S_IFDIR;
    hs_nt.root->nlookup = 1;
    nt_id_add(hs_nt.root);
  }
  nt_unlock();
}

void hs_nodes_clear (void) {
  pthread_mutex_lock(&hs_nt.mu);
  for (size_t b = 0; b < hs_nt.alias_size; b++) {
    hs_alias_t *a = hs_nt.alias_tab[b];
    while (a != NULL) { hs_alias_t *next = a->hnext; free(a); a = next; }
  }
  for (size_t b = 0; b < hs_nt.id_size; b++) {
    hs_node_t *n = hs_nt.id_tab[b];
    while (n != NULL) { hs_node_t *next = n->id_next; free(n); n = next; }
  }
  free(hs_nt.id_tab); free(hs_nt.ino_tab); free(hs_nt.alias_tab);
  hs_nt.id_tab = NULL; hs_nt.ino_tab = NULL; hs_nt.alias_tab = NULL; hs_nt.root = NULL;
  hs_nt.id_count = hs_nt.ino_count = hs_nt.alias_count = 0;
  hs_nt.next_id = HS_ROOT_ID + 1;
  hs_nt.hide_ctr = 0;
  nt_backing_nodes = 0;
  nt_eff_clear();
  nt_jr_detach();
  nt_unlock();
}

hs_node_t *hs_node_get (uint64_t nodeid) {
  pthread_mutex_lock(&hs_nt.mu);
  hs_node_t *n = hs_nt.id_tab != NULL ? nt_id_find(nodeid) : NULL;
  if (n != NULL) n->refs++;
  nt_unlock();
  return n;
}

void hs_node_ref (hs_node_t *n) {
  pthread_mutex_lock(&hs_nt.mu);
  n->refs++;
  nt_unlock();
}

void hs_node_put (hs_node_t *n) {
  if (n == NULL) return;
  pthread_mutex_lock(&hs_nt.mu);
  n->refs--;
  nt_node_free_if_unused(n);
  nt_unlock();
}

uint64_t hs_node_id (const hs_node_t *n) {
  return n->nodeid;
}

hs_node_t *hs_node_home (hs_node_t *n) {
  pthread_mutex_lock(&hs_nt.mu);
  hs_node_t *home = NULL;
  // The chain from n up: the home is the node whose parent's parent is the root.
  for (hs_node_t *at = n; at != NULL && at != hs_nt.root && at->aliases != NULL; at = at->aliases->parent) {
    hs_node_t *up = at->aliases->parent;
    if (up != hs_nt.root && up->aliases != NULL && up->aliases->parent == hs_nt.root) {
      home = at;
      break;
    }
  }
  if (home != NULL) home->refs++;
  nt_unlock();
  return home;
}

uint64_t hs_node_ino (hs_node_t *n) {
  pthread_mutex_lock(&hs_nt.mu);
  uint64_t ino = n->ino;
  nt_unlock();
  return ino;
}

// ---- the kernel's names ----------------------------------------------------------

// Under hs_nt.mu: the alias moves to the front of its node's names (paths are
// built from the first), and when the inode has one link its other names are
// stale (changed behind the daemon's back: a file with one link has one name).
static void alias_prefer (hs_alias_t *a, uint32_t nlink) {
  hs_node_t *n = a->node;
  if (nlink <= 1 || n->type == S_IFDIR) {
    n->refs++;
    while (n->aliases != a) nt_alias_del(n->aliases);
    while (a->next != NULL) nt_alias_del(a->next);
    n->refs--;
    return;
  }
  if (n->aliases == a) return;
  hs_alias_t **pp = &n->aliases;
  while (*pp != a) pp = &(*pp)->next;
  *pp = a->next;
  a->next = n->aliases;
  n->aliases = a;
}

// Under hs_nt.mu: a found that failed part way still used a node ID (the
// journal keeps the counter; the stale names it dropped are the next
// lookup's to drop again).
static int found_failed (uint64_t next_id) {
  if (hs_nt.journal != NULL && hs_nt.next_id != next_id) nt_jr_value(HS_JR_NEXT_ID, hs_nt.next_id);
  nt_unlock();
  return -ENOMEM;
}

int hs_node_found (hs_node_t *parent, const char *name, uint64_t ino, uint32_t type, uint32_t nlink, uint64_t *nodeid) {
  pthread_mutex_lock(&hs_nt.mu);
  uint64_t next_id = hs_nt.next_id;
  type &= S_IFMT;
  hs_node_t *n = NULL;
  hs_alias_t *a = nt_alias_find(parent, name);
  if (a != NULL) {
    n = a->node;
    if (n->ino == ino && n->type == type) goto found;
    // Another inode under that name than the node knew: the name moves.
    n = NULL;
    nt_alias_del(a);
    a = NULL;
  }
  n = ino != 0 ? nt_ino_find(ino) : NULL;
  if (n != NULL && n->type != type) {
    // The number was reused by an inode of another type: the old node keeps
    // its ID for the kernel, but no new name reaches it.
    nt_ino_del(n);
    n = NULL;
  }
  if (n == NULL) {
    n = node_new(ino, type);
    if (n == NULL) return found_failed(next_id);
  }
  if (nt_alias_add(parent, name, n) != 0) {
    nt_node_free_if_unused(n);
    return found_failed(next_id);
  }
  nt_ino_add(n);
  a = nt_alias_find(parent, name);
found:
  alias_prefer(a, nlink);
  n->nlookup++;
  *nodeid = n->nodeid;
  if (hs_nt.journal != NULL) nt_jr_found(parent->nodeid, name, ino, type, nlink, n->nodeid);
  nt_unlock();
  return 0;
}

void hs_node_forget (uint64_t nodeid, uint64_t nlookup) {
  pthread_mutex_lock(&hs_nt.mu);
  hs_node_t *n = hs_nt.id_tab != NULL ? nt_id_find(nodeid) : NULL;
  if (n != NULL && n != hs_nt.root) {
    n->nlookup = nlookup >= n->nlookup ? 0 : n->nlookup - nlookup;
    if (n->nlookup == 0) {
      // Forgotten: its names go (they hold its parents), and it with them unless a thread still holds it.
      n->refs++;
      while (n->aliases != NULL) nt_alias_del(n->aliases);
      n->refs--;
      nt_node_free_if_unused(n);
    }
  }
  if (hs_nt.journal != NULL) nt_jr_forget(nodeid, nlookup);
  nt_unlock();
}

void hs_node_removed (hs_node_t *parent, const char *name) {
  pthread_mutex_lock(&hs_nt.mu);
  hs_alias_t *a = nt_alias_find(parent, name);
  if (a != NULL) {
    hs_node_t *n = a->node;
    n->refs++;
    nt_alias_del(a);
    n->refs--;
    nt_node_free_if_unused(n);
  }
  if (hs_nt.journal != NULL) nt_jr_removed(parent->nodeid, name);
  nt_unlock();
}

int hs_node_renamed (hs_node_t *op, const char *on, hs_node_t *np, const char *nn) {
  int err = 0;
  pthread_mutex_lock(&hs_nt.mu);
  hs_alias_t *target = nt_alias_find(np, nn);
  hs_alias_t *a = nt_alias_find(op, on);
  if (target != NULL && target != a) {
    hs_node_t *t = target->node;
    t->refs++;
    nt_alias_del(target);
    t->refs--;
    nt_node_free_if_unused(t);
  }
  if (a != NULL && a != target) {
    hs_node_t *n = a->node;
    n->refs++;
    nt_alias_del(a);
    err = nt_alias_add(np, nn, n);
    if (err == 0) nt_ino_add(n);
    n->refs--;
    nt_node_free_if_unused(n);
  }
  if (hs_nt.journal != NULL) nt_jr_renamed(op->nodeid, on, np->nodeid, nn);
  nt_unlock();
  return err;
}

// Under hs_nt.mu: (parent, name) names n now (a name of an exchange). 0 or -ENOMEM.
static int exchange_add (hs_node_t *parent, const char *name, hs_node_t *n) {
  if (n == NULL) return 0;
  int err = nt_alias_add(parent, name, n);
  if (err == 0) nt_ino_add(n);
  return err;
}

int hs_node_exchanged (hs_node_t *op, const char *on, hs_node_t *np, const char *nn) {
  int err = 0;
  pthread_mutex_lock(&hs_nt.mu);
  hs_alias_t *a = nt_alias_find(op, on), *b = nt_alias_find(np, nn);
  hs_node_t *na = a != NULL ? a->node : NULL, *nb = b != NULL ? b->node : NULL;
  // Two names of one inode swap to the same; a name the table never knew
  // leaves the other one unknown too (its next lookup finds what is there).
  if (na != nb) {
    // Held while their names move: a node with no name and no lookup is freed.
    if (na != NULL) na->refs++;
    if (nb != NULL) nb->refs++;
    if (a != NULL) nt_alias_del(a);
    if (b != NULL) nt_alias_del(b);
    // Each keeps its other names (a hard-linked file's): only these two swap.
    err = exchange_add(op, on, nb);
    int err2 = exchange_add(np, nn, na);
    if (err == 0) err = err2;
    if (na != NULL) { na->refs--; nt_node_free_if_unused(na); }
    if (nb != NULL) { nb->refs--; nt_node_free_if_unused(nb); }
  }
  if (hs_nt.journal != NULL) nt_jr_exchanged(op->nodeid, on, np->nodeid, nn);
  nt_unlock();
  return err;
}

// ---- opens and hidden names ------------------------------------------------------

// Under hs_nt.mu: whether `unique` is a resent request whose first run's
// change (kind, on n) is in the table already.
static int already_done (uint64_t unique, uint32_t kind, const hs_node_t *n) {
  if (!(unique & HS_UNIQUE_RESEND)) return 0;
  const nt_eff_t *e = nt_eff_find(unique & ~HS_UNIQUE_RESEND);
  return e != NULL && e->kind == kind && e->nodeid == n->nodeid;
}

void hs_node_opened (hs_node_t *n) {
  hs_node_opened_by(n, 0);
}

void (*hs_node_backing_close) (int32_t id) = NULL;
int nt_replaying = 0;
uint64_t nt_backing_nodes = 0;  // nodes with a pt_id, under hs_nt.mu

// Under hs_nt.mu: n's family ends (its last open released): its ID is
// journaled gone and returned for the caller to close once unlocked (0: none
// to close: none held, or a replay's).
int32_t nt_family_end (hs_node_t *n) {
  int32_t id = n->pt_id;
  if (id == 0) return 0;
  n->pt_id = 0;
  nt_backing_nodes--;
  // Journaled before the close: a crash between leaves an ID open (a
  // backing file held until the connection ends), never a node naming an ID
  // the kernel may give to another file.
  if (hs_nt.journal != NULL) nt_jr_value2(HS_JR_BACKING, n->nodeid, 0);
  return nt_replaying ? 0 : id;
}

void nt_close_backing (int32_t id) {
  if (id != 0 && hs_node_backing_close != NULL) hs_node_backing_close(id);
}

int hs_node_family_free (hs_node_t *n) {
  pthread_mutex_lock(&hs_nt.mu);
  int free_ = n->open_count == 0 && n->pt_id == 0;
  nt_unlock();
  return free_;
}

int hs_nodes_passthrough_ino (uint64_t ino) {
  pthread_mutex_lock(&hs_nt.mu);
  hs_node_t *n = hs_nt.ino_tab != NULL ? nt_ino_find(ino) : NULL;
  int pt = n != NULL && n->pt_id != 0;
  nt_unlock();
  return pt;
}

int32_t hs_node_backing (hs_node_t *n) {
  pthread_mutex_lock(&hs_nt.mu);
  int32_t id = n->pt_id;
  nt_unlock();
  return id;
}

uint64_t hs_nodes_backing_count (void) {
  pthread_mutex_lock(&hs_nt.mu);
  uint64_t c = nt_backing_nodes;
  nt_unlock();
  return c;
}

// Under hs_nt.mu: the node's family takes backing ID id (journaled before the
// OPENED record that follows, so a replay has the ID before the open).
void nt_set_backing (hs_node_t *n, int32_t id) {
  if (n->pt_id == 0 && id != 0) nt_backing_nodes++;
  else if (n->pt_id != 0 && id == 0) nt_backing_nodes--;
  n->pt_id = id;
  if (hs_nt.journal != NULL) nt_jr_value2(HS_JR_BACKING, n->nodeid, (uint64_t) (uint32_t) id);
}

int hs_node_open_mode (hs_node_t *n, uint64_t unique, int need, int32_t new_id, int32_t *id, int32_t *spare) {
  uint64_t u = unique & ~HS_UNIQUE_RESEND;
  int mode = HS_IO_CACHED;
  *id = 0;
  *spare = new_id;
  pthread_mutex_lock(&hs_nt.mu);
  // Resent: its first run counted this open (in the family it is in now).
  int done = already_done(unique, HS_JR_OPENED, n);
  uint32_t others = n->open_count - (done && n->open_count > 0 ? 1 : 0);
  if (n->pt_id != 0) {
    mode = need == HS_OPEN_PLAIN_READER ? HS_IO_PT : need == HS_OPEN_PLAIN ? HS_IO_PT_DIRECT : HS_IO_REFUSE;
    *id = n->pt_id;
  } else if (others == 0 && need == HS_OPEN_PLAIN_READER && new_id > 0) {
    nt_set_backing(n, new_id);
    *spare = 0;
    *id = new_id;
    mode = HS_IO_PT;
  }
  if (mode != HS_IO_REFUSE && !done) {
    n->open_count++;
    if (u != 0) nt_eff_put(u, HS_JR_OPENED, n->nodeid);
    if (hs_nt.journal != NULL) nt_jr_value2(HS_JR_OPENED, n->nodeid, u);
  }
  nt_unlock();
  return mode;
}

void hs_node_opened_by (hs_node_t *n, uint64_t unique) {
  uint64_t u = unique & ~HS_UNIQUE_RESEND;
  pthread_mutex_lock(&hs_nt.mu);
  // Resent: its first run counted this open, and the kernel got no answer to it.
  if (!already_done(unique, HS_JR_OPENED, n)) {
    n->open_count++;
    if (u != 0) nt_eff_put(u, HS_JR_OPENED, n->nodeid);
    if (hs_nt.journal != NULL) nt_jr_value2(HS_JR_OPENED, n->nodeid, u);
  }
  nt_unlock();
}

int hs_node_must_hide (hs_node_t *parent, const char *name) {
  pthread_mutex_lock(&hs_nt.mu);
  hs_alias_t *a = nt_alias_find(parent, name);
  int hide = a != NULL && a->node->open_count > 0 && a->node->aliases == a && a->next == NULL;
  nt_unlock();
  return hide;
}

int nt_hidden_named (const hs_node_t *n) {
  return n->aliases != NULL && hs_is_hidden_name(n->aliases->name, n->aliases->len);
}

int hs_node_hidden_name (hs_node_t *parent, const char *name, hs_node_t *in, char *buf, size_t size) {
  int err = -ENOENT;
  pthread_mutex_lock(&hs_nt.mu);
  hs_alias_t *a = nt_alias_find(parent, name);
  if (a != NULL) {
    do {
      hs_nt.hide_ctr++;
      // The node id's low 32 bits, then the counter's: the name is free in `in` whatever the id.
      uint64_t digits = (uint64_t) (uint32_t) a->node->nodeid << 32 | (uint32_t) hs_nt.hide_ctr;
      snprintf(buf, size, "%s%0*" PRIx64, HOMESFS_HIDDEN_PREFIX, (int) HOMESFS_HIDDEN_DIGITS, digits);
    } while (nt_alias_find(in, buf) != NULL);
    err = 0;
    if (hs_nt.journal != NULL) nt_jr_value(HS_JR_HIDE_CTR, hs_nt.hide_ctr);
  }
  nt_unlock();
  return err;
}

void hs_node_tmp_name (hs_node_t *in, char *buf, size_t size) {
  pthread_mutex_lock(&hs_nt.mu);
  do {
    hs_nt.hide_ctr++;
    uint64_t digits = (uint64_t) 0xffffffffu << 32 | (uint32_t) hs_nt.hide_ctr;
    snprintf(buf, size, "%s%0*" PRIx64, HOMESFS_HIDDEN_PREFIX, (int) HOMESFS_HIDDEN_DIGITS, digits);
  } while (nt_alias_find(in, buf) != NULL);
  if (hs_nt.journal != NULL) nt_jr_value(HS_JR_HIDE_CTR, hs_nt.hide_ctr);
  nt_unlock();
}

void hs_node_mark_hidden (hs_node_t *n) {
  pthread_mutex_lock(&hs_nt.mu);
  n->hidden = 1;
  if (hs_nt.journal != NULL) nt_jr_value(HS_JR_HIDDEN, n->nodeid);
  nt_unlock();
}

int hs_node_hide_done (hs_node_t *n, char **path) {
  int unlink_now = 0;
  pthread_mutex_lock(&hs_nt.mu);
  if (n->open_count > 0) {
    n->hidden = 1;
    if (hs_nt.journal != NULL) nt_jr_value(HS_JR_HIDDEN, n->nodeid);
  } else if (nt_hidden_named(n) && nt_try_path(n, NULL, 0, path, NULL, 0, NULL) == 0) {
    // Its last release came while the hiding was under way: it found nothing
    // to unlink, so the hidden name goes now.
    unlink_now = 1;
  }
  nt_unlock();
  return unlink_now;
}

int hs_node_is_hidden (hs_node_t *n) {
  pthread_mutex_lock(&hs_nt.mu);
  int h = n->hidden;
  nt_unlock();
  return h;
}

int hs_node_released (hs_node_t *n, char **path) {
  return hs_node_released_by(n, path, 0);
}

int hs_node_released_by (hs_node_t *n, char **path, uint64_t unique) {
  uint64_t u = unique & ~HS_UNIQUE_RESEND;
  int unlink_hidden = 0;
  pthread_mutex_lock(&hs_nt.mu);
  if (already_done(unique, HS_JR_RELEASED, n)) {
    // Its first run took this release off the count already (journaled), and
    // may have died before the hidden name it left unopened was unlinked:
    // that unlink is this one's to do (a second one finds no name: ENOENT).
    if (n->open_count == 0 && !n->hidden && nt_hidden_named(n) && nt_try_path(n, NULL, 0, path, NULL, 0, NULL) == 0) unlink_hidden = 1;
    nt_unlock();
    return unlink_hidden;
  }
  if (n->open_count > 0) n->open_count--;
  int32_t gone = n->open_count == 0 ? nt_family_end(n) : 0;
  if (n->hidden && n->open_count == 0) {
    n->hidden = 0;
    // Only the hidden name this table made is unlinked, never a name the node
    // came to have otherwise.
    if (nt_hidden_named(n) && nt_try_path(n, NULL, 0, path, NULL, 0, NULL) == 0) unlink_hidden = 1;
  }
  if (u != 0) nt_eff_put(u, HS_JR_RELEASED, n->nodeid);
  if (hs_nt.journal != NULL) nt_jr_value2(HS_JR_RELEASED, n->nodeid, u);
  nt_unlock();
  nt_close_backing(gone);
  return unlink_hidden;
}

uint32_t hs_node_type (uint64_t nodeid) {
  pthread_mutex_lock(&hs_nt.mu);
  hs_node_t *n = hs_nt.id_tab != NULL ? nt_id_find(nodeid) : NULL;
  uint32_t type = n != NULL ? n->type : 0;
  nt_unlock();
  return type;
}

void hs_nodes_stats (uint64_t *nodes, uint64_t *known) {
  pthread_mutex_lock(&hs_nt.mu);
  *nodes = hs_nt.id_count;
  *known = hs_nt.ino_count;
  nt_unlock();
}
