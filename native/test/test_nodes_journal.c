// handover/nodes_journal.c: the node table journaled into two memfds, and
// recovered from them by a fresh table as if the daemon had been killed. A
// recovered table must be the original's (its export, with the nodes in ID
// order: the export walks hash buckets, whose order is not the table's
// content), including after a torn last record, compactions, a second
// crash, a live-handover rebase and threads racing compactions; and garbage
// must be refused with the table left fresh. Plain C, no libfuse, no Node;
// run under ASan/UBSan and TSan.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"
#include "nodes_helpers.h"
#include "../src/handover/nodes_journal.h"
#include "../src/handover/nodes_journal_internal.h"

static void fresh (void) {
  hs_nodes_clear();
  hs_nodes_init();
}

// ---- the table as comparable bytes -------------------------------------------------

typedef struct { uint64_t id; const char *p; size_t len; } rec_t;

static int rec_cmp (const void *a, const void *b) {
  uint64_t x = ((const rec_t *) a)->id, y = ((const rec_t *) b)->id;
  return x < y ? -1 : x > y;
}

// The export's header then its node records in ID order (malloc'd, *len).
static char *canon (size_t *len) {
  char *buf = NULL;
  size_t n = 0;
  if (hs_nodes_export(&buf, &n) != 0) return NULL;
  uint64_t count;
  memcpy(&count, buf + 24, 8);
  rec_t *recs = calloc(count + 1, sizeof(*recs));
  size_t at = 32;
  for (uint64_t i = 0; i < count; i++) {
    size_t start = at;
    uint32_t na;
    memcpy(&recs[i].id, buf + at, 8);
    memcpy(&na, buf + at + 28, 4);
    at += 40;
    for (uint32_t k = 0; k < na; k++) {
      uint32_t l;
      memcpy(&l, buf + at + 8, 4);
      at += 12 + l;
    }
    recs[i].p = buf + start;
    recs[i].len = at - start;
  }
  qsort(recs, count, sizeof(*recs), rec_cmp);
  char *out = malloc(n);
  memcpy(out, buf, 32);
  size_t o = 32;
  for (uint64_t i = 0; i < count; i++) { memcpy(out + o, recs[i].p, recs[i].len); o += recs[i].len; }
  free(recs);
  free(buf);
  *len = o;
  return out;
}

#define CHECK_SAME(a, alen, b, blen) do { \
    CHECK_EQ((alen), (blen)); \
    CHECK((alen) == (blen) && memcmp((a), (b), (alen)) == 0); \
  } while (0)

// The current table as recovered by a "new daemon" from fds: equal to want.
static void check_recovers_p (int fds[2], const char *want, size_t wlen, uint64_t pending) {
  fresh();
  CHECK_EQ(hs_journal_recover(fds[0], fds[1]), 0);
  CHECK_EQ(hs_nodes_pending(), pending);
  size_t len = 0;
  char *got = canon(&len);
  REQUIRE(got != NULL);
  CHECK_SAME(got, len, want, wlen);
  free(got);
}

// The same, and the requests whose answers are in doubt come back too (nodes_requests.c).
static void check_recovers (int fds[2], const char *want, size_t wlen) {
  check_recovers_p(fds, want, wlen, hs_nodes_pending());
}

// ---- a random kernel ------------------------------------------------------------------

typedef struct { uint64_t id, lookups, dir; uint32_t type, opens; char name[8]; } known_t;
typedef struct {
  unsigned seed;
  known_t kn[512];
  int nk;
  hs_node_t *held[8];   // references of requests "in flight"
  int nheld;
  uint64_t unique;      // the kernel's last request number
  uint64_t unanswered[8];  // opens and releases made, not answered yet
  int nun;
} model_t;

static unsigned rnd (model_t *m, unsigned n) {
  m->seed = m->seed * 1103515245u + 12345u;
  return (m->seed >> 8) % n;
}

static known_t *known_of (model_t *m, uint64_t id) {
  for (int i = 0; i < m->nk; i++) if (m->kn[i].id == id) return &m->kn[i];
  return NULL;
}

// A directory the kernel knows (the root included).
static uint64_t some_dir (model_t *m) {
  int n = 0;
  uint64_t pick = HS_ROOT_ID;
  for (int i = 0; i < m->nk; i++) if (m->kn[i].type == S_IFDIR && rnd(m, (unsigned) ++n + 1) == 0) pick = m->kn[i].id;
  return pick;
}

static uint64_t lookup (model_t *m, uint64_t dir, const char *name, uint64_t ino, uint32_t type, uint32_t nlink) {
  hs_node_t *d = hs_node_get(dir);
  if (d == NULL) return 0;
  uint64_t id = found_n(d, name, ino, type, nlink);
  hs_node_put(d);
  known_t *k = known_of(m, id);
  if (k == NULL && m->nk < 512) {
    k = &m->kn[m->nk++];
    memset(k, 0, sizeof(*k));
    k->id = id;
    k->type = type;
  }
  if (k != NULL) {
    k->lookups++;
    k->dir = dir;
    snprintf(k->name, sizeof(k->name), "%s", name);
  }
  return id;
}

static void forget_some (model_t *m) {
  if (m->nk == 0) return;
  int i = (int) rnd(m, (unsigned) m->nk);
  known_t *k = &m->kn[i];
  if (k->opens > 0) return;  // the kernel does not forget an open file
  uint64_t n = 1 + rnd(m, (unsigned) k->lookups);
  hs_node_forget(k->id, n);
  k->lookups -= n;
  if (k->lookups == 0) m->kn[i] = m->kn[--m->nk];
}

static void with_node (uint64_t id, void (*fn) (hs_node_t *)) {
  hs_node_t *n = hs_node_get(id);
  if (n != NULL) fn(n);
  hs_node_put(n);
}

static void release (hs_node_t *n) {
  char *p = NULL;
  hs_node_released(n, &p);
  free(p);
}

// An OPEN or RELEASE as the session makes it, under a request's unique,
// answered at once or left in flight (a crash finds it unanswered).
static void open_or_release (model_t *m, known_t *k, int open) {
  hs_node_t *n = hs_node_get(k->id);
  if (n == NULL) return;
  uint64_t u = ++m->unique;
  char *p = NULL;
  if (open) hs_node_opened_by(n, u);
  else hs_node_released_by(n, &p, u);
  free(p);
  hs_node_put(n);
  if (m->nun < 8 && rnd(m, 2) == 0) m->unanswered[m->nun++] = u;
  else hs_node_answered(u);
}

static void answer_one (model_t *m) {
  if (m->nun > 0) hs_node_answered(m->unanswered[--m->nun]);
}

