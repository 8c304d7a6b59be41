// The JS-main-thread side of claims.c: its exports and what they call.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <node_api.h>
#include "sys/napi_args.h"
#include "fastpath/claims.h"

// hs_fastpath_claim_enter(dev: bigint, ino: bigint)
static NAPI_METHOD(hs_fastpath_claim_enter_js) {
  NAPI_ARGV(2)
  uint64_t dev, ino;
  if (!hs_arg_u64(env, argv[0], &dev) || !hs_arg_u64(env, argv[1], &ino)) {
    napi_throw_type_error(env, "EINVAL", "removalEnter: dev and ino as bigints");
    return NULL;
  }
  if (hs_claim_enter(dev, ino) != 0) napi_throw_error(env, "ENOMEM", "removalEnter: out of memory");
  return NULL;
}

// hs_fastpath_claim_leave(dev: bigint, ino: bigint, gone: boolean) -> whether this remover settles the inode
static NAPI_METHOD(hs_fastpath_claim_leave_js) {
  NAPI_ARGV(3)
  uint64_t dev, ino;
  bool gone = false;
  if (!hs_arg_u64(env, argv[0], &dev) || !hs_arg_u64(env, argv[1], &ino) || napi_get_value_bool(env, argv[2], &gone) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "removalLeave: dev and ino as bigints, and a boolean");
    return NULL;
  }
  return hs_js_bool(env, hs_claim_leave(dev, ino, gone) != 0);
}

// hs_fastpath_claim_stats() -> { inFlight, raced }: inodes entered and not left, and removers that saw nlink 0 after another settled it
static NAPI_METHOD(hs_fastpath_claim_stats_js) {
  uint64_t in_flight = 0, raced = 0;
  hs_claim_stats(&in_flight, &raced);
  napi_value out;
  napi_create_object(env, &out);
  hs_js_set_num(env, out, "inFlight", (double) in_flight);
  hs_js_set_num(env, out, "raced", (double) raced);
  return out;
}

void hs_claims_export (napi_env env, napi_value exports) {
  hs_export_fn(env, exports, "hs_fastpath_claim_enter", hs_fastpath_claim_enter_js);
  hs_export_fn(env, exports, "hs_fastpath_claim_leave", hs_fastpath_claim_leave_js);
  hs_export_fn(env, exports, "hs_fastpath_claim_stats", hs_fastpath_claim_stats_js);
}
