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

#include "session/nodes.h"

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
  // The backing ID (FUSE_DEV_IOC_BACKING_OPEN) every open of this node is
  // passed through with, while one is (0: none): see hs_node_open_mode.
  int32_t pt_id;
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
  struct nt_journal *journal;   // NULL: mutations are not journaled (nodes_journal.c)
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
// Hints for a thread about to look these up (a replay, ahead of its
// records): stage 0 fetches the index slots a lookup of (parent, name),
// of ino and of the node ID `id` will read; stage 1 (once the slots are in
// the cache) the first entries of their chains. No effect on the table.
// Read without hs_nt.mu: only by the thread that alone writes the table
// (a recovery, before the session serves).
void nt_prefetch_found (int stage, uint64_t parent, const char *name, size_t len, uint64_t ino, uint64_t id);
void nt_prefetch_id (int stage, uint64_t id);
int nt_alias_add (hs_node_t *parent, const char *name, hs_node_t *n);
void nt_alias_del (hs_alias_t *a);
// Frees n once nothing holds it: no lookup the kernel still counts, no
// reference. Its names go with it.
void nt_node_free_if_unused (hs_node_t *n);

// The table as bytes (nodes_handover.c's format), under hs_nt.mu, into b:
// a malloc'd buffer that grows, or with `grow`, memory the caller provides
// (grow makes room for `need` bytes in all or fails). 0 or -errno.
typedef struct nt_buf { char *p; size_t len, cap; int (*grow) (struct nt_buf *b, size_t need); void *ctx; } nt_buf_t;
int nt_export_locked (nt_buf_t *b);

// The journal's records (nodes_journal.c), under hs_nt.mu, after the
// mutation they name was made: each public mutation of nodes.c calls its
// one when hs_nt.journal is set (never otherwise: no cost when off).
void nt_jr_found (uint64_t parent, const char *name, uint64_t ino, uint32_t type, uint32_t nlink, uint64_t nodeid);
void nt_jr_forget (uint64_t nodeid, uint64_t nlookup);
void nt_jr_removed (uint64_t parent, const char *name);
void nt_jr_renamed (uint64_t op, const char *on, uint64_t np, const char *nn);
void nt_jr_exchanged (uint64_t op, const char *on, uint64_t np, const char *nn);
// HS_JR_OPENED, HS_JR_HIDDEN, HS_JR_RELEASED (a node), HS_JR_HIDE_CTR, HS_JR_NEXT_ID (a value);
// HS_JR_BACKING (a node and its backing ID, 0 when it has none any more).
// HS_JR_ANSWERED, HS_JR_REFUSED (a request's unique: nodes_requests.c);
// HS_JR_PENDING (written after a snapshot only: a unique, a node, a kind).
enum { HS_JR_FOUND = 1, HS_JR_FORGET, HS_JR_REMOVED, HS_JR_RENAMED, HS_JR_OPENED, HS_JR_HIDDEN, HS_JR_RELEASED, HS_JR_HIDE_CTR, HS_JR_NEXT_ID,
       HS_JR_ANSWERED, HS_JR_REFUSED, HS_JR_PENDING, HS_JR_EXCHANGED, HS_JR_BACKING };
void nt_jr_value (uint32_t kind, uint64_t v);
// OPENED and RELEASED with the unique of the request they answer (b; 0: none).
void nt_jr_value2 (uint32_t kind, uint64_t a, uint64_t b);

// Set while a journal's records are applied (a recovery, a follower): the
// backing IDs their records gave up were closed by the daemon that wrote
// them (or are another's by now), so none is closed again.
extern int nt_replaying;
// Passthrough families (nodes.h): the node takes backing ID id (0: none),
// journaled; its family ends at its last release: its ID journaled gone and
// returned to be closed once hs_nt.mu is dropped (nt_close_backing; 0 when
// nothing is to be closed).
void nt_set_backing (hs_node_t *n, int32_t id);
int32_t nt_family_end (hs_node_t *n);
void nt_close_backing (int32_t id);
extern uint64_t nt_backing_nodes;  // nodes with a backing ID

// Requests whose effect is in the table (and journaled) but whose answer may
// not have reached the kernel (nodes_requests.c): a unique (the resend bit
// cleared) -> the one effect it had (HS_JR_OPENED or HS_JR_RELEASED, a node).
typedef struct nt_eff { uint64_t unique, nodeid; uint32_t kind; struct nt_eff *next; } nt_eff_t;
nt_eff_t *nt_eff_find (uint64_t unique);
// Inserted or replaced; without memory the request is not tracked (a resend
// of it then does its effect again, as before uniques were kept).
void nt_eff_put (uint64_t unique, uint32_t kind, uint64_t nodeid);
int nt_eff_del (uint64_t unique);
void nt_eff_clear (void);
// Each entry (a snapshot writes them after itself): 0, or the first error fn returns.
int nt_eff_each (int (*fn) (const nt_eff_t *e, void *ctx), void *ctx);
// hs_nodes_clear: journaling stops (the memfds are the caller's; only unmapped).
void nt_jr_detach (void);

// A compaction leaves the old memfd's pages to be punched by the thread that
// made it once it has dropped hs_nt.mu (nodes_journal.c): every function that
// may journal unlocks the table with nt_unlock, never pthread_mutex_unlock.
extern __thread int nt_punch_owed;
void nt_jr_punch_owed (void);
static inline void nt_unlock (void) {
  pthread_mutex_unlock(&hs_nt.mu);
  if (__builtin_expect(nt_punch_owed, 0)) nt_jr_punch_owed();
}

// Whether the node's name (the first) is a hidden name: such a node is never
// in the inode-number index (nodes.c).
int nt_hidden_named (const hs_node_t *n);

// Builds (and with `lock`, locks) the path of (dir, name) (nodes_paths.c).
// -EAGAIN: a conflicting lock, nothing held.
int nt_try_path (hs_node_t *dir, const char *name, int wlock, char **path, hs_plock_t *pl, int lock, hs_node_t *mine);

#pragma GCC visibility pop
#endif