// An open file unlinked: hidden, as the session does it.
static void hide (model_t *m, known_t *k) {
  hs_node_t *d = hs_node_get(k->dir);
  if (d == NULL) return;
  char hidden[64];
  if (hs_node_must_hide(d, k->name) && hs_node_hidden_name(d, k->name, d, hidden, sizeof(hidden)) == 0) {
    CHECK_EQ(hs_node_renamed(d, k->name, d, hidden), 0);
    with_node(k->id, hs_node_mark_hidden);
  }
  hs_node_put(d);
}

static void hold_or_drop (model_t *m) {
  if (m->nheld > 0 && rnd(m, 2) == 0) hs_node_put(m->held[--m->nheld]);
  else if (m->nheld < 8 && m->nk > 0) {
    hs_node_t *n = hs_node_get(m->kn[rnd(m, (unsigned) m->nk)].id);
    if (n != NULL) m->held[m->nheld++] = n;
  }
}

static const char *NAMES[] = { "a", "b", "c", "d", "e", "f" };

// One random call of the table's mutations (and, with `compact`, now and
// then a compaction).
static void step (model_t *m, int compact) {
  const char *name = NAMES[rnd(m, 6)];
  uint64_t ino = 10 + rnd(m, 60);
  uint32_t type = ino % 4 == 0 ? S_IFDIR : S_IFREG;
  known_t *k = m->nk > 0 ? &m->kn[rnd(m, (unsigned) m->nk)] : NULL;
  switch (rnd(m, 12)) {
  case 0: case 1: case 2: lookup(m, some_dir(m), name, ino, type, ino % 5 == 0 ? 2 : 1); break;
  case 3: case 4: forget_some(m); break;
  case 5: { hs_node_t *d = hs_node_get(some_dir(m)); if (d) hs_node_removed(d, name); hs_node_put(d); break; }
  case 6: {
    hs_node_t *d1 = hs_node_get(some_dir(m)), *d2 = hs_node_get(some_dir(m));
    // One in three an exchange (renameat2 RENAME_EXCHANGE): its own record.
    if (d1 && d2 && rnd(m, 3) == 0) CHECK_EQ(hs_node_exchanged(d1, name, d2, NAMES[rnd(m, 6)]), 0);
    else if (d1 && d2) CHECK_EQ(hs_node_renamed(d1, name, d2, NAMES[rnd(m, 6)]), 0);
    hs_node_put(d1); hs_node_put(d2);
    break;
  }
  case 7:
    if (k && k->type == S_IFREG) {
      if (rnd(m, 2) == 0) with_node(k->id, hs_node_opened);
      else open_or_release(m, k, 1);
      k->opens++;
    }
    break;
  case 8: if (k && k->opens > 0) hide(m, k); break;
  case 9:
    if (k && k->opens > 0) {
      if (rnd(m, 2) == 0) with_node(k->id, release);
      else open_or_release(m, k, 0);
      k->opens--;
    }
    break;
  case 10: if (rnd(m, 3) == 0) answer_one(m); else hold_or_drop(m); break;
  case 11: if (compact && rnd(m, 20) == 0) CHECK_EQ(hs_journal_compact(), 0); break;
  }
}

static void drop_held (model_t *m) {
  while (m->nheld > 0) hs_node_put(m->held[--m->nheld]);
}

static void close_fds (int fds[2]) {
  hs_journal_close();
  close(fds[0]);
  close(fds[1]);
}

// Requests as the session makes them: under the kernel's unique, resent with bit 63.
#define RESEND HS_UNIQUE_RESEND

static void crash (int fds[2]) {
  fresh();
  CHECK_EQ(hs_journal_recover(fds[0], fds[1]), 0);
}

// Whether the file named (dir, name) is open (an unlink of its one name must hide it).
static int is_open (uint64_t dir, const char *name) {
  hs_node_t *d = hs_node_get(dir);
  int open = d != NULL && hs_node_must_hide(d, name);
  hs_node_put(d);
  return open;
}

static int released (uint64_t id, uint64_t unique, char **path) {
  hs_node_t *n = hs_node_get(id);
  int last = hs_node_released_by(n, path, unique);
  hs_node_put(n);
  return last;
}

static void opened (uint64_t id, uint64_t unique) {
  hs_node_t *n = hs_node_get(id);
  hs_node_opened_by(n, unique);
  hs_node_put(n);
}

// ---- recovery ------------------------------------------------------------------------

TEST(random_sequences_recover_the_same_table) {
  for (unsigned seed = 1; seed <= 12; seed++) {
    model_t m = { .seed = seed };
    fresh();
    int fds[2];
    REQUIRE(hs_journal_open(fds) == 0);
    for (int i = 0; i < 3000; i++) step(&m, seed % 2);
    drop_held(&m);
    size_t wlen = 0;
    char *want = canon(&wlen);
    REQUIRE(want != NULL);
    check_recovers(fds, want, wlen);
    free(want);
    close_fds(fds);
  }
}

// A node held only by a request when the snapshot was taken (forgotten, its
// name gone) and freed when the request ends: not in the recovered table.
// And a forget whose node a request still holds replays as a free.
TEST(nodes_held_only_by_requests_are_not_recovered) {
  fresh();
  model_t m = { .seed = 7 };
  uint64_t d = lookup(&m, HS_ROOT_ID, "d", 8, S_IFDIR, 2);
  uint64_t f = lookup(&m, d, "f", 9, S_IFREG, 1);
  uint64_t g = lookup(&m, d, "g", 11, S_IFREG, 1);
  hs_node_t *hf = hs_node_get(f), *hg = hs_node_get(g);
  hs_node_forget(f, 1);
  int fds[2];
  REQUIRE(hs_journal_open(fds) == 0);   // its snapshot holds f, held only by hf
  hs_node_forget(g, 1);                 // journaled while hg holds g
  hs_node_put(hf);
  hs_node_put(hg);
  CHECK(path_of(f) == NULL);
  size_t wlen = 0;
  char *want = canon(&wlen);
  check_recovers(fds, want, wlen);
  CHECK_EQ(count(), 2);
  CHECK_PATH(d, "/d");
  free(want);
  close_fds(fds);
}

// A copy of memfd src: its first `upto` bytes, zeros after (the same size).
static int copy_upto (int src, size_t upto) {
  struct stat st;
  if (fstat(src, &st) != 0) return -1;
  int fd = memfd_create("test-journal", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, st.st_size) != 0) return -1;
  if (upto > 0) {
    char *m = mmap(NULL, upto, PROT_READ, MAP_SHARED, src, 0);
    if (m == MAP_FAILED || pwrite(fd, m, upto, 0) != (ssize_t) upto) return -1;
    munmap(m, upto);
  }
  return fd;
}

