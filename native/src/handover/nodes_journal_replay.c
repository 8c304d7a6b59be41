// The journal read back (nodes_journal.h: hs_journal_recover, and
// hs_journal_rebase for a successor of a live handover), and followed while
// the serving daemon still writes it (hs_journal_follow, at the end). Layout
// and invariants: nodes_journal.c.
//
// A recovery imports the newest valid snapshot, frees the nodes it caught
// held only by requests in flight (forgotten and nameless: the kernel does
// not name them, and the dead daemon's requests are gone), then replays the
// complete records after it through the table's own functions, journaling
// off: each mutation does what it did, since what it depends on (names,
// lookup counts, the inode index, the ID counter) is what the journal holds.
// A replayed lookup must give the node ID the kernel was given, or the
// journal is refused. A record torn by the crash (its commit word not
// stored) ends the log: its mutation's reply was never sent, and the kernel
// sends the request again.
//
// Lock: the table's functions take hs_nt.mu themselves; it is held here only
// to check the table is fresh, to sweep, and to start journaling. Nothing
// else may use the table during a recovery.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "session/nodes_internal.h"
#include "handover/nodes_journal.h"
#include "handover/nodes_journal_internal.h"

// Whether memfd `at` holds a committed header and the snapshot it names.
static int jr_valid (const struct nt_journal *j, int at, uint64_t *gen) {
  const char *m = j->map[at];
  const jr_hdr_t *h = (const jr_hdr_t *) m;
  *gen = __atomic_load_n(&h->gen, __ATOMIC_ACQUIRE);
  if (*gen == 0 || h->magic != JR_MAGIC || h->version != JR_VERSION) return 0;
  if (h->snap_len > j->size[at] - JR_HDR - 8) return 0;
  if (h->log_start != JR_HDR + (h->snap_len + 7) / 8 * 8) return 0;
  return h->snap_sum == jr_sum(*gen, m + JR_HDR, h->snap_len);
}

// The memfd with the newest valid header (-1: neither).
static int jr_newest (const struct nt_journal *j) {
  uint64_t g0 = 0, g1 = 0;
  int v0 = jr_valid(j, 0, &g0), v1 = jr_valid(j, 1, &g1);
  if (v0 && (!v1 || g0 >= g1)) return 0;
  return v1 ? 1 : -1;
}

// The record at pos of memfd `at` (generation gen): its body, names and
// length, or 0 when there is none (the end of the log, or a torn record).
static int jr_record (const struct nt_journal *j, int at, uint64_t gen, size_t pos, jr_body_t *b, const char **names, size_t *total) {
  const char *m = j->map[at];
  size_t size = j->size[at];
  if (pos % 8 != 0 || pos > size - 8) return 0;
  uint64_t word = __atomic_load_n((const uint64_t *) (m + pos), __ATOMIC_ACQUIRE);
  size_t len = (size_t) (word >> 32);
  if (len < 8 + sizeof(*b) || len % 8 != 0 || len > size - pos) return 0;
  memcpy(b, m + pos + 8, sizeof(*b));
  size_t body = sizeof(*b) + (size_t) b->len1 + b->len2;
  if (body > len - 8 || len - 8 - body >= 8) return 0;
  if ((uint32_t) word != (uint32_t) jr_sum(jr_seed(gen, pos), m + pos + 8, body)) return 0;
  *names = m + pos + 8 + sizeof(*b);
  *total = len;
  return 1;
}

// A name of a record as a C string (in buf, grown as needed; NULL: no memory).
static char *jr_name (char **buf, size_t *cap, const char *p, size_t len) {
  if (len + 1 > *cap) {
    char *nb = realloc(*buf, len + 1);
    if (nb == NULL) return NULL;
    *buf = nb;
    *cap = len + 1;
  }
  memcpy(*buf, p, len);
  (*buf)[len] = '\0';
  return *buf;
}

