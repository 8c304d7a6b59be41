// References in the fast path (fastpath_refs.c; fastpath_internal.h,
// "Lifetimes"), against a real directory tree: a pinned home outlives its
// removal and hs_fastpath_clear with its descriptor open; a removal or a change
// of a home waits for the ops that pinned it before, and only for those; a
// write ticket keeps its inode record and accounting array through a clear;
// a native unlink and an open counted meanwhile keep JS's order (the open
// sees the name gone or the unlink sees the inode open); openat2's ENOSYS
// turns the fast path off; failed allocations fall back and lose nothing;
// and every op racing republications, removals, clears and JS's adoptions
// (ASan: nothing used after it was freed; LeakSanitizer at exit and the
// descriptor count: no reference lost; TSan: no race).
#include "../src/fastpath/fastpath_internal.h"  // first: _GNU_SOURCE
#include <sched.h>
#include <time.h>
#include "harness.h"

// The fast path's test hooks (fp_hooks.c).
extern int fp_test_openat2_errno;
extern void (*fp_test_unlink_checked) (uint64_t dev, uint64_t ino);
extern int fp_test_fail_allocs;
extern void (*fp_test_settle_asked) (void);
extern void (*fp_test_dir_walked) (void);
extern void (*fp_test_symlink_made) (int pfd, const char *name);
extern void (*fp_test_release_closing) (uint64_t dev, uint64_t ino);

// Not under test here: the data plane (no home here publishes to it).
int hs_dp_publish_fd(uint64_t fh, int fd, uint32_t flags, uint64_t dev, uint64_t ino, int append, uint64_t gen) { abort(); }
int hs_dp_unpublish_fd(uint64_t fh) { abort(); }
// RELEASEs not deferred (fuse.nativeRelease off) unless a test turns it on.
int dp_test_release_deferred = 0;
int hs_dp_release_deferred(void) { return __atomic_load_n(&dp_test_release_deferred, __ATOMIC_ACQUIRE); }

#define P "/t/h"
#define PLEN 4
#define FILES 16
static char base[] = "/tmp/homesfs-fp-refs-XXXXXX";
static char home_path[64];
static int home_dir = -1;        // O_PATH of the home's backing directory
static uint64_t home_dev, home_ino;
static double next_token = 1;    // the "JS" thread's
static int64_t pend[HOMESFS_ACCT_LEN];
// What the last create, mkdir, symlink or link presented as its answer (fp_present_node).
static struct stat made_st;
static int made_presented;

// The answer a name made here presented is the one a GETATTR of its path gives now.
static int presented_as_getattr (const char *path) {
  struct stat g;
  if (!made_presented || hs_fastpath_getattr(path, &g) != 0) return 0;
  return g.st_ino == made_st.st_ino && g.st_dev == made_st.st_dev && g.st_mode == made_st.st_mode && g.st_uid == made_st.st_uid &&
         g.st_gid == made_st.st_gid && g.st_nlink == made_st.st_nlink && g.st_size == made_st.st_size &&
         g.st_ctim.tv_sec == made_st.st_ctim.tv_sec && g.st_ctim.tv_nsec == made_st.st_ctim.tv_nsec &&
         g.st_mtim.tv_sec == made_st.st_mtim.tv_sec && g.st_mtim.tv_nsec == made_st.st_mtim.tv_nsec;
}

static int count_fds (void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL) abort();
  while (readdir(d) != NULL) n++;
  closedir(d);
  return n;
}

static void at_exit_clean (void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", base);
}

// base/h with f00..f15 (10 bytes each) and d/f0..f3.
__attribute__((constructor)) static void make_tree (void) {
  if (mkdtemp(base) == NULL) { perror("mkdtemp"); exit(2); }
  atexit(at_exit_clean);
  snprintf(home_path, sizeof(home_path), "%s/h", base);
  char p[128];
  snprintf(p, sizeof(p), "%s/d", home_path);
  if (mkdir(home_path, 0700) != 0 || mkdir(p, 0700) != 0) { perror("mkdir"); exit(2); }
  for (int i = 0; i < FILES + 4; i++) {
    if (i < FILES) snprintf(p, sizeof(p), "%s/f%02d", home_path, i);
    else snprintf(p, sizeof(p), "%s/d/f%d", home_path, i - FILES);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, "0123456789", 10) != 10) { perror(p); exit(2); }
    close(fd);
  }
  home_dir = open(home_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  struct stat st;
  if (home_dir < 0 || fstat(home_dir, &st) != 0) { perror(home_path); exit(2); }
  home_dev = (uint64_t) st.st_dev;
  home_ino = (uint64_t) st.st_ino;
  pthread_once(&fp_once, fp_init_lock);
  __atomic_store_n(&fp_enabled, 1, __ATOMIC_RELEASE);
  // Directories kept for GETATTR, as the daemon keeps them on a backing only root can reach.
  __atomic_store_n(&fp_dc_on, 1, __ATOMIC_RELEASE);
}

// setHome as JS calls it: a new entry for P, every operation off; its token.
static double publish (void) {
  fp_home_t *e = fp_home_new(P, PLEN, home_dir);
  if (e == NULL) abort();
  e->dev = home_dev;
  e->uid = getuid();
  e->gid = getgid();
  e->owner_from_stat = 1;
  e->max_name = 255;
  e->types = 0xffff;
  for (int i = 0; i < 16; i++) e->keep[i] = 07777;
  e->token = next_token++;
  fp_home_publish(e);
  return e->token;
}

// What JS turns on after a publication: unlinks, opens, creates, write credit, setattrs.
static void turn_on (double token) {
  fp_home_set_pending(P, PLEN, token, fp_acct_wrap(pend, HOMESFS_ACCT_LEN, NULL, NULL));
  fp_home_set_open(P, PLEN, token, HOMESFS_OPEN_ON);
  fp_home_set_create(P, PLEN, token, 1, 07777, 0, 0, 0);
  fp_home_set_write_credit(P, PLEN, token, 1);
  fp_home_set_attr_ops(P, PLEN, token, HOMESFS_ATTR_UTIMENS | HOMESFS_ATTR_CHMOD | HOMESFS_ATTR_CHOWN_OWNER, 07777, 07777);
  fp_home_set_rename(P, PLEN, token, 1, 0);
}

// JS's settle: the queue taken and every record adopted and released at once
// (the handle withdrawn before its descriptor is closed, the inode's count
// dropped), as if the kernel's RELEASE had come. How many were opened or made.
static int adopt_all (void) {
  int files = 0;
  for (hq_link_t *l = fp_opens_take().head; l != NULL; ) {
    fp_open_rec_t *r = fp_rec(l);
    l = l->next;
    fp_dh_give(r);
    if (r->kind == HOMESFS_REC_OPENED || r->kind == HOMESFS_REC_CREATED) {
      fp_handle_remove(r->fh);
      fp_inode_delta(r->dev, r->ino, -1);
      close(r->fd);
      files++;
    }
    free(r);
  }
  return files;
}

static void *remove_home (void *arg) {
  double token = *(double *) arg;
  fp_home_remove(P, PLEN, token);
  return NULL;
}

// Until the thread ends, or ms: whether it ended.
static int ends_within (pthread_t t, long ms) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += ms / 1000;
  until.tv_nsec += (ms % 1000) * 1000 * 1000;
  if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
  return pthread_timedjoin_np(t, NULL, &until) == 0;
}

// 200 ms: a wait that should not end must not.
static int ends_soon (pthread_t t) {
  return ends_within(t, 200);
}

TEST(a_pinned_home_outlives_clear_with_its_descriptor_open) {
  int fds = count_fds();
  publish();
  fp_pin_t pin, again;
  REQUIRE(fp_pin(P "/f00", PLEN, "f00", &pin));
  int fd = pin.home->fd;
  CHECK_EQ(fp_homes_alive, 1);
  // Shutdown with a lazily unmounted mount still serving: nothing waits for the pin.
  fp_clear_all();
  CHECK_EQ(fp_home_count, 0);
  CHECK_EQ(fp_homes_alive, 1);
  CHECK(!fp_pin(P "/f00", PLEN, "f00", &again));
  struct stat st;
  CHECK_EQ(fstat(fd, &st), 0);
  CHECK_EQ(st.st_ino, home_ino);
  int f = fp_openat2(fd, "f00", O_PATH | O_CLOEXEC);
  CHECK(f >= 0);
  if (f >= 0) close(f);
  // The last reference closes the dup and frees the home.
  fp_unpin(&pin);
  CHECK_EQ(fp_homes_alive, 0);
  CHECK_EQ(count_fds(), fds);
}

TEST(a_removal_waits_for_the_pins_taken_before_it_and_the_descriptor_stays) {
  int fds = count_fds();
  double token = publish();
  fp_pin_t pin, again;
  REQUIRE(fp_pin(P "/f01", PLEN, "f01", &pin));
  pthread_t t;
  pthread_create(&t, NULL, remove_home, &token);
  // Taken out of the table at once: no new op finds the home ...
  while (fp_pin(P "/f01", PLEN, "f01", &again)) { fp_unpin(&again); sched_yield(); }
  // ... but the removal returns only after the op that pinned it before (JS's barrier, native-notes 6.2).
  CHECK(!ends_soon(t));
  struct stat st;
  CHECK_EQ(fstat(pin.home->fd, &st), 0);
  CHECK_EQ(st.st_ino, home_ino);
  CHECK_EQ(hs_fastpath_getattr(P "/f01", &st), HOMESFS_FASTPATH_FALLBACK);
  fp_unpin(&pin);
  pthread_join(t, NULL);
  CHECK_EQ(fp_homes_alive, 0);
  CHECK_EQ(count_fds(), fds);
}

struct change_arg { double token; uint32_t flags; };
static void *change_attr_ops (void *arg) {
  struct change_arg *c = arg;
  fp_home_set_attr_ops(P, PLEN, c->token, c->flags, 07777, 07777);
  return NULL;
}

