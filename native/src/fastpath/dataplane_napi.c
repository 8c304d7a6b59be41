// The JS-main-thread side of dataplane.c: its exports and what they call.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
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

static int dp_get_fh(napi_env env, napi_value v, uint64_t *fh) {
  int64_t n = 0;
  if (napi_get_value_int64(env, v, &n) != napi_ok || n <= 0 || n > 0xffffffffLL) return 0;
  *fh = (uint64_t) n;
  return 1;
}

// publish(fh, fd, flags): from now on READs (flags & 1) and WRITEs (flags & 2)
// of fh are served with fd. Called before the open is answered, so no request
// for fh can come earlier.
static NAPI_METHOD(hs_fastpath_dp_publish_js) {
  NAPI_ARGV(6)
  uint64_t fh = 0, dev = 0, ino = 0;
  int32_t fd = -1;
  uint32_t flags = 0;
  bool append = false;
  if (!dp_get_fh(env, argv[0], &fh) || napi_get_value_int32(env, argv[1], &fd) != napi_ok || fd < 0 ||
      napi_get_value_uint32(env, argv[2], &flags) != napi_ok || (flags & ~(uint32_t) (HOMESFS_DP_READ | HOMESFS_DP_WRITE)) != 0 ||
      !hs_arg_u64(env, argv[3], &dev) || !hs_arg_u64(env, argv[4], &ino) || napi_get_value_bool(env, argv[5], &append) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "publish(fh, fd, flags, dev, ino, append): fh is a uint32 > 0, fd a descriptor, flags 1 (read) | 2 (write), dev and ino bigints, append a boolean");
    return NULL;
  }
  dp_entry_t *e = malloc(sizeof(*e));
  if (e == NULL) {
    napi_throw_error(env, "ENOMEM", "publish: out of memory");
    return NULL;
  }
  pthread_mutex_lock(&dp_lock);
  dp_entry_t **p = dp_find(fh);
  if (*p != NULL) {
    pthread_mutex_unlock(&dp_lock);
    free(e);
    napi_throw_error(env, "EEXIST", "publish: fh is already published");
    return NULL;
  }
  e->next = NULL;
  e->fh = fh;
  e->fd = fd;
  e->flags = flags;
  e->inflight = 0;
  e->dev = dev;
  e->ino = ino;
  e->append = append ? 1 : 0;
  e->gen = 0;
  *p = e;
  __atomic_add_fetch(&dp_published, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&dp_lock);
  return NULL;
}

// setFlags(fh, flags) -> whether fh is published. Takes effect for the next
// request; one in progress finishes with the descriptor, which stays open.
// The flags are JavaScript's now, under its current policy (gen 0).
static NAPI_METHOD(hs_fastpath_dp_set_flags_js) {
  NAPI_ARGV(2)
  uint64_t fh = 0;
  uint32_t flags = 0;
  if (!dp_get_fh(env, argv[0], &fh) || napi_get_value_uint32(env, argv[1], &flags) != napi_ok || (flags & ~(uint32_t) (HOMESFS_DP_READ | HOMESFS_DP_WRITE)) != 0) {
    napi_throw_type_error(env, "EINVAL", "setFlags(fh, flags): fh is a uint32 > 0, flags 1 (read) | 2 (write)");
    return NULL;
  }
  pthread_mutex_lock(&dp_lock);
  dp_entry_t *e = *dp_find(fh);
  if (e != NULL) {
    e->flags = flags;
    e->gen = 0;
  }
  pthread_mutex_unlock(&dp_lock);
  return hs_js_bool(env, e != NULL);
}

// unpublish(fh) -> whether it was published. On return no read or write uses
// the descriptor any more: the caller may close it.
static NAPI_METHOD(hs_fastpath_dp_unpublish_js) {
  NAPI_ARGV(1)
  uint64_t fh = 0;
  if (!dp_get_fh(env, argv[0], &fh)) {
    napi_throw_type_error(env, "EINVAL", "unpublish(fh): fh is a uint32 > 0");
    return NULL;
  }
  return hs_js_bool(env, hs_dp_unpublish_fd(fh));
}

// setReleaseDeferred(on): from the next RELEASE on, answer and queue (true) or
// send to ops.release (false). Turning it off leaves what is queued queued:
// JavaScript takes it as usual.
static NAPI_METHOD(hs_fastpath_dp_set_release_deferred_js) {
  NAPI_ARGV(1)
  bool on = false;
  if (napi_get_value_bool(env, argv[0], &on) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "setReleaseDeferred(on): on is a boolean");
    return NULL;
  }
  __atomic_store_n(&dp_release_deferred, on ? 1 : 0, __ATOMIC_RELEASE);
  return NULL;
}

