// dirhandles.c: the counting of open directory handles per caller uid and in
// all, through the ops libfuse calls (homesfs_dir_open / _release) with the
// caller's uid from a fuse_get_context of this file's. Built without Node
// (HOMESFS_NO_NAPI) and without libfuse's library.
#define FUSE_USE_VERSION 29
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <fuse.h>
#include "harness.h"
#include "../src/dirhandles.h"

static __thread struct fuse_context ctx;
struct fuse_context *fuse_get_context(void) { return &ctx; }

static int open_as(uid_t uid, struct fuse_file_info *fi) {
  memset(fi, 0, sizeof(*fi));
  ctx.uid = uid;
  return homesfs_dir_open("/", fi);
}

static uint64_t open_count(void) {
  uint64_t open = 0, refused = 0;
  homesfs_dh_stats(&open, &refused);
  return open;
}

static uint64_t refused_count(void) {
  uint64_t open = 0, refused = 0;
  homesfs_dh_stats(&open, &refused);
  return refused;
}

TEST(no_caps_counts_and_releases) {
  homesfs_dh_set_caps(0, 0);
  struct fuse_file_info fi[100];
  for (int i = 0; i < 100; i++) CHECK_EQ(open_as(1000 + (i % 3), &fi[i]), 0);
  CHECK_EQ(open_count(), 100);
  CHECK_EQ(fi[0].fh, 1001);   // uid + 1, for the release
  for (int i = 0; i < 100; i++) CHECK_EQ(homesfs_dir_release("/", &fi[i]), 0);
  CHECK_EQ(open_count(), 0);
}

TEST(per_uid_cap_refuses_only_that_uid_and_a_release_gives_one_back) {
  homesfs_dh_set_caps(3, 0);
  uint64_t refused0 = refused_count();
  struct fuse_file_info a[3], b[3], extra;
  for (int i = 0; i < 3; i++) CHECK_EQ(open_as(2001, &a[i]), 0);
  CHECK_EQ(open_as(2001, &extra), -EMFILE);
  CHECK_EQ(extra.fh, 0);                  // a refused open sets no handle
  CHECK_EQ(refused_count(), refused0 + 1);
  for (int i = 0; i < 3; i++) CHECK_EQ(open_as(2002, &b[i]), 0);   // another uid is not affected
  // 2001 + 1024 shares 2001's bucket: counted apart all the same
  struct fuse_file_info same_bucket;
  CHECK_EQ(open_as(2001 + 1024, &same_bucket), 0);
  homesfs_dir_release("/", &a[1]);
  CHECK_EQ(open_as(2001, &a[1]), 0);       // the released one is available again
  CHECK_EQ(open_as(2001, &extra), -EMFILE);
  for (int i = 0; i < 3; i++) { homesfs_dir_release("/", &a[i]); homesfs_dir_release("/", &b[i]); }
  homesfs_dir_release("/", &same_bucket);
  CHECK_EQ(open_count(), 0);
  // all released: the uid starts from zero again
  for (int i = 0; i < 3; i++) CHECK_EQ(open_as(2001, &a[i]), 0);
  for (int i = 0; i < 3; i++) homesfs_dir_release("/", &a[i]);
  CHECK_EQ(open_count(), 0);
}

TEST(uid_0_is_not_capped_per_uid_but_counts_in_all) {
  homesfs_dh_set_caps(1, 0);
  struct fuse_file_info r[10];
  for (int i = 0; i < 10; i++) CHECK_EQ(open_as(0, &r[i]), 0);
  CHECK_EQ(r[0].fh, 1);
  CHECK_EQ(open_count(), 10);
  homesfs_dh_set_caps(1, 12);
  struct fuse_file_info u1, u2, more;
  CHECK_EQ(open_as(3001, &u1), 0);
  CHECK_EQ(open_as(3002, &u2), 0);
  CHECK_EQ(open_count(), 12);
  CHECK_EQ(open_as(0, &more), -EMFILE);   // the cap in all binds root too
  CHECK_EQ(open_as(3003, &more), -EMFILE);
  homesfs_dir_release("/", &r[0]);
  CHECK_EQ(open_as(3003, &more), 0);
  for (int i = 1; i < 10; i++) homesfs_dir_release("/", &r[i]);
  homesfs_dir_release("/", &u1); homesfs_dir_release("/", &u2); homesfs_dir_release("/", &more);
  CHECK_EQ(open_count(), 0);
}

TEST(a_release_without_a_handle_changes_nothing) {
  homesfs_dh_set_caps(0, 0);
  struct fuse_file_info held, none;
  CHECK_EQ(open_as(4001, &held), 0);
  memset(&none, 0, sizeof(none));
  CHECK_EQ(homesfs_dir_release("/", &none), 0);   // fh 0: JS's handle, not ours
  CHECK_EQ(open_count(), 1);
  homesfs_dir_release("/", &held);
  CHECK_EQ(open_count(), 0);
  homesfs_dh_give(4001);                          // one too many: no underflow
  CHECK_EQ(open_count(), 0);
}

// Threads of several uids open and release at once against both caps: no
// count goes past a cap, and all come back to zero.
#define THREADS 8
#define ROUNDS 20000
static int over_cap = 0;
static void *churn(void *arg) {
  uid_t uid = (uid_t) (uintptr_t) arg;
  struct fuse_file_info held[4];
  int n = 0;
  for (int i = 0; i < ROUNDS; i++) {
    if (n < 4 && open_as(uid, &held[n]) == 0) n++;
    if (open_count() > 20) __atomic_store_n(&over_cap, 1, __ATOMIC_RELAXED);
    if (n > 0 && (i % 3 == 0 || n == 4)) homesfs_dir_release("/", &held[--n]);
  }
  while (n > 0) homesfs_dir_release("/", &held[--n]);
  return NULL;
}

TEST(racing_threads_respect_the_caps_and_return_to_zero) {
  homesfs_dh_set_caps(3, 20);
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, churn, (void *) (uintptr_t) (i % 2 == 0 ? 0 : 5000 + i % 3));
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  CHECK_EQ(over_cap, 0);
  CHECK_EQ(open_count(), 0);
  homesfs_dh_set_caps(0, 0);
}