static void set_value (uint64_t *field, uint64_t v) {
  pthread_mutex_lock(&hs_nt.mu);
  *field = v;
  nt_unlock();
}

// A renamed record: through the table's function when both directories are
// known. A directory the replay does not know was forgotten and held only
// by a request: nothing was found under it (old), or the moved name became
// unreachable (new): what stays to do is a removal.
static void jr_apply_renamed (const jr_body_t *b, const char *on, const char *nn) {
  hs_node_t *op = hs_node_get(b->a), *np = hs_node_get(b->b);
  if (op != NULL && np != NULL) hs_node_renamed(op, on, np, nn);
  else if (np != NULL) hs_node_removed(np, nn);
  else if (op != NULL) hs_node_removed(op, on);
  hs_node_put(op);
  hs_node_put(np);
}

// An exchanged record: as a renamed one, a directory the replay does not
// know leaves the name in the other unreachable (it named what was there).
static void jr_apply_exchanged (const jr_body_t *b, const char *on, const char *nn) {
  hs_node_t *op = hs_node_get(b->a), *np = hs_node_get(b->b);
  if (op != NULL && np != NULL) hs_node_exchanged(op, on, np, nn);
  else if (np != NULL) hs_node_removed(np, nn);
  else if (op != NULL) hs_node_removed(op, on);
  hs_node_put(op);
  hs_node_put(np);
}

// One record replayed. 0, or -EINVAL when it does not replay as it ran.
static int jr_apply_one (const jr_body_t *b, const char *n1, const char *n2) {
  hs_node_t *n = NULL;
  switch (b->kind) {
  case HS_JR_FOUND: {
    uint64_t id = 0;
    // The kernel names no directory it forgot in a lookup: its parent is known.
    if ((n = hs_node_get(b->a)) == NULL) return -EINVAL;
    int err = hs_node_found(n, n1, b->b, b->type, b->nlink, &id);
    hs_node_put(n);
    return err != 0 ? err : id == b->c ? 0 : -EINVAL;
  }
  case HS_JR_FORGET: hs_node_forget(b->a, b->b); return 0;
  case HS_JR_REMOVED:
    if ((n = hs_node_get(b->a)) != NULL) hs_node_removed(n, n1);
    break;
  case HS_JR_RENAMED: jr_apply_renamed(b, n1, n2); return 0;
  case HS_JR_EXCHANGED: jr_apply_exchanged(b, n1, n2); return 0;
  case HS_JR_OPENED:
  case HS_JR_HIDDEN:
  case HS_JR_RELEASED:
    // A node the replay does not know was forgotten, held by a request only.
    if ((n = hs_node_get(b->a)) == NULL) return 0;
    // b: the unique of the request (0 in records written before uniques were
    // kept); never with the resend bit, so the change is made again here.
    if (b->kind == HS_JR_OPENED) hs_node_opened_by(n, b->b & ~HS_UNIQUE_RESEND);
    else if (b->kind == HS_JR_HIDDEN) hs_node_mark_hidden(n);
    else {
      char *path = NULL;
      hs_node_released_by(n, &path, b->b & ~HS_UNIQUE_RESEND);
      free(path);
    }
    break;
  case HS_JR_BACKING:
    // A node the replay does not know was forgotten: its ID was closed with it.
    if ((n = hs_node_get(b->a)) == NULL) return 0;
    pthread_mutex_lock(&hs_nt.mu);
    nt_set_backing(n, (int32_t) (uint32_t) b->b);
    nt_unlock();
    break;
  case HS_JR_ANSWERED: hs_node_answered(b->a); return 0;
  case HS_JR_REFUSED: hs_node_refused(b->a); return 0;
  case HS_JR_PENDING:
    if (b->c != HS_JR_OPENED && b->c != HS_JR_RELEASED) return -EINVAL;
    pthread_mutex_lock(&hs_nt.mu);
    nt_eff_put(b->a & ~HS_UNIQUE_RESEND, (uint32_t) b->c, b->b);
    nt_unlock();
    return 0;
  case HS_JR_HIDE_CTR: set_value(&hs_nt.hide_ctr, b->a); return 0;
  case HS_JR_NEXT_ID: set_value(&hs_nt.next_id, b->a); return 0;
  default: return -EINVAL;
  }
  hs_node_put(n);
  return 0;
}

