// One-shot readiness watches of descriptors on the JavaScript thread's event
// loop (libuv's uv_poll): the daemon's handover listener and its holder's
// pidfd wait for their event instead of looking on a timer, so an idle
// daemon is not woken (fdwatch.h).
//
// Threads: the JavaScript main thread alone (every export and every uv
// callback runs there). Lock: none. State: the watch table, grown and
// emptied only on that thread.
//
// Invariants: a watch fires at most once per arm: libuv's poll is
// level-triggered, and a caller that must not take the event yet (a
// handover in progress) would otherwise be called again at once, for ever.
// A watch's handle is unreferenced (it never keeps the process alive, as an
// unref'd timer). hs_fdwatch_close must come before the descriptor's close:
// epoll would go on reporting a descriptor number reused by another file.
// A slot's id carries its generation: a stale id finds nothing.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>
#include "sys/napi_args.h"
#include "sys/fdwatch.h"

#define W_BITS 16
#define W_MAX (1u << W_BITS)

typedef struct fdw {
  uv_poll_t poll;
  napi_env env;
  napi_ref cb;
  int events;
} fdw_t;

typedef struct {
  fdw_t *w;
  uint32_t gen;
} fdw_slot_t;

static fdw_slot_t *w_slots;
static uint32_t w_n;

static double w_id (uint32_t i) {
  return (double) w_slots[i].gen * (double) W_MAX + (double) i;
}

static fdw_t *w_find (double id, uint32_t *slot) {
  if (!(id > 0) || id > HS_JS_MAX_SAFE) return NULL;
  uint64_t v = (uint64_t) id;
  uint32_t i = (uint32_t) (v % W_MAX);
  if (i >= w_n || w_slots[i].w == NULL || w_slots[i].gen != v / W_MAX) return NULL;
  *slot = i;
  return w_slots[i].w;
}

static void w_freed (uv_handle_t *h) {
  free(h->data);
}

static void w_fired (uv_poll_t *h, int status, int events) {
  fdw_t *w = h->data;
  uv_poll_stop(h);
  napi_env env = w->env;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value fn, global, argv[2];
  napi_get_reference_value(env, w->cb, &fn);
  napi_get_global(env, &global);
  napi_create_int32(env, status, &argv[0]);
  napi_create_int32(env, events, &argv[1]);
  // The callback may close this watch: w is not touched after it.
  if (napi_make_callback(env, NULL, global, fn, 2, argv, NULL) != napi_ok) {
    bool pending = false;
    // An exception here has no caller to reach: it goes to Node's handler,
    // as a timer callback's would.
    if (napi_is_exception_pending(env, &pending) == napi_ok && pending) {
      napi_value ex;
      napi_get_and_clear_last_exception(env, &ex);
      napi_fatal_exception(env, ex);
    }
  }
  napi_close_handle_scope(env, scope);
}

static int w_arm (fdw_t *w) {
  return uv_poll_start(&w->poll, w->events, w_fired);
}

// hs_fdwatch_open(fd, readable, cb) → id (> 0) or -errno: cb(status, events) once
// fd is readable (readable = 1) or writable (0); armed at once.
NAPI_METHOD(hs_fdwatch_open_js) {
  NAPI_ARGV(3)
  NAPI_ARGV_INT32(fd, 0)
  NAPI_ARGV_INT32(readable, 1)
  napi_valuetype t;
  if (napi_typeof(env, argv[2], &t) != napi_ok || t != napi_function) {
    napi_throw_type_error(env, NULL, "hs_fdwatch_open: a callback is required");
    return NULL;
  }
  if (fd < 0) return hs_js_num(env, -EBADF);
  uint32_t i = 0;
  while (i < w_n && w_slots[i].w != NULL) i++;
  if (i == w_n) {
    if (w_n == W_MAX) return hs_js_num(env, -EMFILE);
    uint32_t ncap = w_n == 0 ? 8 : w_n * 2;
    fdw_slot_t *ns = realloc(w_slots, ncap * sizeof(*ns));
    if (ns == NULL) return hs_js_num(env, -ENOMEM);
    memset(ns + w_n, 0, (ncap - w_n) * sizeof(*ns));
    w_slots = ns;
    w_n = ncap;
  }
  fdw_t *w = calloc(1, sizeof(*w));
  if (w == NULL) return hs_js_num(env, -ENOMEM);
  uv_loop_t *loop = NULL;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok || loop == NULL) {
    free(w);
    return hs_js_num(env, -EINVAL);
  }
  int r = uv_poll_init(loop, &w->poll, fd);
  if (r != 0) {
    free(w);
    return hs_js_num(env, r);
  }
  w->poll.data = w;
  w->env = env;
  w->events = readable ? UV_READABLE : UV_WRITABLE;
  napi_create_reference(env, argv[2], 1, &w->cb);
  uv_unref((uv_handle_t *) &w->poll);
  r = w_arm(w);
  if (r != 0) {
    napi_delete_reference(env, w->cb);
    uv_close((uv_handle_t *) &w->poll, w_freed);
    return hs_js_num(env, r);
  }
  w_slots[i].w = w;
  w_slots[i].gen++;
  return hs_js_num(env, w_id(i));
}

// The watch a call's first argument names (NULL: none, or a stale id).
static fdw_t *w_of_arg (napi_env env, napi_callback_info info, uint32_t *slot) {
  size_t argc = 1;
  napi_value argv[1];
  double id = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1) return NULL;
  if (napi_get_value_double(env, argv[0], &id) != napi_ok) return NULL;
  return w_find(id, slot);
}

// hs_fdwatch_arm(id) → 0 or -errno: the watch fires once more.
NAPI_METHOD(hs_fdwatch_arm_js) {
  uint32_t i;
  fdw_t *w = w_of_arg(env, info, &i);
  if (w == NULL) return hs_js_num(env, -ENOENT);
  return hs_js_num(env, w_arm(w));
}

// hs_fdwatch_close(id) → 0 or -ENOENT: the watch ends (its callback is never
// called again); the descriptor stays open, the caller's to close after.
NAPI_METHOD(hs_fdwatch_close_js) {
  uint32_t i;
  fdw_t *w = w_of_arg(env, info, &i);
  if (w == NULL) return hs_js_num(env, -ENOENT);
  w_slots[i].w = NULL;
  napi_delete_reference(env, w->cb);
  // Stopped now: epoll forgets the descriptor before the caller closes it.
  uv_poll_stop(&w->poll);
  uv_close((uv_handle_t *) &w->poll, w_freed);
  return hs_js_num(env, 0);
}

// hs_fdwatch_count() → watches open (tests: none is left behind).
NAPI_METHOD(hs_fdwatch_count_js) {
  (void) info;
  uint32_t n = 0;
  for (uint32_t i = 0; i < w_n; i++) n += w_slots[i].w != NULL;
  return hs_js_num(env, n);
}

void hs_fdwatch_export (napi_env env, napi_value exports) {
  hs_export_fn(env, exports, "hs_fdwatch_open", hs_fdwatch_open_js);
  hs_export_fn(env, exports, "hs_fdwatch_arm", hs_fdwatch_arm_js);
  hs_export_fn(env, exports, "hs_fdwatch_close", hs_fdwatch_close_js);
  hs_export_fn(env, exports, "hs_fdwatch_count", hs_fdwatch_count_js);
}