// Killed in the middle of a record, at any byte of it: the table as of the
// last record complete.
TEST(a_torn_record_recovers_the_table_before_it) {
  enum { LAST = 10 };
  fresh();
  model_t m = { .seed = 99 };
  int fds[2];
  REQUIRE(hs_journal_open(fds) == 0);
  for (int i = 0; i < 400; i++) step(&m, 0);
  drop_held(&m);
  char *want[LAST + 1];
  size_t wlen[LAST + 1];
  uint64_t pos[LAST + 1], gen, pending[LAST + 1];
  int active;
  // The last calls: a lookup, a rename, an open, a hidden-name counter, a
  // removal, a forget, an open under a request's unique, its answer, a
  // resent create's refusal.
  uint64_t d = some_dir(&m), id = 0;
  for (int i = 0; i <= LAST; i++) {
    hs_node_t *dn = hs_node_get(d);
    char hidden[64];
    if (i == 1) id = lookup(&m, d, "new-name", 500, S_IFREG, 1);
    if (i == 2) CHECK_EQ(hs_node_renamed(dn, "new-name", dn, "moved"), 0);
    if (i == 3) with_node(d, hs_node_opened);
    if (i == 4) CHECK_EQ(hs_node_hidden_name(dn, "moved", dn, hidden, sizeof(hidden)), 0);
    if (i == 5) hs_node_removed(dn, "moved");
    if (i == 6) hs_node_forget(id, 1);
    if (i == 7) opened(d, 777);
    if (i == 8) opened(d, 778);
    if (i == 9) hs_node_answered(777);
    if (i == 10) hs_node_refused(RESEND | 778);
    hs_node_put(dn);
    want[i] = canon(&wlen[i]);
    pending[i] = hs_nodes_pending();
    REQUIRE(hs_journal_where(&active, &pos[i], &gen) == 0);
    if (i > 0) CHECK(pos[i] > pos[i - 1]);   // each call wrote one record
  }
  CHECK_EQ(active, 0);
  // A record is complete once its last byte that is not zero is written
  // (the bytes after it are zero anyway).
  uint64_t last[LAST + 1];
  char *map = mmap(NULL, (size_t) pos[LAST], PROT_READ, MAP_SHARED, fds[0], 0);
  REQUIRE(map != MAP_FAILED);
  last[0] = 0;
  for (int i = 1; i <= LAST; i++) {
    last[i] = pos[i] - 1;
    while (map[last[i]] == 0) last[i]--;
    CHECK(last[i] >= pos[i - 1] + 8);   // the body has bytes that are not zero
  }
  munmap(map, (size_t) pos[LAST]);
  for (uint64_t cut = pos[0]; cut <= pos[LAST]; cut++) {
    int cfd[2] = { copy_upto(fds[0], (size_t) cut), copy_upto(fds[1], 0) };
    REQUIRE(cfd[0] >= 0 && cfd[1] >= 0);
    int i = LAST;
    while (i > 0 && last[i] >= cut) i--;
    check_recovers_p(cfd, want[i], wlen[i], pending[i]);
    hs_journal_close();
    close(cfd[0]);
    close(cfd[1]);
  }
  for (int i = 0; i <= LAST; i++) free(want[i]);
  close_fds(fds);
}

// A compaction writes the snapshot under the table's mutex but punches the
// old log's pages only after dropping it (the same thread, before
// hs_journal_compact returns); the old header is invalid from the switch on,
// and the pages the next snapshot there needs are allocated ahead, so the
// next compaction makes no system call for them under the mutex either.
static int *at_punch_fds, at_punch[2] = { -1, -1 };
static char *at_punch_want;
static size_t at_punch_wlen;

// hs_journal_before_punch: copies of both memfds as a kill then would leave them.
static void copy_at_punch (void) {
  struct stat st;
  // (Their first 8 MiB: the test's snapshots and logs are smaller.)
  for (int i = 0; i < 2; i++) at_punch[i] = fstat(at_punch_fds[i], &st) == 0 ? copy_upto(at_punch_fds[i], 8u << 20) : -1;
}

TEST(a_compaction_punches_the_old_log_off_the_mutex) {
  fresh();
  model_t m = { .seed = 3 };
  int fds[2];
  REQUIRE(hs_journal_open(fds) == 0);
  uint64_t d = lookup(&m, HS_ROOT_ID, "many", 4, S_IFDIR, 2);
  char name[32];
  for (int i = 0; i < 20000; i++) {
    snprintf(name, sizeof(name), "file-%d", i % 2000);
    lookup(&m, d, name, 1000 + (uint64_t) (i % 2000), S_IFREG, 1);
  }
  int active;
  uint64_t pos, gen;
  REQUIRE(hs_journal_where(&active, &pos, &gen) == 0);
  CHECK_EQ(active, 0);
  struct stat st;
  REQUIRE(fstat(fds[0], &st) == 0);
  CHECK(pos > (1u << 20) && (uint64_t) st.st_blocks * 512 >= pos);
  CHECK_EQ(hs_journal_compact(), 0);
  REQUIRE(hs_journal_where(&active, &pos, &gen) == 0);
  CHECK_EQ(active, 1);
  jr_hdr_t h0, h1;
  REQUIRE(pread(fds[0], &h0, sizeof(h0), 0) == (ssize_t) sizeof(h0) && pread(fds[1], &h1, sizeof(h1), 0) == (ssize_t) sizeof(h1));
  CHECK_EQ(h0.gen, 0);
  CHECK_EQ(h1.gen, gen);
  // What is left of memfd 0: the pages allocated ahead for a snapshot of this size, zero.
  size_t ahead = (JR_HDR + h1.snap_len + h1.snap_len / 4 + JR_CHUNK) / JR_CHUNK * JR_CHUNK;
  REQUIRE(fstat(fds[0], &st) == 0);
  CHECK((uint64_t) st.st_blocks * 512 <= ahead);
  CHECK((uint64_t) st.st_blocks * 512 >= h1.snap_len);
  uint64_t wall = 0, cpu = 0;
  hs_journal_held(&wall, &cpu);
  CHECK(wall > 0 && cpu > 0);
  // The next compaction goes back there, and the journal recovers the table.
  for (int i = 0; i < 200; i++) step(&m, 0);
  CHECK_EQ(hs_journal_compact(), 0);
  REQUIRE(hs_journal_where(&active, &pos, &gen) == 0);
  CHECK_EQ(active, 0);
  for (int i = 0; i < 200; i++) step(&m, 0);
  drop_held(&m);
  size_t wlen = 0;
  char *want = canon(&wlen);
  check_recovers(fds, want, wlen);
  free(want);
  // Killed after the mutex was dropped and before the punch: the memfds as
  // they are then recover the table (the old header no longer counts).
  at_punch_fds = fds;
  hs_journal_before_punch = copy_at_punch;
  for (int i = 0; i < 50; i++) step(&m, 0);
  drop_held(&m);
  at_punch_want = canon(&at_punch_wlen);
  CHECK_EQ(hs_journal_compact(), 0);
  hs_journal_before_punch = NULL;
  REQUIRE(at_punch[0] >= 0 && at_punch[1] >= 0);
  jr_hdr_t c0;
  REQUIRE(pread(at_punch[0], &c0, sizeof(c0), 0) == (ssize_t) sizeof(c0));
  CHECK_EQ(c0.gen, 0);  // memfd 0's old header, its pages not yet punched
  size_t before_len = 0;
  char *before = canon(&before_len);
  int copies[2] = { at_punch[0], at_punch[1] };
  check_recovers(copies, at_punch_want, at_punch_wlen);
  hs_journal_close();
  close(copies[0]);
  close(copies[1]);
  free(at_punch_want);
  // Back to the live journal (the recovery above replaced the table).
  fresh();
  REQUIRE(hs_journal_recover(fds[0], fds[1]) == 0);
  size_t again_len = 0;
  char *again = canon(&again_len);
  CHECK_SAME(again, again_len, before, before_len);
  free(again);
  free(before);
  close_fds(fds);
}

