// dirhandles.c: the counting of open directory handles per caller uid, per
// home and in all, as directory handles and as open files beside JS's files,
// through the calls the session's OPENDIR and RELEASEDIR make (hs_dh_take
// / _give, wrapped here as the ops were). Built without Node (HOMESFS_NO_NAPI)
// and without libfuse's library.
#define FUSE_USE_VERSION 29
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <fuse.h>
#include "harness.h"
#include "../src/fastpath/dirhandles.h"

static int hs_dir_release(const char *path, struct fuse_file_info *fi) {
  (void) path;
  if (fi->fh != 0) hs_dh_give(fi->fh);
  fi->fh = 0;
  return 0;
}

static int open_at(uid_t uid, const char *path, struct fuse_file_info *fi) {
  memset(fi, 0, sizeof(*fi));
  uint64_t fh = 0;
  int res = hs_dh_take(uid, path, &fh);
  if (res == 0) fi->fh = fh;
  return res;
}

static int open_as(uid_t uid, struct fuse_file_info *fi) {
  return open_at(uid, "/", fi);
}

static uint64_t count(uint32_t uid, const char *prefix, int which) {
  uint64_t c[3];
  hs_dh_counts(uid, prefix, c);
  return c[which];
}

static uint64_t open_count(void) {
  uint64_t open = 0, refused = 0;
  hs_dh_stats(&open, &refused);
  return open;
}

static uint64_t refused_count(void) {
  uint64_t open = 0, refused = 0;
  hs_dh_stats(&open, &refused);
  return refused;
}

TEST(no_caps_counts_and_releases) {
  hs_dh_set_caps(0, 0);
  struct fuse_file_info fi[100];
  for (int i = 0; i < 100; i++) CHECK_EQ(open_as(1000 + (i % 3), &fi[i]), 0);
  CHECK_EQ(open_count(), 100);
  CHECK(fi[0].fh != 0);   // what the release gives back
  for (int i = 0; i < 100; i++) CHECK_EQ(hs_dir_release("/", &fi[i]), 0);
  CHECK_EQ(open_count(), 0);
}

TEST(per_uid_cap_refuses_only_that_uid_and_a_release_gives_one_back) {
  hs_dh_set_caps(3, 0);
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
  hs_dir_release("/", &a[1]);
  CHECK_EQ(open_as(2001, &a[1]), 0);       // the released one is available again
  CHECK_EQ(open_as(2001, &extra), -EMFILE);
  for (int i = 0; i < 3; i++) { hs_dir_release("/", &a[i]); hs_dir_release("/", &b[i]); }
  hs_dir_release("/", &same_bucket);
  CHECK_EQ(open_count(), 0);
  // all released: the uid starts from zero again
  for (int i = 0; i < 3; i++) CHECK_EQ(open_as(2001, &a[i]), 0);
  for (int i = 0; i < 3; i++) hs_dir_release("/", &a[i]);
  CHECK_EQ(open_count(), 0);
}

TEST(uid_0_is_not_capped_per_uid_but_counts_in_all) {
  hs_dh_set_caps(1, 0);
  struct fuse_file_info r[10];
  for (int i = 0; i < 10; i++) CHECK_EQ(open_as(0, &r[i]), 0);
  CHECK(r[0].fh != 0);
  CHECK_EQ(count(0, NULL, 0), 0);   // not counted per uid
  CHECK_EQ(open_count(), 10);
  hs_dh_set_caps(1, 12);
  struct fuse_file_info u1, u2, more;
  CHECK_EQ(open_as(3001, &u1), 0);
  CHECK_EQ(open_as(3002, &u2), 0);
  CHECK_EQ(open_count(), 12);
  CHECK_EQ(open_as(0, &more), -EMFILE);   // the cap in all binds root too
  CHECK_EQ(open_as(3003, &more), -EMFILE);
  hs_dir_release("/", &r[0]);
  CHECK_EQ(open_as(3003, &more), 0);
  for (int i = 1; i < 10; i++) hs_dir_release("/", &r[i]);
  hs_dir_release("/", &u1); hs_dir_release("/", &u2); hs_dir_release("/", &more);
  CHECK_EQ(open_count(), 0);
}

