// Requests handed to JavaScript and its answers (bridge.c).
//
// A session worker posts a call and goes back to reading the device: it
// never waits for JavaScript. The JavaScript thread takes the queue, calls
// the daemon's dispatch function with the call's arguments, and the daemon
// answers through reply(id, res, ...values), on the same thread, now or
// later; the call's `done` then answers the kernel (fuse_reply_* may be
// called from any thread) or posts the next step of the same request.
#ifndef HOMESFS_BRIDGE_H
#define HOMESFS_BRIDGE_H
#include <stddef.h>
#include <stdint.h>
#include <node_api.h>

typedef struct hs_call hs_call_t;

// The JavaScript arguments after (op, id, uid, gid, pid): at most HS_CALL_ARGS.
#define HS_CALL_ARGS 8
typedef size_t (*hs_call_args_fn) (napi_env env, hs_call_t *c, napi_value *argv);
// JavaScript answered res (0 or -errno; a count for reads and writes) and values.
typedef void (*hs_call_done_fn) (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);

struct hs_call {
  hs_call_t *qnext;
  uint32_t op;                 // HOMESFS_OP_*
  uint32_t uid, gid, pid;      // the caller
  hs_call_args_fn args;
  hs_call_done_fn done;
};

// On the JavaScript thread, once: the dispatch function and the loop it runs on.
int hs_bridge_start (napi_env env, napi_value dispatch);
// On the JavaScript thread: the mount no longer keeps the process alive.
void hs_bridge_unref (void);
// Any thread: the call goes to JavaScript. Never blocks on JavaScript.
void hs_bridge_post (hs_call_t *c);
// On the JavaScript thread, after the session ended: calls never answered
// are dropped (the kernel connection is gone); returns how many.
size_t hs_bridge_stop (void);
// Calls posted and not answered yet (for status).
uint64_t hs_bridge_pending (void);
// Between bridge.c's queue and bridge_napi.c: the JS thread takes the queue
// whole and counts each answer; a post wakes it (any thread).
hs_call_t *hs_bridge_take (void);
void hs_bridge_answered (void);
void hs_bridge_wake (void);

void hs_bridge_export (napi_env env, napi_value exports);
#endif
