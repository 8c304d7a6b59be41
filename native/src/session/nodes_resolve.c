// What an invalidation of the kernel's caches names (inval.c): the nodes of
// a virtual path, and every node below one (nodes.h: hs_nodes_resolve,
// hs_nodes_below). Lock: hs_nt.mu, held for each lookup or walk; walk_gen
// and the nodes' walk marks are guarded by it too.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "session/nodes_internal.h"

static uint64_t walk_gen = 0;   // hs_nodes_below's walks

// Under hs_nt.mu: the node of path's directory (NULL: unknown) and of path
// itself (NULL: unknown), and where its last component starts. "/" has no
// directory: the root is itself.
static void resolve (const char *path, hs_node_t **dir, hs_node_t **node, const char **last, size_t *last_len) {
  hs_node_t *n = hs_nt.root;
  *dir = NULL;
  *node = hs_nt.root;
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
    hs_alias_t *a = n != NULL ? nt_alias_find_n(n, s, len) : NULL;
    n = a != NULL ? a->node : NULL;
    *node = n;
    s += len;
  }
}

int hs_nodes_resolve (const char *path, uint64_t *dir, uint64_t *nodeid, const char **name, size_t *len) {
  hs_node_t *d, *n;
  pthread_mutex_lock(&hs_nt.mu);
  if (hs_nt.id_tab == NULL) {
    nt_unlock();
    return -ENOENT;
  }
  resolve(path, &d, &n, name, len);
  *dir = d != NULL ? d->nodeid : 0;
  *nodeid = n != NULL ? n->nodeid : 0;
  nt_unlock();
  return 0;
}

// Under hs_nt.mu: whether n is h or lies below it by the names paths are built
// from (each node's first alias). Every node the walk passes is marked with
// the answer for this walk's generation, so a walk over the whole table
// visits each node a bounded number of times whatever the depth.
static int below (hs_node_t *n, hs_node_t *h) {
  int ans = 0;
  hs_node_t *x = n;
  for (;;) {
    if (x == h) { ans = 1; break; }
    if (x->walk_gen == walk_gen) { ans = x->walk_below; break; }
    if (x == hs_nt.root || x->aliases == NULL) break;
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
  pthread_mutex_lock(&hs_nt.mu);
  hs_node_t *d, *h;
  const char *last;
  size_t len;
  if (hs_nt.id_tab == NULL) {
    nt_unlock();
    return 0;
  }
  resolve(path, &d, &h, &last, &len);
  if (h == NULL) {
    nt_unlock();
    return 0;
  }
  uint64_t *out = malloc(hs_nt.id_count * sizeof(*out));
  if (out == NULL) {
    nt_unlock();
    return -ENOMEM;
  }
  walk_gen++;
  size_t k = 0;
  for (size_t b = 0; b < hs_nt.id_size; b++) {
    for (hs_node_t *n = hs_nt.id_tab[b]; n != NULL; n = n->id_next) {
      if (below(n, h)) out[k++] = n->nodeid;
    }
  }
  nt_unlock();
  *ids = out;
  *count = k;
  return 0;
}
