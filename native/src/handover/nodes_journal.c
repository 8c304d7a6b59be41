// A crash-safe journal of the node table (nodes_journal.h): the table lives,
// continuously, in two memfds another process keeps, so that a daemon killed
// at any instruction leaves its successor the table the kernel still refers
// to. This file writes the journal; nodes_journal_replay.c reads it back.
//
// Layout of each memfd (host byte order; both ends run on one machine):
//   [0, 4096)          header: magic, version, generation, snapshot length,
//                      snapshot checksum, log start, epoch
//   [4096, log_start)  a snapshot of the table (nodes_handover.c's format)
//   [log_start, ...)   records, each a commit word (length << 32 | checksum
//                      of its body, seeded with the generation and offset)
//                      then its body: what a public mutation was called
//                      with, and for a lookup the node ID it gave; first
//                      the PENDING records of the requests whose change the
//                      snapshot holds but whose answer was not written yet
//                      (nodes_requests.c), written before the header commits
//
// Invariants:
// - Lock: hs_nt.mu guards everything here (the journal state, both
//   mappings' contents, the epoch); every record is appended under it, by the
//   mutation it names, before that mutation returns: a reply the kernel saw
//   is always journaled.
// - A record is committed by its commit word, stored last (release); the
//   bytes past the last record are zero (each memfd is punched before a
//   snapshot goes in, a recovery zeroes a torn tail), so a reader stops at
//   the first word that is zero or does not check out.
// - A header is committed by its generation, stored last (release) after
//   the snapshot and the other fields; the valid header with the highest
//   generation is the journal. A compaction writes a snapshot of the table
//   (which includes every record so far) into the other memfd with the next
//   generation, switches to it, and only then zeroes the old header's
//   generation (under the mutex) and punches the old memfd (after the
//   mutex, by the same thread: nt_jr_punch_owed). A memfd takes a snapshot
//   only once punched (by that owed punch, or first thing under the mutex
//   when it did not happen): jr_punch_mu and jr_seq order the two.
// - Automatic compactions are at least JR_MIN_INTERVAL_NS apart unless the
//   log reaches JR_FULL: the export holds the mutex, and an owner's lookups
//   must not make every home wait often.
// - Pages are allocated ahead with fallocate (JR_CHUNK at a time), so a full
//   tmpfs is an error here, never a SIGBUS in a mapping. A journal that
//   cannot go on (no room even after a compaction) invalidates its headers
//   and stops: a successor then refuses it rather than serve a stale table.
// - What is journaled is the table as the kernel knows it: references held
//   by requests in flight are not (after a crash no request of the dead
//   daemon is in flight), so a node kept only by them (forgotten, nameless)
//   is freed by a replay as soon as it is forgotten; nodes_journal_replay.c
//   frees those a snapshot caught.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "session/nodes_internal.h"
#include "handover/nodes_journal.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#include "handover/nodes_journal_internal.h"

struct nt_journal jr;
static size_t jr_limit_override;
static pthread_mutex_t jr_punch_mu;
static uint64_t jr_seq;

uint64_t jr_sum (uint64_t seed, const void *p, size_t len) {
  const unsigned char *s = p;
  uint64_t h = seed ^ 0x9e3779b97f4a7c15ULL ^ len;
  while (len >= 8) {
    uint64_t v;
    memcpy(&v, s, 8);
    h = (h ^ v) * 0xff51afd7ed558ccdULL;
    h ^= h >> 32;
    s += 8;
    len -= 8;
  }
  uint64_t v = 0;
  memcpy(&v, s, len);
  h = (h ^ v) * 0xc4ceb9fe1a85ec53ULL;
  return h ^ (h >> 29);
}

// ---- room in a memfd -------------------------------------------------------------

