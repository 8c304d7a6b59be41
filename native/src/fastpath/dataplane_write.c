// The data plane's WRITE (dataplane.c has the whole design): a write of a
// handle published for writes costs JavaScript one decision with no data
// (or none at all, when fastpath_write.c decides its growth), the pwrite
// happens here on libfuse's thread, and its result goes back to JavaScript:
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

// Where a write request stands. JavaScript moves it out of DP_W_ASKED with
// writeDecision (PROCEED at an offset, or FALLBACK: send it the data) or with
// writeDone (DONE: its final answer, a refusal); out of DP_W_REPORTED (a short
// or failed pwrite, reported) with writeDone.
#define DP_W_ASKED 0
#define DP_W_PROCEED 1
#define DP_W_DONE 2
#define DP_W_FALLBACK 3
#define DP_W_REPORTED 4
#define DP_W_WRITING 5
#define DP_W_PROCEED_WAIT 6  // PROCEED, and answer only after writeDone even when it lands whole

typedef struct dp_wreq {
  struct dp_wreq *next;
  uint32_t id;
  int state;
  int64_t value; // PROCEED: the offset; DONE: bytes written or -errno
  uv_sem_t sem;
  // the request, read by the JS thread while the libfuse thread waits
  uint64_t fh;
  int64_t offset;
  uint32_t len;
  const char *path;
  uint32_t uid, gid, pid;
} dp_wreq_t;

typedef struct dp_msg {
  int kind; // HOMESFS_WRITE_DECIDE (req) or HOMESFS_WRITE_DONE (id, result)
  int on_stack;
  uint32_t id;
  dp_wreq_t *req;
  int64_t result;
} dp_msg_t;

// Whole writes already answered to the kernel: (id, bytes) for JavaScript to
// release the file's lock. Taken by takeWriteReports, which JavaScript calls
// before every decision and every other request it serves (and on a short
// timer), so a report no longer costs a wake of the JS thread of its own.
typedef struct dp_report {
  hq_link_t link;  // first
  uint32_t id;
  int64_t result;
} dp_report_t;
static hq_t dp_reports = HQ_INIT(dp_reports);  // under dp_lock, oldest first