TEST(a_release_without_a_handle_changes_nothing) {
  hs_dh_set_caps(0, 0);
  struct fuse_file_info held, none;
  CHECK_EQ(open_as(4001, &held), 0);
  memset(&none, 0, sizeof(none));
  CHECK_EQ(hs_dir_release("/", &none), 0);   // fh 0: JS's handle, not ours
  CHECK_EQ(open_count(), 1);
  hs_dir_release("/", &held);
  CHECK_EQ(open_count(), 0);
  hs_dh_give(0);                             // no handle: nothing
  CHECK_EQ(open_count(), 0);
}

// Open files JS published and directory handles count together: per uid,
// per home (the path's /<tenant>/<key>) and in all.
TEST(files_and_directories_share_the_open_file_caps) {
  hs_dh_set_caps(0, 0);
  struct fuse_file_info d[10], extra;
  // uid 6001 has 7 files open, of 10 per uid: 3 directories, anywhere (the root too), then EMFILE
  hs_dh_set_files(6001, 7, "/t/a", 7, 0, 7, 10, 0);
  CHECK_EQ(open_at(6001, "/t/a/x", &d[0]), 0);
  CHECK_EQ(open_at(6001, "/", &d[1]), 0);
  CHECK_EQ(open_at(6001, "/t", &d[2]), 0);
  CHECK_EQ(open_at(6001, "/t/a", &extra), -EMFILE);
  CHECK_EQ(count(6001, "/t/a", 0), 3);
  CHECK_EQ(count(6001, "/t/a", 1), 1);   // only one of them in the home
  CHECK_EQ(count(6001, "/t", 1), 0);     // "/t" is no home
  // it closes 4 files: 4 more directories
  CHECK(hs_dh_file_take(6001, "/t/a/f", 4) == NULL);   // no native open of a file either
  void *tok = hs_dh_file_take(6002, "/t/a/f", 4);
  CHECK(tok != NULL);
  hs_dh_file_give(6002, tok);
  hs_dh_set_files(6001, 3, "/t/a", 3, 0, 3, 10, 0);
  for (int i = 3; i < 7; i++) CHECK_EQ(open_at(6001, "/t/a/y/z", &d[i]), 0);
  CHECK_EQ(open_at(6001, "/t/a/y", &extra), -EMFILE);
  CHECK_EQ(count(6001, "/t/a", 1), 5);
  // another uid is not held by 6001's files; uid 0 not by any per-uid cap
  CHECK_EQ(open_at(6002, "/t/a", &d[7]), 0);
  CHECK_EQ(open_at(0, "/t/a", &d[8]), 0);
  for (int i = 0; i < 9; i++) hs_dir_release("/", &d[i]);
  CHECK_EQ(count(6001, "/t/a", 0), 0);
  CHECK_EQ(count(6001, "/t/a", 1), 0);

  // a home with 4 of its 6 files open: 2 directories there, by anyone; another home is not held
  hs_dh_set_files(6001, 0, "/t/a", 4, 6, 4, 10, 0);
  CHECK_EQ(open_at(6003, "/t/a", &d[0]), 0);
  CHECK_EQ(open_at(6004, "/t/a/deep/er", &d[1]), 0);
  CHECK_EQ(open_at(6005, "/t/a/q", &extra), -EMFILE);
  // and a native open there, on a slot JS granted ahead, finds no room either (another home does)
  CHECK(hs_dh_file_take(6005, "/t/a/f", 4) == NULL);
  tok = hs_dh_file_take(6005, "/t/b/f", 4);
  CHECK(tok != NULL);
  hs_dh_file_give(6005, tok);
  CHECK_EQ(open_at(6005, "/t/ab", &d[2]), 0);   // a name that only starts alike
  CHECK_EQ(open_at(6005, "/t/b", &d[3]), 0);
  CHECK_EQ(open_at(6005, "/t", &d[4]), 0);      // above homes: in none
  hs_dir_release("/", &d[0]);
  CHECK_EQ(open_at(6005, "/t/a", &d[0]), 0);
  for (int i = 0; i < 5; i++) hs_dir_release("/", &d[i]);

  // in all: 4 files of the daemon's 6 leave room for 2 directories, then ENFILE (as an open)
  hs_dh_set_files(0, 0, "/t/a", 4, 0, 4, 10, 6);
  CHECK_EQ(open_at(6006, "/t/c", &d[0]), 0);
  CHECK_EQ(open_at(0, "/", &d[1]), 0);
  CHECK_EQ(open_at(0, "/", &extra), -ENFILE);
  CHECK(hs_dh_file_take(0, "/t/c/f", 4) == NULL);
  for (int i = 0; i < 2; i++) hs_dir_release("/", &d[i]);
  hs_dh_set_files(0, 0, "/t/a", 0, 0, 0, 0, 0);
  CHECK_EQ(open_count(), 0);
}