// Pages of memfd `at` allocated up to `end` (from *reserved, JR_CHUNK at a time). 0 or -errno.
static int jr_room (struct nt_journal *j, int at, size_t *reserved, size_t end) {
  if (end > j->size[at]) return -ENOSPC;
  if (end <= *reserved) return 0;
  size_t to = (end + JR_CHUNK - 1) / JR_CHUNK * JR_CHUNK;
  if (to > j->size[at]) to = j->size[at];
  if (fallocate(j->fd[at], 0, (off_t) *reserved, (off_t) (to - *reserved)) != 0) return -errno;
  // Mapped ahead too: one call instead of a page fault per page under the
  // mutex (a kernel without it faults them in as before).
  (void) madvise(j->map[at] + *reserved, to - *reserved, MADV_POPULATE_WRITE);
  *reserved = to;
  return 0;
}

typedef struct { struct nt_journal *j; int at; size_t reserved; } jr_grow_t;

// The export writes straight into the mapping: room is made as it goes.
static int jr_grow (nt_buf_t *b, size_t need) {
  jr_grow_t *g = b->ctx;
  int err = jr_room(g->j, g->at, &g->reserved, JR_HDR + need);
  if (err == 0) b->cap = g->reserved - JR_HDR;
  return err;
}

// ---- records ----------------------------------------------------------------------

// One record written at pos of memfd `at` (generation gen) and committed by
// its word, stored last; room is made for it and the zero word after it.
// Its length, or 0 (no room).
static size_t jr_put (struct nt_journal *j, int at, uint64_t gen, size_t pos, size_t *reserved, const jr_body_t *b, const char *n1, const char *n2) {
  size_t body = sizeof(*b) + b->len1 + b->len2;
  size_t total = (8 + body + 7) / 8 * 8;
  if (jr_room(j, at, reserved, pos + total + 8) != 0) return 0;
  char *r = j->map[at] + pos;
  memcpy(r + 8, b, sizeof(*b));
  memcpy(r + 8 + sizeof(*b), n1, b->len1);
  memcpy(r + 8 + sizeof(*b) + b->len1, n2, b->len2);
  uint64_t sum = jr_sum(jr_seed(gen, pos), r + 8, body);
  __atomic_store_n((uint64_t *) r, ((uint64_t) total << 32) | (uint32_t) sum, __ATOMIC_RELEASE);
  return total;
}

typedef struct { struct nt_journal *j; int at; uint64_t gen; size_t pos, reserved; } jr_pend_t;

// A request's kept change (nodes_requests.c) as a PENDING record after a snapshot.
static int jr_pending (const nt_eff_t *e, void *ctx) {
  jr_pend_t *p = ctx;
  jr_body_t b = { .kind = HS_JR_PENDING, .a = e->unique, .b = e->nodeid, .c = e->kind };
  size_t total = jr_put(p->j, p->at, p->gen, p->pos, &p->reserved, &b, "", "");
  if (total == 0) return -ENOSPC;
  p->pos += total;
  return 0;
}

// ---- snapshots ------------------------------------------------------------------

