// The data plane's WRITE (dataplane.c has the whole design): a write of a
// handle published for writes costs JavaScript one decision with no data
// (or none at all, when fastpath_write.c decides its growth), the pwrite
// happens here on the session's worker thread, and its result goes back to JavaScript:
// queued (takeWriteReports) for a write that landed whole, waited for when
// it did not. Invariants: a request waiting for JavaScript is on dp_pending
// (under dp_lock) from its ask until its thread has its answer, and every
// state change goes through dp_settle, so a late or repeated answer finds no
// request and changes nothing; the entry stays counted in (dp_take/dp_put)
// across the pwrite.
#define _GNU_SOURCE
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

// ---- writes -----------------------------------------------------------------

hq_t dp_reports = HQ_INIT(dp_reports);  // under dp_lock, oldest first

napi_threadsafe_function dp_tsfn = NULL;
napi_ref dp_handler_ref = NULL;
static dp_wreq_t *dp_pending = NULL; // under dp_lock
static uint32_t dp_next_id = 0;

static void dp_unlink(dp_wreq_t *r) {
  pthread_mutex_lock(&dp_lock);
  for (dp_wreq_t **p = &dp_pending; *p != NULL; p = &(*p)->next) {
    if (*p == r) {
      *p = r->next;
      break;
    }
  }
  pthread_mutex_unlock(&dp_lock);
}

// Move request `id` from `from` to `to` and wake its thread. 0 if no request
// with that id is in that state (already answered, or answered to the kernel).
int dp_settle(uint32_t id, int from, int to, int64_t value) {
  int done = 0;
  pthread_mutex_lock(&dp_lock);
  for (dp_wreq_t *r = dp_pending; r != NULL; r = r->next) {
    if (r->id != id) continue;
    if (r->state == from) {
      r->state = to;
      r->value = value;
      uv_sem_post(&r->sem);
      done = 1;
    }
    break;
  }
  pthread_mutex_unlock(&dp_lock);
  return done;
}

static int dp_send(dp_msg_t *m) {
  napi_threadsafe_function tsfn = __atomic_load_n(&dp_tsfn, __ATOMIC_ACQUIRE);
  return tsfn != NULL && napi_call_threadsafe_function(tsfn, m, napi_tsfn_blocking) == napi_ok;
}

// The write decided here when fastpath_write.c can: the entry is counted in
// for the pwrite, as a read is, and the decision settled after. 1: answered
// (*res); 0: JavaScript decides; -1: fh is not published for writes.
static int dp_write_native(uint64_t fh, const char *buf, size_t len, off_t offset, int *res) {
  dp_entry_t *d = dp_take(fh, HOMESFS_DP_WRITE);
  if (d == NULL) return -1;
  hs_wl_ticket_t t;
  if (offset <= (off_t) INT64_MAX && hs_fastpath_wl_begin(d->dev, d->ino, (int64_t) offset, (uint32_t) len, d->append, &t) == 0) {
    ssize_t n;
    if (len > HOMESFS_LEAD_BIG_IO) hs_lead_release();
    do n = pwrite(d->fd, buf, len, (off_t) t.start);
    while (n < 0 && errno == EINTR);
    if (n < 0) n = -errno;
    // Settled before the entry is let go: once unpublish returns, no decision of this handle's is open.
    hs_fastpath_wl_end(&t, (int64_t) n);
    dp_put(d);
    // A failure charged nothing: JavaScript decides again, writes, and answers (and logs) the errno.
    if (n > 0) {
      *res = (int) n;
      __atomic_add_fetch(&dp_writes, 1, __ATOMIC_RELAXED);
      __atomic_add_fetch(&dp_write_bytes, (uint64_t) n, __ATOMIC_RELAXED);
      return 1;
    }
    if (n == 0 && len == 0) {
      *res = 0;
      return 1;
    }
  } else {
    dp_put(d);
  }
  return 0;
}

