// fastpath_write.c's WRITE decision (hs_fastpath_wl_begin / _end): the growth
// a write may charge from the byte credit JS reserved, and its settling when
// the pwrite landed all, part or nothing. The inodes are entered in the
// table as hs_fastpath_inode and hs_fastpath_wl_delegate do, through what
// fastpath_internal.h shares; the fast path's files are linked in and their
// Node calls link to generated stubs that abort (see the Makefile).
#include <stdlib.h>
#include "../src/fastpath/fastpath_internal.h"
#include "harness.h"

// Not under test here: the data plane's publication (the native open and create use it).
int hs_dp_publish_fd(uint64_t fh, int fd, uint32_t flags, uint64_t dev, uint64_t ino, int append, uint64_t gen) { abort(); }
int hs_dp_unpublish_fd(uint64_t fh) { abort(); }
// RELEASEs not deferred (fuse.nativeRelease off) unless a test turns it on.
int dp_test_release_deferred = 0;
int hs_dp_release_deferred(void) { return __atomic_load_n(&dp_test_release_deferred, __ATOMIC_ACQUIRE); }

static int64_t home_acct[HOMESFS_ACCT_LEN];

// An inode of `size` bytes whose charged size C owns, charging acct: counted
// open and handed over as JS does (hs_fastpath_inode, hs_fastpath_wl_delegate).
static fp_inode_t *delegated(uint64_t ino, uint64_t size) {
  pthread_once(&fp_once, fp_init_lock);
  fp_acct_t *a = fp_acct_wrap(home_acct, HOMESFS_ACCT_LEN, NULL, NULL);
  if (a == NULL || fp_inode_delta(1, ino, 1) != 0 || !fp_wl_delegate_to(1, ino, (double) size, a)) abort();
  fp_acct_put(a);
  return fp_find_inode(1, ino);
}

static uint64_t size_of(fp_inode_t *e) { return (uint64_t) fp_bits_double(e->size_bits); }

static void reset(int64_t credit, int64_t maxfile) {
  memset(home_acct, 0, sizeof(home_acct));
  home_acct[HOMESFS_ACCT_CREDIT_BYTES] = credit;
  home_acct[HOMESFS_ACCT_MAXFILE] = maxfile;
}

TEST(a_write_inside_the_file_charges_nothing) {
  reset(500, 0);
  fp_inode_t *e = delegated(10, 1000);
  hs_wl_ticket_t t;
  REQUIRE(hs_fastpath_wl_begin(1, 10, 0, 100, 0, &t) == 0);
  CHECK_EQ(t.growth, 0);
  CHECK_EQ(t.start, 0);
  CHECK_EQ(home_acct[HOMESFS_ACCT_INFLIGHT], 1);
  CHECK_EQ(e->busy, 1);
  hs_fastpath_wl_end(&t, 100);
  CHECK_EQ(home_acct[HOMESFS_ACCT_CREDIT_BYTES], 500);
  CHECK_EQ(home_acct[HOMESFS_ACCT_GROWN], 0);
  CHECK_EQ(home_acct[HOMESFS_ACCT_INFLIGHT], 0);
  CHECK_EQ(e->busy, 0);
  CHECK_EQ(size_of(e), 1000);
}

TEST(a_write_past_the_end_takes_its_growth_from_the_credit) {
  reset(500, 0);
  fp_inode_t *e = delegated(11, 1000);
  hs_wl_ticket_t t;
  REQUIRE(hs_fastpath_wl_begin(1, 11, 900, 300, 0, &t) == 0);
  CHECK_EQ(t.growth, 200);
  CHECK_EQ(home_acct[HOMESFS_ACCT_CREDIT_BYTES], 300);
  CHECK_EQ(size_of(e), 1200);          // a getattr meanwhile says the size it will have
  hs_fastpath_wl_end(&t, 300);
  CHECK_EQ(home_acct[HOMESFS_ACCT_GROWN], 200);
  CHECK_EQ(home_acct[HOMESFS_ACCT_REFUND], 0);
  // a write far past the end: the hole counts, as writeAt charges it
  REQUIRE(hs_fastpath_wl_begin(1, 11, 1250, 10, 0, &t) == 0);
  CHECK_EQ(t.growth, 60);
  hs_fastpath_wl_end(&t, 10);
  CHECK_EQ(home_acct[HOMESFS_ACCT_CREDIT_BYTES], 240);
  CHECK_EQ(home_acct[HOMESFS_ACCT_GROWN], 260);
  CHECK_EQ(size_of(e), 1260);
}

