// The session's node table (see nodes.h for the invariants).
//
// Lock: nt_mu guards everything here: the three indexes (node ID, presented
// inode number, alias by parent and name), every node's counts, aliases and
// tree lock, and the queue of requests waiting for a path. It is held only
// for table work (hashing, copying names), never across a system call, a
// wait for JavaScript or another lock; waiting for a path releases it
// (pthread_cond_wait).
//
// Tree locks (libfuse 2.9's scheme): treelock > 0 counts the requests whose
// path passes through the node; HS_WRITE marks the node an unlink, rmdir or
// rename removes or moves; a writer that finds readers adds HS_WAIT, which
// makes the count negative, so new readers queue behind it instead of
// starving it. Requests that cannot lock wait in FIFO order; every unlock
// retries the queue, and the first in line may keep a partial lock of a
// two-path request (so it cannot starve), the others may not (so two of them
// cannot deadlock).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "nodes.h"

#define HS_WRITE (-1)
#define HS_WAIT INT_MIN

typedef struct hs_alias hs_alias_t;
struct hs_alias {
  hs_node_t *parent;   // holds a reference
  hs_node_t *node;
  hs_alias_t *next;    // the node's other names
  hs_alias_t *hnext;   // the alias index's chain
  size_t len;
  char name[];
};

struct hs_node {
  uint64_t nodeid;
  uint64_t ino;        // presented st_ino (0: not known yet: the root before its first getattr)
  uint32_t type;       // S_IFMT
  uint64_t nlookup;
  uint64_t refs;       // threads using it, child aliases, held path locks
  int treelock;
  uint32_t open_count;
  int hidden;
  int in_ino;          // in the ino index
  uint64_t walk_gen;   // hs_nodes_below: the walk that last decided walk_below
  int walk_below;
  hs_alias_t *aliases;
  hs_node_t *id_next, *ino_next;
};

typedef struct hs_waiter {
  struct hs_waiter *next;
  pthread_cond_t cond;
  int done, err;
  hs_node_t *d1, *d2;
  const char *n1, *n2;
  char **p1, **p2;
  hs_plock_t *pl1, *pl2;
  int wlock;
  int locked1, locked2;
} hs_waiter_t;

static pthread_mutex_t nt_mu = PTHREAD_MUTEX_INITIALIZER;
static hs_node_t **id_tab, **ino_tab;
static hs_alias_t **alias_tab;
static size_t id_size, ino_size, alias_size;   // bucket counts (powers of two)
static size_t id_count, ino_count, alias_count;
static uint64_t next_id = HS_ROOT_ID + 1;
static uint64_t hide_ctr = 0;
static uint64_t walk_gen = 0;   // hs_nodes_below's walks
static hs_node_t *root;
static hs_waiter_t *waiters;

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

static hs_node_t *id_find (uint64_t nodeid) {
  for (hs_node_t *n = id_tab[hash64(nodeid) & (id_size - 1)]; n != NULL; n = n->id_next) {
    if (n->nodeid == nodeid) return n;
  }
  return NULL;
}

static void ino_add (hs_node_t *n) {
  if (n->in_ino || n->ino == 0) return;
  rehash((void ***) &ino_tab, &ino_size, ino_count, offsetof(hs_node_t, ino_next), ino_key);
  size_t h = hash64(n->ino) & (ino_size - 1);
  n->ino_next = ino_tab[h];
  ino_tab[h] = n;
  n->in_ino = 1;
  ino_count++;
}

static void ino_del (hs_node_t *n) {
  if (!n->in_ino) return;
  hs_node_t **pp = &ino_tab[hash64(n->ino) & (ino_size - 1)];
  while (*pp != n) pp = &(*pp)->ino_next;
  *pp = n->ino_next;
  n->in_ino = 0;
  ino_count--;
}

static hs_node_t *ino_find (uint64_t ino) {
  for (hs_node_t *n = ino_tab[hash64(ino) & (ino_size - 1)]; n != NULL; n = n->ino_next) {
    if (n->ino == ino) return n;
  }
  return NULL;
}

static hs_alias_t *alias_find (hs_node_t *parent, const char *name) {
  size_t len = strlen(name);
  for (hs_alias_t *a = alias_tab[hash_name(parent->nodeid, name, len) & (alias_size - 1)]; a != NULL; a = a->hnext) {
    if (a->parent == parent && a->len == len && memcmp(a->name, name, len) == 0) return a;
  }
  return NULL;
}

static void node_free_if_unused (hs_node_t *n);

static void alias_del (hs_alias_t *a) {
  hs_alias_t **pp = &alias_tab[alias_key(a) & (alias_size - 1)];
  while (*pp != a) pp = &(*pp)->hnext;
  *pp = a->hnext;
  alias_count--;
  hs_node_t *n = a->node;
  for (pp = &n->aliases; *pp != a; pp = &(*pp)->next) {}
  *pp = a->next;
  // The last name gone: the inode number may be reused by a new file.
  if (n->aliases == NULL) ino_del(n);
  hs_node_t *parent = a->parent;
  free(a);
  parent->refs--;
  node_free_if_unused(parent);
}