int hs_dp_truncate(uint64_t fh, int64_t size) {
  if (__atomic_load_n(&dp_published, __ATOMIC_ACQUIRE) == 0) return 0;
  dp_entry_t *d = dp_take(fh, HOMESFS_DP_WRITE);
  if (d == NULL) return 0;
  hs_wl_ticket_t t;
  int done = 0;
  if (hs_fastpath_wl_resize_begin(d->dev, d->ino, size, &t) == 0) {
    // A cut of a big file frees its blocks here: the lead goes first, as before a big write.
    hs_lead_release();
    int err = ftruncate(d->fd, (off_t) size) == 0 ? 0 : -errno;
    // Settled before the entry is let go, as a write's; a failure changed nothing and JS repeats it, answering the errno.
    hs_fastpath_wl_resize_end(&t, err);
    done = err == 0;
  }
  dp_put(d);
  return done;
}

// Request r (on the caller's stack) registered and sent to JavaScript for its
// decision: 1, or 0 (nothing registered) when it cannot be asked.
static int dp_ask(dp_wreq_t *r, const char *path, uint64_t fh, size_t len, off_t offset, const uint32_t caller[3]) {
  memset(r, 0, sizeof(*r));
  r->state = DP_W_ASKED;
  r->fh = fh;
  r->offset = (int64_t) offset;
  r->len = (uint32_t) len;
  r->path = path;
  r->uid = caller[0];
  r->gid = caller[1];
  r->pid = caller[2];
  if (uv_sem_init(&r->sem, 0) != 0) return 0;
  pthread_mutex_lock(&dp_lock);
  if (++dp_next_id == 0) dp_next_id = 1;
  r->id = dp_next_id;
  r->next = dp_pending;
  dp_pending = r;
  pthread_mutex_unlock(&dp_lock);

  dp_msg_t *ask = malloc(sizeof(*ask));
  if (ask != NULL) {
    ask->kind = HOMESFS_WRITE_DECIDE;
    ask->on_stack = 0;
    ask->id = r->id;
    ask->req = r;
    ask->result = 0;
  }
  if (ask == NULL || !dp_send(ask)) {
    free(ask);
    dp_unlink(r);
    uv_sem_destroy(&r->sem);
    __atomic_add_fetch(&dp_write_fallbacks, 1, __ATOMIC_RELAXED);
    return 0;
  }
  return 1;
}

// A whole write's report queued for JavaScript's next takeWriteReports: 1, or 0 without memory.
static int dp_report_whole(uint32_t id, int64_t result) {
  dp_report_t *rep = malloc(sizeof(*rep));
  if (rep == NULL) return 0;
  rep->id = id;
  rep->result = result;
  pthread_mutex_lock(&dp_lock);
  hq_push(&dp_reports, &rep->link);
  pthread_mutex_unlock(&dp_lock);
  return 1;
}

// One request's life (native decision, ask, proceed, pwrite, report) in one
// function, so every exit can be seen to unregister the request and destroy
// its semaphore.
// The pwrite of a write JavaScript told to proceed at `at`: bytes written or -errno.
static ssize_t dp_pwrite (uint64_t fh, const char *buf, size_t len, int64_t at) {
  ssize_t n;
  dp_entry_t *w = dp_take(fh, 0);
  if (w == NULL) return -EBADF; // released meanwhile: the kernel never does that with a write in flight
  if (len > HOMESFS_LEAD_BIG_IO) hs_lead_release();
  do n = pwrite(w->fd, buf, len, (off_t) at);
  while (n < 0 && errno == EINTR);
  if (n < 0) n = -errno;
  dp_put(w);
  return n;
}