// A file the binding opens on a slot JS granted is counted here until JS
// counts it: directories and other native opens find its room taken, and it
// gives the room back.
TEST(native_files_hold_their_room_until_given_back) {
  hs_dh_set_caps(0, 0);
  hs_dh_set_files(7001, 2, "/t/n", 2, 5, 2, 4, 0);   // 2 of the uid's 4, of the home's 5
  void *a = hs_dh_file_take(7001, "/t/n/f", 4);
  CHECK(a != NULL);
  struct fuse_file_info d, extra;
  CHECK_EQ(open_at(7001, "/t/n", &d), 0);                 // 2 files + 1 native + 1 directory: the uid's 4
  CHECK_EQ(open_at(7001, "/t/n", &extra), -EMFILE);
  CHECK(hs_dh_file_take(7001, "/t/n/g", 4) == NULL);
  CHECK_EQ(open_at(7002, "/t/n", &extra), 0);             // another uid: the home's 5
  CHECK(hs_dh_file_take(7003, "/t/n/g", 4) == NULL);
  hs_dir_release("/", &extra);
  // JS took the file in: published with its files, the native count given back
  hs_dh_set_files(7001, 3, "/t/n", 3, 5, 3, 4, 0);
  hs_dh_file_give(7001, a);
  CHECK_EQ(open_at(7001, "/t/n", &extra), -EMFILE);       // still 4: nothing counted twice or lost
  hs_dh_set_files(7001, 2, "/t/n", 2, 5, 2, 4, 0);
  CHECK_EQ(open_at(7001, "/t/n", &extra), 0);
  hs_dir_release("/", &extra);
  hs_dir_release("/", &d);
  hs_dh_set_files(7001, 0, "/t/n", 0, 0, 0, 0, 0);
  hs_dh_file_give(0, NULL);                          // no token: nothing
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
    if (n < 4 && open_at(uid, i % 2 ? "/t/h" : "/t/h/sub", &held[n]) == 0) n++;
    if (open_count() > 20) __atomic_store_n(&over_cap, 1, __ATOMIC_RELAXED);
    if (n > 0 && (i % 3 == 0 || n == 4)) hs_dir_release("/", &held[--n]);
  }
  while (n > 0) hs_dir_release("/", &held[--n]);
  return NULL;
}

TEST(racing_threads_respect_the_caps_and_return_to_zero) {
  hs_dh_set_caps(3, 20);
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, churn, (void *) (uintptr_t) (i % 2 == 0 ? 0 : 5000 + i % 3));
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  CHECK_EQ(over_cap, 0);
  CHECK_EQ(open_count(), 0);
  CHECK_EQ(count(5001, "/t/h", 1), 0);
  hs_dh_set_caps(0, 0);
}
