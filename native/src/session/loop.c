// The session's workers: threads that read requests from the device and
// process them (proto.c and libfuse decode, our ops answer), started as needed, and
// stopped at a request boundary for a handover (loop.h).
//
// Lock: w_mu guards the worker list and counts, the saved INIT and the
// writes of w_pause (an atomic: a worker reads it once more without w_mu,
// after it has raised its `reading` flag); w_cond wakes parked workers
// (resume, exit). A worker's `reading` flag is an atomic of its own. w_mu is
// never held across a read or a request; the pauser holds it while it
// signals (so every worker it signals is alive: a worker leaves the list
// under w_mu before it ends). Lock order: w_mu, then nothing (the lead's
// semaphore and the channel's atomics are taken without it).
//
// Invariants: a worker is idle (counted in w_idle) from the moment it looks
// for a request until it has one; when it takes one and no other worker is
// idle, it starts another (at most HS_MAX_WORKERS), so a request that blocks
// (a frozen disk, a path lock) never keeps the device unread. More than
// HS_MAX_IDLE idle workers: the extra ones end. Once w_pause is set, no
// worker starts a read: one that is reading is signalled (HS_STOP_SIGNAL,
// whose handler does nothing but interrupt the read) until it parks; one in
// a request parks when its request is done. "Paused" is every worker parked.
// A signal can land between a worker's last pause check and its read(2):
// the read then blocks until the next request, which it serves whole (no
// request is ever read and dropped); a pauser that waits for "paused" kicks
// again each time it looks (session.c), so the window closes at once. A
// signal sent just as a read returns a request is taken as that read
// returns to user space: the handler runs before the request is processed.
// Workers block SIGTERM, SIGINT, SIGHUP and SIGQUIT (the process's handlers
// run on Node's threads, as under libfuse's own loop) and never block
// HS_STOP_SIGNAL, whatever the mask of the thread that started them.
// HS_LOOP_ENDED is set as soon as the device is gone; workers still inside
// a request finish it (the session's state is never freed, session.c).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "session/channel.h"
#include "session/lead.h"
#include "session/handles.h"
#include "session/loop.h"
#include "session/proto.h"
#include "sys/clock.h"

#define HS_MAX_WORKERS 64
#define HS_MAX_IDLE 8
#define HS_STOP_SIGNAL (SIGRTMIN + 5)
#define FUSE_INIT_OPCODE 26

typedef struct hs_worker {
  struct hs_worker *next;
  pthread_t thread;
  char *buf;       // its request buffer (w_bufsize bytes), made by spawn
  int reading;     // atomic: between its pause check and the end of its read
  int parked;
  uint64_t since;  // atomic: CLOCK_MONOTONIC ns at which its request began, 0 between requests
} hs_worker_t;

static pthread_mutex_t w_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t w_cond = PTHREAD_COND_INITIALIZER;
static hs_worker_t *w_list;
static int w_total, w_idle, w_parked;
static int w_pause;          // atomic, written under w_mu
static int w_ended;
static struct fuse_session *w_se;
static struct fuse_chan *w_ch;
static size_t w_bufsize;
static char *w_init;         // the kernel's INIT request, as read, and the answer sent (proto.h)
static size_t w_init_len;
static uint32_t w_state;     // atomic: HS_LOOP_*

static void stop_signal (int sig) {
  (void) sig;
}


static void *worker_main (void *arg);

// Under w_mu: one more worker, with its buffer. 0 or -errno.
static int spawn (void) {
  hs_worker_t *w = calloc(1, sizeof(*w));
  if (w == NULL || (w->buf = malloc(w_bufsize)) == NULL) {
    free(w);
    return -ENOMEM;
  }
  w->next = w_list;
  w_list = w;
  w_total++;
  w_idle++;
  // The new thread starts with these blocked (process signals go to Node's
  // threads); worker_main unblocks HS_STOP_SIGNAL for itself.
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGHUP);
  sigaddset(&block, SIGQUIT);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int err = pthread_create(&w->thread, &attr, worker_main, w);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (err != 0) {
    w_list = w->next;
    w_total--;
    w_idle--;
    free(w->buf);
    free(w);
    return -err;
  }
  return 0;
}

// Under w_mu: w leaves the list.
static void retire (hs_worker_t *w) {
  hs_worker_t **pp = &w_list;
  while (*pp != w) pp = &(*pp)->next;
  *pp = w->next;
  w_total--;
  w_idle--;
  if (w_total == 0) {
    __atomic_store_n(&w_state, HS_LOOP_ENDED, __ATOMIC_SEQ_CST);
    w_ended = 1;
  }
  pthread_cond_broadcast(&w_cond);
  free(w->buf);
  free(w);
}

// The INIT request, and the answer sent if proto.c wrote it, are kept: a
// successor's session replays the one and takes the other (session_adopt.c).
static void keep_init (const char *buf, size_t len) {
  if (len < 8) return;
  uint32_t opcode;
  memcpy(&opcode, buf + 4, sizeof(opcode));
  if (opcode != FUSE_INIT_OPCODE) return;
  char *copy = malloc(len);
  if (copy == NULL) return;
  memcpy(copy, buf, len);
  pthread_mutex_lock(&w_mu);
  free(w_init);
  w_init = copy;
  w_init_len = len;
  pthread_mutex_unlock(&w_mu);
}

// Under w_mu: the device is gone (unmounted) or broken. The loop ends, and
// every other worker with it: the lead given back, readers interrupted.
// Returns with w_mu held again.
static void end_loop (void) {
  w_ended = 1;
  __atomic_store_n(&w_state, HS_LOOP_ENDED, __ATOMIC_SEQ_CST);
  pthread_cond_broadcast(&w_cond);
  pthread_mutex_unlock(&w_mu);
  hs_lead_release();
  hs_chan_stop(1);
  hs_loop_kick();
  pthread_mutex_lock(&w_mu);
}