static int alias_add (hs_node_t *parent, const char *name, hs_node_t *n) {
  size_t len = strlen(name);
  hs_alias_t *a = malloc(sizeof(*a) + len + 1);
  if (a == NULL) return -ENOMEM;
  a->parent = parent;
  a->node = n;
  a->len = len;
  memcpy(a->name, name, len + 1);
  parent->refs++;
  rehash((void ***) &alias_tab, &alias_size, alias_count, offsetof(hs_alias_t, hnext), alias_key);
  size_t h = alias_key(a) & (alias_size - 1);
  a->hnext = alias_tab[h];
  alias_tab[h] = a;
  alias_count++;
  // Appended: the first name (the one paths are built from) stays while a request may hold it.
  hs_alias_t **pp = &n->aliases;
  while (*pp != NULL) pp = &(*pp)->next;
  a->next = NULL;
  *pp = a;
  return 0;
}

// Frees n once nothing holds it: no lookup the kernel still counts, no
// reference. Its names are gone by then (a forget removes them first).
static void node_free_if_unused (hs_node_t *n) {
  if (n == NULL || n == root || n->nlookup != 0 || n->refs != 0) return;
  n->refs++; // its aliases' removal must not come back here
  while (n->aliases != NULL) alias_del(n->aliases);
  n->refs--;
  ino_del(n);
  hs_node_t **pp = &id_tab[hash64(n->nodeid) & (id_size - 1)];
  while (*pp != n) pp = &(*pp)->id_next;
  *pp = n->id_next;
  id_count--;
  free(n);
}

static hs_node_t *node_new (uint64_t ino, uint32_t type) {
  hs_node_t *n = calloc(1, sizeof(*n));
  if (n == NULL) return NULL;
  n->nodeid = next_id++;
  n->ino = ino;
  n->type = type;
  rehash((void ***) &id_tab, &id_size, id_count, offsetof(hs_node_t, id_next), id_key);
  size_t h = hash64(n->nodeid) & (id_size - 1);
  n->id_next = id_tab[h];
  id_tab[h] = n;
  id_count++;
  ino_add(n);
  return n;
}

void hs_nodes_init (void) {
  pthread_mutex_lock(&nt_mu);
  if (id_tab == NULL) {
    id_size = ino_size = alias_size = 1024;
    id_tab = calloc(id_size, sizeof(void *));
    ino_tab = calloc(ino_size, sizeof(void *));
    alias_tab = calloc(alias_size, sizeof(void *));
    if (id_tab == NULL || ino_tab == NULL || alias_tab == NULL) abort();
    root = calloc(1, sizeof(*root));
    if (root == NULL) abort();
    root->nodeid = HS_ROOT_ID;
    root->type = S_IFDIR;
    root->nlookup = 1;
    id_tab[hash64(HS_ROOT_ID) & (id_size - 1)] = root;
    id_count = 1;
  }
  pthread_mutex_unlock(&nt_mu);
}

void hs_nodes_clear (void) {
  pthread_mutex_lock(&nt_mu);
  for (size_t b = 0; b < alias_size; b++) {
    hs_alias_t *a = alias_tab[b];
    while (a != NULL) { hs_alias_t *next = a->hnext; free(a); a = next; }
  }
  for (size_t b = 0; b < id_size; b++) {
    hs_node_t *n = id_tab[b];
    while (n != NULL) { hs_node_t *next = n->id_next; free(n); n = next; }
  }
  free(id_tab); free(ino_tab); free(alias_tab);
  id_tab = NULL; ino_tab = NULL; alias_tab = NULL; root = NULL;
  id_count = ino_count = alias_count = 0;
  next_id = HS_ROOT_ID + 1;
  pthread_mutex_unlock(&nt_mu);
}

hs_node_t *hs_node_get (uint64_t nodeid) {
  pthread_mutex_lock(&nt_mu);
  hs_node_t *n = id_tab != NULL ? id_find(nodeid) : NULL;
  if (n != NULL) n->refs++;
  pthread_mutex_unlock(&nt_mu);
  return n;
}

void hs_node_ref (hs_node_t *n) {
  pthread_mutex_lock(&nt_mu);
  n->refs++;
  pthread_mutex_unlock(&nt_mu);
}

void hs_node_put (hs_node_t *n) {
  if (n == NULL) return;
  pthread_mutex_lock(&nt_mu);
  n->refs--;
  node_free_if_unused(n);
  pthread_mutex_unlock(&nt_mu);
}

uint64_t hs_node_id (const hs_node_t *n) {
  return n->nodeid;
}

// ---- paths ---------------------------------------------------------------------