// A record replayed: what its releases give up was closed by the daemon
// that wrote it (nodes_internal.h, nt_replaying).
static int jr_apply (const jr_body_t *b, const char *n1, const char *n2) {
  nt_replaying = 1;
  int err = jr_apply_one(b, n1, n2);
  nt_replaying = 0;
  return err;
}

// The last recovery's figures (hs_journal_recovered): the recovering
// thread's alone (a recovery runs before the session serves).
static struct hs_journal_recovery jr_recovery;

void hs_journal_recovered (struct hs_journal_recovery *out) {
  *out = jr_recovery;
}

static uint64_t jr_clock_ns (clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (uint64_t) t.tv_sec * 1000000000ULL + (uint64_t) t.tv_nsec;
}

static uint64_t jr_now_ns (void) { return jr_clock_ns(CLOCK_MONOTONIC); }

// Replay waits on memory: at a million nodes each record's lookups miss the
// cache in three indexes (about 500 ns a record, most of a recovery). So
// the records ahead are skimmed (length and kind, not checked: a hint only)
// and what they will look up fetched: the index slots JR_AHEAD records
// ahead, the chains' first entries JR_AHEAD / 2 ahead.
#define JR_AHEAD 16

// The record at pos skimmed for its lookups' buckets (stage as in
// nt_prefetch_found); -> the position after it, or 0 at the end of the log.
static size_t jr_prefetch (const struct nt_journal *j, int at, size_t pos, int stage) {
  const char *m = j->map[at];
  size_t size = j->size[at];
  if (pos == 0 || pos % 8 != 0 || pos > size - 8) return 0;
  uint64_t word = __atomic_load_n((const uint64_t *) (m + pos), __ATOMIC_ACQUIRE);
  size_t len = (size_t) (word >> 32);
  if (len < 8 + sizeof(jr_body_t) || len % 8 != 0 || len > size - pos) return 0;
  jr_body_t b;
  memcpy(&b, m + pos + 8, sizeof(b));
  if (b.kind == HS_JR_FOUND && b.len1 <= len - 8 - sizeof(b)) nt_prefetch_found(stage, b.a, m + pos + 8 + sizeof(b), b.len1, b.b, b.c);
  else if (b.kind == HS_JR_FORGET) nt_prefetch_id(stage, b.a);
  return pos + len;
}

// The records of memfd `at` from *pos on, replayed; *pos: where the log ends;
// *count (if not NULL) grows by the records replayed. 0 or -errno.
static int jr_replay (const struct nt_journal *j, int at, uint64_t gen, size_t *pos, uint64_t *count) {
  char *b1 = NULL, *b2 = NULL;
  size_t c1 = 0, c2 = 0, total = 0;
  const char *names;
  jr_body_t b;
  int err = 0;
  // The two cursors ahead of *pos (0: past the end).
  size_t far = *pos, near = *pos;
  for (int i = 0; i < JR_AHEAD && far != 0; i++) far = jr_prefetch(j, at, far, 0);
  for (int i = 0; i < JR_AHEAD / 2 && near != 0; i++) near = jr_prefetch(j, at, near, 1);
  while (err == 0 && jr_record(j, at, gen, *pos, &b, &names, &total)) {
    far = jr_prefetch(j, at, far, 0);
    near = jr_prefetch(j, at, near, 1);
    char *n1 = jr_name(&b1, &c1, names, b.len1);
    char *n2 = jr_name(&b2, &c2, names + b.len1, b.len2);
    if (n1 == NULL || n2 == NULL) err = -ENOMEM;
    // A name with a NUL in it is not one the table was given.
    else if (strlen(n1) != b.len1 || strlen(n2) != b.len2) err = -EINVAL;
    else if ((err = jr_apply(&b, n1, n2)) == 0) {
      *pos += total;
      if (count != NULL) (*count)++;
    }
  }
  free(b1);
  free(b2);
  return err;
}

