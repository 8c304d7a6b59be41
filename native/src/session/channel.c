// The channel between libfuse and /dev/fuse, and what rides on it.
//
// - The flush gate: JS's table of which handles' FLUSH it must see; the rest
//   are answered on the session's worker (hs_flush_is_noop).
// - FOPEN_NOFLUSH: the open and create ops mark a reader in a zero gate slot
//   (thread-local, set and consumed on the same worker thread), and this
//   channel's send sets the flag in exactly that reply.
// - One reader at a time: a token (lead_cur) that one libfuse worker holds
//   while it reads; a watchdog takes it from a leader stuck on one request.
// - Stopping (a handover, the loop's end): while chan_stopping is set no
//   thread starts a read, takes the lead or keeps it (a waiter that gets the
//   semaphore posts it back), so the semaphore ends up 1 with no leader.
//
// Invariants: the thread-locals (noflush_pending/fh, lead_mine) are only
// touched by their own thread; lead_cur, busy_since, last and the counters
// are atomics; the lead semaphore is 1 exactly while lead_cur is 0 and no
// thread has taken it, so every lead is posted back exactly once (a CAS of
// lead_cur to 0 decides who posts: the leader or the watchdog). No lock.
#define FUSE_USE_VERSION 29
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/uio.h>
#include <fuse_lowlevel.h>
#ifndef HOMESFS_NO_NAPI
#include <node_api.h>
#include "sys/napi_args.h"
#endif

#include "sys/clock.h"
#include "session/channel.h"
#include "session/proto.h"
#include "session/channel_internal.h"
#include "session/lead.h"
#include "session/handles.h"
#include "session/passthrough.h"

// The flush gate: a table of 65536 counters that JS owns and writes (see
// Fuse.prototype.setFlushGate). Slot fh & 0xffff counts the open handles in
// that slot whose FLUSH JS must answer; a FLUSH for a handle in a zero slot is
// a no-op in JS, so it is answered here without a round trip. JS raises a
// slot before it replies to the open, so no FLUSH for that fh can come earlier.
uint16_t *ch_flush_gate = NULL;
#ifndef HOMESFS_NO_NAPI
napi_ref ch_flush_gate_ref = NULL;
#endif
uint64_t hs_flush_requests = 0;  // FLUSHes received, atomic (tests: none for a NOFLUSH open)

int hs_flush_is_noop (const struct fuse_file_info *info) {
  __atomic_add_fetch(&hs_flush_requests, 1, __ATOMIC_RELAXED);
  if (info == NULL) return 0;
  uint16_t *gate = __atomic_load_n(&ch_flush_gate, __ATOMIC_ACQUIRE);
  return gate != NULL && __atomic_load_n(&gate[info->fh & 0xffff], __ATOMIC_ACQUIRE) == 0;
}

// ---- FOPEN_NOFLUSH ------------------------------------------------------------
// The kernel sends a FLUSH on every close(2) of every descriptor, and libfuse
// 2.9 cannot tell it not to (its fill_open knows direct_io, keep_cache and
// nonseekable only). FLUSH is a no-op for every handle whose slot in the flush
// gate is 0 (above): it is answered here, but it still costs a request, a
// wake of a worker thread and of the caller, a third of an open+close. Since
// Linux 5.17 an open answered with FOPEN_NOFLUSH gets no FLUSH at its closes
// (fuse_flush returns at once without writeback cache, which libfuse 2.9 never
// enables; locks are the kernel's own here: no lock op is registered). So the
// open and create ops mark, on their thread, the handle they are answering
// with a zero gate slot (readers only: a writer's home may become a text home
// before its close, which then reports an unfinished last character), and
// the binding's own channel (read(2) and writev(2) on /dev/fuse, with the
// errno rules of libfuse's kernel channel) sets the flag in that reply:
// libfuse sends the open's reply on the same thread right after the op
// returns, and nothing before it. A handle JS must see the FLUSH of (a writer
// in a text home) is in a raised slot, raised before JS answers its open.
#define HOMESFS_FOPEN_NOFLUSH (1u << 5)
struct hs_out_header { uint32_t len; int32_t error; uint64_t unique; };
// 7.40's fuse_open_out: backing_id where 7.38 has padding (proto.h).
struct hs_open_out { uint64_t fh; uint32_t open_flags; int32_t backing_id; };