static NAPI_METHOD(hs_fastpath_dp_take_releases_js) {
  // A handle never dropped (its descriptor would stay open for good).
  return hq_take_to_js(env, &dp_releases, &dp_lock, NULL, napi_float64_array, sizeof(double), 1, dp_release_fill);
}

static void dp_set_count(napi_env env, napi_value obj, const char *name, uint64_t *counter) {
  napi_value v;
  napi_create_double(env, (double) __atomic_load_n(counter, __ATOMIC_RELAXED), &v);
  napi_set_named_property(env, obj, name, v);
}

// dataPlaneStats() -> { published, reads, bytes, fallbacks, writes, writeBytes, writeFallbacks }
static NAPI_METHOD(hs_fastpath_dp_stats_js) {
  napi_value out;
  napi_create_object(env, &out);
  dp_set_count(env, out, "published", &dp_published);
  dp_set_count(env, out, "reads", &dp_reads);
  dp_set_count(env, out, "bytes", &dp_bytes);
  dp_set_count(env, out, "fallbacks", &dp_fallbacks);
  dp_set_count(env, out, "writes", &dp_writes);
  dp_set_count(env, out, "writeBytes", &dp_write_bytes);
  dp_set_count(env, out, "writeFallbacks", &dp_write_fallbacks);
  dp_set_count(env, out, "releases", &dp_releases_answered);
  return out;
}

void hs_dp_export(napi_env env, napi_value exports) {
  hs_export_fn(env, exports, "hs_fastpath_dp_publish", hs_fastpath_dp_publish_js);
  hs_export_fn(env, exports, "hs_fastpath_dp_set_flags", hs_fastpath_dp_set_flags_js);
  hs_export_fn(env, exports, "hs_fastpath_dp_unpublish", hs_fastpath_dp_unpublish_js);
  hs_export_fn(env, exports, "hs_fastpath_dp_set_write_handler", hs_fastpath_dp_set_write_handler_js);
  hs_export_fn(env, exports, "hs_fastpath_dp_write_decision", hs_fastpath_dp_write_decision_js);
  hs_export_fn(env, exports, "hs_fastpath_dp_write_done", hs_fastpath_dp_write_done_js);
  hs_export_fn(env, exports, "hs_fastpath_dp_take_write_reports", hs_fastpath_dp_take_write_reports_js);
  hs_export_fn(env, exports, "hs_fastpath_dp_set_release_deferred", hs_fastpath_dp_set_release_deferred_js);
  hs_export_fn(env, exports, "hs_fastpath_dp_take_releases", hs_fastpath_dp_take_releases_js);
  hs_export_fn(env, exports, "hs_fastpath_dp_stats", hs_fastpath_dp_stats_js);
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
    // Closing down, or the handler threw: never leave a session worker waiting.
    if (kind == HOMESFS_WRITE_DECIDE) dp_settle(id, DP_W_ASKED, DP_W_FALLBACK, 0);
    else dp_settle(id, DP_W_REPORTED, DP_W_DONE, result);
  }
}

// setWriteHandler(fn): fn(0, id, fh, offset, length, path, uid, gid, pid) asks
// for a write's decision, answered with writeDecision or writeDone;
// fn(1, id, result) reports the pwrite (bytes written or -errno) of a write
// that was told to proceed, answered with writeDone. Once per process.
NAPI_METHOD(hs_fastpath_dp_set_write_handler_js) {
  NAPI_ARGV(1)
  if (hs_js_handler_tsfn(env, argv[0], "homesfs-write-plane", dp_call_js, "setWriteHandler", &dp_tsfn)) napi_create_reference(env, argv[0], 1, &dp_handler_ref);
  return NULL;
}

static int dp_get_id(napi_env env, napi_value v, uint32_t *id) {
  return napi_get_value_uint32(env, v, id) == napi_ok;
}

// writeDecision(id, offset, wait): write at offset (>= 0), or -1: send the data to
// ops.write instead. wait: answer the kernel only after writeDone even when the
// write lands whole (JS hands the file back to fastpath_write.c's decisions at its
// end, before the kernel's next write of it). -> whether the request was waiting for it.
NAPI_METHOD(hs_fastpath_dp_write_decision_js) {
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
NAPI_METHOD(hs_fastpath_dp_write_done_js) {
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

NAPI_METHOD(hs_fastpath_dp_take_write_reports_js) {
  // A report never dropped (the file's lock in JavaScript would never be released).
  return hq_take_to_js(env, &dp_reports, &dp_lock, NULL, napi_float64_array, sizeof(double), 2, dp_report_fill);
}