static void *worker_main (void *arg) {
  hs_worker_t *w = arg;
  char *buf = w->buf;
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, HS_STOP_SIGNAL);
  pthread_sigmask(SIG_UNBLOCK, &stop, NULL);
  pthread_mutex_lock(&w_mu);
  for (;;) {
    while (w_pause && !w_ended) {
      w->parked = 1;
      w_parked++;
      pthread_cond_broadcast(&w_cond);
      pthread_cond_wait(&w_cond, &w_mu);
      w_parked--;
      w->parked = 0;
    }
    if (w_ended || w_idle > HS_MAX_IDLE) break;
    __atomic_store_n(&w->reading, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&w_mu);
    // Checked after `reading` is set: a pause set before this is seen; one
    // set after it finds the flag and signals this thread until it parks.
    int res = -EINTR;
    if (!__atomic_load_n(&w_pause, __ATOMIC_SEQ_CST)) {
      struct fuse_chan *ch = w_ch;
      res = fuse_chan_recv(&ch, buf, w_bufsize);
    }
    __atomic_store_n(&w->reading, 0, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&w_mu);
    if (res == -EINTR || res == -EAGAIN) continue;
    if (res <= 0) {
      end_loop();
      break;
    }
    w_idle--;
    if (w_idle == 0 && w_total < HS_MAX_WORKERS) spawn();
    pthread_mutex_unlock(&w_mu);
    size_t len = (size_t) res;
    // Seen by a handover (hs_loop_busy_ms): a request answered here for seconds
    // (a native cut of a big file) would hold a pause as long.
    __atomic_store_n(&w->since, (uint64_t) hs_mono_ns(), __ATOMIC_RELAXED);
    if (!hs_proto_filter(buf, &len, w_se, w_ch) && !hs_handles_filter(buf, len, w_ch)) fuse_session_process(w_se, buf, len, w_ch);
    __atomic_store_n(&w->since, 0, __ATOMIC_RELAXED);
    pthread_mutex_lock(&w_mu);
    w_idle++;
  }
  retire(w);
  pthread_mutex_unlock(&w_mu);
  return NULL;
}

int hs_loop_start (struct fuse_session *se, struct fuse_chan *ch) {
  static int signal_set = 0;
  if (!signal_set) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = stop_signal;  // no SA_RESTART: a read it interrupts returns EINTR
    sigemptyset(&sa.sa_mask);
    if (sigaction(HS_STOP_SIGNAL, &sa, NULL) != 0) return -errno;
    signal_set = 1;
  }
  pthread_mutex_lock(&w_mu);
  w_se = se;
  w_ch = ch;
  w_bufsize = fuse_chan_bufsize(ch);
  w_ended = 0;
  __atomic_store_n(&w_state, HS_LOOP_RUNNING, __ATOMIC_SEQ_CST);
  int err = spawn();
  if (err != 0) __atomic_store_n(&w_state, HS_LOOP_ENDED, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&w_mu);
  return err;
}

uint32_t hs_loop_state (void) {
  return __atomic_load_n(&w_state, __ATOMIC_SEQ_CST);
}

void hs_loop_pause (void) {
  pthread_mutex_lock(&w_mu);
  __atomic_store_n(&w_pause, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&w_mu);
  hs_chan_stop(1);
  hs_loop_kick();
}

void hs_loop_kick (void) {
  pthread_mutex_lock(&w_mu);
  for (hs_worker_t *w = w_list; w != NULL; w = w->next) {
    if (!w->parked && __atomic_load_n(&w->reading, __ATOMIC_SEQ_CST)) pthread_kill(w->thread, HS_STOP_SIGNAL);
  }
  pthread_mutex_unlock(&w_mu);
}

int hs_loop_paused (void) {
  pthread_mutex_lock(&w_mu);
  int all = w_pause && (w_parked == w_total || w_ended);
  pthread_mutex_unlock(&w_mu);
  return all;
}

double hs_loop_busy_ms (void) {
  uint64_t now = (uint64_t) hs_mono_ns(), oldest = 0;
  pthread_mutex_lock(&w_mu);
  for (hs_worker_t *w = w_list; w != NULL; w = w->next) {
    uint64_t since = __atomic_load_n(&w->since, __ATOMIC_RELAXED);
    if (since != 0 && since < now && now - since > oldest) oldest = now - since;
  }
  pthread_mutex_unlock(&w_mu);
  return (double) oldest / 1e6;
}

void hs_loop_resume (void) {
  hs_chan_stop(0);
  pthread_mutex_lock(&w_mu);
  __atomic_store_n(&w_pause, 0, __ATOMIC_SEQ_CST);
  pthread_cond_broadcast(&w_cond);
  pthread_mutex_unlock(&w_mu);
}

void hs_loop_stats (hs_loop_stats_t *s) {
  pthread_mutex_lock(&w_mu);
  s->workers = (uint32_t) w_total;
  s->idle = (uint32_t) w_idle;
  s->parked = (uint32_t) w_parked;
  s->paused = (uint32_t) w_pause;
  pthread_mutex_unlock(&w_mu);
}

int hs_loop_init_request (char **buf, size_t *len) {
  int err = -ENOENT;
  pthread_mutex_lock(&w_mu);
  if (w_init != NULL && (*buf = malloc(w_init_len)) != NULL) {
    memcpy(*buf, w_init, w_init_len);
    *len = w_init_len;
    err = 0;
  }
  pthread_mutex_unlock(&w_mu);
  return err;
}

void hs_loop_keep_init (const char *buf, size_t len) {
  keep_init(buf, len);
}