// Under hs_nt.mu: a snapshot of the table into memfd `to` as generation
// `gen`, which becomes the active one. The other is left as it was. 0 or -errno.
int jr_snapshot (struct nt_journal *j, int to, uint64_t gen, uint64_t epoch) {
  char *m = j->map[to];
  // Zero: no header until the new one commits, no earlier record after the
  // snapshot. Punched already, off the mutex, by the thread of the compaction
  // that left it (nt_jr_punch_owed), unless that was not done yet or failed:
  // then here. From now on no punch owed of it may run (jr_seq).
  pthread_mutex_lock(&jr_punch_mu);
  int clean = j->clean[to];
  size_t pre = clean ? j->pre[to] : 0;
  j->clean[to] = 0;
  j->pre[to] = 0;
  jr_seq++;
  pthread_mutex_unlock(&jr_punch_mu);
  if (!clean && fallocate(j->fd[to], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t) j->size[to]) != 0) return -errno;
  // Pages allocated and mapped ahead (with the punch) need no system call here.
  jr_grow_t g = { j, to, pre };
  int err = jr_room(j, to, &g.reserved, JR_HDR);
  nt_buf_t b = { m + JR_HDR, 0, 0, jr_grow, &g };
  if (err == 0) err = nt_export_locked(&b);
  size_t log_start = JR_HDR + (b.len + 7) / 8 * 8;
  // Room for the header page, the snapshot and the first commit word.
  if (err == 0) err = jr_room(j, to, &g.reserved, log_start + 8);
  // The requests whose change the snapshot holds but whose answer may not
  // have reached the kernel, as records right after it, before the header
  // commits: whoever reads this snapshot reads them.
  jr_pend_t p = { j, to, gen, log_start, 0 };
  if (err == 0) {
    p.reserved = g.reserved;
    err = nt_eff_each(jr_pending, &p);
    g.reserved = p.reserved;
  }
  if (err != 0) return err;
  jr_hdr_t *h = (jr_hdr_t *) m;
  h->magic = JR_MAGIC;
  h->version = JR_VERSION;
  h->snap_len = b.len;
  h->snap_sum = jr_sum(gen, m + JR_HDR, b.len);
  h->log_start = log_start;
  __atomic_store_n(&h->epoch, epoch, __ATOMIC_RELAXED);
  __atomic_store_n(&h->gen, gen, __ATOMIC_RELEASE);
  j->active = to;
  j->gen = gen;
  j->log_start = log_start;
  j->pos = p.pos;
  j->reserved = g.reserved;
  j->snap_len = b.len;
  return 0;
}

// The pages of memfd `at` go (and with them its header); clean when they did.
void jr_punch (struct nt_journal *j, int at) {
  if (fallocate(j->fd[at], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t) j->size[at]) != 0) {
    // Its generation is lower than the active one's: left as it is, it is never chosen.
    fprintf(stderr, "homesfs: node journal: the old log's pages stay (%s)\n", strerror(errno));
    return;
  }
  pthread_mutex_lock(&jr_punch_mu);
  j->clean[at] = 1;
  j->pre[at] = 0;
  pthread_mutex_unlock(&jr_punch_mu);
}

static uint64_t mono_ns (void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return (uint64_t) t.tv_sec * 1000000000ULL + (uint64_t) t.tv_nsec;
}

// ---- the old log's punch, off the table's mutex -------------------------------------
//
// A compaction writes the snapshot under hs_nt.mu (it must see the table
// whole), but the old memfd's pages (the whole old log: up to 64 MiB and
// more) are punched after, by the same thread once it has dropped the mutex
// (nt_unlock), so no other request waits for that. In between the old
// memfd's header is already invalid (its generation zeroed under the mutex,
// right after the new header committed), so a recovery or a follower treats
// it as punched; its records never check out against another generation.
//
// Lock: jr_punch_mu guards jr_seq and jr.clean; lock order hs_nt.mu, then
// jr_punch_mu (the punch owed holds only jr_punch_mu). jr_seq moves whenever
// a memfd starts taking a snapshot or the journal is attached or detached,
// so an owed punch that finds it moved does nothing: it never punches a
// memfd written again meanwhile, nor one the journal no longer has.

static pthread_mutex_t jr_punch_mu = PTHREAD_MUTEX_INITIALIZER;
__thread int nt_punch_owed;
static __thread int owed_at;
static __thread uint64_t owed_seq;
static __thread size_t owed_snap;

// And the pages the next snapshot there will need (this one's size and a
// quarter more) allocated and mapped ahead, so that the next compaction
// makes no system call for them under the mutex either.
void (*hs_journal_before_punch) (void);