// Under hs_nt.mu: the snapshot's nodes held only by requests in flight when
// it was taken (no lookup, no name, no child) go. None of them has a name,
// so freeing one frees no other.
static void jr_sweep (void) {
  for (size_t i = 0; i < hs_nt.id_size; i++) {
    hs_node_t *n = hs_nt.id_tab[i];
    while (n != NULL) {
      hs_node_t *next = n->id_next;
      if (n != hs_nt.root && n->nlookup == 0 && n->refs == 0 && n->aliases == NULL) nt_node_free_if_unused(n);
      n = next;
    }
  }
}

// The table's indexes grown once, before the replay, to the nodes the log
// will leave (the imported ones, plus a node per lookup, less one per
// forget: a hint, not a count), instead of doubling again and again as the
// replay adds them (each doubling rehashes every entry, a cache miss each).
// The records are only skimmed (length and kind; not checked: the replay
// checks them).
static void jr_presize (const struct nt_journal *j, int at, size_t pos) {
  const char *m = j->map[at];
  size_t size = j->size[at];
  uint64_t found = 0, forgets = 0;
  while (pos % 8 == 0 && pos <= size - 8) {
    uint64_t word = __atomic_load_n((const uint64_t *) (m + pos), __ATOMIC_ACQUIRE);
    size_t len = (size_t) (word >> 32);
    if (len < 8 + sizeof(jr_body_t) || len % 8 != 0 || len > size - pos) break;
    uint32_t kind;
    memcpy(&kind, m + pos + 8, sizeof(kind));
    if (kind == HS_JR_FOUND) found++;
    else if (kind == HS_JR_FORGET) forgets++;
    pos += len;
  }
  pthread_mutex_lock(&hs_nt.mu);
  if (found > forgets) nt_presize(hs_nt.id_count + (size_t) (found - forgets));
  nt_unlock();
}

// Whether the table is fresh and journals nothing (what a recovery or rebase needs).
static int jr_table_free (int fresh) {
  pthread_mutex_lock(&hs_nt.mu);
  int ok = hs_nt.journal == NULL && hs_nt.id_tab != NULL && (!fresh || (hs_nt.id_count == 1 && hs_nt.alias_count == 0));
  nt_unlock();
  return ok;
}

// The table, the journal in j (memfd `at`, generation gen: its snapshot
// `snap` of `len` bytes, in place or a copy, and the records from log_start)
// loaded into it. 0 or -errno.
static int jr_load (struct nt_journal *j, int at, uint64_t gen, const char *snap, size_t len, size_t log_start, size_t *pos) {
  struct hs_journal_recovery r = { .snap_bytes = len };
  uint64_t t0 = jr_now_ns(), c0 = jr_clock_ns(CLOCK_THREAD_CPUTIME_ID);
  int err = hs_nodes_import(snap, len);
  if (err != 0) return err == -ENOMEM ? err : -EINVAL;
  pthread_mutex_lock(&hs_nt.mu);
  r.snap_nodes = hs_nt.id_count - 1;
  jr_sweep();
  nt_unlock();
  uint64_t t1 = jr_now_ns();
  jr_presize(j, at, log_start);
  *pos = log_start;
  err = jr_replay(j, at, gen, pos, &r.records);
  r.import_ns = t1 - t0;
  r.replay_ns = jr_now_ns() - t1;
  r.cpu_ns = jr_clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
  r.log_bytes = *pos - log_start;
  jr_recovery = r;
  if (err != 0) {
    hs_nodes_clear();
    hs_nodes_init();
  }
  return err;
}

