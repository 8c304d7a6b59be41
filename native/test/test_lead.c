// channel.c's single-reader lead token, without a mount: the token is
// lead_cur (0: free) and a semaphore that is 1 exactly while nobody holds or
// took the lead. Every lead must be posted back exactly once, whether its
// leader gives it up (release, or its thread exits) or the watchdog revokes
// it: a lead posted twice lets two threads read at once for good, one never
// posted stops every reader. channel.c is included for its static functions;
// built without Node (HOMESFS_NO_NAPI), linked with libfuse (unused here).
#include "../src/session/channel.c"
#include "harness.h"

// channel.c's passthrough mark and device (passthrough.c): none in these tests.
int hs_pt_take_mark (uint64_t *fh, int32_t *id) { (void) fh; (void) id; return 0; }
void hs_pt_set_dev (int fd) { (void) fd; }

// The handle epoch channel.c names replies by (session/handles.c): none here.
uint32_t hs_fh_epoch (void) { return 0; }

static int sem_value(void) {
  int v = -1;
  sem_getvalue(&hs_lead_sem, &v);
  return v;
}

// What hs_lead_start does, without its watchdog thread: the tests call
// hs_lead_revoke themselves, or start the real watchdog.
__attribute__((constructor)) static void lead_init(void) {
  sem_init(&hs_lead_sem, 0, 1);
  sem_init(&hs_wd_sem, 0, 0);
  pthread_key_create(&hs_lead_key, hs_lead_exit);
  hs_lead_on = 1;
}

TEST(take_then_release_posts_once) {
  hs_lead_take();
  uint64_t mine = hs_lead_mine;
  CHECK(mine != 0);
  CHECK_EQ(hs_lead_cur, mine);
  CHECK_EQ(sem_value(), 0);
  hs_lead_take();                  // still the leader: keeps it, no wait
  CHECK_EQ(hs_lead_mine, mine);
  CHECK_EQ(sem_value(), 0);
  uint64_t handoffs = hs_lead_handoffs;
  hs_lead_release();
  CHECK_EQ(hs_lead_cur, 0);
  CHECK_EQ(hs_lead_mine, 0);
  CHECK_EQ(sem_value(), 1);
  CHECK_EQ(hs_lead_handoffs, handoffs + 1);
  hs_lead_release();               // not a leader any more: nothing
  hs_lead_release_read();
  CHECK_EQ(sem_value(), 1);
  CHECK_EQ(hs_lead_handoffs, handoffs + 1);
}

TEST(a_revoked_lead_is_posted_by_the_watchdog_only) {
  hs_lead_take();
  uint64_t mine = hs_lead_mine;
  hs_lead_busy();
  CHECK(hs_lead_busy_since != 0);
  uint64_t revoked = hs_lead_revoked;
  CHECK_EQ(hs_lead_revoke(mine), 1);
  CHECK_EQ(hs_lead_revoked, revoked + 1);
  CHECK_EQ(hs_lead_cur, 0);
  CHECK_EQ(hs_lead_busy_since, 0);
  CHECK_EQ(sem_value(), 1);
  CHECK_EQ(hs_lead_revoke(mine), 0);   // twice: nothing more
  hs_lead_release();                   // the old leader gives it up late: no second post
  CHECK_EQ(sem_value(), 1);
  hs_lead_take();                      // and takes a new lead through the semaphore
  CHECK(hs_lead_mine > mine);
  CHECK_EQ(sem_value(), 0);
  hs_lead_release();
  CHECK_EQ(sem_value(), 1);
}

TEST(a_revoked_leader_taking_again_waits_for_a_new_lead) {
  hs_lead_take();
  uint64_t mine = hs_lead_mine;
  hs_lead_busy();
  CHECK_EQ(hs_lead_revoke(mine), 1);
  hs_lead_take();                      // before any release: becomes a follower, then leads anew
  CHECK(hs_lead_mine != mine);
  CHECK_EQ(hs_lead_cur, hs_lead_mine);
  CHECK_EQ(sem_value(), 0);
  hs_lead_release();
  CHECK_EQ(sem_value(), 1);
}

TEST(a_revoke_after_the_release_does_nothing) {
  hs_lead_take();
  uint64_t mine = hs_lead_mine;
  hs_lead_busy();
  hs_lead_release();
  CHECK_EQ(hs_lead_revoke(mine), 0);   // the watchdog saw the lead before the release
  CHECK_EQ(sem_value(), 1);
}