// Short or failed (or a write JavaScript asked to hear about): JavaScript
// charges only what landed (or undoes the charge), then answers; the kernel
// hears JavaScript's answer, which this returns.
static int dp_report_and_wait (dp_wreq_t *r, ssize_t n) {
  pthread_mutex_lock(&dp_lock);
  r->state = DP_W_REPORTED;
  pthread_mutex_unlock(&dp_lock);
  dp_msg_t rep = { .kind = HOMESFS_WRITE_DONE, .on_stack = 1, .id = r->id, .req = NULL, .result = n };
  if (!dp_send(&rep)) {
    dp_unlink(r);
    uv_sem_destroy(&r->sem);
    return (int) n;
  }
  hs_lead_release();
  uv_sem_wait(&r->sem);
  dp_unlink(r);
  uv_sem_destroy(&r->sem);
  __atomic_add_fetch(&dp_writes, 1, __ATOMIC_RELAXED);
  if (r->value > 0) __atomic_add_fetch(&dp_write_bytes, (uint64_t) r->value, __ATOMIC_RELAXED);
  return (int) r->value;
}

int hs_dp_write(const char *path, uint64_t fh, const char *buf, size_t len, off_t offset, const uint32_t caller[3], int *res) {
  if (__atomic_load_n(&dp_published, __ATOMIC_ACQUIRE) == 0) return 0;
  if (__atomic_load_n(&dp_tsfn, __ATOMIC_ACQUIRE) == NULL || len > INT32_MAX || offset < 0) return 0;
  int native = dp_write_native(fh, buf, len, offset, res);
  if (native != 0) return native > 0;

  // Only a look: the decision in JavaScript is not counted in (see the top).
  pthread_mutex_lock(&dp_lock);
  dp_entry_t *e = *dp_find(fh);
  int published = e != NULL && (e->flags & HOMESFS_DP_WRITE) && dp_current(e);
  pthread_mutex_unlock(&dp_lock);
  if (!published) return 0;

  dp_wreq_t r;
  if (!dp_ask(&r, path, fh, len, offset, caller)) return 0;
  hs_lead_release();
  uv_sem_wait(&r.sem);

  pthread_mutex_lock(&dp_lock);
  int state = r.state;
  int64_t at = r.value;
  int wait = state == DP_W_PROCEED_WAIT;
  if (wait) state = DP_W_PROCEED;
  if (state == DP_W_PROCEED) r.state = DP_W_WRITING;
  pthread_mutex_unlock(&dp_lock);
  if (state != DP_W_PROCEED) {
    dp_unlink(&r);
    uv_sem_destroy(&r.sem);
    if (state == DP_W_FALLBACK) {
      __atomic_add_fetch(&dp_write_fallbacks, 1, __ATOMIC_RELAXED);
      return 0;
    }
    *res = (int) at; // JavaScript's answer (a refusal): nothing written, nothing charged
    return 1;
  }

  // JavaScript charged the ledger and holds the file's lock until it hears back.
  ssize_t n = dp_pwrite(fh, buf, len, at);

  if (n == (ssize_t) len && !wait) {
    // Exactly what was charged landed: answer the kernel now; the report only
    // lets JavaScript release the file's lock, so it waits in dp_reports for
    // JavaScript's next call instead of waking it.
    dp_unlink(&r);
    uv_sem_destroy(&r.sem);
    // Without memory for a report the lock would never be released: in that
    // case only, wait for JavaScript like a short write does (below).
    if (dp_report_whole(r.id, n)) {
      *res = (int) n;
      __atomic_add_fetch(&dp_writes, 1, __ATOMIC_RELAXED);
      __atomic_add_fetch(&dp_write_bytes, (uint64_t) n, __ATOMIC_RELAXED);
      return 1;
    }
    if (uv_sem_init(&r.sem, 0) != 0) abort();
    pthread_mutex_lock(&dp_lock);
    r.next = dp_pending;
    dp_pending = &r;
    pthread_mutex_unlock(&dp_lock);
  }

  *res = dp_report_and_wait(&r, n);
  return 1;
}

// takeWriteReports() -> Float64Array [id, bytes, id, bytes, ...] of the whole
// writes answered since the last call, oldest first; null when there are none.
void dp_report_fill(hq_link_t *r, void *data, uint32_t i) {
  const dp_report_t *e = (const dp_report_t *) r;
  ((double *) data)[2 * i] = (double) e->id;
  ((double *) data)[2 * i + 1] = (double) e->result;
}
