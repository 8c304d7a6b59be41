// dataplane.c's handle table and READ path, without Node: handles published
// from C (hs_dp_publish_fd, as the native open does), read through
// hs_dp_read from real files, unpublished while other threads read them
// (AddressSanitizer reports an entry freed under a reader), and the deferred
// RELEASE queue. dataplane.c is included for its statics, its allocations
// made through test_malloc (which fails on cue); its Node calls link to
// aborting stubs (stubs.c).
#include <stddef.h>
void *test_malloc(size_t n);
#define malloc test_malloc
#include "../src/fastpath/dataplane.c"
#undef malloc
extern void *malloc(size_t n);  // stdlib.h declared it under the other name
static int fail_mallocs = 0;
void *test_malloc(size_t n) {
  if (fail_mallocs > 0) { fail_mallocs--; return NULL; }
  return malloc(n);
}
#include <fcntl.h>
#include <stdio.h>
#include "harness.h"

// The policy generation fastpath_state.c keeps; a test moves it as a set-profile would.
static uint64_t policy_gen = 1;
uint64_t hs_fastpath_policy_gen(void) { return __atomic_load_n(&policy_gen, __ATOMIC_ACQUIRE); }

static uint64_t lead_releases = 0;
void hs_lead_release(void) { __atomic_add_fetch(&lead_releases, 1, __ATOMIC_RELAXED); }
void hs_lead_release_read(void) { hs_lead_release(); }

#define FILES 8
static int fds[FILES];
static char dir[] = "/tmp/homesfs-dp-test-XXXXXX";

// File i holds 4096 bytes of the letter 'a' + i.
__attribute__((constructor)) static void make_files(void) {
  if (mkdtemp(dir) == NULL) { perror("mkdtemp"); exit(2); }
  for (int i = 0; i < FILES; i++) {
    char p[64], buf[4096];
    snprintf(p, sizeof(p), "%s/f%d", dir, i);
    fds[i] = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
    memset(buf, 'a' + i, sizeof(buf));
    if (fds[i] < 0 || write(fds[i], buf, sizeof(buf)) != (ssize_t) sizeof(buf)) { perror(p); exit(2); }
    unlink(p);
  }
  rmdir(dir);
}

TEST(nothing_published_falls_back) {
  char buf[16];
  int res = -1;
  CHECK_EQ(hs_dp_read(1, buf, sizeof(buf), 0, &res), 0);
  CHECK_EQ(res, -1);
}

TEST(a_published_handle_is_read_here_until_unpublished) {
  char buf[100];
  int res = -1;
  uint64_t reads0 = dp_reads;
  CHECK_EQ(hs_dp_publish_fd(7, fds[2], HOMESFS_DP_READ, 1, 2, 0, 0), 1);
  CHECK_EQ(hs_dp_publish_fd(7, fds[3], HOMESFS_DP_READ, 1, 3, 0, 0), 0);   // already published
  CHECK_EQ(hs_dp_read(7, buf, sizeof(buf), 10, &res), 1);
  CHECK_EQ(res, 100);
  CHECK_EQ(buf[0], 'c');
  CHECK_EQ(buf[99], 'c');
  CHECK_EQ(dp_reads, reads0 + 1);
  CHECK_EQ(hs_dp_read(8, buf, sizeof(buf), 0, &res), 0);                // another handle
  // across the end of the file: what there is; past it: 0 bytes, both answered
  CHECK_EQ(hs_dp_read(7, buf, sizeof(buf), 4096 - 30, &res), 1);
  CHECK_EQ(res, 30);
  CHECK_EQ(hs_dp_read(7, buf, sizeof(buf), 1 << 20, &res), 1);
  CHECK_EQ(res, 0);
  CHECK_EQ(hs_dp_unpublish_fd(7), 1);
  CHECK_EQ(hs_dp_unpublish_fd(7), 0);
  res = -1;
  CHECK_EQ(hs_dp_read(7, buf, sizeof(buf), 0, &res), 0);
  CHECK_EQ(res, -1);
  CHECK_EQ(dp_published, 0);
}