TEST(compactions_switch_memfds_and_recover) {
  fresh();
  hs_journal_set_limit(4096);
  model_t m = { .seed = 5 };
  int fds[2];
  REQUIRE(hs_journal_open(fds) == 0);
  uint64_t d = lookup(&m, HS_ROOT_ID, "many", 4, S_IFDIR, 2);
  char name[32];
  for (int i = 0; i < 3000; i++) {
    snprintf(name, sizeof(name), "file-%d", i);
    lookup(&m, d, name, 1000 + (uint64_t) i, S_IFREG, 1);
    if (i % 3 == 0) step(&m, 0);
  }
  drop_held(&m);
  int active;
  uint64_t pos, gen;
  REQUIRE(hs_journal_where(&active, &pos, &gen) == 0);
  CHECK(gen > 3);
  size_t wlen = 0;
  char *want = canon(&wlen);
  check_recovers(fds, want, wlen);
  free(want);
  hs_journal_set_limit(0);
  close_fds(fds);
}

// Crashed, recovered, crashed again: the journal went on in the same memfds
// (and the epoch the resumer set is the one the next one reads).
TEST(a_second_crash_recovers_from_the_same_memfds) {
  fresh();
  model_t m = { .seed = 11 };
  int fds[2];
  REQUIRE(hs_journal_open(fds) == 0);
  uint64_t epoch = 99;
  CHECK_EQ(hs_journal_epoch_get(&epoch), 0);
  CHECK_EQ(epoch, 0);
  for (int i = 0; i < 800; i++) step(&m, 1);
  drop_held(&m);
  size_t wlen = 0;
  char *want = canon(&wlen);
  check_recovers(fds, want, wlen);
  free(want);
  CHECK_EQ(hs_journal_epoch_get(&epoch), 0);
  CHECK_EQ(hs_journal_epoch_set(epoch + 1), 0);
  for (int i = 0; i < 800; i++) step(&m, 1);
  drop_held(&m);
  want = canon(&wlen);
  check_recovers(fds, want, wlen);
  CHECK_EQ(hs_journal_epoch_get(&epoch), 0);
  CHECK_EQ(epoch, 1);
  free(want);
  close_fds(fds);
}

// ---- requests resent after a crash (nodes_requests.c) ---------------------------------
//
// The session journals an open's or a release's change of the open count
// before its answer; a kill in between makes the kernel resend the request
// (same unique, bit 63) to the next daemon, which runs it again. Each test
// journals a change, "kills" (a recovery by a fresh table), and resends.

// An OPEN counted and journaled, the daemon killed before its answer: the
// resent OPEN (twice: a second kill before its answer too) counts it once,
// so the file's one RELEASE leaves it closed (before: open for ever, and its
// unlink kept a hidden name that no release would ever remove).
TEST(a_resent_open_is_counted_once) {
  fresh();
  int fds[2];
  REQUIRE(hs_journal_open(fds) == 0);
  hs_node_t *r = root();
  uint64_t f = found_n(r, "f", 100, S_IFREG, 1);
  hs_node_put(r);
  opened(f, 7);
  crash(fds);
  CHECK_EQ(hs_nodes_pending(), 1);
  opened(f, RESEND | 7);
  crash(fds);  // killed again before the answer
  opened(f, RESEND | 7);
  hs_node_answered(RESEND | 7);
  CHECK_EQ(hs_nodes_pending(), 0);
  CHECK(is_open(HS_ROOT_ID, "f"));
  char *p = NULL;
  CHECK_EQ(released(f, 8, &p), 0);
  hs_node_answered(8);
  CHECK(!is_open(HS_ROOT_ID, "f"));
  // And so after one more crash (the journal agrees).
  crash(fds);
  CHECK(!is_open(HS_ROOT_ID, "f"));
  CHECK_EQ(hs_nodes_pending(), 0);
  close_fds(fds);
}

// Two handles on a file unlinked while open (hidden); one RELEASE journaled,
// the daemon killed before its answer: the resent RELEASE takes nothing more
// off (before: the count fell to 0 and the hidden name was unlinked while the
// other handle still used it), and the other handle's release unlinks it.
TEST(a_resent_release_takes_one_release_off) {
  fresh();
  int fds[2];
  REQUIRE(hs_journal_open(fds) == 0);
  hs_node_t *r = root();
  uint64_t f = found_n(r, "f", 100, S_IFREG, 1);
  opened(f, 1);
  hs_node_answered(1);
  opened(f, 2);
  hs_node_answered(2);
  char hidden[64];
  REQUIRE(hs_node_must_hide(r, "f") && hs_node_hidden_name(r, "f", r, hidden, sizeof(hidden)) == 0);
  CHECK_EQ(hs_node_renamed(r, "f", r, hidden), 0);
  with_node(f, hs_node_mark_hidden);
  hs_node_put(r);
  char *p = NULL;
  CHECK_EQ(released(f, 3, &p), 0);
  crash(fds);
  CHECK_EQ(released(f, RESEND | 3, &p), 0);
  CHECK(p == NULL);
  hs_node_answered(RESEND | 3);
  CHECK(is_open(HS_ROOT_ID, hidden));
  crash(fds);
  CHECK(is_open(HS_ROOT_ID, hidden));
  CHECK_EQ(released(f, 4, &p), 1);
  CHECK(p != NULL && strncmp(p, "/.fuse_hidden", 13) == 0);
  free(p);
  close_fds(fds);
}

