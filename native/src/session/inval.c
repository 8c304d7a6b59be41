// Invalidations of the kernel's caches (see inval.h): a queue, and one
// thread that drains it through libfuse's notify functions.
//
// Why a thread of its own: the kernel may hold a directory's lock while it
// waits for the answer to a request in that directory (a lookup, a create, a
// rename holds both), and an entry invalidation takes that same lock. Sent
// from a thread that serves requests, or by one a request waits for, it
// could wait for itself. So nothing that serves requests ever sends or waits
// for a send: JavaScript and the session's workers only queue (q_mu, held
// for a list append), and this thread sends with no lock held. A send may
// then block in the kernel until the request holding the directory is
// answered, which never depends on this thread.
//
// Locks: q_mu guards the queue (q_head, q_tail) and the counters; it is
// never held across a send or while taking the node table's mutex. Node IDs
// are resolved from paths by nodes.c under its own mutex before q_mu is
// taken. IDs are never reused, so an entry that outlives its node names
// nothing (the kernel answers ENOENT).
#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 29
#endif
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fuse_lowlevel.h>

#include "abi.h"
#include "session/inval.h"
#include "session/nodes.h"

typedef struct hs_inval hs_inval_t;
struct hs_inval {
  hs_inval_t *next;
  uint64_t ino;      // the node (attributes) or the directory (entry)
  size_t len;
  int entry;         // 1: the name below is an entry of directory ino
  char name[];
};

static pthread_mutex_t q_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cv = PTHREAD_COND_INITIALIZER;
static hs_inval_t *q_head, *q_tail;
static void *q_ch;                  // set once by hs_inval_start (under q_mu)
static int q_started;
static hs_inval_stats_t q_stats;

// libfuse's notifications. For a file, attributes only (offset -1): what
// the daemon changes behind the kernel's back is presentation (modes,
// owners, names), never a file's bytes, so the page cache stays. For a
// directory, its pages too (offset 0): they hold the listing the kernel
// keeps (ops_dirs.c), which a name the daemon made or removed changes; the
// kernel fills them without waiting for the daemon under a page lock, so
// dropping them never waits for a request.
static int notify (void *ch, uint64_t ino, const char *name, size_t len) {
  struct fuse_chan *c = ch;
  if (name != NULL) return fuse_lowlevel_notify_inval_entry(c, ino, name, len);
  return fuse_lowlevel_notify_inval_inode(c, ino, hs_node_type(ino) == S_IFDIR ? 0 : -1, 0);
}

static hs_inval_send_fn q_send = notify;

void hs_inval_set_sender (hs_inval_send_fn fn) {
  pthread_mutex_lock(&q_mu);
  q_send = fn != NULL ? fn : notify;
  pthread_mutex_unlock(&q_mu);
}

static void *drain (void *arg) {
  (void) arg;
  pthread_mutex_lock(&q_mu);
  for (;;) {
    while (q_head == NULL) pthread_cond_wait(&q_cv, &q_mu);
    hs_inval_t *e = q_head;
    q_head = e->next;
    if (q_head == NULL) q_tail = NULL;
    hs_inval_send_fn send = q_send;
    void *ch = q_ch;
    pthread_mutex_unlock(&q_mu);
    int res = send(ch, e->ino, e->entry ? e->name : NULL, e->len);
    free(e);
    pthread_mutex_lock(&q_mu);
    q_stats.pending--;
    if (res == 0) q_stats.sent++;
    else if (res == -ENOENT) q_stats.not_cached++;
    else q_stats.failed++;
  }
  return NULL;
}

int hs_inval_start (void *ch) {
  int err = 0;
  pthread_mutex_lock(&q_mu);
  q_ch = ch;
  if (!q_started) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    err = -pthread_create(&t, &attr, drain, NULL);
    pthread_attr_destroy(&attr);
    if (err == 0) q_started = 1;
  }
  pthread_mutex_unlock(&q_mu);
  return err;
}

// Builds one entry (name NULL: attributes of ino).
static hs_inval_t *entry_new (uint64_t ino, const char *name, size_t len) {
  hs_inval_t *e = malloc(sizeof(*e) + (name != NULL ? len + 1 : 1));
  if (e == NULL) return NULL;
  e->next = NULL;
  e->ino = ino;
  e->entry = name != NULL;
  e->len = name != NULL ? len : 0;
  if (name != NULL) memcpy(e->name, name, len);
  e->name[e->len] = '\0';
  return e;
}

// Appends a chain of n entries (first..last) and wakes the thread; before
// the mount they are dropped (nothing is cached yet).
static int enqueue (hs_inval_t *first, hs_inval_t *last, int n) {
  pthread_mutex_lock(&q_mu);
  if (!q_started) {
    pthread_mutex_unlock(&q_mu);
    while (first != NULL) { hs_inval_t *next = first->next; free(first); first = next; }
    return 0;
  }
  if (q_tail != NULL) q_tail->next = first;
  else q_head = first;
  q_tail = last;
  q_stats.queued += (uint64_t) n;
  q_stats.pending += (uint64_t) n;
  pthread_cond_signal(&q_cv);
  pthread_mutex_unlock(&q_mu);
  return n;
}

// A short chain built before q_mu is taken: up to three entries.
typedef struct { hs_inval_t *first, *last; int n, err; } chain_t;

static void chain_add (chain_t *c, uint64_t ino, const char *name, size_t len) {
  if (c->err != 0) return;
  hs_inval_t *e = entry_new(ino, name, len);
  if (e == NULL) { c->err = -ENOMEM; return; }
  if (c->last != NULL) c->last->next = e;
  else c->first = e;
  c->last = e;
  c->n++;
}

static int chain_queue (chain_t *c) {
  if (c->err != 0) {
    while (c->first != NULL) { hs_inval_t *next = c->first->next; free(c->first); c->first = next; }
    return c->err;
  }
  if (c->n == 0) return 0;
  return enqueue(c->first, c->last, c->n);
}

// The name's entry (and, with node, its node's attributes), and its directory's attributes.
static int inval_name (const char *path, int node) {
  uint64_t dir = 0, id = 0;
  const char *name;
  size_t len;
  if (hs_nodes_resolve(path, &dir, &id, &name, &len) != 0) return 0;
  chain_t c = { NULL, NULL, 0, 0 };
  if (dir != 0) chain_add(&c, dir, name, len);
  if (node && id != 0) chain_add(&c, id, NULL, 0);
  if (dir != 0) chain_add(&c, dir, NULL, 0);
  return chain_queue(&c);
}

int hs_inval_path (const char *path) {
  return inval_name(path, 1);
}

int hs_inval_entry (const char *path) {
  return inval_name(path, 0);
}

int hs_inval_tree (const char *path) {
  uint64_t *ids = NULL;
  size_t n = 0;
  int err = hs_nodes_below(path, &ids, &n);
  if (err != 0) return err;
  chain_t c = { NULL, NULL, 0, 0 };
  for (size_t i = 0; i < n; i++) chain_add(&c, ids[i], NULL, 0);
  free(ids);
  return chain_queue(&c);
}

void hs_inval_progress (uint64_t *queued, uint64_t *done) {
  pthread_mutex_lock(&q_mu);
  *queued = q_stats.queued;
  *done = q_stats.sent + q_stats.not_cached + q_stats.failed;
  pthread_mutex_unlock(&q_mu);
}

void hs_inval_stats (hs_inval_stats_t *s) {
  pthread_mutex_lock(&q_mu);
  *s = q_stats;
  pthread_mutex_unlock(&q_mu);
}