void nt_jr_punch_owed (void) {
  nt_punch_owed = 0;
  if (hs_journal_before_punch != NULL) hs_journal_before_punch();
  pthread_mutex_lock(&jr_punch_mu);
  if (jr_seq == owed_seq) {
    int at = owed_at;
    if (fallocate(jr.fd[at], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t) jr.size[at]) == 0) {
      jr.clean[at] = 1;
      jr.pre[at] = 0;
      size_t want = (JR_HDR + owed_snap + owed_snap / 4 + JR_CHUNK) / JR_CHUNK * JR_CHUNK;
      if (want > jr.size[at]) want = jr.size[at];
      if (fallocate(jr.fd[at], 0, 0, (off_t) want) == 0) {
        (void) madvise(jr.map[at], want, MADV_POPULATE_WRITE);
        jr.pre[at] = want;
      }
    }
    // Else the next compaction into it punches it first (under the mutex).
    else fprintf(stderr, "homesfs: node journal: the old log's pages stay until the next compaction (%s)\n", strerror(errno));
  }
  pthread_mutex_unlock(&jr_punch_mu);
}

void jr_attach (const struct nt_journal *j) {
  pthread_mutex_lock(&jr_punch_mu);
  jr = *j;
  jr_seq++;
  pthread_mutex_unlock(&jr_punch_mu);
  hs_nt.journal = &jr;
}

void jr_detach (void) {
  pthread_mutex_lock(&jr_punch_mu);
  jr_seq++;
  jr_unmap(&jr);
  pthread_mutex_unlock(&jr_punch_mu);
  hs_nt.journal = NULL;
}

void jr_unmap (struct nt_journal *j) {
  for (int i = 0; i < 2; i++) {
    if (j->map[i] != NULL) munmap(j->map[i], j->size[i]);
    j->map[i] = NULL;
  }
}

// Under hs_nt.mu: the journal cannot follow the table any more: no header
// stays valid (a successor refuses it instead of serving a stale table).
static void jr_break (struct nt_journal *j, int err) {
  fprintf(stderr, "homesfs: node journal stopped: %s\n", strerror(-err));
  for (int i = 0; i < 2; i++) __atomic_store_n(&((jr_hdr_t *) j->map[i])->gen, 0, __ATOMIC_RELEASE);
  jr_detach();
}

// What the last compaction held the mutex for (hs_journal_held): wall and this thread's CPU time.
static uint64_t jr_held_ns, jr_held_cpu_ns;

static uint64_t cpu_ns (void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (uint64_t) t.tv_sec * 1000000000ULL + (uint64_t) t.tv_nsec;
}

static uint64_t wall_ns (void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t) t.tv_sec * 1000000000ULL + (uint64_t) t.tv_nsec;
}

static int jr_compact_locked (struct nt_journal *j);

// Under hs_nt.mu: the active log starts over from a snapshot in the other memfd.
static int jr_compact (struct nt_journal *j) {
  uint64_t w0 = wall_ns(), c0 = cpu_ns();
  int err = jr_compact_locked(j);
  jr_held_cpu_ns = cpu_ns() - c0;
  jr_held_ns = wall_ns() - w0;
  return err;
}

static int jr_compact_locked (struct nt_journal *j) {
  int from = j->active;
  uint64_t epoch = __atomic_load_n(&((jr_hdr_t *) j->map[from])->epoch, __ATOMIC_RELAXED);
  int err = jr_snapshot(j, 1 - from, j->gen + 1, epoch);
  j->last_compact_ns = mono_ns();
  if (err != 0) {
    // The active log is intact: the records go on there while it has room.
    return err;
  }
  // The new header is committed: the old one goes now (one store), its pages
  // once this thread has dropped the mutex (nt_unlock).
  __atomic_store_n(&((jr_hdr_t *) j->map[from])->gen, 0, __ATOMIC_RELEASE);
  if (j == &jr) {
    pthread_mutex_lock(&jr_punch_mu);
    owed_seq = jr_seq;
    pthread_mutex_unlock(&jr_punch_mu);
    owed_at = from;
    owed_snap = j->snap_len;
    nt_punch_owed = 1;
  } else jr_punch(j, from);
  return 0;
}