static void *lead_and_exit(void *arg) {
  hs_lead_take();
  hs_lead_busy();
  *(uint64_t *) arg = hs_lead_mine;
  return NULL;                              // still leading: the thread key's destructor gives it up
}

TEST(a_thread_that_exits_leading_gives_the_lead_up) {
  pthread_t t;
  uint64_t theirs = 0;
  pthread_create(&t, NULL, lead_and_exit, &theirs);
  pthread_join(t, NULL);
  CHECK(theirs != 0);
  CHECK_EQ(hs_lead_cur, 0);
  CHECK_EQ(sem_value(), 1);
}

// Workers take the lead, "read", and then answer natively (keep it), give it
// up, or stall past HOMESFS_LEAD_STALL_NS so that the real watchdog revokes
// it; a sampler checks the semaphore never exceeds 1. At the end every worker
// has let go: the semaphore is 1 and nobody holds a lead.
#define WORKERS 6
#define RUN_NS 1500000000LL
static int stop = 0;
static int sem_over = 0;
static uint64_t takes = 0, stalls = 0;
static void *worker(void *arg) {
  uint64_t r = (uint64_t) (uintptr_t) arg * 0x9E3779B97F4A7C15ULL + 1;
  while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
    hs_lead_take();
    __atomic_add_fetch(&takes, 1, __ATOMIC_RELAXED);
    hs_lead_busy();
    r ^= r << 13; r ^= r >> 7; r ^= r << 17;
    switch (r % 64) {
      case 0: {                             // a stall the watchdog must break
        __atomic_add_fetch(&stalls, 1, __ATOMIC_RELAXED);
        struct timespec ts = { 0, 2 * HOMESFS_LEAD_STALL_NS };
        nanosleep(&ts, NULL);
        break;
      }
      case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 8: case 9: case 10:
        hs_lead_release();             // before JavaScript or a big write
        break;
      case 11: case 12:
        hs_lead_release_read();        // before a read that waits
        break;
      default: {                            // answered natively
        struct timespec ts = { 0, 20000 };
        nanosleep(&ts, NULL);
      }
    }
  }
  hs_lead_release();
  return NULL;
}

TEST(racing_workers_and_the_watchdog_post_every_lead_once) {
  uint64_t revoked0 = hs_lead_revoked, handoffs0 = hs_lead_handoffs;
  __atomic_store_n(&hs_lead_last, hs_mono_ns(), __ATOMIC_SEQ_CST);
  pthread_t wd, w[WORKERS];
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  REQUIRE(pthread_create(&wd, &attr, hs_lead_watchdog, NULL) == 0);
  for (int i = 0; i < WORKERS; i++) pthread_create(&w[i], NULL, worker, (void *) (uintptr_t) (i + 1));
  int64_t end = hs_mono_ns() + RUN_NS;
  while (hs_mono_ns() < end) {
    if (sem_value() > 1) sem_over = 1;
    struct timespec ts = { 0, 50000 };
    nanosleep(&ts, NULL);
  }
  __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
  for (int i = 0; i < WORKERS; i++) {
    // A lead never posted leaves a worker in sem_wait for good.
    struct timespec limit;
    clock_gettime(CLOCK_REALTIME, &limit);
    limit.tv_sec += 10;
    if (pthread_timedjoin_np(w[i], NULL, &limit) != 0) {
      fprintf(stderr, "  worker %d never got the lead back: a lead was lost\n", i);
      CHECK(0);
      return;
    }
  }
  CHECK_EQ(sem_over, 0);
  CHECK_EQ(sem_value(), 1);
  CHECK_EQ(hs_lead_cur, 0);
  // all three ways a lead ends were exercised
  CHECK(hs_lead_revoked > revoked0);
  CHECK(hs_lead_handoffs > handoffs0);
  CHECK(hs_lead_read_handoffs > 0);
  printf("# lead stress: %" PRIu64 " takes, %" PRIu64 " stalls, %" PRIu64 " revoked, %" PRIu64 " handoffs\n",
         takes, stalls, hs_lead_revoked - revoked0, hs_lead_handoffs - handoffs0);
}