// The last RELEASE of a hidden file journaled, the daemon killed before the
// hidden name was unlinked: the resent RELEASE still names it for the unlink
// (before: the replay had left it unopened and unmarked, and it stayed).
TEST(a_resent_last_release_still_unlinks_the_hidden_name) {
  fresh();
  int fds[2];
  REQUIRE(hs_journal_open(fds) == 0);
  hs_node_t *r = root();
  uint64_t f = found_n(r, "f", 100, S_IFREG, 1);
  opened(f, 1);
  hs_node_answered(1);
  char hidden[64];
  REQUIRE(hs_node_must_hide(r, "f") && hs_node_hidden_name(r, "f", r, hidden, sizeof(hidden)) == 0);
  CHECK_EQ(hs_node_renamed(r, "f", r, hidden), 0);
  with_node(f, hs_node_mark_hidden);
  hs_node_put(r);
  char *p = NULL;
  CHECK_EQ(released(f, 2, &p), 1);
  free(p);
  p = NULL;
  crash(fds);
  CHECK_EQ(released(f, RESEND | 2, &p), 1);
  CHECK(p != NULL && strcmp(p + 1, hidden) == 0);
  free(p);
  close_fds(fds);
}

// A request's change made before a compaction, the daemon killed after it
// and before the answer: the snapshot carries it (a PENDING record), through
// a second compaction and crash as well; answered ones are not carried.
TEST(changes_in_doubt_survive_compactions) {
  fresh();
  int fds[2];
  REQUIRE(hs_journal_open(fds) == 0);
  hs_node_t *r = root();
  uint64_t f = found_n(r, "f", 100, S_IFREG, 1);
  uint64_t g = found_n(r, "g", 101, S_IFREG, 1);
  hs_node_put(r);
  opened(f, 7);        // in flight at the kill
  opened(g, 9);
  hs_node_answered(9); // answered: never resent
  CHECK_EQ(hs_journal_compact(), 0);
  crash(fds);
  CHECK_EQ(hs_nodes_pending(), 1);
  opened(f, RESEND | 7);
  CHECK_EQ(hs_journal_compact(), 0);
  crash(fds);
  opened(f, RESEND | 7);
  hs_node_answered(RESEND | 7);
  char *p = NULL;
  CHECK_EQ(released(f, 10, &p), 0);
  hs_node_answered(10);
  CHECK(!is_open(HS_ROOT_ID, "f"));
  CHECK(is_open(HS_ROOT_ID, "g"));
  CHECK_EQ(hs_journal_compact(), 0);
  crash(fds);
  CHECK_EQ(hs_nodes_pending(), 0);
  CHECK(!is_open(HS_ROOT_ID, "f"));
  close_fds(fds);
}

// A CREATE with O_EXCL counted its open, the daemon killed before the answer:
// the resend is answered EIO without running (handles.c), so the kernel holds
// no handle: the open is taken back, and stays so after another crash.
TEST(a_refused_resent_create_takes_its_open_back) {
  fresh();
  int fds[2];
  REQUIRE(hs_journal_open(fds) == 0);
  hs_node_t *r = root();
  uint64_t f = found_n(r, "f", 100, S_IFREG, 1);
  hs_node_put(r);
  opened(f, 5);
  crash(fds);
  CHECK(is_open(HS_ROOT_ID, "f"));
  hs_node_refused(RESEND | 5);
  CHECK(!is_open(HS_ROOT_ID, "f"));
  hs_node_refused(RESEND | 5);  // refused again (killed before the EIO went out): nothing more
  crash(fds);
  CHECK(!is_open(HS_ROOT_ID, "f"));
  CHECK_EQ(hs_nodes_pending(), 0);
  // A request that is not a resend of one kept takes nothing back.
  opened(f, 6);
  hs_node_answered(6);
  hs_node_refused(RESEND | 6);
  CHECK(is_open(HS_ROOT_ID, "f"));
  close_fds(fds);
}

// A live handover's successor imports the bytes, then journals into the
// memfds it was handed: a crash after that recovers its table.
TEST(a_rebase_after_an_import_journals_on) {
  fresh();
  model_t m = { .seed = 21 };
  int fds[2];
  REQUIRE(hs_journal_open(fds) == 0);
  CHECK_EQ(hs_journal_epoch_set(41), 0);
  for (int i = 0; i < 500; i++) step(&m, 0);
  drop_held(&m);
  char *bytes = NULL;
  size_t blen = 0;
  REQUIRE(hs_nodes_export(&bytes, &blen) == 0);
  fresh();
  CHECK_EQ(hs_nodes_import(bytes, blen), 0);
  CHECK_EQ(hs_journal_rebase(fds[0], fds[1]), 0);
  uint64_t epoch = 0;
  CHECK_EQ(hs_journal_epoch_get(&epoch), 0);
  CHECK_EQ(epoch, 41);
  for (int i = 0; i < 500; i++) step(&m, 0);
  drop_held(&m);
  size_t wlen = 0;
  char *want = canon(&wlen);
  check_recovers(fds, want, wlen);
  free(want);
  free(bytes);
  close_fds(fds);
}

static void check_refused (int fd0, int fd1, int want) {
  fresh();
  CHECK_EQ(hs_journal_recover(fd0, fd1), want);
  CHECK_EQ(count(), 1);
  uint64_t e;
  CHECK_EQ(hs_journal_epoch_get(&e), -ENOENT);   // journaling did not start
  hs_node_t *r = root();
  CHECK(r != NULL && hs_node_id(r) == HS_ROOT_ID);
  hs_node_put(r);
}

TEST(garbage_is_refused_and_the_table_left_fresh) {
  int g[2];
  model_t m = { .seed = 3 };
  for (int i = 0; i < 2; i++) {
    g[i] = memfd_create("garbage", MFD_CLOEXEC);
    char buf[65536];
    for (size_t k = 0; k < sizeof(buf); k++) buf[k] = (char) rnd(&m, 256);
    REQUIRE(pwrite(g[i], buf, sizeof(buf), 0) == (ssize_t) sizeof(buf));
  }
  check_refused(g[0], g[1], -EINVAL);
  // Too small to be a journal.
  CHECK_EQ(ftruncate(g[1], 100), 0);
  check_refused(g[0], g[1], -EINVAL);
  // A real journal whose snapshot lost a byte, or whose header is cut.
  fresh();
  int fds[2];
  REQUIRE(hs_journal_open(fds) == 0);
  for (int i = 0; i < 300; i++) step(&m, 0);
  drop_held(&m);
  REQUIRE(hs_journal_compact() == 0);
  for (int i = 0; i < 300; i++) step(&m, 0);
  drop_held(&m);
  hs_journal_close();
  int active;
  uint64_t pos, gen;
  int c[2] = { copy_upto(fds[0], 8192), copy_upto(fds[1], 8192) };
  char z = 0x5a;
  for (int i = 0; i < 2; i++) CHECK_EQ(pwrite(c[i], &z, 1, 4096 + 20), 1);
  check_refused(c[0], c[1], -EINVAL);
  int t[2] = { copy_upto(fds[0], 12), copy_upto(fds[1], 12) };
  check_refused(t[0], t[1], -EINVAL);
  // Not into a table that served: refused, and the table kept.
  fresh();
  lookup(&m, HS_ROOT_ID, "served", 5, S_IFREG, 1);
  CHECK_EQ(hs_journal_recover(fds[0], fds[1]), -EBUSY);
  CHECK_EQ(count(), 2);
  CHECK_EQ(hs_journal_where(&active, &pos, &gen), -ENOENT);
  for (int i = 0; i < 2; i++) { close(g[i]); close(c[i]); close(t[i]); close(fds[i]); }
}