int hs_journal_recover (int fd0, int fd1) {
  hs_nodes_init();  // before the session starts, the table it will use (idempotent)
  if (!jr_table_free(1)) return -EBUSY;
  struct nt_journal j;
  int err = jr_map(&j, fd0, fd1, 1);
  if (err != 0) return err;
  int at = jr_newest(&j);
  uint64_t gen = 0;
  size_t pos = 0;
  if (at < 0) err = -EINVAL;
  else {
    const jr_hdr_t *h = (const jr_hdr_t *) j.map[at];
    gen = h->gen;
    err = jr_load(&j, at, gen, j.map[at] + JR_HDR, h->snap_len, h->log_start, &pos);
  }
  if (err != 0) {
    jr_unmap(&j);
    return err;
  }
  // A torn record's bytes go: the next record is written where it began,
  // and none of its bytes may read as one after it. (Its page is the last
  // record's, allocated; the pages after it are punched.)
  size_t page_end = (pos + 4095) / 4096 * 4096;
  size_t tail = 2 * (sizeof(jr_body_t) + 8) + 2 * 65536;
  if (page_end > j.size[at]) page_end = j.size[at];
  memset(j.map[at] + pos, 0, page_end - pos);
  if (page_end < j.size[at]) {
    size_t len = j.size[at] - page_end < tail ? j.size[at] - page_end : tail;
    fallocate(j.fd[at], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t) page_end, (off_t) len);
  }
  const jr_hdr_t *h = (const jr_hdr_t *) j.map[at];
  j.active = at;
  j.gen = gen;
  j.pos = pos;
  j.log_start = h->log_start;
  j.reserved = page_end;
  j.snap_len = h->snap_len;
  // The other memfd (an older generation, or a snapshot the crash cut short)
  // is never read again: punched now, so the first compaction needs no punch
  // under the mutex. Nothing else uses the table during a recovery.
  int other = 1 - at;
  j.clean[at] = 0;
  j.clean[other] = fallocate(j.fd[other], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t) j.size[other]) == 0;
  pthread_mutex_lock(&hs_nt.mu);
  jr_attach(&j);
  nt_unlock();
  return 0;
}

int hs_journal_rebase (int fd0, int fd1) {
  if (!jr_table_free(0)) return -EBUSY;
  struct nt_journal j;
  int err = jr_map(&j, fd0, fd1, 1);
  if (err != 0) return err;
  int at = jr_newest(&j);
  uint64_t gen = 0, epoch = 0;
  if (at >= 0) {
    const jr_hdr_t *h = (const jr_hdr_t *) j.map[at];
    gen = h->gen;
    epoch = __atomic_load_n(&h->epoch, __ATOMIC_RELAXED);
  }
  int to = at == 0 ? 1 : 0;
  pthread_mutex_lock(&hs_nt.mu);
  if (hs_nt.journal != NULL) err = -EBUSY;
  else if ((err = jr_snapshot(&j, to, gen + 1, epoch)) == 0) {
    jr_punch(&j, 1 - to);
    jr_attach(&j);
  }
  nt_unlock();
  if (err != 0) jr_unmap(&j);
  return err;
}

// ---- following a live journal ----------------------------------------------------
//
// A successor of a live handover loads the serving daemon's table from its
// journal before the pause (the memfds, mapped read-only: it never writes
// them), and in the pause only applies the records appended since. The
// serving daemon then exports no table and the successor imports none: at
// 100,000 nodes that was most of the pause.
//
// The writer goes on meanwhile. Records are safe to read as it appends (each
// committed by its word, stored last). What can change under the reader is a
// compaction: a snapshot into the other memfd, then this one punched. So the
// snapshot is copied out and checked (its checksum, then the header's
// generation read again after the copy: a punch zeroes it, a new snapshot
// raises it), and a record read half punched fails its checksum and ends the
// log there. In the pause nothing is written: if the header still holds the
// generation followed, the memfd was neither punched nor rewritten, and the
// records from where the reader stopped to the end are the rest of the table.
// Otherwise -ESTALE: the table goes back to fresh and the handed-over export
// is used. The serving daemon makes the same comparison (hs_journal_where's
// generation against the one the successor says it followed) to decide
// whether to export, so both ends agree.
//
// Lock: the reader's state is the caller's thread's alone (the successor's
// JavaScript thread, before it serves); the table's functions lock themselves.

