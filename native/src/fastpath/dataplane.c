// homesfs data plane (see dataplane.h).
//
// A READ or WRITE normally costs a hop from the session's worker to the JS thread
// (uv_async, semaphore, napi), a JS Buffer and a copy of up to 128 KiB, a hop
// to the libuv threadpool for the pread/pwrite and the way back. For a handle
// published here:
//
// * READ (flag HOMESFS_DP_READ: its reads need no policy) is a pread on a session
//   worker thread; JavaScript is not involved at all.
// * WRITE (flag HOMESFS_DP_WRITE: its content needs no check, only the byte ledger)
//   asks JavaScript for the decision with (fh, offset, length) and no data.
//   JavaScript charges the ledger exactly as for a write it performs itself
//   (src/fs/file.ts writeAt, under the file's lock) and answers with the
//   offset to write at, or with the final result (a refusal: nothing was
//   written, nothing charged). The pwrite then happens here and its result goes
//   back to JavaScript, which keeps the lock until then. A full write is
//   answered to the kernel at once (the ledger already holds exactly those
//   bytes; the report only releases the lock, so it is queued for JavaScript's
//   next call, takeWriteReports, instead of waking it); a short or failed one waits
//   until JavaScript has charged only what landed and answers what it would
//   have answered, errno mapping and log line included.
//
// The descriptor stays JavaScript's: no dup, so no second descriptor per open
// file. What keeps a read or write from ever using a descriptor that
// JavaScript closed (and the kernel handed to something else) is the in-flight
// count: the syscall counts itself in under the table lock, unpublish takes
// the entry out of the table and then waits until the count is zero, so by the
// time JavaScript closes the descriptor nothing here holds it. A write's
// decision in JavaScript is outside the count (unpublish runs on the JS thread
// and must never wait for it). The kernel sends RELEASE only after the last
// READ/WRITE of the open file has been answered, so the wait is a guard, not a
// path that is expected to block.
//
// This file: the handle table (publish, setFlags, unpublish), READ, the
// deferred RELEASE queue, stats and the exports; WRITE is dataplane_write.c.
// dataplane_internal.h says which lock guards what.
#define _GNU_SOURCE  // preadv2, RWF_NOWAIT
#define FUSE_USE_VERSION 29
#include "abi.h"
#include "fastpath/dataplane.h"
#include "fastpath/fastpath.h"
#include "session/lead.h"
#include "fastpath/dataplane_internal.h"
#include "fastpath/queue.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <uv.h>

#include "sys/napi_args.h"

#define DP_BUCKETS 4096

static dp_entry_t *dp_table[DP_BUCKETS];
pthread_mutex_t dp_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t dp_drained = PTHREAD_COND_INITIALIZER;
uint64_t dp_published = 0;

// Counters for tests and figures (relaxed atomics; read by dataPlaneStats).
uint64_t dp_reads = 0;
uint64_t dp_bytes = 0;
uint64_t dp_fallbacks = 0;
uint64_t dp_writes = 0;
uint64_t dp_write_bytes = 0;
uint64_t dp_write_fallbacks = 0;

static inline size_t dp_bucket(uint64_t fh) {
  return (size_t) ((fh * 0x9E3779B97F4A7C15ULL) >> 52) & (DP_BUCKETS - 1);
}

dp_entry_t **dp_find(uint64_t fh) {
  dp_entry_t **p = &dp_table[dp_bucket(fh)];
  while (*p != NULL && (*p)->fh != fh) p = &(*p)->next;
  return p;
}

// The entry of fh with `flag` set and current, counted in (NULL if there is
// none). flag 0: any entry (a write JavaScript itself decided).
dp_entry_t *dp_take(uint64_t fh, uint32_t flag) {
  pthread_mutex_lock(&dp_lock);
  dp_entry_t *e = *dp_find(fh);
  if (e != NULL && (e->flags & flag) == flag && (flag == 0 || dp_current(e))) e->inflight++;
  else e = NULL;
  pthread_mutex_unlock(&dp_lock);
  return e;
}

void dp_put(dp_entry_t *e) {
  pthread_mutex_lock(&dp_lock);
  if (--e->inflight == 0) pthread_cond_broadcast(&dp_drained);
  pthread_mutex_unlock(&dp_lock);
}

int hs_dp_published(uint64_t fh, uint32_t *flags, int (*fn)(int fd, void *ctx), void *ctx) {
  *flags = 0;
  if (__atomic_load_n(&dp_published, __ATOMIC_ACQUIRE) == 0) return -1;
  pthread_mutex_lock(&dp_lock);
  dp_entry_t *e = *dp_find(fh);
  if (e != NULL && dp_current(e)) {
    *flags = e->flags;
    e->inflight++;
  } else {
    e = NULL;
  }
  pthread_mutex_unlock(&dp_lock);
  if (e == NULL) return -1;
  int res = fn != NULL ? fn(e->fd, ctx) : 0;
  dp_put(e);
  return res;
}