static size_t jr_limit (const struct nt_journal *j) {
  if (jr_limit_override != 0) return jr_limit_override;
  size_t four = 4 * j->snap_len;
  return four > JR_MIN_LIMIT ? four : JR_MIN_LIMIT;
}

// ---- appending ----------------------------------------------------------------------

// Under hs_nt.mu, after the mutation it names: one record appended and committed.
static void jr_append (const jr_body_t *b, const char *n1, const char *n2) {
  struct nt_journal *j = &jr;
  size_t total = jr_put(j, j->active, j->gen, j->pos, &j->reserved, b, n1, n2);
  if (total == 0) {
    // The snapshot a compaction writes holds this mutation already.
    int err = jr_compact(j);
    if (err != 0) jr_break(j, err);
    return;
  }
  j->pos += total;
  // Past the limit, and not sooner than JR_MIN_INTERVAL_NS after the last
  // compaction unless the log is long (each one holds the mutex for the
  // table's export: however many lookups an owner makes, other homes wait for
  // one at most every 5 s). Tests that set a limit get every one.
  if (j->pos - j->log_start > jr_limit(j) &&
      (jr_limit_override != 0 || j->pos > JR_FULL || mono_ns() - j->last_compact_ns >= JR_MIN_INTERVAL_NS)) {
    int err = jr_compact(j);
    // Not compacted: the log goes on while the memfd has room.
    if (err != 0) fprintf(stderr, "homesfs: node journal: compaction failed: %s\n", strerror(-err));
  }
}

void nt_jr_found (uint64_t parent, const char *name, uint64_t ino, uint32_t type, uint32_t nlink, uint64_t nodeid) {
  jr_body_t b = { .kind = HS_JR_FOUND, .len1 = (uint32_t) strlen(name), .type = type, .nlink = nlink, .a = parent, .b = ino, .c = nodeid };
  jr_append(&b, name, "");
}

void nt_jr_forget (uint64_t nodeid, uint64_t nlookup) {
  jr_body_t b = { .kind = HS_JR_FORGET, .a = nodeid, .b = nlookup };
  jr_append(&b, "", "");
}

void nt_jr_removed (uint64_t parent, const char *name) {
  jr_body_t b = { .kind = HS_JR_REMOVED, .len1 = (uint32_t) strlen(name), .a = parent };
  jr_append(&b, name, "");
}

void nt_jr_renamed (uint64_t op, const char *on, uint64_t np, const char *nn) {
  jr_body_t b = { .kind = HS_JR_RENAMED, .len1 = (uint32_t) strlen(on), .len2 = (uint32_t) strlen(nn), .a = op, .b = np };
  jr_append(&b, on, nn);
}

void nt_jr_exchanged (uint64_t op, const char *on, uint64_t np, const char *nn) {
  jr_body_t b = { .kind = HS_JR_EXCHANGED, .len1 = (uint32_t) strlen(on), .len2 = (uint32_t) strlen(nn), .a = op, .b = np };
  jr_append(&b, on, nn);
}

void nt_jr_value (uint32_t kind, uint64_t v) {
  jr_body_t b = { .kind = kind, .a = v };
  jr_append(&b, "", "");
}

void nt_jr_value2 (uint32_t kind, uint64_t a, uint64_t b) {
  jr_body_t body = { .kind = kind, .a = a, .b = b };
  jr_append(&body, "", "");
}

void nt_jr_detach (void) {
  if (hs_nt.journal == NULL) return;
  jr_detach();
}

// ---- opening ------------------------------------------------------------------------