TEST(a_change_in_place_waits_only_for_the_ops_that_saw_the_old_state) {
  double token = publish();
  turn_on(token);
  fp_pin_t old, fresh;
  REQUIRE(fp_pin(P "/f02", PLEN, "f02", &old));
  CHECK(old.pol.attr_flags & HOMESFS_ATTR_CHMOD);
  struct change_arg c = { token, HOMESFS_ATTR_UTIMENS };
  pthread_t t;
  pthread_create(&t, NULL, change_attr_ops, &c);
  // An op that starts now decides from the new flags ...
  for (;;) {
    REQUIRE(fp_pin(P "/f02", PLEN, "f02", &fresh));
    if (fresh.pol.attr_flags == HOMESFS_ATTR_UTIMENS) break;
    fp_unpin(&fresh);
    sched_yield();
  }
  struct stat st;
  CHECK_EQ(hs_fastpath_chmod(P "/f02", 0600), HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(hs_fastpath_getattr(P "/f02", &st), 0);
  // ... and the change returns once the one that pinned the old flags is done, whatever started since.
  CHECK(!ends_soon(t));
  fp_unpin(&old);
  CHECK(ends_soon(t));
  fp_unpin(&fresh);
  fp_clear_all();
  CHECK_EQ(fp_homes_alive, 0);
}

static void *remove_handle (void *arg) {
  fp_handle_remove(*(uint64_t *) arg);
  return NULL;
}

TEST(a_handle_is_freed_and_its_descriptor_let_go_only_after_the_fgetattr_using_it) {
  fp_handle_t *e = calloc(1, sizeof(*e));
  REQUIRE(e != NULL);
  uint64_t fh = 4242;
  e->fh = fh;
  int fd = openat(home_dir, "f07", O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  e->fd = fd;
  e->types = 0xffff;
  for (int i = 0; i < 16; i++) e->keep[i] = 07777;
  fp_handle_publish(e);
  struct stat st;
  CHECK_EQ(hs_fastpath_fgetattr(fh, &st), 0);
  // An fgetattr counted in, as hs_fastpath_fgetattr does under the read lock, and not done yet:
  pthread_rwlock_rdlock(&fp_lock);
  fp_handle_t *using = fp_handles[fh % FP_HANDLE_BUCKETS];
  while (using != NULL && using->fh != fh) using = using->next;
  REQUIRE(using == e);
  __atomic_add_fetch(&using->users, 1, __ATOMIC_ACQUIRE);
  pthread_rwlock_unlock(&fp_lock);
  pthread_t t;
  pthread_create(&t, NULL, remove_handle, &fh);
  // JS's removeHandle returns (and JS closes the descriptor) only once that fgetattr is done.
  CHECK(!ends_soon(t));
  CHECK_EQ(hs_fastpath_fgetattr(fh, &st), HOMESFS_FASTPATH_FALLBACK);  // out of the table already
  CHECK_EQ(fstat(using->fd, &st), 0);
  fp_handle_done(using);
  CHECK(ends_soon(t));
  close(fd);
}

TEST(a_write_ticket_keeps_its_inode_and_array_through_clear) {
  int64_t acct[HOMESFS_ACCT_LEN] = { 0 };
  acct[HOMESFS_ACCT_CREDIT_BYTES] = 1000;
  fp_acct_t *a = fp_acct_wrap(acct, HOMESFS_ACCT_LEN, NULL, NULL);
  REQUIRE(a != NULL);
  REQUIRE(fp_inode_delta(1, 77, 1) == 0);
  REQUIRE(fp_wl_delegate_to(1, 77, 100, a));
  fp_acct_put(a);  // the inode holds it now
  hs_wl_ticket_t t;
  REQUIRE(hs_fastpath_wl_begin(1, 77, 100, 50, 0, &t) == 0);
  // Shutdown (or the inode's last close in JS) mid-write: the record leaves the table.
  fp_clear_all();
  CHECK(fp_find_inode(1, 77) == NULL);
  hs_fastpath_wl_end(&t, 30);  // writes into the record and the array: both still the ticket's
  CHECK_EQ(acct[HOMESFS_ACCT_GROWN], 30);
  CHECK_EQ(acct[HOMESFS_ACCT_REFUND], 20);
  CHECK_EQ(acct[HOMESFS_ACCT_INFLIGHT], 0);
  fp_reap();
}

TEST(wl_revoke_answers_in_flight_until_the_write_settles) {
  int64_t acct[HOMESFS_ACCT_LEN] = { 0 };
  acct[HOMESFS_ACCT_CREDIT_BYTES] = 1000;
  fp_acct_t *a = fp_acct_wrap(acct, HOMESFS_ACCT_LEN, NULL, NULL);
  REQUIRE(fp_inode_delta(1, 78, 1) == 0);
  REQUIRE(fp_wl_delegate_to(1, 78, 100, a));
  hs_wl_ticket_t t, t2;
  REQUIRE(hs_fastpath_wl_begin(1, 78, 100, 50, 0, &t) == 0);
  CHECK(fp_wl_take_back(1, 78) == -1);                                        // in flight: ask again
  CHECK_EQ(hs_fastpath_wl_begin(1, 78, 0, 10, 0, &t2), HOMESFS_FASTPATH_FALLBACK);  // no new decision meanwhile
  CHECK(fp_wl_take_back(1, 78) == -1);
  hs_fastpath_wl_end(&t, 50);
  CHECK(fp_wl_take_back(1, 78) == 150);                                       // settled: the size is JS's
  CHECK(fp_wl_take_back(1, 78) == -2);                                        // not handed over any more
  CHECK_EQ(hs_fastpath_wl_begin(1, 78, 0, 10, 0, &t2), HOMESFS_FASTPATH_FALLBACK);
  CHECK(fp_wl_delegate_to(1, 78, 150, a));                                    // handed over again
  CHECK_EQ(hs_fastpath_wl_begin(1, 78, 0, 10, 0, &t2), 0);
  hs_fastpath_wl_end(&t2, 10);
  fp_acct_put(a);
  fp_inode_delta(1, 78, -1);
  fp_reap();
}

// The open that JS counts while a native unlink of the same inode is between its open check and its unlinkat.
static int probe_fd = -1;
static int probe_ended = 0;
static nlink_t probe_nlink = 99;
static uint64_t probe_dev, probe_ino;
static void *count_open (void *arg) {
  fp_inode_delta(probe_dev, probe_ino, 1);  // attachInode: counted open, then nlink read
  struct stat st;
  if (fstat(probe_fd, &st) == 0) __atomic_store_n(&probe_nlink, st.st_nlink, __ATOMIC_RELEASE);
  return NULL;
}
static void unlink_checked (uint64_t dev, uint64_t ino) {
  probe_dev = dev;
  probe_ino = ino;
  pthread_t t;
  pthread_create(&t, NULL, count_open, NULL);
  // The count must wait for this unlink's removal: it may not end while the unlink is held here.
  probe_ended = ends_soon(t);
  if (!probe_ended) pthread_detach(t);
}

TEST(an_open_counted_during_a_native_unlink_reads_nlink_after_the_removal) {
  double token = publish();
  turn_on(token);
  char p[128];
  snprintf(p, sizeof(p), "%s/gone", home_path);
  probe_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  REQUIRE(probe_fd >= 0);
  int64_t inodes = pend[HOMESFS_ACCT_RELEASED_INODES];
  fp_test_unlink_checked = unlink_checked;
  CHECK_EQ(hs_fastpath_unlink(P "/gone"), 0);
  fp_test_unlink_checked = NULL;
  CHECK_EQ(probe_ended, 0);
  // Once the unlink is done, the count goes on and reads nlink 0: JS's open answers ENOENT.
  while (__atomic_load_n(&probe_nlink, __ATOMIC_ACQUIRE) == 99) sched_yield();
  CHECK_EQ(probe_nlink, 0);
  CHECK_EQ(pend[HOMESFS_ACCT_RELEASED_INODES], inodes + 1);
  // And an inode counted open before the unlink's check: the unlink is JS's.
  int fd = openat(home_dir, "f03", O_RDONLY | O_CLOEXEC);
  struct stat st;
  REQUIRE(fd >= 0 && fstat(fd, &st) == 0);
  fp_inode_delta((uint64_t) st.st_dev, (uint64_t) st.st_ino, 1);
  CHECK_EQ(hs_fastpath_unlink(P "/f03"), HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(fstatat(home_dir, "f03", &st, 0), 0);
  fp_inode_delta((uint64_t) st.st_dev, (uint64_t) st.st_ino, -1);
  close(fd);
  close(probe_fd);
  fp_clear_all();
  fp_reap();
}

TEST(openat2_answering_enosys_turns_the_fast_path_off) {
  publish();
  struct stat st;
  CHECK_EQ(hs_fastpath_getattr(P "/d/f0", &st), 0);
  __atomic_store_n(&fp_test_openat2_errno, ENOSYS, __ATOMIC_RELAXED);
  // Its directory is kept (fastpath_dircache.c): no walk until the generation moves.
  CHECK_EQ(hs_fastpath_getattr(P "/d/f0", &st), 0);
  hs_fastpath_dirs_moved();
  CHECK_EQ(hs_fastpath_getattr(P "/d/f0", &st), HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE), 0);
  __atomic_store_n(&fp_test_openat2_errno, 0, __ATOMIC_RELAXED);
  // Off: everything goes to JS (nothing walks), until turned on again.
  CHECK_EQ(hs_fastpath_getattr(P "/d/f0", &st), HOMESFS_FASTPATH_FALLBACK);
  __atomic_store_n(&fp_enabled, 1, __ATOMIC_RELEASE);
  CHECK_EQ(hs_fastpath_getattr(P "/d/f0", &st), 0);
  // Another errno (EXDEV, ELOOP...) is JS's to log and map: the fast path stays on.
  hs_fastpath_dirs_moved();
  __atomic_store_n(&fp_test_openat2_errno, EXDEV, __ATOMIC_RELAXED);
  CHECK_EQ(hs_fastpath_getattr(P "/d/f0", &st), HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE), 1);
  // A name in the home's own directory needs no walk: answered in one fstatat.
  CHECK_EQ(hs_fastpath_getattr(P "/f04", &st), 0);
  CHECK_EQ(st.st_size, 10);
  __atomic_store_n(&fp_test_openat2_errno, 0, __ATOMIC_RELAXED);
  fp_clear_all();
}

// A home removed while a GETATTR that pinned it walks a directory of it: the
// removal waits for the pin (fp_drain), and only then closes the home's kept
// descriptors, so the one that GETATTR keeps is closed too, never left open
// for a home that is gone.
static fp_home_t *walked_home = NULL;
static int walk_paused = 0;   // atomic
static void pause_until_draining (void) {
  __atomic_store_n(&walk_paused, 1, __ATOMIC_RELEASE);
  // The removal took the home out of the table and waits for this GETATTR's pin.
  while (__atomic_load_n(&walked_home->drainers, __ATOMIC_SEQ_CST) == 0) sched_yield();
}
static void *getattr_deep (void *arg) {
  struct stat st;
  *(int *) arg = hs_fastpath_getattr(P "/d/f2", &st);
  return NULL;
}
static void *remove_it (void *arg) {
  *(int *) arg = fp_home_remove(P, PLEN, next_token - 1);
  return NULL;
}

TEST(a_home_removed_while_a_getattr_walks_it_keeps_no_descriptor_of_it) {
  publish();
  int fds = count_fds();
  pthread_rwlock_rdlock(&fp_lock);
  walked_home = fp_find_home(P, PLEN, fp_hash(P, PLEN));
  pthread_rwlock_unlock(&fp_lock);
  REQUIRE(walked_home != NULL);
  fp_home_get(walked_home);
  hs_fastpath_dirs_moved();
  fp_test_dir_walked = pause_until_draining;
  int got = -1, removed = -1;
  pthread_t g, r;
  pthread_create(&g, NULL, getattr_deep, &got);
  while (!__atomic_load_n(&walk_paused, __ATOMIC_ACQUIRE)) sched_yield();
  pthread_create(&r, NULL, remove_it, &removed);
  pthread_join(g, NULL);
  pthread_join(r, NULL);
  fp_test_dir_walked = NULL;
  CHECK_EQ(got, 0);
  CHECK_EQ(removed, 1);
  fp_home_put(walked_home);
  walked_home = NULL;
  // The home's own descriptor and the kept one are closed.
  CHECK_EQ(count_fds(), fds - 1);
  fp_clear_all();
  fp_reap();
}

static void fail_allocs (int n) { __atomic_store_n(&fp_test_fail_allocs, n, __ATOMIC_RELEASE); }

// A file made here whose RELEASE comes before JS took its record: with
// RELEASEs deferred, closed here (descriptor, fgetattr handle, open count)
// and queued as REC_CREATED_CLOSED for JS to count; without, JS's.
TEST(a_file_made_here_and_released_before_js_took_it_is_closed_here_when_releases_are_deferred) {
  int fds = count_fds();
  uint32_t uid = getuid();
  double token = publish();
  turn_on(token);
  CHECK_EQ(fp_slot_grant(P, PLEN, token, 600, uid, 1), 1);
  CHECK_EQ(fp_slot_grant(P, PLEN, token, 601, uid, 1), 1);
  uint64_t fh0 = 0, fh1 = 0;
  int dio = 0;
  CHECK_EQ(hs_fastpath_create(P "/made0", 0600, O_RDWR | O_CREAT, uid, getgid(), &fh0, &dio, &made_st, &made_presented), 0);
  CHECK_EQ(hs_fastpath_release(fh0), 0);  // not deferred: JS adopts it and carries the RELEASE out
  __atomic_store_n(&dp_test_release_deferred, 1, __ATOMIC_RELEASE);
  CHECK_EQ(hs_fastpath_create(P "/made1", 0600, O_RDWR | O_CREAT, uid, getgid(), &fh1, &dio, &made_st, &made_presented), 0);
  struct stat st;
  CHECK_EQ(fstatat(home_dir, "made1", &st, AT_SYMLINK_NOFOLLOW), 0);
  CHECK(fp_find_inode((uint64_t) st.st_dev, (uint64_t) st.st_ino) != NULL);
  uint64_t closed_before = fp_cclosed;
  CHECK_EQ(hs_fastpath_release(fh1), 1);
  CHECK(fp_find_inode((uint64_t) st.st_dev, (uint64_t) st.st_ino) == NULL);
  CHECK_EQ(fp_cclosed, closed_before + 1);
  CHECK_EQ(hs_fastpath_release(fh1), 0);  // once
  // Its name is JS's to remove while JS has not counted it (fp_making_queued).
  CHECK_EQ(hs_fastpath_unlink(P "/made1"), HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(fstatat(home_dir, "made1", &st, AT_SYMLINK_NOFOLLOW), 0);
  int created = 0, closed = 0;
  for (hq_link_t *l = fp_opens_take().head; l != NULL; ) {
    fp_open_rec_t *r = fp_rec(l);
    l = l->next;
    fp_dh_give(r);
    if (r->kind == HOMESFS_REC_CREATED) {
      CHECK_EQ(r->fh, fh0);
      fp_handle_remove(r->fh);
      fp_inode_delta(r->dev, r->ino, -1);
      close(r->fd);
      created++;
    } else if (r->kind == HOMESFS_REC_CREATED_CLOSED) {
      CHECK_EQ(r->fh, fh1);
      CHECK_EQ(r->fd, -1);
      closed++;
    }
    free(r);
  }
  CHECK_EQ(created, 1);
  CHECK_EQ(closed, 1);
  // Counted (the queue taken): removed here, its inode in the pending pair.
  int64_t inodes_before = pend[HOMESFS_ACCT_RELEASED_INODES];
  CHECK_EQ(hs_fastpath_unlink(P "/made1"), 0);
  CHECK_EQ(pend[HOMESFS_ACCT_RELEASED_INODES], inodes_before + 1);
  __atomic_store_n(&dp_test_release_deferred, 0, __ATOMIC_RELEASE);
  unlinkat(home_dir, "made0", 0);
  fp_clear_all();
  CHECK_EQ(adopt_all(), 0);
  fp_reap();
  CHECK_EQ(count_fds(), fds);
}

// While a RELEASE closes a file made here (its record between the queue and
// REC_CREATED_CLOSED), another worker's UNLINK of the file: JS has not
// counted the inode, so the removal must be JS's, and JS's take of the queue
// must wait for the record (else JS would serve the removal uncounted, and
// the record's later count would leave the ledger one inode over).
static int closing_seen = -1, closing_unlink = 0, closing_ready = -1;
static void unlink_while_closing (uint64_t dev, uint64_t ino) {
  closing_seen = fp_making_queued(dev, ino);
  closing_unlink = hs_fastpath_unlink(P "/closing");
  pthread_mutex_lock(&fp_open_lock);
  closing_ready = fp_closing_gate.midway() == 0;
  pthread_mutex_unlock(&fp_open_lock);
}

TEST(a_file_released_here_while_another_worker_removes_it_is_counted_before_its_removal) {
  uint32_t uid = getuid();
  double token = publish();
  turn_on(token);
  CHECK_EQ(fp_slot_grant(P, PLEN, token, 610, uid, 1), 1);
  __atomic_store_n(&dp_test_release_deferred, 1, __ATOMIC_RELEASE);
  uint64_t fh = 0;
  int dio = 0;
  CHECK_EQ(hs_fastpath_create(P "/closing", 0600, O_RDWR | O_CREAT, uid, getgid(), &fh, &dio, &made_st, &made_presented), 0);
  int64_t inodes_before = pend[HOMESFS_ACCT_RELEASED_INODES];
  fp_test_release_closing = unlink_while_closing;
  CHECK_EQ(hs_fastpath_release(fh), 1);
  fp_test_release_closing = NULL;
  CHECK_EQ(closing_seen, 1);
  CHECK_EQ(closing_unlink, HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(closing_ready, 0);  // JS's take would wait for it
  struct stat st;
  CHECK_EQ(fstatat(home_dir, "closing", &st, AT_SYMLINK_NOFOLLOW), 0);
  CHECK_EQ(pend[HOMESFS_ACCT_RELEASED_INODES], inodes_before);
  // Closed: the record is JS's to take, as REC_CREATED_CLOSED.
  hq_t q = fp_opens_take();
  CHECK_EQ(q.n, 1u);
  CHECK_EQ(fp_rec(q.head)->kind, HOMESFS_REC_CREATED_CLOSED);
  CHECK_EQ(fp_rec(q.head)->fh, fh);
  fp_dh_give(fp_rec(q.head));
  free(fp_rec(q.head));
  __atomic_store_n(&dp_test_release_deferred, 0, __ATOMIC_RELEASE);
  unlinkat(home_dir, "closing", 0);
  fp_clear_all();
  CHECK_EQ(adopt_all(), 0);
  fp_reap();
}

// Releases that keep closing made files on other workers must not hold JS's
// take: it waits for the closings under way when it begins, not for ones
// begun while it waits (else a home's create-and-close storm would keep the
// JS thread, every home's, spinning). Each closing is held in the hook.
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t held_cond = PTHREAD_COND_INITIALIZER;
static int held = 0, let_go = 0;
static void hold_while_closing (uint64_t dev, uint64_t ino) {
  (void) dev; (void) ino;
  pthread_mutex_lock(&held_lock);
  int mine = ++held;
  pthread_cond_broadcast(&held_cond);
  while (let_go < mine) pthread_cond_wait(&held_cond, &held_lock);
  pthread_mutex_unlock(&held_lock);
}
static void wait_held (int n) {
  pthread_mutex_lock(&held_lock);
  while (held < n) pthread_cond_wait(&held_cond, &held_lock);
  pthread_mutex_unlock(&held_lock);
}
static void release_held (int n) {
  pthread_mutex_lock(&held_lock);
  let_go = n;
  pthread_cond_broadcast(&held_cond);
  pthread_mutex_unlock(&held_lock);
}
static void *release_fh (void *arg) {
  hs_fastpath_release(*(uint64_t *) arg);
  return NULL;
}
static hq_t storm_taken;
static void *take_queue (void *arg) {
  (void) arg;
  storm_taken = fp_opens_take();
  return NULL;
}

TEST(closings_begun_while_js_takes_the_queue_do_not_hold_the_take) {
  uint32_t uid = getuid();
  double token = publish();
  turn_on(token);
  for (uint32_t fh = 620; fh < 623; fh++) CHECK_EQ(fp_slot_grant(P, PLEN, token, fh, uid, 1), 1);
  __atomic_store_n(&dp_test_release_deferred, 1, __ATOMIC_RELEASE);
  uint64_t a = 0, b = 0, c = 0;
  int dio = 0;
  CHECK_EQ(hs_fastpath_create(P "/storm-a", 0600, O_RDWR | O_CREAT, uid, getgid(), &a, &dio, &made_st, &made_presented), 0);
  CHECK_EQ(hs_fastpath_create(P "/storm-c", 0600, O_RDWR | O_CREAT, uid, getgid(), &c, &dio, &made_st, &made_presented), 0);
  held = let_go = 0;
  fp_test_release_closing = hold_while_closing;
  pthread_t ta, tb, take;
  // a's closing is under way when the take begins: the take waits for it ...
  pthread_create(&ta, NULL, release_fh, &a);
  wait_held(1);
  pthread_create(&take, NULL, take_queue, NULL);
  // (its first look has taken c's record, still queued)
  for (int i = 0; i < 10000000 && hq_count(&fp_opens) != 0; i++) sched_yield();
  CHECK_EQ(hq_count(&fp_opens), 0u);
  CHECK(!ends_soon(take));
  // ... but not for b's, made and closing after that look, still held when a's ends.
  CHECK_EQ(hs_fastpath_create(P "/storm-b", 0600, O_RDWR | O_CREAT, uid, getgid(), &b, &dio, &made_st, &made_presented), 0);
  pthread_create(&tb, NULL, release_fh, &b);
  wait_held(2);
  release_held(1);
  pthread_join(ta, NULL);
  int ended = ends_within(take, 10000);  // a wait that must end, on a machine however loaded
  CHECK(ended);
  release_held(2);
  pthread_join(tb, NULL);
  if (!ended) pthread_join(take, NULL);
  fp_test_release_closing = NULL;
  // What the take saw: c as made (JS adopts it) and a as made and closed; b comes with the next take.
  CHECK_EQ(storm_taken.n, 2u);
  if (storm_taken.n == 2) {
    CHECK_EQ(fp_rec(storm_taken.head)->kind, HOMESFS_REC_CREATED);
    CHECK_EQ(fp_rec(storm_taken.head)->fh, c);
    CHECK_EQ(fp_rec(storm_taken.head->next)->kind, HOMESFS_REC_CREATED_CLOSED);
    CHECK_EQ(fp_rec(storm_taken.head->next)->fh, a);
  }
  fp_opens_put_back(storm_taken);
  hq_t rest = fp_opens_take();
  CHECK_EQ(rest.n, 3u);
  if (rest.n == 3) {
    CHECK_EQ(fp_rec(rest.head->next->next)->kind, HOMESFS_REC_CREATED_CLOSED);
    CHECK_EQ(fp_rec(rest.head->next->next)->fh, b);
  }
  fp_opens_put_back(rest);
  CHECK_EQ(adopt_all(), 1);
  __atomic_store_n(&dp_test_release_deferred, 0, __ATOMIC_RELEASE);
  unlinkat(home_dir, "storm-a", 0);
  unlinkat(home_dir, "storm-b", 0);
  unlinkat(home_dir, "storm-c", 0);
  fp_clear_all();
  fp_reap();
}

TEST(failed_allocations_fall_back_and_lose_nothing) {
  int fds = count_fds();
  uint32_t uid = getuid();
  // A home that cannot be made: nothing published, no descriptor left.
  fail_allocs(1);
  errno = 0;
  CHECK(fp_home_new(P, PLEN, home_dir) == NULL);
  CHECK_EQ(errno, ENOMEM);
  double token = publish();
  turn_on(token);
  fail_allocs(1);
  CHECK_EQ(fp_slot_grant(P, PLEN, token, 500, uid, 0), -1);
  CHECK_EQ(fp_slot_grant(P, PLEN, token, 501, uid, 0), 1);
  CHECK_EQ(fp_slot_grant(P, PLEN, token, 502, uid, 1), 1);
  CHECK_EQ(fp_slot_count, 2);
  // An open or a create without memory: JS's, and the slot stays in its list.
  uint64_t fh = 0;
  int dio = 0;
  fail_allocs(1);
  CHECK_EQ(hs_fastpath_open(P "/f05", O_RDONLY, uid, &fh, &dio), HOMESFS_FASTPATH_FALLBACK);
  fail_allocs(1);
  CHECK_EQ(hs_fastpath_create(P "/new", 0600, O_RDWR | O_CREAT, uid, getgid(), &fh, &dio, &made_st, &made_presented), HOMESFS_FASTPATH_FALLBACK);
  struct stat st;
  CHECK(fstatat(home_dir, "new", &st, 0) != 0);
  CHECK_EQ(fp_slot_count, 2);
  // An unlink that cannot mark its inode: JS's, and the name stays.
  fail_allocs(1);
  CHECK_EQ(hs_fastpath_unlink(P "/f06"), HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(fstatat(home_dir, "f06", &st, 0), 0);
  // An inode JS cannot count: nothing counted.
  fail_allocs(1);
  CHECK_EQ(fp_inode_delta(1, 79, 1), -ENOMEM);
  CHECK(fp_find_inode(1, 79) == NULL);
  fail_allocs(0);
  // With memory, the slots are used.
  CHECK_EQ(hs_fastpath_open(P "/f05", O_RDONLY, uid, &fh, &dio), 0);
  CHECK_EQ(fh, 501);
  CHECK_EQ(hs_fastpath_release(fh), 1);  // closed before JS adopted it: the slot back in the list
  CHECK_EQ(fp_slot_count, 2);
  made_presented = 0;
  CHECK_EQ(hs_fastpath_create(P "/new", 0600, O_RDWR | O_CREAT, uid, getgid(), &fh, &dio, &made_st, &made_presented), 0);
  CHECK_EQ(fh, 502);
  // The answer: the file once owned, as an fgetattr of the handle presents it.
  struct stat fg;
  CHECK(made_presented);
  CHECK_EQ(hs_fastpath_fgetattr(fh, &fg), 0);
  CHECK_EQ(fg.st_ino, made_st.st_ino);
  CHECK_EQ(fg.st_mode, made_st.st_mode);
  CHECK_EQ(fg.st_uid, made_st.st_uid);
  CHECK_EQ(fg.st_gid, made_st.st_gid);
  CHECK_EQ(fg.st_ctim.tv_nsec, made_st.st_ctim.tv_nsec);
  CHECK_EQ(adopt_all(), 1);
  unlinkat(home_dir, "new", 0);
  fp_clear_all();
  CHECK_EQ(adopt_all(), 0);
  fp_reap();
  CHECK_EQ(count_fds(), fds);
}

static int settle_asks = 0;
static void count_ask (void) { settle_asks++; }

// A burst of creates asks JS for more slots before it runs out: once, as the
// caller's slots in the home fall to FP_CSLOTS_LOW; another caller's slots
// are not counted, and a caller that never falls to the mark never asks.
TEST(a_callers_create_slots_falling_to_the_low_mark_ask_js_once) {
  double token = publish();
  turn_on(token);
  uint32_t a = getuid(), b = getuid() + 1;
  fp_test_settle_asked = count_ask;
  settle_asks = 0;
  // a's 11 slots and b's 5, interleaved in the list.
  for (uint32_t i = 0; i < 11; i++) {
    CHECK_EQ(fp_slot_grant(P, PLEN, token, 800 + i, a, 1), 1);
    if (i < 5) CHECK_EQ(fp_slot_grant(P, PLEN, token, 820 + i, b, 1), 1);
  }
  char p[64];
  uint64_t fh = 0;
  int dio = 0, made = 0;
  for (int i = 0; i < 11; i++) {
    snprintf(p, sizeof(p), P "/burst%02d", made++);
    CHECK_EQ(hs_fastpath_create(p, 0600, O_RDWR | O_CREAT, a, getgid(), &fh, &dio, &made_st, &made_presented), 0);
    // 10 and 9 left: no ask; 8: the ask; 7 down to 0: no other.
    CHECK_EQ(settle_asks, i < 2 ? 0 : 1);
  }
  // Out of slots: the create is JS's, and asks nothing (JS, answering it, takes the queue).
  snprintf(p, sizeof(p), P "/burst%02d", made);
  CHECK_EQ(hs_fastpath_create(p, 0600, O_RDWR | O_CREAT, a, getgid(), &fh, &dio, &made_st, &made_presented), HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(settle_asks, 1);
  // Topped up to 9: the next take leaves 8, and asks again.
  for (uint32_t i = 0; i < 9; i++) CHECK_EQ(fp_slot_grant(P, PLEN, token, 840 + i, a, 1), 1);
  snprintf(p, sizeof(p), P "/burst%02d", made++);
  CHECK_EQ(hs_fastpath_create(p, 0600, O_RDWR | O_CREAT, a, getgid(), &fh, &dio, &made_st, &made_presented), 0);
  CHECK_EQ(settle_asks, 2);
  // b's five: 4 down to 0 left, never the mark.
  for (int i = 0; i < 5; i++) {
    snprintf(p, sizeof(p), P "/burst%02d", made++);
    CHECK_EQ(hs_fastpath_create(p, 0600, O_RDWR | O_CREAT, b, getgid(), &fh, &dio, &made_st, &made_presented), 0);
  }
  CHECK_EQ(settle_asks, 2);
  fp_test_settle_asked = NULL;
  CHECK_EQ(adopt_all(), made);
  for (int i = 0; i < made; i++) {
    snprintf(p, sizeof(p), "burst%02d", i);
    CHECK_EQ(unlinkat(home_dir, p, 0), 0);
  }
  fp_clear_all();
  CHECK_EQ(adopt_all(), 0);
  fp_reap();
}

TEST(what_the_queue_could_not_give_js_goes_back_in_front) {
  double token = publish();
  turn_on(token);
  uint32_t uid = getuid();
  for (uint32_t fh = 600; fh < 603; fh++) CHECK_EQ(fp_slot_grant(P, PLEN, token, fh, uid, 0), 1);
  fp_home_set_open(P, PLEN, token, 0);  // the three slots queued back, unused
  hq_t taken = fp_opens_take();
  CHECK_EQ(taken.n, 3);
  // Queued while JS could not be given the three (its array could not be made):
  fp_home_set_open(P, PLEN, token, HOMESFS_OPEN_ON);
  for (uint32_t fh = 603; fh < 605; fh++) CHECK_EQ(fp_slot_grant(P, PLEN, token, fh, uid, 0), 1);
  fp_home_set_open(P, PLEN, token, 0);
  fp_opens_put_back(taken);
  taken = fp_opens_take();
  CHECK_EQ(taken.n, 5);
  uint32_t fhs[5] = { 0 };
  int i = 0;
  for (hq_link_t *l = taken.head; l != NULL && i < 5; l = l->next) fhs[i++] = fp_rec(l)->fh;
  CHECK_EQ(i, 5);
  // Every slot once, the three taken first still first.
  uint32_t seen = 0;
  for (int k = 0; k < 5; k++) if (fhs[k] >= 600 && fhs[k] < 605) seen |= 1u << (fhs[k] - 600);
  CHECK_EQ(seen, 31);
  for (int k = 0; k < 3; k++) CHECK(fhs[k] < 603);
  for (hq_link_t *l = taken.head; l != NULL; ) { fp_open_rec_t *r = fp_rec(l); l = l->next; free(r); }
  // Given back empty, or when nothing was queued meanwhile: the queue as it was.
  fp_opens_put_back(fp_opens_take());
  CHECK_EQ(fp_opens_take().n, 0);
  fp_clear_all();
  fp_reap();
}

// A symlink made here takes the inode of a create slot of the caller's (its
// record REC_SYMLINK, no descriptor), owned as a new file; its target judged
// first (rule 1: a relative one that stays in; an absolute one is JS's),
// before any slot is taken. Off, rule 0, no slot or an existing name: JS's,
// nothing made, any slot taken queued back.
TEST(a_symlink_takes_a_create_slots_inode_after_its_target_is_judged_and_every_doubt_goes_to_js) {
  double token = publish();
  turn_on(token);
  uint32_t uid = getuid();
  struct stat st;
  char buf[64];
  CHECK_EQ(fp_slot_grant(P, PLEN, token, 710, uid, 1), 1);
  // Not published for symlinks (rule 0): JS's, even with a slot.
  CHECK_EQ(hs_fastpath_symlink(P "/ln", "f00", uid, getgid(), &made_st, &made_presented), HOMESFS_FASTPATH_FALLBACK);
  CHECK(fstatat(home_dir, "ln", &st, AT_SYMLINK_NOFOLLOW) != 0);
  CHECK_EQ(fp_home_set_symlink(P, PLEN, token, 1), 1);
  int64_t busy0 = pend[HOMESFS_ACCT_BUSY];
  // Outside the home (a climb past the root, one after a name) or absolute: JS's, the slot kept.
  const char *outside[] = { "../x", "a/../f00", "/usr/bin/env", "" };
  for (int i = 0; i < 4; i++) {
    CHECK_EQ(hs_fastpath_symlink(P "/ln", outside[i], uid, getgid(), &made_st, &made_presented), HOMESFS_FASTPATH_FALLBACK);
    CHECK_EQ(fp_opens_take().n, 0u);
    CHECK_EQ(fp_slot_count, 1u);
    CHECK_EQ(pend[HOMESFS_ACCT_BUSY], busy0);
  }
  CHECK(fstatat(home_dir, "ln", &st, AT_SYMLINK_NOFOLLOW) != 0);
  // Made: the link with its target, one record for JS, busy until JS counts it.
  made_presented = 0;
  CHECK_EQ(hs_fastpath_symlink(P "/ln", "./f00", uid, getgid(), &made_st, &made_presented), 0);
  CHECK(presented_as_getattr(P "/ln"));
  CHECK_EQ(fstatat(home_dir, "ln", &st, AT_SYMLINK_NOFOLLOW), 0);
  CHECK(S_ISLNK(st.st_mode));
  ssize_t n = readlinkat(home_dir, "ln", buf, sizeof(buf));
  CHECK_EQ(n, 5);
  CHECK(memcmp(buf, "./f00", 5) == 0);
  CHECK_EQ(pend[HOMESFS_ACCT_BUSY], busy0 + 1);
  hq_t q = fp_opens_take();
  CHECK_EQ(q.n, 1u);
  fp_open_rec_t *r = fp_rec(q.head);
  CHECK_EQ(r->kind, HOMESFS_REC_SYMLINK);
  CHECK_EQ(r->fh, 710);
  CHECK_EQ(r->fd, -1);
  CHECK_EQ(r->ino, (uint64_t) st.st_ino);
  free(r);
  pend[HOMESFS_ACCT_BUSY] = busy0;
  // No slot left: JS's.
  CHECK_EQ(hs_fastpath_symlink(P "/ln2", "f00", uid, getgid(), &made_st, &made_presented), HOMESFS_FASTPATH_FALLBACK);
  CHECK(fstatat(home_dir, "ln2", &st, AT_SYMLINK_NOFOLLOW) != 0);
  // Rule 2 (any target): an absolute one is made too; an existing name is JS's, the slot queued back unused.
  CHECK_EQ(fp_home_set_symlink(P, PLEN, token, 2), 1);
  CHECK_EQ(fp_slot_grant(P, PLEN, token, 711, uid, 1), 1);
  CHECK_EQ(hs_fastpath_symlink(P "/ln", "/usr/bin/env", uid, getgid(), &made_st, &made_presented), HOMESFS_FASTPATH_FALLBACK);
  q = fp_opens_take();
  CHECK_EQ(q.n, 1u);
  CHECK_EQ(fp_rec(q.head)->kind, HOMESFS_REC_UNUSED_CREATE);
  free(fp_rec(q.head));
  CHECK_EQ(fp_slot_grant(P, PLEN, token, 712, uid, 1), 1);
  CHECK_EQ(hs_fastpath_symlink(P "/abs", "/usr/bin/env", uid, getgid(), &made_st, &made_presented), 0);
  CHECK_EQ(fstatat(home_dir, "abs", &st, AT_SYMLINK_NOFOLLOW), 0);
  CHECK(S_ISLNK(st.st_mode));
  q = fp_opens_take();
  CHECK_EQ(q.n, 1u);
  CHECK_EQ(fp_rec(q.head)->kind, HOMESFS_REC_SYMLINK);
  free(fp_rec(q.head));
  pend[HOMESFS_ACCT_BUSY] = busy0;
  unlinkat(home_dir, "ln", 0);
  unlinkat(home_dir, "abs", 0);
  fp_clear_all();
  CHECK_EQ(adopt_all(), 0);
  fp_reap();
}

// Where other uids reach the backing tree (allowOpenBacking), one of them
// could put a file of theirs at the name between the binding's symlinkat and
// its open of the link: what it finds there is checked before it is given to
// the link's owner, so only a symlink is ever chowned (or removed again). The
// swap is made on cue by the hook; the file keeps its owner and its name, and
// the make goes to JS.
static void put_a_file_over (int pfd, const char *name) {
  if (renameat(home_dir, "theirs", pfd, name) != 0) abort();
}

TEST(a_file_put_at_a_new_symlinks_name_is_never_given_away) {
  double token = publish();
  turn_on(token);
  CHECK_EQ(fp_home_set_symlink(P, PLEN, token, 1), 1);
  uint32_t uid = getuid();
  // Root (as CI runs these) owns the link made: the file belongs to another uid, whose loss would show.
  uid_t them = geteuid() == 0 ? 4242 : getuid();
  int f = openat(home_dir, "theirs", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  REQUIRE(f >= 0);
  REQUIRE(fchown(f, them, them) == 0);
  struct stat before, after;
  REQUIRE(fstat(f, &before) == 0);
  CHECK_EQ(fp_slot_grant(P, PLEN, token, 720, uid, 1), 1);
  int64_t busy0 = pend[HOMESFS_ACCT_BUSY];
  fp_test_symlink_made = put_a_file_over;
  CHECK_EQ(hs_fastpath_symlink(P "/sw", "f00", uid, getgid(), &made_st, &made_presented), HOMESFS_FASTPATH_FALLBACK);
  fp_test_symlink_made = NULL;
  CHECK_EQ(fstat(f, &after), 0);
  CHECK_EQ(after.st_uid, before.st_uid);
  CHECK_EQ(after.st_gid, before.st_gid);
  CHECK_EQ(after.st_uid, them);
  // Nor removed: the name holds the file still.
  struct stat named;
  CHECK_EQ(fstatat(home_dir, "sw", &named, AT_SYMLINK_NOFOLLOW), 0);
  CHECK_EQ(named.st_ino, before.st_ino);
  // Nothing counted: the slot and its inode go back, the home no longer busy.
  hq_t q = fp_opens_take();
  CHECK_EQ(q.n, 1u);
  CHECK_EQ(fp_rec(q.head)->kind, HOMESFS_REC_UNUSED_CREATE);
  free(fp_rec(q.head));
  CHECK_EQ(pend[HOMESFS_ACCT_BUSY], busy0);
  close(f);
  unlinkat(home_dir, "sw", 0);
  unlinkat(home_dir, "theirs", 0);
  fp_clear_all();
  CHECK_EQ(adopt_all(), 0);
  fp_reap();
}

// A mkdir made here takes the inode of a create slot of the caller's (its
// record REC_MKDIR, no descriptor, no count beside the directory handles);
// with no slot, off, at an existing name, past the depth limit or with
// setgid asked it is JS's, nothing made and any slot taken queued back.
TEST(a_mkdir_takes_a_create_slots_inode_and_every_doubt_goes_to_js_with_nothing_made) {
  double token = publish();
  turn_on(token);
  uint32_t uid = getuid();
  struct stat st;
  // Not published for mkdirs: JS's, even with a slot.
  CHECK_EQ(fp_slot_grant(P, PLEN, token, 700, uid, 1), 1);
  CHECK_EQ(hs_fastpath_mkdir(P "/nd", 0755, uid, getgid(), &made_st, &made_presented), HOMESFS_FASTPATH_FALLBACK);
  CHECK(fstatat(home_dir, "nd", &st, AT_SYMLINK_NOFOLLOW) != 0);
  CHECK_EQ(fp_home_set_mkdir(P, PLEN, token, 1, 07777, 0), 1);
  // Made: the directory with the mode asked (under the umask, as JS's mkdir), one record for JS.
  mode_t um = umask(022);
  int64_t busy0 = pend[HOMESFS_ACCT_BUSY];  // what the tests before left there
  made_presented = 0;
  CHECK_EQ(hs_fastpath_mkdir(P "/nd", 0775, uid, getgid(), &made_st, &made_presented), 0);
  CHECK(presented_as_getattr(P "/nd"));  // the answer: owned, as a getattr of the path gives it
  CHECK_EQ(fstatat(home_dir, "nd", &st, AT_SYMLINK_NOFOLLOW), 0);
  CHECK(S_ISDIR(st.st_mode));
  CHECK_EQ(st.st_mode & 07777, 0755);
  CHECK_EQ(pend[HOMESFS_ACCT_BUSY], busy0 + 1);  // until JS counts it
  hq_t q = fp_opens_take();
  CHECK_EQ(q.n, 1);
  fp_open_rec_t *r = fp_rec(q.head);
  CHECK_EQ(r->kind, HOMESFS_REC_MKDIR);
  CHECK_EQ(r->fh, 700);
  CHECK_EQ(r->fd, -1);
  CHECK_EQ(r->ino, (uint64_t) st.st_ino);
  CHECK(r->dh == NULL);
  free(r);
  pend[HOMESFS_ACCT_BUSY] = busy0;
  // No slot left: JS's.
  CHECK_EQ(hs_fastpath_mkdir(P "/nd2", 0700, uid, getgid(), &made_st, &made_presented), HOMESFS_FASTPATH_FALLBACK);
  CHECK(fstatat(home_dir, "nd2", &st, AT_SYMLINK_NOFOLLOW) != 0);
  // Past the depth limit, setgid asked: JS's before any slot is taken. An
  // existing name (a directory, a file): JS's, the slot queued back unused.
  CHECK_EQ(fp_home_set_create(P, PLEN, token, 1, 07777, 0, 2, 0), 1);
  const char *doubts[] = { P "/nd/a/b", P "/sg", P "/nd", P "/f00" };
  const uint32_t modes[] = { 0700, 02755, 0700, 0700 };
  CHECK_EQ(fp_slot_grant(P, PLEN, token, 701, uid, 1), 1);
  for (int i = 0; i < 4; i++) {
    CHECK_EQ(hs_fastpath_mkdir(doubts[i], modes[i], uid, getgid(), &made_st, &made_presented), HOMESFS_FASTPATH_FALLBACK);
    CHECK_EQ(pend[HOMESFS_ACCT_BUSY], busy0);
    q = fp_opens_take();
    CHECK_EQ(q.n, i < 2 ? 0u : 1u);
    CHECK_EQ(fp_slot_count, i < 2 ? 1u : 0u);
    if (q.n == 0) continue;
    CHECK_EQ(fp_rec(q.head)->kind, HOMESFS_REC_UNUSED_CREATE);
    free(fp_rec(q.head));
    if (i == 2) CHECK_EQ(fp_slot_grant(P, PLEN, token, 702, uid, 1), 1);
  }
  CHECK(fstatat(home_dir, "sg", &st, AT_SYMLINK_NOFOLLOW) != 0);
  CHECK_EQ(fstatat(home_dir, "f00", &st, AT_SYMLINK_NOFOLLOW), 0);
  CHECK(S_ISREG(st.st_mode));
  umask(um);
  unlinkat(home_dir, "nd", AT_REMOVEDIR);
  fp_clear_all();
  CHECK_EQ(adopt_all(), 0);
  fp_reap();
}

// A link made here takes the inode of a create slot of the caller's (its
// record REC_LINK, no descriptor, no count beside the directory handles):
// the new name is the source's inode. Not published for links, with no
// slot, past the depth limit, between homes, from a hidden name (an
// O_TMPFILE's, JS's nameUnnamed) or onto the reserved one: JS's before any
// slot is taken. From a directory, a symlink, a missing name or onto an
// existing one: JS's, the slot queued back unused. Nothing is made in any.
TEST(a_link_takes_a_create_slots_inode_and_every_doubt_goes_to_js_with_nothing_made) {
  double token = publish();
  turn_on(token);
  uint32_t uid = getuid();
  struct stat st, src;
  // The names JS keeps (fastpath.ts JS_ONLY_NAMES): as setReserved gives them.
  size_t reserved_was = fp_reserved_n;
  memset(fp_reserved, 0, 2 * sizeof(fp_reserved_t));
  memcpy(fp_reserved[0].name, ".homesfs", 8);
  fp_reserved[0].len = 8;
  memcpy(fp_reserved[1].name, HOMESFS_HIDDEN_PREFIX, sizeof(HOMESFS_HIDDEN_PREFIX) - 1);
  fp_reserved[1].len = sizeof(HOMESFS_HIDDEN_PREFIX) - 1;
  fp_reserved[1].prefix = 1;
  fp_reserved_n = 2;
  char hidden[64];
  snprintf(hidden, sizeof(hidden), "%s0123456789abcdef", HOMESFS_HIDDEN_PREFIX);
  int hfd = openat(home_dir, hidden, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  REQUIRE(hfd >= 0);
  close(hfd);
  REQUIRE(symlinkat("f02", home_dir, "sl") == 0);
  CHECK_EQ(fp_slot_grant(P, PLEN, token, 710, uid, 1), 1);
  // Not published for links: JS's, even with a slot.
  CHECK_EQ(hs_fastpath_link(P "/f02", P "/l1", uid, getgid(), &made_st, &made_presented), HOMESFS_FASTPATH_FALLBACK);
  CHECK(fstatat(home_dir, "l1", &st, AT_SYMLINK_NOFOLLOW) != 0);
  CHECK_EQ(fp_slot_count, 1);
  CHECK_EQ(fp_home_set_link(P, PLEN, token, 1), 1);
  // Linked: the new name (in another directory of the home) is the source's inode, one record for JS.
  int64_t busy0 = pend[HOMESFS_ACCT_BUSY];  // what the tests before left there
  made_presented = 0;
  CHECK_EQ(hs_fastpath_link(P "/f02", P "/d/l1", uid, getgid(), &made_st, &made_presented), 0);
  CHECK(presented_as_getattr(P "/d/l1"));
  CHECK_EQ(made_st.st_nlink, 2);
  CHECK_EQ(fstatat(home_dir, "d/l1", &st, AT_SYMLINK_NOFOLLOW), 0);
  CHECK_EQ(fstatat(home_dir, "f02", &src, AT_SYMLINK_NOFOLLOW), 0);
  CHECK_EQ(st.st_ino, src.st_ino);
  CHECK_EQ(src.st_nlink, 2);
  CHECK_EQ(pend[HOMESFS_ACCT_BUSY], busy0 + 1);  // until JS counts it
  hq_t q = fp_opens_take();
  CHECK_EQ(q.n, 1);
  fp_open_rec_t *r = fp_rec(q.head);
  CHECK_EQ(r->kind, HOMESFS_REC_LINK);
  CHECK_EQ(r->kind, 7);
  CHECK_EQ(r->fh, 710);
  CHECK_EQ(r->fd, -1);
  CHECK_EQ(r->ino, (uint64_t) src.st_ino);
  CHECK(r->dh == NULL);
  free(r);
  pend[HOMESFS_ACCT_BUSY] = busy0;
  // No slot left: JS's.
  CHECK_EQ(hs_fastpath_link(P "/f02", P "/l2", uid, getgid(), &made_st, &made_presented), HOMESFS_FASTPATH_FALLBACK);
  CHECK(fstatat(home_dir, "l2", &st, AT_SYMLINK_NOFOLLOW) != 0);
  CHECK_EQ(fp_home_set_create(P, PLEN, token, 1, 07777, 0, 2, 0), 1);
  char hidden_path[96];
  snprintf(hidden_path, sizeof(hidden_path), P "/%s", hidden);
  const char *from[] = { P "/f02", "/t/h2/f02", hidden_path, P "/f02", P "/d", P "/sl", P "/nope", P "/f02" };
  const char *to[] = { P "/d/x/l", P "/l3", P "/l4", P "/.homesfs", P "/l5", P "/l6", P "/l7", P "/f03" };
  const char *made[] = { "d/x/l", "l3", "l4", ".homesfs", "l5", "l6", "l7", NULL };
  CHECK_EQ(fp_slot_grant(P, PLEN, token, 711, uid, 1), 1);
  for (int i = 0; i < 8; i++) {
    CHECK_EQ(hs_fastpath_link(from[i], to[i], uid, getgid(), &made_st, &made_presented), HOMESFS_FASTPATH_FALLBACK);
    CHECK_EQ(pend[HOMESFS_ACCT_BUSY], busy0);
    if (made[i] != NULL) CHECK(fstatat(home_dir, made[i], &st, AT_SYMLINK_NOFOLLOW) != 0);
    q = fp_opens_take();
    CHECK_EQ(q.n, i < 4 ? 0u : 1u);
    CHECK_EQ(fp_slot_count, i < 4 ? 1u : 0u);
    if (q.n == 0) continue;
    CHECK_EQ(fp_rec(q.head)->kind, HOMESFS_REC_UNUSED_CREATE);
    free(fp_rec(q.head));
    CHECK_EQ(fp_slot_grant(P, PLEN, token, 712 + (uint32_t) i, uid, 1), 1);
  }
  // The existing name is still the file it was.
  CHECK_EQ(fstatat(home_dir, "f03", &st, AT_SYMLINK_NOFOLLOW), 0);
  CHECK(st.st_ino != src.st_ino);
  CHECK_EQ(fstatat(home_dir, "f02", &src, AT_SYMLINK_NOFOLLOW), 0);
  CHECK_EQ(src.st_nlink, 2);
  // Off again (a profile that denies hard links): JS's, the slot left in its list.
  CHECK_EQ(fp_home_set_link(P, PLEN, token, 0), 1);
  CHECK_EQ(hs_fastpath_link(P "/f02", P "/l8", uid, getgid(), &made_st, &made_presented), HOMESFS_FASTPATH_FALLBACK);
  CHECK(fstatat(home_dir, "l8", &st, AT_SYMLINK_NOFOLLOW) != 0);
  CHECK_EQ(fp_slot_count, 1);
  unlinkat(home_dir, "d/l1", 0);
  unlinkat(home_dir, "sl", 0);
  unlinkat(home_dir, hidden, 0);
  fp_reserved_n = reserved_was;
  fp_clear_all();
  CHECK_EQ(adopt_all(), 0);
  fp_reap();
}

// ---- everything at once ----------------------------------------------------------------------

// The JS thread's rounds; the native threads go on until it has done them.
#define JS_ROUNDS 3000
static int stop = 0;
static int natives_left = 0;
static int going (void) { return !__atomic_load_n(&stop, __ATOMIC_ACQUIRE); }
static uint64_t opens_done = 0, creates_done = 0;  // rounds of those threads, atomic
// Until the thread counting *done has done n more rounds.
static void progress_of (uint64_t *done, uint64_t n) {
  uint64_t until = __atomic_load_n(done, __ATOMIC_ACQUIRE) + n;
  while (__atomic_load_n(done, __ATOMIC_ACQUIRE) < until) sched_yield();
}
static uint32_t unlinked_natively = 0;

static void path_of (char *out, size_t n, const char *prefix, int i) { snprintf(out, n, P "/%s%d", prefix, i); }
static int name_ok (const unsigned char *s, size_t n) { return 1; }
static int count_entry (void *buf, const char *name, const struct stat *st, off_t off) { (*(int *) buf)++; return 0; }

static void *getattrs (void *arg) {
  struct stat st;
  char p[64];
  for (int i = 0; going(); i++, sched_yield()) {
    snprintf(p, sizeof(p), P "/f%02d", i % FILES);
    hs_fastpath_getattr(p, &st);
    snprintf(p, sizeof(p), P "/d/f%d", i % 4);
    hs_fastpath_getattr(p, &st);
    hs_fastpath_getattr(P "/nope/x", &st);
    hs_fastpath_fgetattr(1000 + (uint64_t) (i % 64), &st);
    if (i % 16 == 0) {
      int n = 0;
      hs_fastpath_readdir(i % 32 == 0 ? P : P "/d", &n, count_entry, 0, name_ok);
    }
  }
  __atomic_sub_fetch(&natives_left, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void *opens (void *arg) {
  struct stat st;
  char p[64];
  for (int i = 0; going(); i++, sched_yield()) {
    snprintf(p, sizeof(p), P "/f%02d", i % FILES);
    uint64_t fh = 0;
    int dio = 0;
    if (hs_fastpath_open(p, O_RDONLY, getuid(), &fh, &dio) == 0) {
      hs_fastpath_fgetattr(fh, &st);
      hs_fastpath_release(fh);  // 0 when JS adopted it first (then JS closed it)
    }
    __atomic_add_fetch(&opens_done, 1, __ATOMIC_RELEASE);
  }
  __atomic_sub_fetch(&natives_left, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void *setattrs (void *arg) {
  char p[64];
  for (int i = 0; going(); i++, sched_yield()) {
    snprintf(p, sizeof(p), P "/f%02d", i % FILES);
    hs_fastpath_utimens(p, NULL);
    hs_fastpath_chmod(p, i % 2 ? 0600 : 0640);
    hs_fastpath_chown(p, UINT32_MAX, UINT32_MAX);
  }
  __atomic_sub_fetch(&natives_left, 1, __ATOMIC_RELEASE);
  return NULL;
}

// Creates (each adopted and closed by JS later), renames and unlinks, natively where C may.
static uint32_t renamed_natively = 0;
static uint32_t replaced_natively = 0;  // of unlinked_natively, names a native rename replaced
static void *creates_unlinks (void *arg) {
  char p[64], name[160];
  for (int i = 0; going(); i++, sched_yield()) {
    uint64_t fh = 0;
    int dio = 0;
    path_of(p, sizeof(p), "c", i % 8);
    if (hs_fastpath_create(p, 0600, O_RDWR | O_CREAT, getuid(), getgid(), &fh, &dio, &made_st, &made_presented) != 0) {
      snprintf(name, sizeof(name), "%s/c%d", home_path, i % 8);
      int fd = open(name, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);  // JS's create, in effect
      if (fd >= 0) close(fd);
    }
    path_of(p, sizeof(p), "c", (i + 4) % 8);
    if (hs_fastpath_unlink(p) == 0) {
      __atomic_add_fetch(&unlinked_natively, 1, __ATOMIC_RELAXED);
    } else {
      snprintf(name, sizeof(name), "%s/c%d", home_path, (i + 4) % 8);
      unlink(name);  // JS's unlink, in effect
    }
    // A rename of a closed file over another, or to a free name, natively where C may.
    char to[64], from[160], onto[160];
    snprintf(from, sizeof(from), "%s/v%d", home_path, i % 4);
    snprintf(onto, sizeof(onto), "%s/w%d", home_path, i % 4);
    int vfd = open(from, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);  // JS's creates, in effect
    if (vfd >= 0) close(vfd);
    if (i % 3 != 0) { vfd = open(onto, O_WRONLY | O_CREAT | O_CLOEXEC, 0600); if (vfd >= 0) close(vfd); }
    struct stat tst;
    int replaces = lstat(onto, &tst) == 0;  // only this thread makes or removes v* and w*
    path_of(p, sizeof(p), "v", i % 4);
    path_of(to, sizeof(to), "w", i % 4);
    if (hs_fastpath_rename(p, to, 0) == 0) {
      __atomic_add_fetch(&renamed_natively, 1, __ATOMIC_RELAXED);
      // A name replaced natively is released as an unlinked one.
      if (replaces) {
        __atomic_add_fetch(&unlinked_natively, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&replaced_natively, 1, __ATOMIC_RELAXED);
      }
    } else {
      rename(from, onto);  // JS's rename, in effect
    }
    char full[160];
    snprintf(full, sizeof(full), "%s/u%d", home_path, i);
    int fd = open(full, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
    path_of(p, sizeof(p), "u", i);
    if (hs_fastpath_unlink(p) == 0) __atomic_add_fetch(&unlinked_natively, 1, __ATOMIC_RELAXED);
    else unlink(full);  // JS's unlink, in effect
    __atomic_add_fetch(&creates_done, 1, __ATOMIC_RELEASE);
  }
  __atomic_sub_fetch(&natives_left, 1, __ATOMIC_RELEASE);
  return NULL;
}

// Writes decided here on inodes JS hands over and takes back, counts and drops, and clears under them.
#define WINODES 4
static int64_t wacct[HOMESFS_ACCT_LEN];
static void *writes (void *arg) {
  for (int i = 0; going(); i++, sched_yield()) {
    hs_wl_ticket_t t;
    uint32_t len = 1 + (uint32_t) (i % 200);
    if (hs_fastpath_wl_begin(99, 1 + (uint64_t) (i % WINODES), (int64_t) (i % 5000), len, i % 3 == 0, &t) == 0) {
      hs_fastpath_wl_end(&t, i % 7 == 0 ? (int64_t) len / 2 : (int64_t) len);
    }
  }
  __atomic_sub_fetch(&natives_left, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void js_write_inodes (int on) {
  fp_acct_t *a = fp_acct_wrap(wacct, HOMESFS_ACCT_LEN, NULL, NULL);
  for (uint64_t ino = 1; ino <= WINODES; ino++) {
    if (on) {
      fp_inode_delta(99, ino, 1);
      fp_wl_delegate_to(99, ino, 0, a);
    } else if (fp_wl_take_back(99, ino) != -1) {
      fp_inode_delta(99, ino, -1);
    }
  }
  fp_acct_put(a);
}

// JS: publications, grants, adoptions, removals and clears, while the native threads run.
static void js_loop (void) {
  uint32_t uid = getuid();
  uint32_t fh = 1000;
  double token = publish();
  turn_on(token);
  js_write_inodes(1);
  uint64_t r = 0x9E3779B97F4A7C15ULL;
  for (int round = 0; round < JS_ROUNDS; round++) {
    r ^= r << 13; r ^= r >> 7; r ^= r << 17;
    // Each change off and on again (as a rescan's gate or a policy change does), racing the ops.
    switch (r % 10) {
      case 0: token = publish(); turn_on(token); hs_fastpath_dirs_moved(); break;
      case 1: fp_home_remove(P, PLEN, token); token = publish(); turn_on(token); break;
      case 2: fp_clear_all(); token = publish(); turn_on(token); js_write_inodes(1); break;
      case 3:
        fp_home_set_pending(P, PLEN, token, NULL);
        fp_home_set_pending(P, PLEN, token, fp_acct_wrap(pend, HOMESFS_ACCT_LEN, NULL, NULL));
        fp_home_set_create(P, PLEN, token, 1, 07777, 0, 0, 0);
        break;
      case 4: fp_home_set_open(P, PLEN, token, 0); fp_home_set_open(P, PLEN, token, HOMESFS_OPEN_ON); break;
      case 5:
        fp_home_set_attr_ops(P, PLEN, token, 0, 07777, 07777);
        fp_home_set_attr_ops(P, PLEN, token, HOMESFS_ATTR_UTIMENS | HOMESFS_ATTR_CHMOD | HOMESFS_ATTR_CHOWN_OWNER, 07777, 07777);
        break;
      case 6: js_write_inodes(0); js_write_inodes(1); break;
      default:
        // Slots, and a few opens and creates made with everything on.
        for (int k = 0; k < 8; k++) fp_slot_grant(P, PLEN, token, fh++, uid, k & 1);
        progress_of(&opens_done, 4);
        if (fh % 32 == 0) progress_of(&creates_done, 1);
        adopt_all();
        fp_reap();
    }
  }
  __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
  while (__atomic_load_n(&natives_left, __ATOMIC_ACQUIRE) > 0) adopt_all();
  fp_home_set_open(P, PLEN, token, 0);
  adopt_all();
  fp_clear_all();
  adopt_all();
  fp_reap();
}

static void make_file (const char *name, size_t size) {
  char p[160];
  snprintf(p, sizeof(p), "%s/%s", home_path, name);
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  char buf[256];
  memset(buf, 'r', sizeof(buf));
  if (fd < 0 || write(fd, buf, size) != (ssize_t) size) { perror(p); exit(2); }
  close(fd);
}

static int named (const char *name) {
  struct stat st;
  return fstatat(home_dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static void js_counts (const char *name, int delta) {
  struct stat st;
  if (fstatat(home_dir, name, &st, AT_SYMLINK_NOFOLLOW) != 0) abort();
  fp_inode_delta((uint64_t) st.st_dev, (uint64_t) st.st_ino, delta);
}

// A directory's descriptor kept for GETATTR is trusted until a RENAME or RMDIR
// moves the generation (the session's, hs_fastpath_dirs_moved), whatever
// happened on the backing; a missing directory is ENOENT as the walk's, a
// file in the way goes to the walk; a removed home's descriptors are closed.
TEST(a_kept_directory_answers_until_the_generation_moves_and_goes_with_its_home) {
  double token = publish();
  struct stat st;
  char d[160], d2[160];
  snprintf(d, sizeof(d), "%s/d", home_path);
  snprintf(d2, sizeof(d2), "%s/d-moved", home_path);
  int fds = count_fds();
  uint64_t hits = __atomic_load_n(&fp_dc_hits, __ATOMIC_RELAXED);
  CHECK_EQ(hs_fastpath_getattr(P "/d/f0", &st), 0);
  CHECK_EQ(st.st_size, 10);
  CHECK_EQ(hs_fastpath_getattr(P "/d/f1", &st), 0);
  CHECK_EQ(__atomic_load_n(&fp_dc_hits, __ATOMIC_RELAXED), hits + 1);
  CHECK_EQ(count_fds(), fds + 1);
  // Moved behind the session (as only a RENAME through the mount can): still the kept one...
  CHECK_EQ(rename(d, d2), 0);
  CHECK_EQ(mkdir(d, 0700), 0);
  make_file("d/f0", 3);
  CHECK_EQ(hs_fastpath_getattr(P "/d/f0", &st), 0);
  CHECK_EQ(st.st_size, 10);
  // ...until the generation moves, as the RENAME's answer does.
  hs_fastpath_dirs_moved();
  CHECK_EQ(hs_fastpath_getattr(P "/d/f0", &st), 0);
  CHECK_EQ(st.st_size, 3);
  CHECK_EQ(hs_fastpath_getattr(P "/d/f1", &st), -ENOENT);
  CHECK_EQ(hs_fastpath_getattr(P "/nope/f1", &st), -ENOENT);
  // A file where a directory was: the whole path's walk answers (ENOTDIR).
  CHECK_EQ(hs_fastpath_getattr(P "/f03/x", &st), -ENOTDIR);
  // Back as the tree was, for the tests after.
  snprintf(d, sizeof(d), "%s/d/f0", home_path);
  CHECK_EQ(unlink(d), 0);
  snprintf(d, sizeof(d), "%s/d", home_path);
  CHECK_EQ(rmdir(d), 0);
  CHECK_EQ(rename(d2, d), 0);
  hs_fastpath_dirs_moved();
  CHECK_EQ(hs_fastpath_getattr(P "/d/f1", &st), 0);
  CHECK(count_fds() > fds);
  // Turned off (an open backing): every kept descriptor is closed and none is kept again.
  __atomic_store_n(&fp_dc_on, 0, __ATOMIC_RELEASE);
  fp_dc_forget(0, 1);
  CHECK_EQ(count_fds(), fds);
  CHECK_EQ(hs_fastpath_getattr(P "/d/f1", &st), 0);
  CHECK_EQ(count_fds(), fds);
  __atomic_store_n(&fp_dc_on, 1, __ATOMIC_RELEASE);
  CHECK_EQ(hs_fastpath_getattr(P "/d/f1", &st), 0);
  CHECK_EQ(count_fds(), fds + 1);
  // The home leaves the table: its kept descriptors are closed.
  CHECK_EQ(fp_home_remove(P, PLEN, token), 1);
  CHECK_EQ(count_fds(), fds - 1);
  fp_clear_all();
  fp_reap();
}

TEST(a_native_rename_moves_a_closed_file_and_releases_a_replaced_one_as_an_unlink_else_js_with_nothing_changed) {
  double token = publish();
  __atomic_store_n(&fp_free_inline_max, 65536, __ATOMIC_RELAXED);
  make_file("rs", 10);
  make_file("rt", 200);
  make_file("ru", 30);
  REQUIRE(mkdirat(home_dir, "d/e", 0700) == 0);
  // Not mutable, then mutable but not published for renames: JS's.
  CHECK_EQ(hs_fastpath_rename(P "/rs", P "/rn", 0), HOMESFS_FASTPATH_FALLBACK);
  turn_on(token);
  CHECK_EQ(fp_home_set_rename(P, PLEN, token, 0, 0), 1);
  CHECK_EQ(hs_fastpath_rename(P "/rs", P "/rn", 0), HOMESFS_FASTPATH_FALLBACK);
  CHECK(named("rs") && !named("rn"));
  CHECK_EQ(fp_home_set_rename(P, PLEN, token, 1, 2), 1);
  int64_t bytes = pend[HOMESFS_ACCT_RELEASED_BYTES], inodes = pend[HOMESFS_ACCT_RELEASED_INODES];
  // To a new name, in another directory: moved, nothing released.
  CHECK_EQ(hs_fastpath_rename(P "/rs", P "/d/rn", 0), 0);
  CHECK(!named("rs") && named("d/rn"));
  CHECK_EQ(pend[HOMESFS_ACCT_RELEASED_INODES], inodes);
  // Past the depth limit (3 > 2), between homes, EXCHANGE, NOREPLACE onto a name, a
  // directory, a missing source, a reserved-looking path (the home itself): JS's, nothing moved.
  CHECK_EQ(hs_fastpath_rename(P "/d/rn", P "/d/e/x", 0), HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(hs_fastpath_rename(P "/d/rn", "/t/other/x", 0), HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(hs_fastpath_rename(P "/d/rn", P "/rt", RENAME_EXCHANGE), HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(hs_fastpath_rename(P "/d/rn", P "/rt", RENAME_NOREPLACE), HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(hs_fastpath_rename(P "/d/e", P "/e2", 0), HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(hs_fastpath_rename(P "/nothing", P "/e2", 0), HOMESFS_FASTPATH_FALLBACK);
  CHECK_EQ(hs_fastpath_rename(P "/d/rn", P "/..", 0), HOMESFS_FASTPATH_FALLBACK);
  CHECK(named("d/rn") && named("d/e") && !named("e2") && !named("d/e/x"));
  // NOREPLACE onto a new name: moved.
  CHECK_EQ(hs_fastpath_rename(P "/d/rn", P "/rs", RENAME_NOREPLACE), 0);
  CHECK(named("rs") && !named("d/rn"));
  // An open source is moved (a rename moves a name, never an open file's bytes or charge).
  js_counts("rs", 1);
  CHECK_EQ(hs_fastpath_rename(P "/rs", P "/r9", 0), 0);
  CHECK_EQ(hs_fastpath_rename(P "/r9", P "/rs", 0), 0);
  js_counts("rs", -1);
  // An open target: JS's (it hides it), nothing moved.
  js_counts("rt", 1);
  CHECK_EQ(hs_fastpath_rename(P "/rs", P "/rt", 0), HOMESFS_FASTPATH_FALLBACK);
  js_counts("rt", -1);
  CHECK(named("rs") && named("rt") && !named("r9"));
  CHECK_EQ(pend[HOMESFS_ACCT_RELEASED_INODES], inodes);
  // Over a file with one name: its inode and its bytes released.
  CHECK_EQ(hs_fastpath_rename(P "/rs", P "/rt", 0), 0);
  CHECK(!named("rs") && named("rt"));
  CHECK_EQ(pend[HOMESFS_ACCT_RELEASED_INODES], inodes + 1);
  CHECK_EQ(pend[HOMESFS_ACCT_RELEASED_BYTES], bytes + 200);
  // Over a file with another name: only the inode (the name).
  REQUIRE(linkat(home_dir, "ru", home_dir, "ru2", 0) == 0);
  CHECK_EQ(hs_fastpath_rename(P "/rt", P "/ru", 0), 0);
  CHECK_EQ(pend[HOMESFS_ACCT_RELEASED_INODES], inodes + 2);
  CHECK_EQ(pend[HOMESFS_ACCT_RELEASED_BYTES], bytes + 200);
  // Two names of one inode: rename(2) changes nothing, JS's.
  CHECK_EQ(hs_fastpath_rename(P "/ru2", P "/ru2", 0), HOMESFS_FASTPATH_FALLBACK);
  REQUIRE(linkat(home_dir, "ru", home_dir, "ru3", 0) == 0);
  CHECK_EQ(hs_fastpath_rename(P "/ru", P "/ru3", 0), HOMESFS_FASTPATH_FALLBACK);
  CHECK(named("ru") && named("ru3"));
  // Made immutable: JS's again.
  fp_home_set_pending(P, PLEN, token, NULL);
  CHECK_EQ(hs_fastpath_rename(P "/ru", P "/rv", 0), HOMESFS_FASTPATH_FALLBACK);
  CHECK(named("ru") && !named("rv"));
  for (const char *n = "ru\0ru2\0ru3\0d/e\0"; *n; n += strlen(n) + 1) unlinkat(home_dir, n, strcmp(n, "d/e") == 0 ? AT_REMOVEDIR : 0);
  __atomic_store_n(&fp_free_inline_max, 0, __ATOMIC_RELAXED);
  fp_clear_all();
  fp_reap();
}

TEST(every_op_racing_republications_removals_clears_and_adoptions) {
  int fds = count_fds();
  uint32_t unlinks0 = (uint32_t) __atomic_load_n(&fp_uanswered, __ATOMIC_RELAXED);
  int64_t released0 = pend[HOMESFS_ACCT_RELEASED_INODES];
  uint64_t answered0 = fp_answered, opened0 = fp_oanswered, made0 = fp_canswered_create, decided0 = fp_wdecided, chmods0 = fp_chmod_answered;
  wacct[HOMESFS_ACCT_CREDIT_BYTES] = 1LL << 40;
  pthread_t t[5];
  void *(*fns[5])(void *) = { getattrs, opens, setattrs, creates_unlinks, writes };
  natives_left = 5;
  for (int i = 0; i < 5; i++) pthread_create(&t[i], NULL, fns[i], NULL);
  js_loop();
  for (int i = 0; i < 5; i++) pthread_join(t[i], NULL);
  // No reference lost or left: every home freed, every descriptor closed, nothing pinned.
  CHECK_EQ(fp_homes_alive, 0);
  CHECK_EQ(fp_home_count, 0);
  CHECK_EQ(fp_pins_held(), 0);
  CHECK_EQ(fp_slot_count, 0);
  CHECK_EQ(count_fds(), fds);
  // Each kind was answered here some of the time (the race ran through the native paths, not only their fallbacks).
  CHECK(fp_answered > answered0);
  CHECK(fp_oanswered > opened0);
  CHECK(fp_canswered_create > made0);
  CHECK(fp_wdecided > decided0);
  CHECK(fp_chmod_answered > chmods0);
  // Every native unlink's release reached the array it was made under (one array throughout here).
  CHECK(unlinked_natively > 0);
  fprintf(stderr, "# racing: %u names removed natively, %u of them by a rename over them (of %u native renames)\n", unlinked_natively, replaced_natively, renamed_natively);
  CHECK(replaced_natively > 0);
  CHECK_EQ((uint32_t) __atomic_load_n(&fp_uanswered, __ATOMIC_RELAXED) - unlinks0, unlinked_natively - replaced_natively);
  CHECK_EQ(pend[HOMESFS_ACCT_RELEASED_INODES] - released0, (int64_t) unlinked_natively);
  CHECK_EQ(wacct[HOMESFS_ACCT_INFLIGHT], 0);
  CHECK_EQ(wacct[HOMESFS_ACCT_CREDIT_BYTES] + wacct[HOMESFS_ACCT_GROWN] + wacct[HOMESFS_ACCT_REFUND], 1LL << 40);
}