// Killed after a compaction committed the new snapshot and before the old
// memfd was punched: both headers are valid, the newer one wins.
TEST(the_newest_generation_wins_when_both_are_valid) {
  fresh();
  model_t m = { .seed = 31 };
  int fds[2];
  REQUIRE(hs_journal_open(fds) == 0);
  for (int i = 0; i < 300; i++) step(&m, 0);
  int active;
  uint64_t pos, gen;
  REQUIRE(hs_journal_where(&active, &pos, &gen) == 0);
  int old = copy_upto(fds[active], (size_t) pos);
  for (int i = 0; i < 300; i++) step(&m, 0);
  drop_held(&m);
  REQUIRE(hs_journal_compact() == 0);
  int now;
  REQUIRE(hs_journal_where(&now, &pos, &gen) == 0);
  CHECK(now != active);
  int both[2];
  both[active] = old;
  both[now] = copy_upto(fds[now], (size_t) pos);
  size_t wlen = 0;
  char *want = canon(&wlen);
  check_recovers(both, want, wlen);
  free(want);
  hs_journal_close();
  close(both[0]);
  close(both[1]);
  close(fds[0]);
  close(fds[1]);
}

// A journal whose lookups do not give the node IDs the kernel was given
// (here: its snapshot's ID counter moved, checksum and all) is refused.
TEST(a_replay_that_gives_other_ids_is_refused) {
  fresh();
  model_t m = { .seed = 41 };
  int fds[2];
  REQUIRE(hs_journal_open(fds) == 0);
  lookup(&m, HS_ROOT_ID, "first", 50, S_IFREG, 1);
  hs_journal_close();
  char *map = mmap(NULL, 2 * JR_HDR, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
  REQUIRE(map != MAP_FAILED);
  jr_hdr_t *h = (jr_hdr_t *) map;
  uint64_t next_id;
  memcpy(&next_id, map + JR_HDR + 8, 8);
  next_id += 5;
  memcpy(map + JR_HDR + 8, &next_id, 8);
  h->snap_sum = jr_sum(h->gen, map + JR_HDR, h->snap_len);
  munmap(map, 2 * JR_HDR);
  check_refused(fds[0], fds[1], -EINVAL);
  close(fds[0]);
  close(fds[1]);
}

// ---- threads -------------------------------------------------------------------------

typedef struct { model_t m; uint64_t dir; int steps; } worker_t;
static volatile int compacting;

static void *worker (void *arg) {
  worker_t *w = arg;
  char name[32];
  for (int i = 0; i < w->steps; i++) {
    snprintf(name, sizeof(name), "n%u", rnd(&w->m, 40));
    uint64_t ino = (w->dir << 16) + rnd(&w->m, 40);
    hs_node_t *d = hs_node_get(w->dir);
    uint64_t id = 0;
    switch (rnd(&w->m, 4)) {
    case 0: case 1: CHECK_EQ(hs_node_found(d, name, ino, S_IFREG, 1, &id), 0); hs_node_forget(id, rnd(&w->m, 2)); break;
    case 2: hs_node_removed(d, name); break;
    case 3: CHECK_EQ(hs_node_renamed(d, name, d, "r"), 0); break;
    }
    hs_node_put(d);
  }
  return NULL;
}

static void *compactor (void *arg) {
  (void) arg;
  while (__atomic_load_n(&compacting, __ATOMIC_ACQUIRE)) CHECK_EQ(hs_journal_compact(), 0);
  return NULL;
}

TEST(threads_mutate_while_compactions_run) {
  fresh();
  model_t m = { .seed = 1 };
  worker_t w[3];
  for (int i = 0; i < 3; i++) {
    char dn[16];
    snprintf(dn, sizeof(dn), "w%d", i);
    w[i] = (worker_t) { .m = { .seed = (unsigned) i + 100 }, .steps = 3000 };
    w[i].dir = lookup(&m, HS_ROOT_ID, dn, 2 + (uint64_t) i, S_IFDIR, 2);
  }
  int fds[2];
  REQUIRE(hs_journal_open(fds) == 0);
  pthread_t t[4];
  __atomic_store_n(&compacting, 1, __ATOMIC_RELEASE);
  pthread_create(&t[3], NULL, compactor, NULL);
  for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, worker, &w[i]);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  __atomic_store_n(&compacting, 0, __ATOMIC_RELEASE);
  pthread_join(t[3], NULL);
  int active;
  uint64_t pos, gen;
  REQUIRE(hs_journal_where(&active, &pos, &gen) == 0);
  CHECK(gen > 1);
  size_t wlen = 0;
  char *want = canon(&wlen);
  check_recovers(fds, want, wlen);
  free(want);
  close_fds(fds);
}

// ---- following a live journal (a live handover's successor) -------------------------
//
// The successor is a child process with a fresh table of its own, following
// the memfds the parent (the serving daemon) goes on writing; the parent
// "pauses", and the child's caught-up table must be the parent's.

#include <sys/wait.h>

static void put_all (int fd, const void *p, size_t len) {
  for (size_t at = 0; at < len;) {
    ssize_t n = write(fd, (const char *) p + at, len - at);
    if (n <= 0) abort();
    at += (size_t) n;
  }
}

static int get_all (int fd, void *p, size_t len) {
  for (size_t at = 0; at < len;) {
    ssize_t n = read(fd, (char *) p + at, len - at);
    if (n <= 0) return -1;
    at += (size_t) n;
  }
  return 0;
}

static int readable (int fd) {
  struct pollfd p = { fd, POLLIN, 0 };
  return poll(&p, 1, 0) == 1;
}

// The follower: fresh, follows, says the generation (or -errno), waits for
// the pause, finishes, and sends the result and its table. Never returns.
static void follower (int fds[2], int to_parent, int from_parent) {
  hs_journal_close();  // the parent's journal, inherited: this process only reads it
  fresh();
  uint64_t gen = 0;
  int64_t r = hs_journal_follow(fds[0], fds[1], &gen);
  if (r == 0) r = (int64_t) gen;
  put_all(to_parent, &r, sizeof(r));
  char go;
  if (get_all(from_parent, &go, 1) != 0) _exit(2);
  int64_t fin = r > 0 ? hs_journal_follow_finish() : r;
  int64_t followed = fin == 0 ? hs_journal_followed() : 0;
  int64_t left = (int64_t) count();
  size_t len = 0;
  char *got = canon(&len);
  uint64_t l = got != NULL ? len : 0;
  put_all(to_parent, &fin, sizeof(fin));
  put_all(to_parent, &followed, sizeof(followed));
  put_all(to_parent, &left, sizeof(left));
  put_all(to_parent, &l, sizeof(l));
  if (l > 0) put_all(to_parent, got, l);
  _exit(0);
}