TEST(a_handle_opened_natively_under_an_older_policy_falls_back) {
  char buf[16];
  int res = -1;
  // Stamped with the generation it was opened under: read here while it holds.
  CHECK_EQ(hs_dp_publish_fd(21, fds[4], HOMESFS_DP_READ, 1, 21, 0, policy_gen), 1);
  CHECK_EQ(hs_dp_read(21, buf, sizeof(buf), 0, &res), 1);
  CHECK_EQ(res, 16);
  // A policy change (a profile switch) makes it JavaScript's: its reads go there.
  __atomic_add_fetch(&policy_gen, 1, __ATOMIC_ACQ_REL);
  res = -1;
  CHECK_EQ(hs_dp_read(21, buf, sizeof(buf), 0, &res), 0);
  CHECK_EQ(res, -1);
  CHECK_EQ(hs_dp_unpublish_fd(21), 1);
  // What JavaScript publishes (generation 0) holds under any policy.
  CHECK_EQ(hs_dp_publish_fd(21, fds[4], HOMESFS_DP_READ, 1, 21, 0, 0), 1);
  __atomic_add_fetch(&policy_gen, 1, __ATOMIC_ACQ_REL);
  CHECK_EQ(hs_dp_read(21, buf, sizeof(buf), 0, &res), 1);
  CHECK_EQ(hs_dp_unpublish_fd(21), 1);
}

TEST(what_javascript_must_decide_falls_back) {
  char buf[16];
  int res = -1;
  uint64_t fallbacks0 = dp_fallbacks;
  CHECK_EQ(hs_dp_publish_fd(9, fds[0], HOMESFS_DP_WRITE, 1, 0, 0, 0), 1);  // write-only
  CHECK_EQ(hs_dp_read(9, buf, sizeof(buf), 0, &res), 0);
  CHECK_EQ(hs_dp_unpublish_fd(9), 1);
  CHECK_EQ(hs_dp_publish_fd(9, fds[0], HOMESFS_DP_READ | 0x80, 1, 0, 0, 0), 1); // unknown flag bits dropped
  CHECK_EQ(dp_find(9)[0]->flags, HOMESFS_DP_READ);
  // offsets JavaScript cannot address (past 2^53 - 1), negative ones, a failed pread
  CHECK_EQ(hs_dp_read(9, buf, sizeof(buf), (off_t) HOMESFS_MAX_SAFE_INTEGER - 4, &res), 0);
  CHECK_EQ(hs_dp_read(9, buf, sizeof(buf), -1, &res), 0);
  CHECK_EQ(hs_dp_unpublish_fd(9), 1);
  int d = open("/", O_RDONLY | O_DIRECTORY);
  CHECK_EQ(hs_dp_publish_fd(9, d, HOMESFS_DP_READ, 1, 0, 0, 0), 1);
  CHECK_EQ(hs_dp_read(9, buf, sizeof(buf), 0, &res), 0);                // EISDIR: JavaScript reads and answers
  CHECK_EQ(hs_dp_unpublish_fd(9), 1);
  close(d);
  CHECK_EQ(res, -1);
  CHECK_EQ(dp_fallbacks, fallbacks0 + 3);
}

TEST(many_handles_in_shared_buckets_each_read_their_own_file) {
  enum { N = 20000 };
  char buf[8];
  int res = 0, wrong = 0;
  for (uint64_t fh = 1; fh <= N; fh++) CHECK_EQ(hs_dp_publish_fd(fh, fds[fh % FILES], HOMESFS_DP_READ, 0, fh, 0, 0), 1);
  CHECK_EQ(dp_published, N);
  for (uint64_t fh = 2; fh <= N; fh += 2) CHECK_EQ(hs_dp_unpublish_fd(fh), 1);
  for (uint64_t fh = 1; fh <= N; fh++) {
    int got = hs_dp_read(fh, buf, sizeof(buf), 0, &res);
    if (fh % 2 == 0) { if (got != 0) wrong++; }
    else if (got != 1 || res != (int) sizeof(buf) || buf[0] != 'a' + (int) (fh % FILES)) wrong++;
  }
  CHECK_EQ(wrong, 0);
  for (uint64_t fh = 1; fh <= N; fh += 2) CHECK_EQ(hs_dp_unpublish_fd(fh), 1);
  CHECK_EQ(dp_published, 0);
  int left = 0;
  for (size_t b = 0; b < DP_BUCKETS; b++) left += dp_table[b] != NULL;
  CHECK_EQ(left, 0);
}

