// Paths of nodes, and the tree locks that keep them stable while a request
// uses them (the table itself is nodes.c; nodes.h states the invariants).
//
// Lock: hs_nt.mu, as everywhere in the table; it also guards the queue of
// requests waiting for a path, and waiting releases it (pthread_cond_wait).
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
#include <stdlib.h>
#include <string.h>

#include "session/nodes_internal.h"

#define HS_WRITE (-1)
#define HS_WAIT INT_MIN

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

static hs_waiter_t *waiters;

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

// Under hs_nt.mu: undoes what a (partial) lock took.
static void unlock_held (hs_plock_t *pl) {
  if (pl->wnode != NULL) {
    pl->wnode->treelock = 0;
    pl->wnode->refs--;
    nt_node_free_if_unused(pl->wnode);
    pl->wnode = NULL;
  }
  for (int i = 0; i < pl->n; i++) {
    hs_node_t *n = pl->held[i];
    n->treelock--;
    if (n->treelock == HS_WAIT) n->treelock = 0;
    n->refs--;
    nt_node_free_if_unused(n);
  }
  pl->n = 0;
}

// Under hs_nt.mu: builds the path of n from its alias a up (a: one of n's
// names), locking it if `lock`. -EAGAIN: a conflicting lock (nothing held).
static int walk_up (hs_node_t *n, hs_alias_t *a, char **buf, size_t *size, char **s, hs_plock_t *pl, int lock) {
  for (;;) {
    if (n == hs_nt.root) return 0;
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

// Under hs_nt.mu: builds and locks the path of (dir, name); lock 0 builds it
// without locking (pl unused). `mine`: a node the same request already holds
// exclusively (a rename between two names of one hard-linked inode): not
// locked twice. -EAGAIN: a conflicting lock, nothing held.
int nt_try_path (hs_node_t *dir, const char *name, int wlock, char **path, hs_plock_t *pl, int lock, hs_node_t *mine) {
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
      hs_alias_t *a = nt_alias_find(dir, name);
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
    int err = nt_try_path(w->d1, w->n1, w->wlock, w->p1, w->pl1, 1, w->locked2 ? w->pl2->wnode : NULL);
    if (err == 0) w->locked1 = 1;
    else if (err != -EAGAIN) return err;
  }
  if (w->d2 != NULL && !w->locked2) {
    int err = nt_try_path(w->d2, w->n2, w->wlock, w->p2, w->pl2, 1, w->locked1 ? w->pl1->wnode : NULL);
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
  pthread_mutex_lock(&hs_nt.mu);
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
    while (!w->done) pthread_cond_wait(&w->cond, &hs_nt.mu);
    for (pp = &waiters; *pp != w; pp = &(*pp)->next) {}
    *pp = w->next;
    pthread_cond_destroy(&w->cond);
    err = w->err;
    // The head left: the next one may now hold a partial lock.
    wake_waiters();
  } else if (err != 0) {
    waiter_fail(w, err);
  }
  nt_unlock();
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
  pthread_mutex_lock(&hs_nt.mu);
  unlock_held(pl);
  if (waiters != NULL) wake_waiters();
  nt_unlock();
  plock_free(pl);
}

char *hs_path_peek (hs_node_t *n) {
  char *path = NULL;
  pthread_mutex_lock(&hs_nt.mu);
  if (nt_try_path(n, NULL, 0, &path, NULL, 0, NULL) != 0) path = NULL;
  nt_unlock();
  return path;
}