// Maps fd0 and fd1 whole into j (MAP_SHARED: the holder's memfds), read-only
// unless `writable` (a follower never writes another daemon's journal). 0 or -errno.
int jr_map (struct nt_journal *j, int fd0, int fd1, int writable) {
  memset(j, 0, sizeof(*j));
  j->fd[0] = fd0;
  j->fd[1] = fd1;
  for (int i = 0; i < 2; i++) {
    struct stat st;
    if (fstat(j->fd[i], &st) != 0) { jr_unmap(j); return -errno; }
    if (!S_ISREG(st.st_mode) || st.st_size < (off_t) (2 * JR_HDR) || (uint64_t) st.st_size > JR_MAX_SIZE) { jr_unmap(j); return -EINVAL; }
    j->size[i] = (size_t) st.st_size;
    void *m = mmap(NULL, j->size[i], writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, j->fd[i], 0);
    if (m == MAP_FAILED) { int err = -errno; jr_unmap(j); return err; }
    j->map[i] = m;
  }
  return 0;
}

int hs_journal_open (int fds[2]) {
  int mfd[2] = { -1, -1 };
  int err = 0;
  for (int i = 0; i < 2 && err == 0; i++) {
    mfd[i] = memfd_create("homesfs-nodes-journal", MFD_CLOEXEC);
    if (mfd[i] < 0 || ftruncate(mfd[i], (off_t) JR_SIZE) != 0) err = -errno;
  }
  struct nt_journal j;
  if (err == 0) err = jr_map(&j, mfd[0], mfd[1], 1);
  if (err == 0) {
    hs_nodes_init();  // before a mount, the table the session will use (idempotent)
    pthread_mutex_lock(&hs_nt.mu);
    if (hs_nt.journal != NULL) err = -EBUSY;
    else {
      j.clean[0] = j.clean[1] = 1;  // new memfds: no pages
      if ((err = jr_snapshot(&j, 0, 1, 0)) == 0) jr_attach(&j);
    }
    nt_unlock();
    if (err != 0) jr_unmap(&j);
  }
  if (err != 0) {
    for (int i = 0; i < 2; i++) if (mfd[i] >= 0) close(mfd[i]);
    return err;
  }
  fds[0] = mfd[0];
  fds[1] = mfd[1];
  return 0;
}

void hs_journal_close (void) {
  pthread_mutex_lock(&hs_nt.mu);
  nt_jr_detach();
  nt_unlock();
}

// ---- the epoch, and what tests and measurements ask ------------------------------

int hs_journal_epoch_get (uint64_t *epoch) {
  int err = -ENOENT;
  pthread_mutex_lock(&hs_nt.mu);
  if (hs_nt.journal != NULL) {
    *epoch = __atomic_load_n(&((jr_hdr_t *) jr.map[jr.active])->epoch, __ATOMIC_RELAXED);
    err = 0;
  }
  nt_unlock();
  return err;
}

int hs_journal_epoch_set (uint64_t epoch) {
  int err = -ENOENT;
  pthread_mutex_lock(&hs_nt.mu);
  if (hs_nt.journal != NULL) {
    __atomic_store_n(&((jr_hdr_t *) jr.map[jr.active])->epoch, epoch, __ATOMIC_RELEASE);
    err = 0;
  }
  nt_unlock();
  return err;
}

int hs_journal_compact (void) {
  int err = -ENOENT;
  pthread_mutex_lock(&hs_nt.mu);
  if (hs_nt.journal != NULL) err = jr_compact(&jr);
  nt_unlock();
  return err;
}

void hs_journal_set_limit (size_t bytes) {
  pthread_mutex_lock(&hs_nt.mu);
  jr_limit_override = bytes;
  nt_unlock();
}

void hs_journal_held (uint64_t *wall, uint64_t *cpu) {
  pthread_mutex_lock(&hs_nt.mu);
  *wall = jr_held_ns;
  *cpu = jr_held_cpu_ns;
  nt_unlock();
}

int hs_journal_where (int *active, uint64_t *pos, uint64_t *gen) {
  int err = -ENOENT;
  pthread_mutex_lock(&hs_nt.mu);
  if (hs_nt.journal != NULL) {
    *active = jr.active;
    *pos = jr.pos;
    *gen = jr.gen;
    err = 0;
  }
  nt_unlock();
  return err;
}