// Prepends "/name" before *s in a buffer built from its end, growing it.
static char *prepend (char **buf, size_t *size, char *s, const char *name, size_t len) {
  if ((size_t) (s - *buf) < len + 1) {
    size_t used = *size - (size_t) (s - *buf);
    size_t nsize = *size;
    while (nsize < used + len + 1) nsize *= 2;
    char *nbuf = malloc(nsize);
    if (nbuf == NULL) return NULL;
    memcpy(nbuf + nsize - used, s, used);
    free(*buf);
    *buf = nbuf;
    *size = nsize;
    s = nbuf + nsize - used;
  }
  s -= len;
  memcpy(s, name, len);
  *--s = '/';
  return s;
}

static int held_push (hs_plock_t *pl, hs_node_t *n) {
  if (pl->n == pl->cap) {
    int ncap = pl->cap * 2;
    hs_node_t **nh = malloc((size_t) ncap * sizeof(*nh));
    if (nh == NULL) return -ENOMEM;
    memcpy(nh, pl->held, (size_t) pl->n * sizeof(*nh));
    if (pl->held != pl->inline_held) free(pl->held);
    pl->held = nh;
    pl->cap = ncap;
  }
  pl->held[pl->n++] = n;
  return 0;
}

static void plock_free (hs_plock_t *pl) {
  if (pl->held != NULL && pl->held != pl->inline_held) free(pl->held);
  pl->held = NULL;
  pl->n = 0;
}

static void plock_reset (hs_plock_t *pl) {
  if (pl->held != NULL && pl->held != pl->inline_held) free(pl->held);
  pl->held = pl->inline_held;
  pl->cap = (int) (sizeof(pl->inline_held) / sizeof(pl->inline_held[0]));
  pl->n = 0;
  pl->wnode = NULL;
}

// Under nt_mu: undoes what a (partial) lock took.
static void unlock_held (hs_plock_t *pl) {
  if (pl->wnode != NULL) {
    pl->wnode->treelock = 0;
    pl->wnode->refs--;
    node_free_if_unused(pl->wnode);
    pl->wnode = NULL;
  }
  for (int i = 0; i < pl->n; i++) {
    hs_node_t *n = pl->held[i];
    n->treelock--;
    if (n->treelock == HS_WAIT) n->treelock = 0;
    n->refs--;
    node_free_if_unused(n);
  }
  pl->n = 0;
}

// Under nt_mu: builds the path of n from its alias a up (a: one of n's
// names), locking it if `lock`. -EAGAIN: a conflicting lock (nothing held).
static int walk_up (hs_node_t *n, hs_alias_t *a, char **buf, size_t *size, char **s, hs_plock_t *pl, int lock) {
  for (;;) {
    if (n == root) return 0;
    if (a == NULL) return -ENOENT;
    *s = prepend(buf, size, *s, a->name, a->len);
    if (*s == NULL) return -ENOMEM;
    if (lock) {
      if (n->treelock < 0) return -EAGAIN;
      if (held_push(pl, n) != 0) return -ENOMEM;
      n->treelock++;
      n->refs++;
    }
    n = a->parent;
    a = n->aliases;
  }
}

// Under nt_mu: builds and locks the path of (dir, name); lock 0 builds it
// without locking (pl unused). `mine`: a node the same request already holds
// exclusively (a rename between two names of one hard-linked inode): not
// locked twice. -EAGAIN: a conflicting lock, nothing held.
static int try_path (hs_node_t *dir, const char *name, int wlock, char **path, hs_plock_t *pl, int lock, hs_node_t *mine) {
  size_t size = 256;
  char *buf = malloc(size);
  if (buf == NULL) return -ENOMEM;
  char *end = buf + size - 1;
  *end = '\0';
  char *s = end;
  int err = 0;
  if (lock) plock_reset(pl);
  if (name != NULL) {
    s = prepend(&buf, &size, s, name, strlen(name));
    if (s == NULL) { err = -ENOMEM; goto fail; }
    if (wlock && lock) {
      hs_alias_t *a = alias_find(dir, name);
      if (a != NULL && a->node != mine) {
        hs_node_t *w = a->node;
        if (w->treelock != 0) {
          if (w->treelock > 0) w->treelock += HS_WAIT;
          err = -EAGAIN;
          goto fail;
        }
        w->treelock = HS_WRITE;
        w->refs++;
        pl->wnode = w;
      }
    }
    err = walk_up(dir, dir->aliases, &buf, &size, &s, pl, lock);
  } else {
    // A hard-linked file has several names: any whose directories are all still known.
    hs_alias_t *a = dir->aliases;
    size_t mark = size - (size_t) (s - buf);
    for (;;) {
      err = walk_up(dir, a, &buf, &size, &s, pl, lock);
      if (err != -ENOENT || a == NULL || a->next == NULL) break;
      if (lock) unlock_held(pl);
      a = a->next;
      s = buf + size - mark;
    }
  }
  if (err != 0) goto fail;
  if (*s == '\0') {
    buf[0] = '/';
    buf[1] = '\0';
  } else {
    memmove(buf, s, size - (size_t) (s - buf));
  }
  *path = buf;
  return 0;
fail:
  if (lock) unlock_held(pl);
  free(buf);
  return err;
}