static napi_threadsafe_function dp_tsfn = NULL;
static napi_ref dp_handler_ref = NULL;
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
static int dp_settle(uint32_t id, int from, int to, int64_t value) {
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

// On the JS thread: hand one message to the handler set by setWriteHandler.
static void dp_call_js(napi_env env, napi_value js_cb, void *context, void *data) {
  dp_msg_t *m = (dp_msg_t *) data;
  uint32_t id = m->id;
  int kind = m->kind;
  int64_t result = m->result;
  int called = 0;
  if (env != NULL && js_cb != NULL) {
    napi_value argv[9], undef;
    size_t argc = 3;
    napi_get_undefined(env, &undef);
    napi_create_uint32(env, (uint32_t) kind, &argv[0]);
    napi_create_uint32(env, id, &argv[1]);
    if (kind == HOMESFS_WRITE_DECIDE) {
      dp_wreq_t *r = m->req; // its thread waits for the decision: r is alive
      napi_create_double(env, (double) r->fh, &argv[2]);
      napi_create_int64(env, r->offset, &argv[3]);
      napi_create_uint32(env, r->len, &argv[4]);
      if (r->path != NULL) napi_create_string_utf8(env, r->path, NAPI_AUTO_LENGTH, &argv[5]);
      else napi_get_null(env, &argv[5]);
      napi_create_uint32(env, r->uid, &argv[6]);
      napi_create_uint32(env, r->gid, &argv[7]);
      napi_create_uint32(env, r->pid, &argv[8]);
      argc = 9;
    } else {
      napi_create_int64(env, result, &argv[2]);
    }
    if (!m->on_stack) free(m);
    m = NULL;
    called = napi_call_function(env, undef, js_cb, argc, argv, NULL) == napi_ok;
  }
  if (m != NULL && !m->on_stack) free(m);
  if (!called) {
    // Closing down, or the handler threw: never leave a libfuse thread waiting.
    if (kind == HOMESFS_WRITE_DECIDE) dp_settle(id, DP_W_ASKED, DP_W_FALLBACK, 0);
    else dp_settle(id, DP_W_REPORTED, DP_W_DONE, result);
  }
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
  homesfs_wl_ticket_t t;
  if (offset <= (off_t) INT64_MAX && homesfs_fastpath_wl_begin(d->dev, d->ino, (int64_t) offset, (uint32_t) len, d->append, &t) == 0) {
    ssize_t n;
    if (len > HOMESFS_LEAD_BIG_IO) homesfs_lead_release();
    do n = pwrite(d->fd, buf, len, (off_t) t.start);
    while (n < 0 && errno == EINTR);
    if (n < 0) n = -errno;
    // Settled before the entry is let go: once unpublish returns, no decision of this handle's is open.
    homesfs_fastpath_wl_end(&t, (int64_t) n);
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
  if (len > HOMESFS_LEAD_BIG_IO) homesfs_lead_release();
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
  homesfs_lead_release();
  uv_sem_wait(&r->sem);
  dp_unlink(r);
  uv_sem_destroy(&r->sem);
  __atomic_add_fetch(&dp_writes, 1, __ATOMIC_RELAXED);
  if (r->value > 0) __atomic_add_fetch(&dp_write_bytes, (uint64_t) r->value, __ATOMIC_RELAXED);
  return (int) r->value;
}

int homesfs_dp_write(const char *path, uint64_t fh, const char *buf, size_t len, off_t offset, const uint32_t caller[3], int *res) {
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
  homesfs_lead_release();
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

// setWriteHandler(fn): fn(0, id, fh, offset, length, path, uid, gid, pid) asks
// for a write's decision, answered with writeDecision or writeDone;
// fn(1, id, result) reports the pwrite (bytes written or -errno) of a write
// that was told to proceed, answered with writeDone. Once per process.
NAPI_METHOD(homesfs_dp_set_write_handler) {
  NAPI_ARGV(1)
  napi_valuetype t;
  if (napi_typeof(env, argv[0], &t) != napi_ok || t != napi_function) {
    napi_throw_type_error(env, "EINVAL", "setWriteHandler(fn): fn is a function");
    return NULL;
  }
  if (dp_tsfn != NULL) {
    napi_throw_error(env, "EEXIST", "setWriteHandler: a handler is already set");
    return NULL;
  }
  napi_value name;
  napi_create_string_utf8(env, "homesfs-write-plane", NAPI_AUTO_LENGTH, &name);
  napi_threadsafe_function tsfn;
  if (napi_create_threadsafe_function(env, argv[0], NULL, name, 0, 1, NULL, NULL, NULL, dp_call_js, &tsfn) != napi_ok) {
    napi_throw_error(env, "EIO", "setWriteHandler: cannot create the thread-safe function");
    return NULL;
  }
  // It must not keep the process alive on its own.
  napi_unref_threadsafe_function(env, tsfn);
  napi_create_reference(env, argv[0], 1, &dp_handler_ref);
  __atomic_store_n(&dp_tsfn, tsfn, __ATOMIC_RELEASE);
  return NULL;
}

static int dp_get_id(napi_env env, napi_value v, uint32_t *id) {
  return napi_get_value_uint32(env, v, id) == napi_ok;
}

// writeDecision(id, offset, wait): write at offset (>= 0), or -1: send the data to
// ops.write instead. wait: answer the kernel only after writeDone even when the
// write lands whole (JS hands the file back to fastpath_write.c's decisions at its
// end, before the kernel's next write of it). -> whether the request was waiting for it.
NAPI_METHOD(homesfs_dp_write_decision) {
  NAPI_ARGV(3)
  uint32_t id = 0;
  int64_t at = 0;
  bool wait = false;
  if (!dp_get_id(env, argv[0], &id) || napi_get_value_int64(env, argv[1], &at) != napi_ok || at < -1 || napi_get_value_bool(env, argv[2], &wait) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "writeDecision(id, offset, wait): offset >= 0, or -1; wait a boolean");
    return NULL;
  }
  int ok = at >= 0 ? dp_settle(id, DP_W_ASKED, wait ? DP_W_PROCEED_WAIT : DP_W_PROCEED, at) : dp_settle(id, DP_W_ASKED, DP_W_FALLBACK, 0);
  return hs_js_bool(env, ok);
}

// writeDone(id, result): the final answer (bytes or -errno) of a write that
// was refused before writing, or whose pwrite was short or failed. For a
// write already answered (it landed whole) there is nothing to do: false.
NAPI_METHOD(homesfs_dp_write_done) {
  NAPI_ARGV(2)
  uint32_t id = 0;
  int32_t result = 0;
  if (!dp_get_id(env, argv[0], &id) || napi_get_value_int32(env, argv[1], &result) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "writeDone(id, result): result is bytes or -errno");
    return NULL;
  }
  int ok = dp_settle(id, DP_W_ASKED, DP_W_DONE, result) || dp_settle(id, DP_W_REPORTED, DP_W_DONE, result);
  return hs_js_bool(env, ok);
}

// takeWriteReports() -> Float64Array [id, bytes, id, bytes, ...] of the whole
// writes answered since the last call, oldest first; null when there are none.
static void dp_report_fill(hq_link_t *r, void *data, uint32_t i) {
  const dp_report_t *e = (const dp_report_t *) r;
  ((double *) data)[2 * i] = (double) e->id;
  ((double *) data)[2 * i + 1] = (double) e->result;
}

NAPI_METHOD(homesfs_dp_take_write_reports) {
  // A report never dropped (the file's lock in JavaScript would never be released).
  return hq_take_to_js(env, &dp_reports, &dp_lock, napi_float64_array, sizeof(double), 2, dp_report_fill);
}