int hs_dp_read(uint64_t fh, char *buf, size_t len, off_t offset, int *res) {
  // Nothing published yet (or ever): not even the lock.
  if (__atomic_load_n(&dp_published, __ATOMIC_ACQUIRE) == 0) return 0;
  dp_entry_t *e = dp_take(fh, HOMESFS_DP_READ);
  if (e == NULL) return 0;

  int answered = 0;
  // JavaScript sees offsets as doubles: beyond MAX_SAFE_INTEGER its read
  // answers 0 (src/fs/file.ts MAX_OFFSET). Such reads go to it, which decides.
  if (offset >= 0 && (uint64_t) offset + (uint64_t) len <= HOMESFS_MAX_SAFE_INTEGER && len <= INT32_MAX) {
    // As JavaScript does: a short read is not EOF by itself; keep going until it is.
    size_t done = 0;
    answered = 1;
    // One reader at a time (channel.c): a read the page cache holds keeps the
    // lead (RWF_NOWAIT: never waits for the disk); one that would wait gives
    // it up first, whatever its size, and is read the ordinary way.
    int nowait = 1;
    while (done < len) {
      ssize_t n;
      if (nowait) {
        struct iovec iov = { buf + done, len - done };
        n = preadv2(e->fd, &iov, 1, offset + (off_t) done, RWF_NOWAIT);
        if (n < 0 && errno != EINTR) {
          // EAGAIN: it would wait (EOPNOTSUPP: no such reads here; an error shows again below).
          nowait = 0;
          hs_lead_release_read();
          continue;
        }
      } else {
        n = pread(e->fd, buf + done, len - done, offset + (off_t) done);
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        answered = 0; // JavaScript reads again and answers (and logs) the errno
        break;
      }
      if (n == 0) break;
      done += (size_t) n;
    }
    if (answered) {
      *res = (int) done;
      __atomic_add_fetch(&dp_reads, 1, __ATOMIC_RELAXED);
      __atomic_add_fetch(&dp_bytes, done, __ATOMIC_RELAXED);
    }
  }
  if (!answered) __atomic_add_fetch(&dp_fallbacks, 1, __ATOMIC_RELAXED);
  dp_put(e);
  return answered;
}

// ---- JavaScript side (the write path's own calls: dataplane_write.c) ---------

// The same from C (fastpath_open.c's native open): 1 when published.
int hs_dp_publish_fd(uint64_t fh, int fd, uint32_t flags, uint64_t dev, uint64_t ino, int append, uint64_t gen) {
  dp_entry_t *e = malloc(sizeof(*e));
  if (e == NULL) return 0;
  pthread_mutex_lock(&dp_lock);
  dp_entry_t **p = dp_find(fh);
  if (*p != NULL) {
    pthread_mutex_unlock(&dp_lock);
    free(e);
    return 0;
  }
  e->next = NULL;
  e->fh = fh;
  e->fd = fd;
  e->flags = flags & (HOMESFS_DP_READ | HOMESFS_DP_WRITE);
  e->inflight = 0;
  e->dev = dev;
  e->ino = ino;
  e->append = append;
  e->gen = gen;
  *p = e;
  __atomic_add_fetch(&dp_published, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&dp_lock);
  return 1;
}

// unpublish from C (also a native open closed before JS adopted it): on
// return no read or write uses the descriptor any more. -> whether it was published.
int hs_dp_unpublish_fd (uint64_t fh) {
  pthread_mutex_lock(&dp_lock);
  dp_entry_t **p = dp_find(fh);
  dp_entry_t *e = *p;
  if (e != NULL) {
    *p = e->next;
    while (e->inflight > 0) pthread_cond_wait(&dp_drained, &dp_lock);
    __atomic_sub_fetch(&dp_published, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&dp_lock);
  free(e);
  return e != NULL;
}

// ---- releases --------------------------------------------------------------

// RELEASE (the kernel's last word on an open file, sent after close(2) has
// returned; its result is ignored) normally costs the session's worker a wait for
// the JS thread and the JS thread a wake of its own. With deferral on
// (setReleaseDeferred, JavaScript's choice) it is answered here at once and
// the handle is queued: JavaScript takes the queue before every request it
// serves, every control command and on a timer (takeReleases), and does then
// exactly what it would have done for the RELEASE (close the descriptor, give
// the open-file slot back, detach the inode). Nothing about the handle is
// decided here. Until JavaScript has taken it, the handle is simply still
// open on JavaScript's side: its fh is not reused, its descriptor stays valid
// for the fast path and the data plane (which the kernel no longer sends
// anything for), and C's own open-inode check sends an unlink of that file to
// JavaScript, which takes the queue first. Order matters for libfuse itself:
// after this returns it may unlink a hidden (.fuse_hidden*) name of the file,
// and that unlink reaches JavaScript, which takes the queue before it.
typedef struct dp_release {
  hq_link_t link;  // first
  uint64_t fh;
} dp_release_t;
int dp_release_deferred = 0;          // atomic: JavaScript's switch
hq_t dp_releases = HQ_INIT(dp_releases);  // under dp_lock, oldest first
uint64_t dp_releases_answered = 0;    // counter for tests and figures

int hs_dp_release_deferred(void) {
  return __atomic_load_n(&dp_release_deferred, __ATOMIC_ACQUIRE);
}

int hs_dp_release(uint64_t fh) {
  if (!__atomic_load_n(&dp_release_deferred, __ATOMIC_ACQUIRE)) return 0;
  dp_release_t *r = malloc(sizeof(*r));
  // No memory for the queue: JavaScript answers this one as before.
  if (r == NULL) return 0;
  r->fh = fh;
  pthread_mutex_lock(&dp_lock);
  hq_push(&dp_releases, &r->link);
  pthread_mutex_unlock(&dp_lock);
  __atomic_add_fetch(&dp_releases_answered, 1, __ATOMIC_RELAXED);
  return 1;
}

// takeReleases() -> Float64Array [fh, fh, ...] of the RELEASEs answered since
// the last call, oldest first; null when there are none.
void dp_release_fill(hq_link_t *r, void *data, uint32_t i) {
  ((double *) data)[i] = (double) ((dp_release_t *) r)->fh;
}