int hs_noflush_on = 0;                // atomic; setNoFlush
uint64_t hs_noflush_count = 0;        // opens answered with it, atomic
static __thread int hs_noflush_pending = 0;
static __thread uint64_t hs_noflush_fh = 0;

static void hs_mark_noflush (const struct fuse_file_info *info) {
  hs_noflush_pending = 0;
  if (info == NULL || !__atomic_load_n(&hs_noflush_on, __ATOMIC_ACQUIRE)) return;
  // Readers only: a writer's home may become a text home while it is open, and then its close reports an unfinished character.
  if ((info->flags & O_ACCMODE) != O_RDONLY) return;
  uint16_t *gate = __atomic_load_n(&ch_flush_gate, __ATOMIC_ACQUIRE);
  if (gate == NULL || __atomic_load_n(&gate[info->fh & 0xffff], __ATOMIC_ACQUIRE) != 0) return;
  hs_noflush_fh = hs_fh_out(info->fh);  // as the reply carries it
  hs_noflush_pending = 1;
}

void hs_noflush_after_open (int res, const struct fuse_file_info *info) {
  if (res == 0) hs_mark_noflush(info);
  else hs_noflush_pending = 0;
}

// ---- One reader at a time (fuse.singleReader) ---------------------------------
// libfuse's mt
// loop keeps every idle worker blocked in read(2) on the device, so the kernel
// wakes one for each request although the thread that answered the last one
// is about to read again: a context switch per request, and on a
// paravirtualised guest every switch is a hypervisor round trip. Here one
// thread, the leader, reads; the other idle workers wait for the lead. A
// request answered natively keeps it, and the next request is often queued by
// then (a RELEASE after an OPEN's answer); a thread gives it up before it
// blocks on JavaScript or copies a large buffer.
//
// A native answer can still block: a cold disk, a journal commit, dirty-page
// throttling. So that no home can hold every other up that way, a watchdog
// thread looks every HOMESFS_LEAD_STALL_NS while requests flow, and takes the
// lead away from a leader busy with one request for that long; a follower
// reads on. It sleeps without a timeout once requests stop (woken by the next one).
//
// The lead is a token: lead_cur is the number of the current lead, 0 while
// nobody holds it; the semaphore is 1 exactly while lead_cur is 0 and nobody
// took it. Giving it up (the leader) and taking it away (the watchdog) are
// one compare-and-swap of lead_cur to 0, so exactly one of them posts.
// 4 ms: far longer than any cached answer, short for a person. The watchdog
// looks every 4 ms while requests flow (a wake costs 30-35 us of CPU on this
// VM: about 1% of a core), so a stuck leader loses the lead within 4-8 ms.
#define HOMESFS_LEAD_STALL_NS 4000000LL
#define HOMESFS_LEAD_IDLE_NS 50000000LL    // the watchdog sleeps after 50 ms without a request
int hs_lead_wanted = 1;        // setSingleReader, read at mount
int hs_lead_on = 0;            // for this mount
static sem_t hs_lead_sem;
static uint64_t hs_lead_seq = 0;      // atomic
static uint64_t hs_lead_cur = 0;      // atomic: the current lead's number, 0 = free
static int64_t hs_lead_busy_since = 0; // atomic: ns the leader took its request, 0 while it reads
static int64_t hs_lead_last = 0;      // atomic: ns of the last request taken
static int hs_wd_asleep = 0;          // atomic
static sem_t hs_wd_sem;
uint64_t hs_lead_handoffs = 0; // atomic
uint64_t hs_lead_revoked = 0;  // atomic
uint64_t hs_lead_read_handoffs = 0; // atomic: of the handoffs, before a read that would wait
static pthread_key_t hs_lead_key;
static __thread uint64_t hs_lead_mine = 0;