// Readers hammer handles that the main thread unpublishes and publishes
// again with another file: a read answers from the old or the new file,
// never from freed memory, and unpublish waits for reads in flight.
#define READERS 4
#define HANDLES 16
static int stop_readers = 0;
static long bad_reads = 0, served = 0;
static void *reader(void *arg) {
  char buf[512];
  uint64_t r = (uint64_t) (uintptr_t) arg;
  while (!__atomic_load_n(&stop_readers, __ATOMIC_RELAXED)) {
    r = r * 6364136223846793005ULL + 1;
    uint64_t fh = 1 + (r >> 33) % HANDLES;
    int res = 0;
    if (hs_dp_read(fh, buf, sizeof(buf), (off_t) ((r >> 20) % 3000), &res) == 1) {
      __atomic_add_fetch(&served, 1, __ATOMIC_RELAXED);
      if (res <= 0 || buf[0] < 'a' || buf[0] >= 'a' + FILES || buf[res - 1] != buf[0]) __atomic_add_fetch(&bad_reads, 1, __ATOMIC_RELAXED);
    }
  }
  return NULL;
}

TEST(unpublish_racing_reads_is_safe) {
  pthread_t t[READERS];
  for (int i = 0; i < READERS; i++) pthread_create(&t[i], NULL, reader, (void *) (uintptr_t) (i + 1));
  for (int round = 0; round < 20000; round++) {
    uint64_t fh = 1 + (uint64_t) round % HANDLES;
    hs_dp_unpublish_fd(fh);
    CHECK_EQ(hs_dp_publish_fd(fh, fds[round % FILES], HOMESFS_DP_READ, 0, 0, 0, 0), 1);
  }
  __atomic_store_n(&stop_readers, 1, __ATOMIC_RELAXED);
  for (int i = 0; i < READERS; i++) pthread_join(t[i], NULL);
  for (uint64_t fh = 1; fh <= HANDLES; fh++) CHECK_EQ(hs_dp_unpublish_fd(fh), 1);
  CHECK_EQ(bad_reads, 0);
  CHECK(served > 0);
  CHECK_EQ(dp_published, 0);
}

TEST(deferred_releases_queue_in_order_only_when_switched_on) {
  CHECK_EQ(hs_dp_release(5), 0);                 // off: JavaScript answers it
  CHECK(dp_releases.head == NULL);
  __atomic_store_n(&dp_release_deferred, 1, __ATOMIC_RELEASE);
  for (uint64_t fh = 100; fh < 110; fh++) CHECK_EQ(hs_dp_release(fh), 1);
  // No memory for the queue: JavaScript answers that one, nothing is queued.
  fail_mallocs = 1;
  CHECK_EQ(hs_dp_release(999), 0);
  CHECK_EQ(hq_count(&dp_releases), 10);
  // Taken whole (takeReleases), then given back (no memory for JavaScript's
  // array) after two more came: the ten in front, in order, then the two.
  hq_t taken = hq_take(&dp_releases);
  CHECK_EQ(taken.n, 10);
  CHECK_EQ(hq_count(&dp_releases), 0);
  CHECK_EQ(hs_dp_release(110), 1);
  CHECK_EQ(hs_dp_release(111), 1);
  hq_put_back(&dp_releases, taken);
  CHECK_EQ(hq_count(&dp_releases), 12);
  uint64_t want = 100;
  int in_order = 1;
  for (hq_link_t *l = dp_releases.head; l != NULL; l = l->next) in_order &= ((dp_release_t *) l)->fh == want++;
  CHECK(in_order);
  CHECK_EQ(want, 112);
  // One pushed after the put back goes last.
  CHECK_EQ(hs_dp_release(112), 1);
  CHECK_EQ(((dp_release_t *) dp_releases.tail)->fh, 112);
  // what JavaScript's take does to the queue
  taken = hq_take(&dp_releases);
  for (hq_link_t *l = taken.head; l != NULL; ) { dp_release_t *r = (dp_release_t *) l; l = l->next; free(r); }
  hq_put_back(&dp_releases, hq_take(&dp_releases));  // nothing taken: nothing changes
  CHECK(dp_releases.head == NULL);
  CHECK_EQ(hs_dp_release(113), 1);                // and the emptied queue takes new ones
  CHECK_EQ(((dp_release_t *) dp_releases.head)->fh, 113);
  taken = hq_take(&dp_releases);
  free(taken.head);
  __atomic_store_n(&dp_release_deferred, 0, __ATOMIC_RELEASE);
}