TEST(an_append_writes_at_the_end_whatever_its_offset) {
  reset(1000, 0);
  fp_inode_t *e = delegated(12, 400);
  hs_wl_ticket_t t;
  REQUIRE(hs_fastpath_wl_begin(1, 12, 0, 50, 1, &t) == 0);
  CHECK_EQ(t.start, 400);
  CHECK_EQ(t.growth, 50);
  hs_fastpath_wl_end(&t, 50);
  CHECK_EQ(size_of(e), 450);
  CHECK_EQ(home_acct[HOMESFS_ACCT_CREDIT_BYTES], 950);
}

TEST(what_only_javascript_may_decide_falls_back_and_changes_nothing) {
  reset(100, 2000);
  fp_inode_t *e = delegated(13, 1000);
  hs_wl_ticket_t t;
  uint64_t fb = fp_wfallbacks;
  CHECK_EQ(hs_fastpath_wl_begin(1, 13, 1000, 101, 0, &t), HOMESFS_FASTPATH_FALLBACK);   // credit short by 1
  CHECK_EQ(hs_fastpath_wl_begin(1, 13, 1000, 100, 0, &t), 0);                           // exactly the credit
  hs_fastpath_wl_end(&t, 100);
  home_acct[HOMESFS_ACCT_CREDIT_BYTES] = 5000;
  CHECK_EQ(hs_fastpath_wl_begin(1, 13, 1990, 11, 0, &t), HOMESFS_FASTPATH_FALLBACK);    // past the per-file limit
  CHECK_EQ(hs_fastpath_wl_begin(1, 13, (int64_t) HOMESFS_MAX_SAFE_INTEGER - 5, 10, 0, &t), HOMESFS_FASTPATH_FALLBACK); // past 2^53 - 1
  CHECK_EQ(hs_fastpath_wl_begin(1, 13, -1, 10, 0, &t), HOMESFS_FASTPATH_FALLBACK);
  home_acct[HOMESFS_ACCT_CREDIT_BYTES] = -1;                                                            // JS took the credit back
  CHECK_EQ(hs_fastpath_wl_begin(1, 13, 1100, 1, 0, &t), HOMESFS_FASTPATH_FALLBACK);
  home_acct[HOMESFS_ACCT_CREDIT_BYTES] = 5000;
  REQUIRE(hs_fastpath_wl_begin(1, 13, 0, 10, 0, &t) == 0);
  hs_wl_ticket_t t2;
  CHECK_EQ(hs_fastpath_wl_begin(1, 13, 0, 10, 0, &t2), HOMESFS_FASTPATH_FALLBACK);      // one write at a time per inode
  hs_fastpath_wl_end(&t, 10);
  // counted: the four refusals of a delegated inode (not the negative offset, not the busy one)
  CHECK_EQ(fp_wfallbacks, fb + 4);
  CHECK_EQ(size_of(e), 1100);
  CHECK_EQ(home_acct[HOMESFS_ACCT_CREDIT_BYTES], 5000);
  CHECK_EQ(home_acct[HOMESFS_ACCT_GROWN], 100);
  CHECK_EQ(home_acct[HOMESFS_ACCT_INFLIGHT], 0);
  // not delegated, or not known at all: JS's, and not counted as a delegated fallback
  e->deleg = 0;
  CHECK_EQ(hs_fastpath_wl_begin(1, 13, 0, 10, 0, &t), HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(hs_fastpath_wl_begin(1, 999, 0, 10, 0, &t), HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(fp_wfallbacks, fb + 4);
}

TEST(a_short_or_failed_write_charges_what_landed_and_refunds_the_rest) {
  reset(5000, 0);
  fp_inode_t *e = delegated(14, 1000);
  hs_wl_ticket_t t;
  REQUIRE(hs_fastpath_wl_begin(1, 14, 1100, 100, 0, &t) == 0);   // growth 200 (a hole of 100)
  CHECK_EQ(t.growth, 200);
  hs_fastpath_wl_end(&t, 50);                                     // landed up to 1150
  CHECK_EQ(size_of(e), 1150);
  CHECK_EQ(home_acct[HOMESFS_ACCT_GROWN], 150);
  CHECK_EQ(home_acct[HOMESFS_ACCT_REFUND], 50);
  REQUIRE(hs_fastpath_wl_begin(1, 14, 1150, 100, 0, &t) == 0);
  hs_fastpath_wl_end(&t, -5);                                     // EIO: nothing landed
  CHECK_EQ(size_of(e), 1150);
  CHECK_EQ(home_acct[HOMESFS_ACCT_GROWN], 150);
  CHECK_EQ(home_acct[HOMESFS_ACCT_REFUND], 150);
  REQUIRE(hs_fastpath_wl_begin(1, 14, 2000, 100, 0, &t) == 0);
  hs_fastpath_wl_end(&t, 0);                                      // far past the end, nothing written: the size stays
  CHECK_EQ(size_of(e), 1150);
  // every byte taken from the credit is charged or refunded
  CHECK_EQ(5000 - home_acct[HOMESFS_ACCT_CREDIT_BYTES], home_acct[HOMESFS_ACCT_GROWN] + home_acct[HOMESFS_ACCT_REFUND]);
  CHECK_EQ(home_acct[HOMESFS_ACCT_INFLIGHT], 0);
}

// An ftruncate (hs_fastpath_wl_resize_begin / _end): growth from the credit
// within the per-file limit, charged once the call succeeded and refunded
// when it failed; a cut gives its bytes back (RELEASED_BYTES) only once done;
// one size change at a time per inode with its writes; off, refused, or not
// delegated: JS's, nothing changed.
TEST(an_ftruncate_grows_from_the_credit_and_a_cut_gives_its_bytes_back) {
  reset(1000, 3000);
  fp_inode_t *e = delegated(15, 1000);
  hs_wl_ticket_t t, t2;
  __atomic_store_n(&fp_truncate_on, 0, __ATOMIC_RELEASE);
  CHECK_EQ(hs_fastpath_wl_resize_begin(1, 15, 1500, &t), HOMESFS_FASTPATH_FALLBACK);   // off
  __atomic_store_n(&fp_truncate_on, 1, __ATOMIC_RELEASE);
  REQUIRE(hs_fastpath_wl_resize_begin(1, 15, 1500, &t) == 0);
  CHECK_EQ(size_of(e), 1500);                                                             // growth shows at once
  CHECK_EQ(home_acct[HOMESFS_ACCT_CREDIT_BYTES], 500);
  CHECK_EQ(hs_fastpath_wl_begin(1, 15, 0, 10, 0, &t2), HOMESFS_FASTPATH_FALLBACK);        // busy: a write waits for JS
  CHECK_EQ(hs_fastpath_wl_resize_begin(1, 15, 10, &t2), HOMESFS_FASTPATH_FALLBACK);       // and another size change
  CHECK_EQ(home_acct[HOMESFS_ACCT_INFLIGHT], 1);
  hs_fastpath_wl_resize_end(&t, 0);
  CHECK_EQ(home_acct[HOMESFS_ACCT_GROWN], 500);
  CHECK_EQ(home_acct[HOMESFS_ACCT_INFLIGHT], 0);
  // A failed growth: the size as before, the credit refunded.
  REQUIRE(hs_fastpath_wl_resize_begin(1, 15, 1900, &t) == 0);
  hs_fastpath_wl_resize_end(&t, -5);
  CHECK_EQ(size_of(e), 1500);
  CHECK_EQ(home_acct[HOMESFS_ACCT_REFUND], 400);
  CHECK_EQ(home_acct[HOMESFS_ACCT_GROWN], 500);
  // A cut: no credit, its bytes released once done; a failed cut changes nothing.
  REQUIRE(hs_fastpath_wl_resize_begin(1, 15, 200, &t) == 0);
  CHECK_EQ(size_of(e), 1500);
  hs_fastpath_wl_resize_end(&t, -5);
  CHECK_EQ(size_of(e), 1500);
  CHECK_EQ(home_acct[HOMESFS_ACCT_RELEASED_BYTES], 0);
  REQUIRE(hs_fastpath_wl_resize_begin(1, 15, 200, &t) == 0);
  hs_fastpath_wl_resize_end(&t, 0);
  CHECK_EQ(size_of(e), 200);
  CHECK_EQ(home_acct[HOMESFS_ACCT_RELEASED_BYTES], 1300);
  // Past the per-file limit, past the credit, past 2^53 - 1, negative: JS's.
  CHECK_EQ(hs_fastpath_wl_resize_begin(1, 15, 3001, &t), HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(hs_fastpath_wl_resize_begin(1, 15, 200 + 501, &t), HOMESFS_FASTPATH_FALLBACK); // the credit is 100 now
  CHECK_EQ(hs_fastpath_wl_resize_begin(1, 15, (int64_t) HOMESFS_MAX_SAFE_INTEGER + 1, &t), HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(hs_fastpath_wl_resize_begin(1, 15, -1, &t), HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(size_of(e), 200);
  CHECK_EQ(home_acct[HOMESFS_ACCT_CREDIT_BYTES], 100);
  // Not delegated: JS's.
  e->deleg = 0;
  CHECK_EQ(hs_fastpath_wl_resize_begin(1, 15, 100, &t), HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(home_acct[HOMESFS_ACCT_INFLIGHT], 0);
  __atomic_store_n(&fp_truncate_on, 0, __ATOMIC_RELEASE);
}

// Threads write to their own inodes of one home, all from one credit, with
// random short and failed writes, while JavaScript tops the credit up: the
// credit never goes negative, and every byte it held (at the start or topped
// up) is still in it, charged, or refunded.
#define WRITERS 6
static void *writer(void *arg) {
  uint64_t ino = 100 + (uint64_t) (uintptr_t) arg;
  uint64_t r = ino * 0x9E3779B97F4A7C15ULL;
  for (int i = 0; i < 20000; i++) {
    r ^= r << 13; r ^= r >> 7; r ^= r << 17;
    hs_wl_ticket_t t;
    uint32_t len = 1 + (uint32_t) (r % 300);
    if (hs_fastpath_wl_begin(1, ino, (int64_t) ((r >> 16) % 100000), len, (r >> 8) & 1, &t) != 0) continue;
    if (__atomic_load_n(&home_acct[HOMESFS_ACCT_CREDIT_BYTES], __ATOMIC_ACQUIRE) < 0) abort();
    int64_t n = (r >> 24) % 4 == 0 ? (int64_t) ((r >> 32) % len) : (int64_t) len;
    hs_fastpath_wl_end(&t, (r >> 40) % 50 == 0 ? -28 : n);
  }
  return NULL;
}

// JavaScript tops the credit up meanwhile (Atomics.add on the same array).
static int writers_done = 0;
static int64_t topped = 0;
static void *topper(void *arg) {
  while (!__atomic_load_n(&writers_done, __ATOMIC_ACQUIRE)) {
    __atomic_add_fetch(&home_acct[HOMESFS_ACCT_CREDIT_BYTES], 7, __ATOMIC_ACQ_REL);
    topped += 7;
  }
  return NULL;
}

TEST(racing_writers_share_one_credit_exactly) {
  reset(300000, 0);
  for (int i = 0; i < WRITERS; i++) delegated(100 + (uint64_t) i, 0);
  pthread_t t[WRITERS], js;
  pthread_create(&js, NULL, topper, NULL);
  for (int i = 0; i < WRITERS; i++) pthread_create(&t[i], NULL, writer, (void *) (uintptr_t) i);
  for (int i = 0; i < WRITERS; i++) pthread_join(t[i], NULL);
  __atomic_store_n(&writers_done, 1, __ATOMIC_RELEASE);
  pthread_join(js, NULL);
  CHECK(home_acct[HOMESFS_ACCT_CREDIT_BYTES] >= 0);
  CHECK(home_acct[HOMESFS_ACCT_GROWN] > 0);
  CHECK(home_acct[HOMESFS_ACCT_REFUND] > 0);
  CHECK(topped > 0);
  CHECK_EQ(300000 + topped - home_acct[HOMESFS_ACCT_CREDIT_BYTES], home_acct[HOMESFS_ACCT_GROWN] + home_acct[HOMESFS_ACCT_REFUND]);
  // what was charged is what the files grew by
  uint64_t sizes = 0;
  for (int i = 0; i < WRITERS; i++) sizes += size_of(fp_find_inode(1, 100 + (uint64_t) i));
  CHECK_EQ(sizes, home_acct[HOMESFS_ACCT_GROWN]);
  CHECK_EQ(home_acct[HOMESFS_ACCT_INFLIGHT], 0);
}
