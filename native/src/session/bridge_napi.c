// The JavaScript side of the bridge (bridge.h): the calls JavaScript holds,
// their dispatch and reply(), on the JS main thread (the wake, from any).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>
#include "sys/napi_args.h"
#include "session/bridge.h"

// The table of calls JavaScript holds (slots) belongs to the JavaScript
// thread alone: it is filled when a call is dispatched and emptied by
// reply(), both on that thread. An id names a slot and the generation it was
// filled in, so an answer given twice, or for a call that is gone, finds
// nothing and is refused (a TypeError in JavaScript), never another request.
#define SLOT_BITS 22
#define SLOT_MAX (1u << SLOT_BITS)

static napi_env b_env;
static napi_ref b_dispatch;
static uv_async_t b_async;
static int b_started;
static int b_draining;  // drain() is running: a nested call finds the rest taken already

typedef struct {
  hs_call_t *call;
  uint32_t gen;
  uint32_t next_free;
} slot_t;
static slot_t *slots;
static uint32_t n_slots, free_slot = UINT32_MAX;

static int slot_take (hs_call_t *c, double *id) {
  uint32_t i;
  if (free_slot != UINT32_MAX) {
    i = free_slot;
    free_slot = slots[i].next_free;
  } else {
    if (n_slots == SLOT_MAX) return -ENOMEM;
    uint32_t ncap = n_slots == 0 ? 256 : n_slots * 2;
    if (ncap > SLOT_MAX) ncap = SLOT_MAX;
    // Grown only here, on the JavaScript thread: no one else reads it.
    slot_t *ns = realloc(slots, ncap * sizeof(*ns));
    if (ns == NULL) return -ENOMEM;
    memset(ns + n_slots, 0, (ncap - n_slots) * sizeof(*ns));
    slots = ns;
    for (uint32_t k = ncap - 1; k > n_slots; k--) {
      slots[k].next_free = free_slot;
      free_slot = k;
    }
    i = n_slots;
    n_slots = ncap;
  }
  slots[i].call = c;
  slots[i].gen++;
  *id = (double) slots[i].gen * (double) SLOT_MAX + (double) i;
  return 0;
}

static hs_call_t *slot_give (double id) {
  if (!(id >= 0) || id > HS_JS_MAX_SAFE) return NULL;
  uint64_t v = (uint64_t) id;
  uint32_t i = (uint32_t) (v % SLOT_MAX);
  uint64_t gen = v / SLOT_MAX;
  if (i >= n_slots || slots[i].call == NULL || slots[i].gen != gen) return NULL;
  hs_call_t *c = slots[i].call;
  slots[i].call = NULL;
  slots[i].next_free = free_slot;
  free_slot = i;
  return c;
}

// JavaScript threw, or could not be called: the request gets EIO, never silence.
static void fail_call (napi_env env, hs_call_t *c, double id) {
  if (slot_give(id) == c) {
    hs_bridge_answered();
    c->done(env, c, -EIO, NULL, 0);
  }
}

static void dispatch_one (napi_env env, napi_value fn, napi_value global, hs_call_t *c) {
  double id = 0;
  if (slot_take(c, &id) != 0) {
    hs_bridge_answered();
    c->done(env, c, -ENOMEM, NULL, 0);
    return;
  }
  napi_value argv[5 + HS_CALL_ARGS];
  napi_create_uint32(env, c->op, &argv[0]);
  napi_create_double(env, id, &argv[1]);
  napi_create_uint32(env, c->uid, &argv[2]);
  napi_create_uint32(env, c->gid, &argv[3]);
  napi_create_uint32(env, c->pid, &argv[4]);
  size_t argc = 5 + c->args(env, c, argv + 5);
  // The call may be answered, and freed, inside: it is not touched after this.
  napi_status st = napi_make_callback(env, NULL, global, fn, argc, argv, NULL);
  if (st != napi_ok) {
    bool pending = false;
    if (napi_is_exception_pending(env, &pending) == napi_ok && pending) {
      napi_value ex;
      napi_get_and_clear_last_exception(env, &ex);
    }
    fail_call(env, c, id);
  }
}

void hs_bridge_wake (void) {
  uv_async_send(&b_async);
}

static void drain (uv_async_t *h) {
  (void) h;
  if (!b_started || b_draining) return;
  b_draining = 1;
  napi_env env = b_env;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value fn, global;
  napi_get_reference_value(env, b_dispatch, &fn);
  napi_get_global(env, &global);
  for (;;) {
    hs_call_t *c = hs_bridge_take();
    if (c == NULL) break;
    while (c != NULL) {
      hs_call_t *next = c->qnext;
      napi_handle_scope inner;
      napi_open_handle_scope(env, &inner);
      dispatch_one(env, fn, global, c);
      napi_close_handle_scope(env, inner);
      c = next;
    }
  }
  napi_close_handle_scope(env, scope);
  b_draining = 0;
}

void hs_bridge_unref (void) {
  if (b_started) uv_unref((uv_handle_t *) &b_async);
}

size_t hs_bridge_stop (void) {
  size_t held = 0;
  for (uint32_t i = 0; i < n_slots; i++) held += slots[i].call != NULL;
  return held;
}

int hs_bridge_start (napi_env env, napi_value dispatch) {
  if (b_started) return -EEXIST;
  if (napi_create_reference(env, dispatch, 1, &b_dispatch) != napi_ok) return -EINVAL;
  uv_loop_t *loop = NULL;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok || uv_async_init(loop, &b_async, drain) != 0) return -EIO;
  // A mounted session keeps the process alive, as a server socket does, until hs_bridge_unref.
  b_env = env;
  b_started = 1;
  return 0;
}

// reply(id, res, ...values): the daemon's answer to a call.
NAPI_METHOD(hs_session_reply_js) {
  size_t argc = 2 + HS_CALL_ARGS;
  napi_value argv[2 + HS_CALL_ARGS];
  NAPI_STATUS_THROWS(napi_get_cb_info(env, info, &argc, argv, NULL, NULL))
  double id = -1;
  int32_t res = 0;
  if (argc < 2 || napi_get_value_double(env, argv[0], &id) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "reply(id, res, ...values)");
    return NULL;
  }
  if (napi_get_value_int32(env, argv[1], &res) != napi_ok) res = -EIO;
  hs_call_t *c = slot_give(id);
  if (c == NULL) {
    napi_throw_type_error(env, "ENOENT", "reply: no such call (answered twice?)");
    return NULL;
  }
  hs_bridge_answered();
  c->done(env, c, res, argv + 2, argc - 2);
  return NULL;
}

// dispatchQueued(): every call the workers posted so far is dispatched now,
// before the caller goes on. The data plane's write decisions come through
// their own threadsafe function, which libuv may run before this queue's
// wake: a write decided first would not see a RELEASE read before it (the
// bytes of a file unlinked while open, its open-file slot).
NAPI_METHOD(hs_session_dispatch_queued_js) {
  (void) info;
  drain(NULL);
  return NULL;
}

// unref(): the session no longer keeps the process alive (the daemon unmounted it).
NAPI_METHOD(hs_session_unref_js) {
  hs_bridge_unref();
  return NULL;
}

void hs_bridge_export (napi_env env, napi_value exports) {
  hs_export_fn(env, exports, "hs_session_reply", hs_session_reply_js);
  hs_export_fn(env, exports, "hs_session_unref", hs_session_unref_js);
  hs_export_fn(env, exports, "hs_session_dispatch_queued", hs_session_dispatch_queued_js);
}