static void wake_waiters (void);

static int try_path2 (hs_waiter_t *w, int first) {
  if (!w->locked1) {
    int err = try_path(w->d1, w->n1, w->wlock, w->p1, w->pl1, 1, w->locked2 ? w->pl2->wnode : NULL);
    if (err == 0) w->locked1 = 1;
    else if (err != -EAGAIN) return err;
  }
  if (w->d2 != NULL && !w->locked2) {
    int err = try_path(w->d2, w->n2, w->wlock, w->p2, w->pl2, 1, w->locked1 ? w->pl1->wnode : NULL);
    if (err == 0) w->locked2 = 1;
    else if (err != -EAGAIN) return err;
  }
  if (w->locked1 && (w->locked2 || w->d2 == NULL)) return 0;
  // Only the first in line keeps a partial lock: two partial holders could wait for each other.
  if (!first) {
    if (w->locked1) { unlock_held(w->pl1); free(*w->p1); *w->p1 = NULL; w->locked1 = 0; }
    if (w->locked2) { unlock_held(w->pl2); free(*w->p2); *w->p2 = NULL; w->locked2 = 0; }
  }
  return -EAGAIN;
}

static void waiter_fail (hs_waiter_t *w, int err) {
  if (w->locked1) { unlock_held(w->pl1); free(*w->p1); *w->p1 = NULL; w->locked1 = 0; }
  if (w->locked2) { unlock_held(w->pl2); free(*w->p2); *w->p2 = NULL; w->locked2 = 0; }
  w->err = err;
  w->done = 1;
}

static void wake_waiters (void) {
  int first = 1;
  for (hs_waiter_t *w = waiters; w != NULL; w = w->next) {
    if (w->done) continue;
    int err = try_path2(w, first);
    first = 0;
    if (err == -EAGAIN) continue;
    if (err != 0) waiter_fail(w, err);
    else { w->err = 0; w->done = 1; }
    pthread_cond_signal(&w->cond);
  }
}

static int lock_paths (hs_waiter_t *w) {
  pthread_mutex_lock(&nt_mu);
  int err = waiters == NULL ? try_path2(w, 1) : -EAGAIN;
  if (err == -EAGAIN) {
    // A second request never overtakes the queue: a writer in line would starve.
    if (w->locked1 || w->locked2) {
      if (w->locked1) { unlock_held(w->pl1); free(*w->p1); *w->p1 = NULL; w->locked1 = 0; }
      if (w->locked2) { unlock_held(w->pl2); free(*w->p2); *w->p2 = NULL; w->locked2 = 0; }
    }
    pthread_cond_init(&w->cond, NULL);
    w->next = NULL;
    hs_waiter_t **pp = &waiters;
    while (*pp != NULL) pp = &(*pp)->next;
    *pp = w;
    wake_waiters();
    while (!w->done) pthread_cond_wait(&w->cond, &nt_mu);
    for (pp = &waiters; *pp != w; pp = &(*pp)->next) {}
    *pp = w->next;
    pthread_cond_destroy(&w->cond);
    err = w->err;
    // The head left: the next one may now hold a partial lock.
    wake_waiters();
  } else if (err != 0) {
    waiter_fail(w, err);
  }
  pthread_mutex_unlock(&nt_mu);
  if (err != 0) {
    plock_free(w->pl1);
    if (w->pl2 != NULL) plock_free(w->pl2);
  }
  return err;
}

int hs_path_lock (hs_node_t *dir, const char *name, int wlock, char **path, hs_plock_t *pl) {
  hs_waiter_t w;
  memset(&w, 0, sizeof(w));
  w.d1 = dir; w.n1 = name; w.p1 = path; w.pl1 = pl; w.wlock = wlock;
  pl->held = NULL;
  *path = NULL;
  return lock_paths(&w);
}

int hs_path_lock2 (hs_node_t *d1, const char *n1, hs_node_t *d2, const char *n2, int wlock, char **p1, char **p2, hs_plock_t *pl1, hs_plock_t *pl2) {
  hs_waiter_t w;
  memset(&w, 0, sizeof(w));
  w.d1 = d1; w.n1 = n1; w.p1 = p1; w.pl1 = pl1;
  w.d2 = d2; w.n2 = n2; w.p2 = p2; w.pl2 = pl2;
  w.wlock = wlock;
  pl1->held = NULL;
  pl2->held = NULL;
  *p1 = NULL;
  *p2 = NULL;
  return lock_paths(&w);
}

void hs_path_unlock (hs_plock_t *pl) {
  if (pl->held == NULL) return;
  pthread_mutex_lock(&nt_mu);
  unlock_held(pl);
  if (waiters != NULL) wake_waiters();
  pthread_mutex_unlock(&nt_mu);
  plock_free(pl);
}

char *hs_path_peek (hs_node_t *n) {
  char *path = NULL;
  pthread_mutex_lock(&nt_mu);
  if (try_path(n, NULL, 0, &path, NULL, 0, NULL) != 0) path = NULL;
  pthread_mutex_unlock(&nt_mu);
  return path;
}

