// The node table as bytes, for a successor daemon (nodes.h: hs_nodes_export,
// hs_nodes_import, and the import started early). Lock: hs_nt.mu, held for
// the whole export or import; pre_mu guards the early import's thread state.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "session/nodes_internal.h"

// Written by a daemon that stopped serving (no request in flight: no
// references, no tree locks), read by its successor before it serves. Layout
// (host byte order: both run on one machine): "HSNT", u32 version, u64
// next_id, u64 hide_ctr, u64 nodes; per node u64 nodeid, u64 ino, u32 type,
// u32 open_count, u32 hidden, u32 aliases, u64 nlookup; per alias u64 parent
// nodeid, u32 length, the name's bytes. Version 2 (passthrough): `hidden` is
// the backing ID shifted left by one, or'd with the hidden bit (IDs are
// positive ints: 31 bits); a version 1 table (no passthrough) is read too.

#define NT_MAGIC 0x544e5348u  // "HSNT"
#define NT_VERSION 2u

static int reserve (nt_buf_t *b, size_t n) {
  if (b->len + n <= b->cap) return 0;
  if (b->grow != NULL) return b->grow(b, b->len + n);
  size_t ncap = b->cap == 0 ? 4096 : b->cap;
  while (ncap < b->len + n) ncap *= 2;
  char *np = realloc(b->p, ncap);
  if (np == NULL) return -ENOMEM;
  b->p = np;
  b->cap = ncap;
  return 0;
}

static int put (nt_buf_t *b, const void *v, size_t n) {
  int err = reserve(b, n);
  if (err != 0) return err;
  memcpy(b->p + b->len, v, n);
  b->len += n;
  return 0;
}

#define PUT(b, v) do { __typeof__(v) put_v_ = (v); if ((err = put((b), &put_v_, sizeof(put_v_))) != 0) goto fail; } while (0)

int nt_export_locked (nt_buf_t *b) {
  int err = -ENOMEM;
  // Sized for every node with one short name: one allocation in the usual case.
  if ((err = reserve(b, hs_nt.id_count * 64 + 64)) != 0) return err;
  PUT(b, (uint32_t) NT_MAGIC);
  PUT(b, (uint32_t) NT_VERSION);
  PUT(b, (uint64_t) hs_nt.next_id);
  PUT(b, (uint64_t) hs_nt.hide_ctr);
  PUT(b, (uint64_t) (hs_nt.id_count - 1));
  for (size_t i = 0; i < hs_nt.id_size; i++) {
    // The nodes of buckets ahead are fetched while this one is written (the
    // walk waits on memory), and the names of nodes fetched earlier.
    if (i + 16 < hs_nt.id_size && hs_nt.id_tab[i + 16] != NULL) __builtin_prefetch(hs_nt.id_tab[i + 16]);
    if (i + 8 < hs_nt.id_size && hs_nt.id_tab[i + 8] != NULL && hs_nt.id_tab[i + 8]->aliases != NULL) __builtin_prefetch(hs_nt.id_tab[i + 8]->aliases);
    for (hs_node_t *n = hs_nt.id_tab[i]; n != NULL; n = n->id_next) {
      if (n == hs_nt.root) continue;
      uint32_t na = 0;
      for (hs_alias_t *a = n->aliases; a != NULL; a = a->next) na++;
      PUT(b, (uint64_t) n->nodeid);
      PUT(b, (uint64_t) n->ino);
      PUT(b, (uint32_t) n->type);
      PUT(b, (uint32_t) n->open_count);
      PUT(b, ((uint32_t) n->pt_id << 1) | (n->hidden ? 1u : 0u));
      PUT(b, na);
      PUT(b, (uint64_t) n->nlookup);
      for (hs_alias_t *a = n->aliases; a != NULL; a = a->next) {
        PUT(b, (uint64_t) a->parent->nodeid);
        PUT(b, (uint32_t) a->len);
        if ((err = put(b, a->name, a->len)) != 0) return err;
      }
    }
  }
  return 0;
fail:
  return err;
}

int hs_nodes_export (char **out, size_t *len) {
  nt_buf_t b = { NULL, 0, 0, NULL, NULL };
  pthread_mutex_lock(&hs_nt.mu);
  int err = nt_export_locked(&b);
  nt_unlock();
  if (err != 0) {
    free(b.p);
    return err;
  }
  *out = b.p;
  *len = b.len;
  return 0;
}

typedef struct { const char *p; size_t len, at; } nt_in_t;

static int get (nt_in_t *in, void *v, size_t n) {
  if (in->len - in->at < n) return -EINVAL;
  memcpy(v, in->p + in->at, n);
  in->at += n;
  return 0;
}