// The follower's process: this binary run again with --follow (glibc hands
// constructors argc and argv), before any test runs.
__attribute__((constructor)) static void follower_main (int argc, char **argv) {
  if (argc == 6 && strcmp(argv[1], "--follow") == 0) {
    int fds[2] = { atoi(argv[2]), atoi(argv[3]) };
    follower(fds, atoi(argv[4]), atoi(argv[5]));
  }
}

typedef struct { int64_t gen, fin, followed, left; char *table; uint64_t len; } followed_t;

// A follower started on the parent's journal; `meanwhile` runs in the parent
// until it has followed, `paused` once it has (the last changes before the
// pause); then the follower finishes and reports.
static void follow_child (followed_t *out, int fds[2], model_t *m, void (*meanwhile) (model_t *), void (*paused) (model_t *)) {
  int up[2], down[2];
  REQUIRE(pipe2(up, O_CLOEXEC) == 0 && pipe2(down, O_CLOEXEC) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    // A new image: a forked copy of a process under TSan (which has a thread
    // of its own) may deadlock in it.
    int keep[4] = { fds[0], fds[1], up[1], down[0] };
    char arg[4][16];
    for (int i = 0; i < 4; i++) {
      if (fcntl(keep[i], F_SETFD, 0) != 0) _exit(126);
      snprintf(arg[i], sizeof(arg[i]), "%d", keep[i]);
    }
    execl("/proc/self/exe", "test_nodes_journal", "--follow", arg[0], arg[1], arg[2], arg[3], (char *) NULL);
    _exit(127);
  }
  close(up[1]);
  close(down[0]);
  followed_t f = { 0 };
  *out = f;
  // The model's trees deepen with its steps (and each step costs more): a bounded number, then a wait.
  for (int n = 0; !readable(up[0]);) {
    if (n++ < 500) meanwhile(m);
    else poll(&(struct pollfd) { up[0], POLLIN, 0 }, 1, 10);
  }
  REQUIRE(get_all(up[0], &f.gen, sizeof(f.gen)) == 0);
  paused(m);
  drop_held(m);
  put_all(down[1], "g", 1);
  REQUIRE(get_all(up[0], &f.fin, sizeof(f.fin)) == 0);
  REQUIRE(get_all(up[0], &f.followed, sizeof(f.followed)) == 0);
  REQUIRE(get_all(up[0], &f.left, sizeof(f.left)) == 0);
  REQUIRE(get_all(up[0], &f.len, sizeof(f.len)) == 0);
  f.table = malloc(f.len + 1);
  REQUIRE(f.len == 0 || get_all(up[0], f.table, f.len) == 0);
  close(up[0]);
  close(down[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  *out = f;
}

static void steps_plain (model_t *m) { step(m, 0); }
// Compactions while the follow starts (a bounded number: then none, so that
// some follows end on the generation the pause finds).
static int compactions_left;
static void steps_compacting (model_t *m) {
  step(m, 0);
  if (compactions_left > 0 && rnd(m, 4) == 0) {
    compactions_left--;
    CHECK_EQ(hs_journal_compact(), 0);
  }
}
static void more_steps (model_t *m) { for (int i = 0; i < 300; i++) step(m, 0); }
static void a_compaction (model_t *m) { more_steps(m); CHECK_EQ(hs_journal_compact(), 0); }

TEST(a_follower_loads_the_live_table_and_catches_up_in_the_pause) {
  for (unsigned seed = 1; seed <= 4; seed++) {
    fresh();
    model_t m = { .seed = seed };
    int fds[2];
    REQUIRE(hs_journal_open(fds) == 0);
    for (int i = 0; i < 3000; i++) step(&m, 0);
    followed_t f;
    follow_child(&f, fds, &m, steps_plain, more_steps);
    int active;
    uint64_t pos, gen;
    REQUIRE(hs_journal_where(&active, &pos, &gen) == 0);
    CHECK_EQ(f.gen, (int64_t) gen);
    CHECK_EQ(f.fin, 0);
    CHECK_EQ(f.followed, 1);
    size_t wlen = 0;
    char *want = canon(&wlen);
    CHECK_SAME(f.table, (size_t) f.len, want, wlen);
    free(want);
    free(f.table);
    close_fds(fds);
  }
}

// Compacted between the follow and the pause: the serving daemon sees another
// generation than the one followed (and exports); the follower's finish says
// -ESTALE and leaves its table fresh for the handed-over export.
TEST(a_compaction_after_the_follow_is_stale_and_leaves_the_table_fresh) {
  fresh();
  model_t m = { .seed = 9 };
  int fds[2];
  REQUIRE(hs_journal_open(fds) == 0);
  for (int i = 0; i < 2000; i++) step(&m, 0);
  followed_t f;
  follow_child(&f, fds, &m, steps_plain, a_compaction);
  int active;
  uint64_t pos, gen;
  REQUIRE(hs_journal_where(&active, &pos, &gen) == 0);
  CHECK(f.gen > 0 && (uint64_t) f.gen != gen);
  CHECK_EQ(f.fin, -ESTALE);
  CHECK_EQ(f.followed, 0);
  CHECK_EQ(f.left, 1);
  free(f.table);
  close_fds(fds);
}

// Compactions racing the follow itself (a snapshot switched and punched
// while it is copied or its records read): whatever the timing, the follower
// ends with the parent's table, or says it cannot (stale, or no snapshot that
// held still) with its table fresh; never another table.
TEST(compactions_racing_the_follow_never_give_another_table) {
  int same = 0;
  for (unsigned seed = 1; seed <= 12; seed++) {
    fresh();
    model_t m = { .seed = seed + 40 };
    int fds[2];
    REQUIRE(hs_journal_open(fds) == 0);
    for (int i = 0; i < 1000; i++) step(&m, 0);
    followed_t f;
    compactions_left = (int) (seed % 4) * 2;
    follow_child(&f, fds, &m, steps_compacting, more_steps);
    int active;
    uint64_t pos, gen;
    REQUIRE(hs_journal_where(&active, &pos, &gen) == 0);
    if (f.fin == 0) {
      CHECK_EQ(f.gen, (int64_t) gen);
      size_t wlen = 0;
      char *want = canon(&wlen);
      CHECK_SAME(f.table, (size_t) f.len, want, wlen);
      free(want);
      same++;
    } else {
      CHECK(f.fin == -ESTALE || f.fin == -EAGAIN || f.fin == -EINVAL);
      CHECK_EQ(f.left, 1);
    }
    free(f.table);
    close_fds(fds);
  }
  // Not a vacuous test: follows ended on the table (those without compactions at least).
  fprintf(stderr, "  %d of 12 follows (9 of them with compactions meanwhile) ended on the table\n", same);
  CHECK(same > 0);
}

// ---- passthrough families (nodes.h) ------------------------------------------------

static int32_t closed_ids[16];
static int n_closed;
static void record_close (int32_t id) {
  if (n_closed < 16) closed_ids[n_closed] = id;
  n_closed++;
}

static int open_mode (uint64_t id, uint64_t unique, int need, int32_t new_id, int32_t *got, int32_t *spare) {
  hs_node_t *n = hs_node_get(id);
  int m = hs_node_open_mode(n, unique, need, new_id, got, spare);
  hs_node_put(n);
  return m;
}

static int32_t backing_of (uint64_t id) {
  hs_node_t *n = hs_node_get(id);
  int32_t b = hs_node_backing(n);
  hs_node_put(n);
  return b;
}

// The kernel's one I/O mode per inode, as the daemon keeps it: a family
// begun by a plain reader is passed through with one ID, which every other
// open of the file answers with; a cached family stays cached. Across a
// kill -9 the journal gives the successor each file's ID (never closing one
// a record gave up: the dead daemon did), and so does a handover; the last
// release closes the ID once.
TEST(passthrough_families_keep_one_id_across_crashes_and_handovers) {
  fresh();
  int fds[2];
  REQUIRE(hs_journal_open(fds) == 0);
  hs_node_backing_close = record_close;
  n_closed = 0;
  hs_node_t *r = root();
  uint64_t f = found_n(r, "f", 100, S_IFREG, 1), g = found_n(r, "g", 101, S_IFREG, 1);
  hs_node_put(r);
  int32_t id = 0, spare = 0;
  CHECK_EQ(open_mode(f, 10, HS_OPEN_PLAIN_READER, 5, &id, &spare), HS_IO_PT);
  CHECK_EQ(id, 5);
  CHECK_EQ(spare, 0);
  CHECK_EQ(open_mode(f, 11, HS_OPEN_PLAIN_READER, 0, &id, &spare), HS_IO_PT);
  CHECK_EQ(id, 5);
  CHECK_EQ(open_mode(f, 12, HS_OPEN_PLAIN, 0, &id, &spare), HS_IO_PT_DIRECT);
  CHECK_EQ(id, 5);
  // Refused and not counted: its home's content policy must see what an mmap would bypass.
  CHECK_EQ(open_mode(f, 13, HS_OPEN_POLICY, 0, &id, &spare), HS_IO_REFUSE);
  // An ID made for an open that found the family begun is the caller's to close.
  CHECK_EQ(open_mode(f, 14, HS_OPEN_PLAIN_READER, 9, &id, &spare), HS_IO_PT);
  CHECK_EQ(id, 5);
  CHECK_EQ(spare, 9);
  // A writer first: the family is cached, its readers too (with an ID at hand).
  CHECK_EQ(open_mode(g, 20, HS_OPEN_PLAIN, 0, &id, &spare), HS_IO_CACHED);
  CHECK_EQ(open_mode(g, 21, HS_OPEN_PLAIN_READER, 7, &id, &spare), HS_IO_CACHED);
  CHECK_EQ(spare, 7);
  CHECK_EQ(hs_nodes_backing_count(), 1);
  for (uint64_t u = 10; u <= 21; u++) hs_node_answered(u);

  crash(fds);
  CHECK_EQ(n_closed, 0);
  CHECK_EQ(backing_of(f), 5);
  CHECK_EQ(backing_of(g), 0);
  CHECK_EQ(hs_nodes_backing_count(), 1);
  // The successor answers f's opens with the kernel's ID, g's cached.
  CHECK_EQ(open_mode(f, 30, HS_OPEN_PLAIN, 0, &id, &spare), HS_IO_PT_DIRECT);
  CHECK_EQ(id, 5);
  CHECK_EQ(open_mode(g, 31, HS_OPEN_PLAIN_READER, 8, &id, &spare), HS_IO_CACHED);
  CHECK_EQ(spare, 8);
  // A resent open counted by its first run: the same mode, counted once.
  CHECK_EQ(open_mode(f, 32, HS_OPEN_PLAIN_READER, 0, &id, &spare), HS_IO_PT);
  crash(fds);
  CHECK_EQ(open_mode(f, RESEND | 32, HS_OPEN_PLAIN_READER, 0, &id, &spare), HS_IO_PT);
  CHECK_EQ(id, 5);
  hs_node_answered(RESEND | 32);
  hs_node_answered(30);
  hs_node_answered(31);

  // A live handover: the table as bytes carries the ID.
  char *buf = NULL;
  size_t len = 0;
  REQUIRE(hs_nodes_export(&buf, &len) == 0);
  hs_journal_close();
  fresh();
  CHECK_EQ(hs_nodes_import(buf, len), 0);
  free(buf);
  CHECK_EQ(backing_of(f), 5);
  CHECK_EQ(hs_nodes_backing_count(), 1);
  CHECK_EQ(n_closed, 0);
  // f has six opens (10, 11, 12, 14, 30, 32): the sixth release closes 5, once.
  char *p = NULL;
  for (uint64_t u = 40; u < 45; u++) CHECK_EQ(released(f, u, &p), 0);
  CHECK_EQ(n_closed, 0);
  CHECK_EQ(backing_of(f), 5);
  CHECK_EQ(released(f, 45, &p), 0);
  CHECK_EQ(n_closed, 1);
  CHECK_EQ(closed_ids[0], 5);
  CHECK_EQ(backing_of(f), 0);
  CHECK_EQ(hs_nodes_backing_count(), 0);
  // The file's next open begins a family anew.
  CHECK_EQ(open_mode(f, 50, HS_OPEN_PLAIN_READER, 6, &id, &spare), HS_IO_PT);
  CHECK_EQ(id, 6);
  hs_node_backing_close = NULL;
  close(fds[0]);
  close(fds[1]);
}

// A journal whose records gave an ID up replays without closing it again
// (the kernel may have given the number to another file since).
TEST(a_replayed_release_closes_no_id) {
  fresh();
  int fds[2];
  REQUIRE(hs_journal_open(fds) == 0);
  hs_node_backing_close = record_close;
  n_closed = 0;
  hs_node_t *r = root();
  uint64_t f = found_n(r, "f", 100, S_IFREG, 1);
  hs_node_put(r);
  int32_t id = 0, spare = 0;
  CHECK_EQ(open_mode(f, 0, HS_OPEN_PLAIN_READER, 3, &id, &spare), HS_IO_PT);
  char *p = NULL;
  CHECK_EQ(released(f, 0, &p), 0);
  CHECK_EQ(n_closed, 1);
  crash(fds);
  CHECK_EQ(n_closed, 1);
  CHECK_EQ(backing_of(f), 0);
  CHECK_EQ(hs_nodes_backing_count(), 0);
  hs_node_backing_close = NULL;
  close_fds(fds);
}