// Gives the lead up if this thread still holds it: exactly one post per lead.
static void hs_lead_drop (void) {
  uint64_t mine = hs_lead_mine;
  if (mine == 0) return;
  hs_lead_mine = 0;
  pthread_setspecific(hs_lead_key, NULL);
  if (__atomic_compare_exchange_n(&hs_lead_cur, &mine, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    __atomic_store_n(&hs_lead_busy_since, 0, __ATOMIC_SEQ_CST);
    sem_post(&hs_lead_sem);
  }
}

// A worker libfuse retires (more than 10 idle) may still lead.
static void hs_lead_exit (void *v) {
  (void) v;
  hs_lead_drop();
}

void hs_lead_release (void) {
  if (hs_lead_mine == 0) return;
  __atomic_add_fetch(&hs_lead_handoffs, 1, __ATOMIC_RELAXED);
  hs_lead_drop();
}

void hs_lead_release_read (void) {
  if (hs_lead_mine == 0) return;
  __atomic_add_fetch(&hs_lead_read_handoffs, 1, __ATOMIC_RELAXED);
  hs_lead_release();
}

// Set while the session stops reading (a handover): a thread about to read,
// or waiting for the lead, returns -EINTR instead (the session signals the
// ones already inside read(2), which then return EINTR too).
static int hs_chan_stopping = 0; // atomic

void hs_chan_stop (int on) {
  __atomic_store_n(&hs_chan_stopping, on, __ATOMIC_SEQ_CST);
}

// Before the read of the next request: 0, or -EINTR when reading stops.
static int hs_lead_take (void) {
  if (__atomic_load_n(&hs_chan_stopping, __ATOMIC_SEQ_CST)) {
    // A worker that stops holds no lead: the watchdog would revoke it, and
    // whoever reads next takes it.
    hs_lead_drop();
    return -EINTR;
  }
  if (!hs_lead_on) return 0;
  uint64_t mine = hs_lead_mine;
  if (mine != 0) {
    if (__atomic_load_n(&hs_lead_cur, __ATOMIC_SEQ_CST) == mine) {
      __atomic_store_n(&hs_lead_busy_since, 0, __ATOMIC_SEQ_CST);
      // Still the lead after the store: read. Taken away in between (the
      // watchdog, as this thread came back from a long request): a follower,
      // never a second reader.
      if (__atomic_load_n(&hs_lead_cur, __ATOMIC_SEQ_CST) == mine) return 0;
    }
    hs_lead_mine = 0; // taken away while this thread was busy: a follower now
    pthread_setspecific(hs_lead_key, NULL);
  }
  while (sem_wait(&hs_lead_sem) != 0) {
    if (__atomic_load_n(&hs_chan_stopping, __ATOMIC_SEQ_CST)) return -EINTR;
  }
  if (__atomic_load_n(&hs_chan_stopping, __ATOMIC_SEQ_CST)) {
    // Stopping: the lead goes back untaken, for whoever reads next.
    sem_post(&hs_lead_sem);
    return -EINTR;
  }
  mine = __atomic_add_fetch(&hs_lead_seq, 1, __ATOMIC_SEQ_CST);
  __atomic_store_n(&hs_lead_busy_since, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&hs_lead_cur, mine, __ATOMIC_SEQ_CST);
  hs_lead_mine = mine;
  pthread_setspecific(hs_lead_key, (void *) 1);
  return 0;
}

// After the read returned a request.
static void hs_lead_busy (void) {
  uint64_t mine = hs_lead_mine;
  if (mine == 0 || __atomic_load_n(&hs_lead_cur, __ATOMIC_SEQ_CST) != mine) return;
  int64_t now = hs_mono_ns();
  __atomic_store_n(&hs_lead_busy_since, now, __ATOMIC_SEQ_CST);
  // The lead may have been taken away between the check and the store: the
  // time would then be the next leader's, which is reading, and the watchdog
  // would take its lead for nothing. Taken back unless that leader has
  // stored its own since (the compare fails then).
  if (__atomic_load_n(&hs_lead_cur, __ATOMIC_SEQ_CST) != mine) {
    int64_t stale = now;
    __atomic_compare_exchange_n(&hs_lead_busy_since, &stale, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  }
  __atomic_store_n(&hs_lead_last, now, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&hs_wd_asleep, __ATOMIC_SEQ_CST) && __atomic_exchange_n(&hs_wd_asleep, 0, __ATOMIC_SEQ_CST)) sem_post(&hs_wd_sem);
}

// The leader of lead `cur` has been on one request too long: its lead goes
// to a follower, unless it gave it up meanwhile (then it posted). -> 1 revoked.
static int hs_lead_revoke (uint64_t cur) {
  if (!__atomic_compare_exchange_n(&hs_lead_cur, &cur, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return 0;
  __atomic_store_n(&hs_lead_busy_since, 0, __ATOMIC_SEQ_CST);
  __atomic_add_fetch(&hs_lead_revoked, 1, __ATOMIC_RELAXED);
  sem_post(&hs_lead_sem);
  return 1;
}

static void * hs_lead_watchdog (void *arg) {
  (void) arg;
  for (;;) {
    int64_t now = hs_mono_ns();
    uint64_t cur = __atomic_load_n(&hs_lead_cur, __ATOMIC_SEQ_CST);
    int64_t since = __atomic_load_n(&hs_lead_busy_since, __ATOMIC_SEQ_CST);
    if (cur != 0 && since != 0 && now - since >= HOMESFS_LEAD_STALL_NS) {
      hs_lead_revoke(cur);
    } else if (since == 0 && now - __atomic_load_n(&hs_lead_last, __ATOMIC_SEQ_CST) >= HOMESFS_LEAD_IDLE_NS) {
      // Quiet: sleep until the next request (its leader wakes this thread).
      __atomic_store_n(&hs_wd_asleep, 1, __ATOMIC_SEQ_CST);
      if (__atomic_load_n(&hs_lead_busy_since, __ATOMIC_SEQ_CST) == 0 &&
          hs_mono_ns() - __atomic_load_n(&hs_lead_last, __ATOMIC_SEQ_CST) >= HOMESFS_LEAD_IDLE_NS) {
        while (sem_wait(&hs_wd_sem) != 0) { /* EINTR */ }
      }
      __atomic_store_n(&hs_wd_asleep, 0, __ATOMIC_SEQ_CST);
      continue;
    }
    struct timespec ts = { 0, HOMESFS_LEAD_STALL_NS };
    nanosleep(&ts, NULL);
  }
  return NULL;
}

void hs_lead_start (void) {
  static int started = 0;
  hs_lead_on = __atomic_load_n(&hs_lead_wanted, __ATOMIC_ACQUIRE);
  if (!hs_lead_on || started) return;
  started = 1;
  sem_init(&hs_lead_sem, 0, 1);
  sem_init(&hs_wd_sem, 0, 0);
  pthread_key_create(&hs_lead_key, hs_lead_exit);
  __atomic_store_n(&hs_lead_last, hs_mono_ns(), __ATOMIC_SEQ_CST);
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &attr, hs_lead_watchdog, NULL) != 0) hs_lead_on = 0; // no watchdog, no single reader
  pthread_attr_destroy(&attr);
}

// A read of the next request, with libfuse 2.9's kernel-channel errno rules:
// ENOENT (an interrupted request) reads again, ENODEV (unmounted) ends the session.
static int hs_chan_receive (struct fuse_chan **chp, char *buf, size_t size) {
  struct fuse_chan *ch = *chp;
  struct fuse_session *se = fuse_chan_session(ch);
  if (hs_lead_take() != 0) return -EINTR;
restart:;
  if (__atomic_load_n(&hs_chan_stopping, __ATOMIC_SEQ_CST)) {
    hs_lead_drop();
    return -EINTR;
  }
  ssize_t res = read(fuse_chan_fd(ch), buf, size);
  int err = errno;
  if (res > 0) hs_lead_busy();
  if (se != NULL && fuse_session_exited(se)) return 0;
  if (res == -1) {
    if (err == ENOENT) goto restart;  // the request was interrupted: safe to read again
    if (err == ENODEV) {              // unmounted
      if (se != NULL) fuse_session_exit(se);
      return 0;
    }
    // Interrupted to stop reading: the lead goes to whoever reads next.
    if (err == EINTR) hs_lead_drop();
    else if (err != EAGAIN) perror("fuse: reading device");
    return -err;
  }
  if ((size_t) res < sizeof(struct hs_out_header)) {
    fprintf(stderr, "short read on fuse device\n");
    return -EIO;
  }
  return (int) res;
}

// A writev of a reply (ENOENT: the request was interrupted, not an error to
// print), with the flag set in the reply to an open marked above.
// The reply's fuse_open_out, if it is a successful open's: OPEN's reply ends
// with it, CREATE's (after fuse_entry_out) too.
static struct hs_open_out * open_out_of (const struct iovec iov[], size_t count) {
  if (count < 2 || iov[0].iov_len < sizeof(struct hs_out_header)) return NULL;
  const struct hs_out_header *oh = (const struct hs_out_header *) iov[0].iov_base;
  const struct iovec *last = &iov[count - 1];
  if (oh->error != 0 || last->iov_len < sizeof(struct hs_open_out)) return NULL;
  return (struct hs_open_out *) ((char *) last->iov_base + last->iov_len - sizeof(struct hs_open_out));
}

static int hs_chan_send (struct fuse_chan *ch, const struct iovec iov[], size_t count) {
  if (iov == NULL) return 0;
  if (hs_noflush_pending) {
    hs_noflush_pending = 0;
    struct hs_open_out *oo = open_out_of(iov, count);
    if (oo != NULL && oo->fh == hs_noflush_fh) {
      oo->open_flags |= HOMESFS_FOPEN_NOFLUSH;
      __atomic_add_fetch(&hs_noflush_count, 1, __ATOMIC_RELAXED);
    }
  }
  uint64_t pt_fh;
  int32_t pt_id;
  if (hs_pt_take_mark(&pt_fh, &pt_id)) {
    // Passed through (ops_files.c): libfuse 2.9 wrote the rest of the flags.
    struct hs_open_out *oo = open_out_of(iov, count);
    if (oo != NULL && oo->fh == pt_fh) {
      oo->open_flags |= HS_FOPEN_PASSTHROUGH;
      oo->backing_id = pt_id;
    }
  }
  ssize_t res = writev(fuse_chan_fd(ch), iov, (int) count);
  int err = errno;
  if (res == -1) {
    struct fuse_session *se = fuse_chan_session(ch);
    if (se != NULL && !fuse_session_exited(se) && err != ENOENT) perror("fuse: writing device");
    return -err;
  }
  return 0;
}

static void hs_chan_destroy (struct fuse_chan *ch) {
  int fd = fuse_chan_fd(ch);
  if (fd != -1) close(fd);
}

// Our channel on /dev/fuse descriptor fd (owned by it from now on), with
// requests of up to bufsize bytes; NULL when it cannot be made.
struct fuse_chan * hs_chan_on_fd (int fd, size_t bufsize) {
  hs_pt_set_dev(fd);
  struct fuse_chan_ops op;
  memset(&op, 0, sizeof(op));
  op.receive = hs_chan_receive;
  op.send = hs_chan_send;
  op.destroy = hs_chan_destroy;
  return fuse_chan_new(&op, fd, bufsize, NULL);
}

// The kernel channel fuse_mount made, replaced by the same one with the send above (on a dup of its descriptor).
struct fuse_chan * hs_wrap_chan (struct fuse_chan *ch) {
  int fd = fcntl(fuse_chan_fd(ch), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return ch;
  // Buffers for the largest request proto.c negotiates (libfuse 2.9 made 132 KiB ones).
  struct fuse_chan *wrapped = hs_chan_on_fd(fd, HS_PROTO_BUFSIZE);
  if (wrapped == NULL) {
    close(fd);
    return ch;
  }
  fuse_chan_destroy(ch);
  return wrapped;
}