#define GET(in, v) do { if (get((in), &(v), sizeof(v)) != 0) goto bad; } while (0)

// Under hs_nt.mu: back to the table hs_nodes_init made (root alone, with the
// references it had), after an import that failed part way.
static void import_undo (uint64_t root_refs) {
  for (size_t b = 0; b < hs_nt.alias_size; b++) {
    hs_alias_t *a = hs_nt.alias_tab[b];
    while (a != NULL) { hs_alias_t *next = a->hnext; free(a); a = next; }
  }
  for (size_t b = 0; b < hs_nt.id_size; b++) {
    hs_node_t *n = hs_nt.id_tab[b];
    while (n != NULL) { hs_node_t *next = n->id_next; if (n != hs_nt.root) free(n); n = next; }
  }
  memset(hs_nt.alias_tab, 0, hs_nt.alias_size * sizeof(*hs_nt.alias_tab));
  memset(hs_nt.id_tab, 0, hs_nt.id_size * sizeof(*hs_nt.id_tab));
  memset(hs_nt.ino_tab, 0, hs_nt.ino_size * sizeof(*hs_nt.ino_tab));
  hs_nt.alias_count = hs_nt.ino_count = hs_nt.id_count = 0;
  nt_backing_nodes = 0;
  hs_nt.root->id_next = NULL;
  hs_nt.root->in_ino = 0;
  hs_nt.root->aliases = NULL;
  hs_nt.root->refs = root_refs;
  nt_id_add(hs_nt.root);
  nt_ino_add(hs_nt.root);
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
  hs_node_t *pn = nt_id_find(parent);
  if (pn == NULL || pn->type != S_IFDIR || nt_alias_find(pn, name) != NULL) goto bad;
  return nt_alias_add(pn, name, n);
bad:
  return -EINVAL;
}

// At a million nodes each record's index work misses the cache (a slot of
// the ID index in the first pass; of the name and inode indexes in the
// second): the records IMPORT_AHEAD ahead are skimmed (not checked: a hint
// only) and those slots fetched, their chains' first entries half as far
// ahead (nodes_internal.h, nt_prefetch_found). -> where the record after it
// starts, or 0 (the end, or bytes that do not skim).
#define IMPORT_AHEAD 16

static size_t import_prefetch (const nt_in_t *in, size_t at, int link, int stage) {
  const size_t head = 8 + 8 + 4 * 4 + 8;
  if (at == 0 || in->len - at < head || at > in->len) return 0;
  uint64_t nodeid, ino;
  uint32_t na;
  memcpy(&nodeid, in->p + at, 8);
  memcpy(&ino, in->p + at + 8, 8);
  memcpy(&na, in->p + at + 8 + 8 + 3 * 4, 4);
  at += head;
  if (!link) nt_prefetch_id(stage, nodeid);
  for (uint32_t k = 0; k < na; k++) {
    uint64_t parent;
    uint32_t len;
    if (in->len - at < 12) return 0;
    memcpy(&parent, in->p + at, 8);
    memcpy(&len, in->p + at + 8, 4);
    at += 12;
    if (in->len - at < len) return 0;
    // The inode index is looked up once a node has a name: with its first.
    if (link) nt_prefetch_found(stage, parent, in->p + at, len, k == 0 ? ino : 0, parent);
    at += len;
  }
  return at;
}

