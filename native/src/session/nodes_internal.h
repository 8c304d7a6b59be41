// What the node table's files share: the layout of nodes and names, the
// table itself and its indexes. nodes.c owns the indexes (every insertion and
// removal goes through the functions below); nodes_paths.c builds and locks
// paths, nodes_handover.c turns the table into bytes and back, and
// nodes_resolve.c finds the nodes an invalidation names. Everything here is
// used with hs_nt.mu held (nodes.c's header says why that is enough).
#ifndef HOMESFS_NODES_INTERNAL_H
#define HOMESFS_NODES_INTERNAL_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "nodes.h"

#pragma GCC visibility push(hidden)

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

// The one table of the process.
typedef struct {
  pthread_mutex_t mu;
  hs_node_t **id_tab, **ino_tab;
  hs_alias_t **alias_tab;
  size_t id_size, ino_size, alias_size;   // bucket counts (powers of two)
  size_t id_count, ino_count, alias_count;
  uint64_t next_id;
  uint64_t hide_ctr;
  hs_node_t *root;
} hs_nt_t;

extern hs_nt_t hs_nt;

// The indexes (nodes.c).
hs_node_t *nt_id_find (uint64_t nodeid);
// Enters a node whose nodeid is set into the ID index.
void nt_id_add (hs_node_t *n);
// Grows every index to at least `count` buckets (before an import fills them).
void nt_presize (size_t count);
void nt_ino_add (hs_node_t *n);
void nt_ino_del (hs_node_t *n);
hs_node_t *nt_ino_find (uint64_t ino);
hs_alias_t *nt_alias_find_n (hs_node_t *parent, const char *name, size_t len);
static inline hs_alias_t *nt_alias_find (hs_node_t *parent, const char *name) {
  return nt_alias_find_n(parent, name, strlen(name));
}
int nt_alias_add (hs_node_t *parent, const char *name, hs_node_t *n);
void nt_alias_del (hs_alias_t *a);
// Frees n once nothing holds it: no lookup the kernel still counts, no
// reference. Its names go with it.
void nt_node_free_if_unused (hs_node_t *n);

// Builds (and with `lock`, locks) the path of (dir, name) (nodes_paths.c).
// -EAGAIN: a conflicting lock, nothing held.
int nt_try_path (hs_node_t *dir, const char *name, int wlock, char **path, hs_plock_t *pl, int lock, hs_node_t *mine);

#pragma GCC visibility pop
#endif