// ---- the kernel's names ----------------------------------------------------------

// Under nt_mu: the alias moves to the front of its node's names (paths are
// built from the first), and when the inode has one link its other names are
// stale (changed behind the daemon's back: a file with one link has one name).
static void alias_prefer (hs_alias_t *a, uint32_t nlink) {
  hs_node_t *n = a->node;
  if (nlink <= 1 || n->type == S_IFDIR) {
    n->refs++;
    while (n->aliases != a) alias_del(n->aliases);
    while (a->next != NULL) alias_del(a->next);
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

int hs_node_found (hs_node_t *parent, const char *name, uint64_t ino, uint32_t type, uint32_t nlink, uint64_t *nodeid) {
  pthread_mutex_lock(&nt_mu);
  type &= S_IFMT;
  hs_node_t *n = NULL;
  hs_alias_t *a = alias_find(parent, name);
  if (a != NULL) {
    n = a->node;
    if (n->ino == ino && n->type == type) goto found;
    // Another inode under that name than the node knew: the name moves.
    n = NULL;
    alias_del(a);
    a = NULL;
  }
  n = ino != 0 ? ino_find(ino) : NULL;
  if (n != NULL && n->type != type) {
    // The number was reused by an inode of another type: the old node keeps
    // its ID for the kernel, but no new name reaches it.
    ino_del(n);
    n = NULL;
  }
  if (n == NULL) {
    n = node_new(ino, type);
    if (n == NULL) {
      pthread_mutex_unlock(&nt_mu);
      return -ENOMEM;
    }
  }
  if (alias_add(parent, name, n) != 0) {
    node_free_if_unused(n);
    pthread_mutex_unlock(&nt_mu);
    return -ENOMEM;
  }
  ino_add(n);
  a = alias_find(parent, name);
found:
  alias_prefer(a, nlink);
  n->nlookup++;
  *nodeid = n->nodeid;
  pthread_mutex_unlock(&nt_mu);
  return 0;
}

void hs_node_forget (uint64_t nodeid, uint64_t nlookup) {
  pthread_mutex_lock(&nt_mu);
  hs_node_t *n = id_tab != NULL ? id_find(nodeid) : NULL;
  if (n != NULL && n != root) {
    n->nlookup = nlookup >= n->nlookup ? 0 : n->nlookup - nlookup;
    if (n->nlookup == 0) {
      // Forgotten: its names go (they hold its parents), and it with them unless a thread still holds it.
      n->refs++;
      while (n->aliases != NULL) alias_del(n->aliases);
      n->refs--;
      node_free_if_unused(n);
    }
  }
  pthread_mutex_unlock(&nt_mu);
}

void hs_node_removed (hs_node_t *parent, const char *name) {
  pthread_mutex_lock(&nt_mu);
  hs_alias_t *a = alias_find(parent, name);
  if (a != NULL) {
    hs_node_t *n = a->node;
    n->refs++;
    alias_del(a);
    n->refs--;
    node_free_if_unused(n);
  }
  pthread_mutex_unlock(&nt_mu);
}

int hs_node_renamed (hs_node_t *op, const char *on, hs_node_t *np, const char *nn) {
  int err = 0;
  pthread_mutex_lock(&nt_mu);
  hs_alias_t *target = alias_find(np, nn);
  hs_alias_t *a = alias_find(op, on);
  if (target != NULL && target != a) {
    hs_node_t *t = target->node;
    t->refs++;
    alias_del(target);
    t->refs--;
    node_free_if_unused(t);
  }
  if (a != NULL && a != target) {
    hs_node_t *n = a->node;
    n->refs++;
    alias_del(a);
    err = alias_add(np, nn, n);
    if (err == 0) ino_add(n);
    n->refs--;
    node_free_if_unused(n);
  }
  pthread_mutex_unlock(&nt_mu);
  return err;
}

// ---- opens and hidden names ------------------------------------------------------

void hs_node_opened (hs_node_t *n) {
  pthread_mutex_lock(&nt_mu);
  n->open_count++;
  pthread_mutex_unlock(&nt_mu);
}

int hs_node_must_hide (hs_node_t *parent, const char *name) {
  pthread_mutex_lock(&nt_mu);
  hs_alias_t *a = alias_find(parent, name);
  int hide = a != NULL && a->node->open_count > 0 && a->node->aliases == a && a->next == NULL;
  pthread_mutex_unlock(&nt_mu);
  return hide;
}

int hs_node_hidden_name (hs_node_t *parent, const char *name, char *buf, size_t size) {
  int err = -ENOENT;
  pthread_mutex_lock(&nt_mu);
  hs_alias_t *a = alias_find(parent, name);
  if (a != NULL) {
    do {
      hide_ctr++;
      snprintf(buf, size, ".fuse_hidden%08x%08x", (unsigned int) a->node->nodeid, (unsigned int) hide_ctr);
    } while (alias_find(parent, buf) != NULL);
    err = 0;
  }
  pthread_mutex_unlock(&nt_mu);
  return err;
}

void hs_node_mark_hidden (hs_node_t *n) {
  pthread_mutex_lock(&nt_mu);
  n->hidden = 1;
  pthread_mutex_unlock(&nt_mu);
}

int hs_node_is_hidden (hs_node_t *n) {
  pthread_mutex_lock(&nt_mu);
  int h = n->hidden;
  pthread_mutex_unlock(&nt_mu);
  return h;
}

int hs_node_released (hs_node_t *n, char **path) {
  int unlink_hidden = 0;
  pthread_mutex_lock(&nt_mu);
  if (n->open_count > 0) n->open_count--;
  if (n->hidden && n->open_count == 0) {
    n->hidden = 0;
    if (try_path(n, NULL, 0, path, NULL, 0, NULL) == 0) unlink_hidden = 1;
  }
  pthread_mutex_unlock(&nt_mu);
  return unlink_hidden;
}

void hs_nodes_stats (uint64_t *nodes, uint64_t *known) {
  pthread_mutex_lock(&nt_mu);
  *nodes = id_count;
  *known = ino_count;
  pthread_mutex_unlock(&nt_mu);
}

// ---- handover: the table as bytes ------------------------------------------------
//
// Written by a daemon that stopped serving (no request in flight: no
// references, no tree locks), read by its successor before it serves. Layout
// (host byte order: both run on one machine): "HSNT", u32 version, u64
// next_id, u64 hide_ctr, u64 nodes; per node u64 nodeid, u64 ino, u32 type,
// u32 open_count, u32 hidden, u32 aliases, u64 nlookup; per alias u64 parent
// nodeid, u32 length, the name's bytes.

#define NT_MAGIC 0x544e5348u  // "HSNT"
#define NT_VERSION 1u

typedef struct { char *p; size_t len, cap; } nt_buf_t;

static int reserve (nt_buf_t *b, size_t n) {
  if (b->len + n <= b->cap) return 0;
  size_t ncap = b->cap == 0 ? 4096 : b->cap;
  while (ncap < b->len + n) ncap *= 2;
  char *np = realloc(b->p, ncap);
  if (np == NULL) return -ENOMEM;
  b->p = np;
  b->cap = ncap;
  return 0;
}

static int put (nt_buf_t *b, const void *v, size_t n) {
  if (reserve(b, n) != 0) return -ENOMEM;
  memcpy(b->p + b->len, v, n);
  b->len += n;
  return 0;
}

#define PUT(b, v) do { __typeof__(v) put_v_ = (v); if (put((b), &put_v_, sizeof(put_v_)) != 0) goto fail; } while (0)

int hs_nodes_export (char **out, size_t *len) {
  nt_buf_t b = { NULL, 0, 0 };
  pthread_mutex_lock(&nt_mu);
  // Sized for every node with one short name: one allocation in the usual case.
  if (reserve(&b, id_count * 64 + 64) != 0) goto fail;
  PUT(&b, (uint32_t) NT_MAGIC);
  PUT(&b, (uint32_t) NT_VERSION);
  PUT(&b, (uint64_t) next_id);
  PUT(&b, (uint64_t) hide_ctr);
  PUT(&b, (uint64_t) (id_count - 1));
  for (size_t i = 0; i < id_size; i++) {
    // The nodes of buckets ahead are fetched while this one is written (the walk waits on memory).
    if (i + 8 < id_size && id_tab[i + 8] != NULL) __builtin_prefetch(id_tab[i + 8]);
    for (hs_node_t *n = id_tab[i]; n != NULL; n = n->id_next) {
      if (n == root) continue;
      uint32_t na = 0;
      for (hs_alias_t *a = n->aliases; a != NULL; a = a->next) na++;
      PUT(&b, (uint64_t) n->nodeid);
      PUT(&b, (uint64_t) n->ino);
      PUT(&b, (uint32_t) n->type);
      PUT(&b, (uint32_t) n->open_count);
      PUT(&b, (uint32_t) n->hidden);
      PUT(&b, na);
      PUT(&b, (uint64_t) n->nlookup);
      for (hs_alias_t *a = n->aliases; a != NULL; a = a->next) {
        PUT(&b, (uint64_t) a->parent->nodeid);
        PUT(&b, (uint32_t) a->len);
        if (put(&b, a->name, a->len) != 0) goto fail;
      }
    }
  }
  pthread_mutex_unlock(&nt_mu);
  *out = b.p;
  *len = b.len;
  return 0;
fail:
  pthread_mutex_unlock(&nt_mu);
  free(b.p);
  return -ENOMEM;
}

typedef struct { const char *p; size_t len, at; } nt_in_t;

static int get (nt_in_t *in, void *v, size_t n) {
  if (in->len - in->at < n) return -EINVAL;
  memcpy(v, in->p + in->at, n);
  in->at += n;
  return 0;
}

#define GET(in, v) do { if (get((in), &(v), sizeof(v)) != 0) goto bad; } while (0)

// Under nt_mu: back to the table hs_nodes_init made (root alone, with the
// references it had), after an import that failed part way.
static void import_undo (uint64_t root_refs) {
  for (size_t b = 0; b < alias_size; b++) {
    hs_alias_t *a = alias_tab[b];
    while (a != NULL) { hs_alias_t *next = a->hnext; free(a); a = next; }
  }
  for (size_t b = 0; b < id_size; b++) {
    hs_node_t *n = id_tab[b];
    while (n != NULL) { hs_node_t *next = n->id_next; if (n != root) free(n); n = next; }
  }
  memset(alias_tab, 0, alias_size * sizeof(*alias_tab));
  memset(id_tab, 0, id_size * sizeof(*id_tab));
  memset(ino_tab, 0, ino_size * sizeof(*ino_tab));
  alias_count = ino_count = 0;
  root->id_next = NULL;
  root->in_ino = 0;
  root->aliases = NULL;
  root->refs = root_refs;
  id_tab[hash64(HS_ROOT_ID) & (id_size - 1)] = root;
  id_count = 1;
  ino_add(root);
}

// One name of a node: its parent must be a directory of the table, the name
// a single component not yet taken there. With `link`, it is added.
static int import_alias (nt_in_t *in, hs_node_t *n, int link) {
  uint64_t parent;
  uint32_t len;
  char name[4096];
  GET(in, parent);
  GET(in, len);
  if (len == 0 || len >= sizeof(name) || in->len - in->at < len) goto bad;
  memcpy(name, in->p + in->at, len);
  name[len] = '\0';
  in->at += len;
  if (memchr(name, '/', len) != NULL || memchr(name, '\0', len) != NULL) goto bad;
  if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) goto bad;
  if (!link) return 0;
  hs_node_t *pn = id_find(parent);
  if (pn == NULL || pn->type != S_IFDIR || alias_find(pn, name) != NULL) goto bad;
  return alias_add(pn, name, n);
bad:
  return -EINVAL;
}

// Grows a chained table to at least `want` buckets before an import fills it.
static void presize (void ***tab, size_t *size, size_t want, size_t link, size_t (*key) (void *)) {
  while (*size < want) {
    size_t before = *size;
    rehash(tab, size, *size, link, key);
    if (*size == before) return;  // no memory: longer chains, still correct
  }
}

// Reads the node records: the first pass makes the nodes (into `made`, in
// record order), the second (`link`) their names (every parent exists by
// then) and the inode index.
static int import_pass (nt_in_t *in, uint64_t count, uint64_t next, int link, hs_node_t **made) {
  for (uint64_t i = 0; i < count; i++) {
    uint64_t nodeid, ino, nlookup;
    uint32_t type, open_count, hidden, na;
    GET(in, nodeid); GET(in, ino); GET(in, type); GET(in, open_count); GET(in, hidden); GET(in, na); GET(in, nlookup);
    hs_node_t *n = NULL;
    if (!link) {
      // An ID the successor would hand out again, or one taken twice.
      if (nodeid <= HS_ROOT_ID || nodeid >= next || id_find(nodeid) != NULL) goto bad;
      if ((n = calloc(1, sizeof(*n))) == NULL) return -ENOMEM;
      n->nodeid = nodeid;
      n->ino = ino;
      n->type = type & S_IFMT;
      n->open_count = open_count;
      n->hidden = hidden != 0;
      n->nlookup = nlookup;
      rehash((void ***) &id_tab, &id_size, id_count, offsetof(hs_node_t, id_next), id_key);
      size_t h = hash64(nodeid) & (id_size - 1);
      n->id_next = id_tab[h];
      id_tab[h] = n;
      id_count++;
      made[i] = n;
    } else {
      n = made[i];
    }
    for (uint32_t k = 0; k < na; k++) {
      int err = import_alias(in, n, link);
      if (err != 0) return err;
    }
    if (link && n->aliases != NULL) {
      // One node per presented inode number.
      if (n->ino != 0 && ino_find(n->ino) != NULL) goto bad;
      ino_add(n);
    }
  }
  return 0;
bad:
  return -EINVAL;
}

// The smallest record: a node with no name.
#define NT_MIN_RECORD (8 + 8 + 4 * 4 + 8)

int hs_nodes_import (const char *buf, size_t len) {
  nt_in_t in = { buf, len, 0 };
  uint32_t magic, version;
  uint64_t nid, hctr, count;
  hs_node_t **made = NULL;
  int err = -EINVAL;
  pthread_mutex_lock(&nt_mu);
  // Only into a table that has served nothing yet.
  if (id_tab == NULL || id_count != 1 || alias_count != 0) goto out;
  GET(&in, magic); GET(&in, version); GET(&in, nid); GET(&in, hctr); GET(&in, count);
  if (magic != NT_MAGIC || version != NT_VERSION) goto out;
  // A count the buffer cannot hold is refused before anything is allocated for it.
  if (count > (len - in.at) / NT_MIN_RECORD) goto out;
  if ((made = malloc((count + 1) * sizeof(*made))) == NULL) {
    err = -ENOMEM;
    goto out;
  }
  // Every table at its final size first: no rehash while the records go in.
  presize((void ***) &id_tab, &id_size, (size_t) count + 1, offsetof(hs_node_t, id_next), id_key);
  presize((void ***) &ino_tab, &ino_size, (size_t) count + 1, offsetof(hs_node_t, ino_next), ino_key);
  presize((void ***) &alias_tab, &alias_size, (size_t) count + 1, offsetof(hs_alias_t, hnext), alias_key);
  uint64_t root_refs = root->refs;
  size_t at = in.at;
  err = import_pass(&in, count, nid, 0, made);
  if (err == 0) {
    in.at = at;
    err = import_pass(&in, count, nid, 1, made);
  }
  // Every byte is a record: a longer buffer is not this table.
  if (err == 0 && in.at != in.len) err = -EINVAL;
  if (err != 0) {
    import_undo(root_refs);
    goto out;
  }
  next_id = nid;
  hide_ctr = hctr;
out:
  pthread_mutex_unlock(&nt_mu);
  free(made);
  return err;
bad:
  err = -EINVAL;
  goto out;
}

// ---- what an invalidation names (inval.c) ----------------------------------------

static hs_alias_t *alias_find_n (hs_node_t *parent, const char *name, size_t len) {
  for (hs_alias_t *a = alias_tab[hash_name(parent->nodeid, name, len) & (alias_size - 1)]; a != NULL; a = a->hnext) {
    if (a->parent == parent && a->len == len && memcmp(a->name, name, len) == 0) return a;
  }
  return NULL;
}

// Under nt_mu: the node of path's directory (NULL: unknown) and of path
// itself (NULL: unknown), and where its last component starts. "/" has no
// directory: the root is itself.
static void resolve (const char *path, hs_node_t **dir, hs_node_t **node, const char **last, size_t *last_len) {
  hs_node_t *n = root;
  *dir = NULL;
  *node = root;
  *last = path;
  *last_len = 0;
  const char *s = path;
  for (;;) {
    while (*s == '/') s++;
    if (*s == '\0') return;
    const char *e = strchr(s, '/');
    size_t len = e != NULL ? (size_t) (e - s) : strlen(s);
    *dir = n;
    *last = s;
    *last_len = len;
    hs_alias_t *a = n != NULL ? alias_find_n(n, s, len) : NULL;
    n = a != NULL ? a->node : NULL;
    *node = n;
    s += len;
  }
}

int hs_nodes_resolve (const char *path, uint64_t *dir, uint64_t *nodeid, const char **name, size_t *len) {
  hs_node_t *d, *n;
  pthread_mutex_lock(&nt_mu);
  if (id_tab == NULL) {
    pthread_mutex_unlock(&nt_mu);
    return -ENOENT;
  }
  resolve(path, &d, &n, name, len);
  *dir = d != NULL ? d->nodeid : 0;
  *nodeid = n != NULL ? n->nodeid : 0;
  pthread_mutex_unlock(&nt_mu);
  return 0;
}

// Under nt_mu: whether n is h or lies below it by the names paths are built
// from (each node's first alias). Every node the walk passes is marked with
// the answer for this walk's generation, so a walk over the whole table
// visits each node a bounded number of times whatever the depth.
static int below (hs_node_t *n, hs_node_t *h) {
  int ans = 0;
  hs_node_t *x = n;
  for (;;) {
    if (x == h) { ans = 1; break; }
    if (x->walk_gen == walk_gen) { ans = x->walk_below; break; }
    if (x == root || x->aliases == NULL) break;
    x = x->aliases->parent;
  }
  for (hs_node_t *y = n; y != x; y = y->aliases->parent) {
    y->walk_gen = walk_gen;
    y->walk_below = ans;
  }
  return ans;
}

int hs_nodes_below (const char *path, uint64_t **ids, size_t *count) {
  *ids = NULL;
  *count = 0;
  pthread_mutex_lock(&nt_mu);
  hs_node_t *d, *h;
  const char *last;
  size_t len;
  if (id_tab == NULL) {
    pthread_mutex_unlock(&nt_mu);
    return 0;
  }
  resolve(path, &d, &h, &last, &len);
  if (h == NULL) {
    pthread_mutex_unlock(&nt_mu);
    return 0;
  }
  uint64_t *out = malloc(id_count * sizeof(*out));
  if (out == NULL) {
    pthread_mutex_unlock(&nt_mu);
    return -ENOMEM;
  }
  walk_gen++;
  size_t k = 0;
  for (size_t b = 0; b < id_size; b++) {
    for (hs_node_t *n = id_tab[b]; n != NULL; n = n->id_next) {
      if (below(n, h)) out[k++] = n->nodeid;
    }
  }
  pthread_mutex_unlock(&nt_mu);
  *ids = out;
  *count = k;
  return 0;
}