// Reads the node records: the first pass makes the nodes (into `made`, in
// record order), the second (`link`) their names (every parent exists by
// then) and the inode index.
static int import_pass (nt_in_t *in, uint64_t count, uint64_t next, int link, hs_node_t **made, uint32_t version) {
  size_t far = in->at, near = in->at;
  for (int k = 0; k < IMPORT_AHEAD && far != 0; k++) far = import_prefetch(in, far, link, 0);
  for (int k = 0; k < IMPORT_AHEAD / 2 && near != 0; k++) near = import_prefetch(in, near, link, 1);
  for (uint64_t i = 0; i < count; i++) {
    far = import_prefetch(in, far, link, 0);
    near = import_prefetch(in, near, link, 1);
    // The node the second pass names (made by the first, in record order).
    if (link && i + IMPORT_AHEAD / 2 < count) __builtin_prefetch(made[i + IMPORT_AHEAD / 2]);
    uint64_t nodeid, ino, nlookup;
    uint32_t type, open_count, hidden, na;
    GET(in, nodeid); GET(in, ino); GET(in, type); GET(in, open_count); GET(in, hidden); GET(in, na); GET(in, nlookup);
    hs_node_t *n = NULL;
    if (!link) {
      // An ID the successor would hand out again, or one taken twice.
      if (nodeid <= HS_ROOT_ID || nodeid >= next || nt_id_find(nodeid) != NULL) goto bad;
      if ((n = calloc(1, sizeof(*n))) == NULL) return -ENOMEM;
      n->nodeid = nodeid;
      n->ino = ino;
      n->type = type & S_IFMT;
      n->open_count = open_count;
      n->hidden = version >= 2 ? (hidden & 1u) != 0 : hidden != 0;
      if (version >= 2 && (hidden >> 1) != 0) nt_set_backing(n, (int32_t) (hidden >> 1));
      n->nlookup = nlookup;
      nt_id_add(n);
      made[i] = n;
    } else {
      n = made[i];
    }
    for (uint32_t k = 0; k < na; k++) {
      int err = import_alias(in, n, link);
      if (err != 0) return err;
    }
    if (link && n->aliases != NULL && !nt_hidden_named(n)) {
      // One node per presented inode number (a node named by a hidden name is never in the index: nodes.c).
      if (n->ino != 0 && nt_ino_find(n->ino) != NULL) goto bad;
      nt_ino_add(n);
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
  pthread_mutex_lock(&hs_nt.mu);
  // Only into a table that has served nothing yet (and journals nothing: the
  // journal would miss what the import adds; hs_journal_rebase follows it).
  if (hs_nt.id_tab == NULL || hs_nt.id_count != 1 || hs_nt.alias_count != 0) goto out;
  if (hs_nt.journal != NULL) {
    err = -EBUSY;
    goto out;
  }
  GET(&in, magic); GET(&in, version); GET(&in, nid); GET(&in, hctr); GET(&in, count);
  if (magic != NT_MAGIC || version < 1 || version > NT_VERSION) goto out;
  // A count the buffer cannot hold is refused before anything is allocated for it.
  if (count > (len - in.at) / NT_MIN_RECORD) goto out;
  if ((made = malloc((count + 1) * sizeof(*made))) == NULL) {
    err = -ENOMEM;
    goto out;
  }
  // Every index at its final size first: no rehash while the records go in.
  nt_presize((size_t) count + 1);
  uint64_t root_refs = hs_nt.root->refs;
  size_t at = in.at;
  err = import_pass(&in, count, nid, 0, made, version);
  if (err == 0) {
    in.at = at;
    err = import_pass(&in, count, nid, 1, made, version);
  }
  // Every byte is a record: a longer buffer is not this table.
  if (err == 0 && in.at != in.len) err = -EINVAL;
  if (err != 0) {
    import_undo(root_refs);
    goto out;
  }
  hs_nt.next_id = nid;
  hs_nt.hide_ctr = hctr;
out:
  nt_unlock();
  free(made);
  return err;
bad:
  err = -EINVAL;
  goto out;
}

// ---- the import, started early --------------------------------------------------
//
// A successor receives the table while the serving daemon is paused, and has
// JavaScript's work to do before it can serve (its state read, the open files
// adopted). The import is C's own work on a table nothing else uses yet, so it
// runs meanwhile on a thread of its own; the adopt joins it. A status call in
// between waits on the table's mutex, never the reverse.

static pthread_mutex_t pre_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t pre_thread;
static int pre_started;   // a thread imports (or imported) pre_buf
static int pre_err;       // its result, read after the join
static char *pre_buf;     // its copy of the bytes
static size_t pre_len;

static void *pre_import (void *arg) {
  (void) arg;
  pre_err = hs_nodes_import(pre_buf, pre_len);
  return NULL;
}

int hs_nodes_import_start (const char *buf, size_t len) {
  int err = 0;
  pthread_mutex_lock(&pre_mu);
  if (pre_started) err = -EEXIST;
  else if ((pre_buf = malloc(len > 0 ? len : 1)) == NULL) err = -ENOMEM;
  if (err == 0) {
    memcpy(pre_buf, buf, len);
    pre_len = len;
    if ((err = -pthread_create(&pre_thread, NULL, pre_import, NULL)) == 0) pre_started = 1;
    else {
      free(pre_buf);
      pre_buf = NULL;
    }
  }
  pthread_mutex_unlock(&pre_mu);
  return err;
}

int hs_nodes_import_finish (const char *buf, size_t len) {
  pthread_mutex_lock(&pre_mu);
  int started = pre_started;
  if (started) {
    pthread_join(pre_thread, NULL);
    pre_started = 0;
  }
  int same = started && pre_len == len && memcmp(pre_buf, buf, len) == 0;
  int err = pre_err;
  free(pre_buf);
  pre_buf = NULL;
  pthread_mutex_unlock(&pre_mu);
  if (same) return err;
  if (started) {
    // Imported from other bytes: the table starts over from these.
    hs_nodes_clear();
    hs_nodes_init();
  }
  return hs_nodes_import(buf, len);
}