static struct {
  struct nt_journal j;
  int at;
  uint64_t gen;
  size_t pos;
  int state;  // 0 none, 1 following (mapped), 2 finished (the table is loaded)
} fl;

// The newest valid snapshot, copied out of a journal another process writes.
// 0, -EAGAIN (it changed under the copy), -EINVAL (none) or -ENOMEM.
static int jr_copy_snapshot (const struct nt_journal *j, int *at, uint64_t *gen, char **snap, size_t *len, size_t *log_start) {
  int a = jr_newest(j);
  if (a < 0) return -EINVAL;
  const jr_hdr_t *h = (const jr_hdr_t *) j->map[a];
  uint64_t g = __atomic_load_n(&h->gen, __ATOMIC_ACQUIRE);
  size_t n = h->snap_len, ls = h->log_start;
  uint64_t sum = h->snap_sum;
  if (g == 0 || n > j->size[a] - JR_HDR - 8 || ls != JR_HDR + (n + 7) / 8 * 8) return -EAGAIN;
  char *b = malloc(n > 0 ? n : 1);
  if (b == NULL) return -ENOMEM;
  memcpy(b, j->map[a] + JR_HDR, n);
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  if (__atomic_load_n(&h->gen, __ATOMIC_RELAXED) != g || jr_sum(g, b, n) != sum) {
    free(b);
    return -EAGAIN;
  }
  *at = a;
  *gen = g;
  *snap = b;
  *len = n;
  *log_start = ls;
  return 0;
}

static void jr_follow_reset (void) {
  if (fl.state == 1) jr_unmap(&fl.j);
  fl.state = 0;
}

int hs_journal_follow (int fd0, int fd1, uint64_t *gen) {
  hs_nodes_init();
  if (fl.state != 0 || !jr_table_free(1)) return -EBUSY;
  int err = jr_map(&fl.j, fd0, fd1, 0);
  if (err != 0) return err;
  char *snap = NULL;
  size_t len = 0, log_start = 0;
  // A compaction under the copy: again (each is a whole snapshot of the writer's, milliseconds apart at worst).
  for (int tries = 0; tries < 8; tries++)
    if ((err = jr_copy_snapshot(&fl.j, &fl.at, &fl.gen, &snap, &len, &log_start)) != -EAGAIN) break;
  if (err == 0) {
    err = jr_load(&fl.j, fl.at, fl.gen, snap, len, log_start, &fl.pos);
    free(snap);
  }
  if (err != 0) {
    jr_unmap(&fl.j);
    return err;
  }
  fl.state = 1;
  *gen = fl.gen;
  return 0;
}

int hs_journal_follow_finish (void) {
  if (fl.state != 1) return -EINVAL;
  const jr_hdr_t *h = (const jr_hdr_t *) fl.j.map[fl.at];
  int err = __atomic_load_n(&h->gen, __ATOMIC_ACQUIRE) == fl.gen ? jr_replay(&fl.j, fl.at, fl.gen, &fl.pos, NULL) : -ESTALE;
  jr_unmap(&fl.j);
  if (err != 0) {
    fl.state = 0;
    hs_nodes_clear();
    hs_nodes_init();
    return err;
  }
  fl.state = 2;
  return 0;
}

int hs_journal_followed (void) {
  int done = fl.state == 2;
  if (done) fl.state = 0;
  return done;
}

void hs_journal_follow_drop (void) {
  int had = fl.state != 0;
  jr_follow_reset();
  if (had) {
    hs_nodes_clear();
    hs_nodes_init();
  }
}
