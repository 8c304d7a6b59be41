// The JS-main-thread side of channel.c: its exports and what they call.
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
#include <node_api.h>
#include "sys/napi_args.h"
#include "session/channel.h"
#include "session/channel_internal.h"
#include "session/lead.h"
#include "session/handles.h"

// setFlushGate(buffer of 65536 uint16): from now on FLUSH consults it (homesfs_flush_is_noop).
NAPI_METHOD(fuse_native_set_flush_gate) {
  NAPI_ARGV(1)
  void *data = NULL;
  size_t len = 0;
  if (napi_get_buffer_info(env, argv[0], &data, &len) != napi_ok || len != 65536 * sizeof(uint16_t)) {
    napi_throw_type_error(env, "EINVAL", "the flush gate is a buffer of 65536 uint16");
    return NULL;
  }
  if (ch_flush_gate_ref != NULL) {
    napi_throw_error(env, "EEXIST", "the flush gate is already set");
    return NULL;
  }
  // Kept alive for the life of the process: the FUSE threads read it without asking.
  napi_create_reference(env, argv[0], 1, &ch_flush_gate_ref);
  __atomic_store_n(&ch_flush_gate, (uint16_t *) data, __ATOMIC_RELEASE);
  return NULL;
}

// setSingleReader(on): one thread reads the device at a time, from
// the next mount on. -> [handoffs, revocations] so far.
NAPI_METHOD(fuse_native_set_single_reader) {
  NAPI_ARGV(1)
  bool on = false;
  if (napi_get_value_bool(env, argv[0], &on) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "setSingleReader(on): a boolean");
    return NULL;
  }
  __atomic_store_n(&homesfs_lead_wanted, on ? 1 : 0, __ATOMIC_RELEASE);
  return NULL;
}

// -> [on for this mount (0/1), handoffs, revocations, handoffs before reads that would wait]
NAPI_METHOD(fuse_native_lead_stats) {
  napi_value out, v;
  napi_create_array_with_length(env, 4, &out);
  napi_create_uint32(env, (uint32_t) homesfs_lead_on, &v);
  napi_set_element(env, out, 0, v);
  napi_create_double(env, (double) __atomic_load_n(&homesfs_lead_handoffs, __ATOMIC_RELAXED), &v);
  napi_set_element(env, out, 1, v);
  napi_create_double(env, (double) __atomic_load_n(&homesfs_lead_revoked, __ATOMIC_RELAXED), &v);
  napi_set_element(env, out, 2, v);
  napi_create_double(env, (double) __atomic_load_n(&homesfs_lead_read_handoffs, __ATOMIC_RELAXED), &v);
  napi_set_element(env, out, 3, v);
  return out;
}

// setNoFlush(on): opens and creates of handles in a zero flush-gate slot are
// answered with FOPEN_NOFLUSH. -> opens answered so far.
NAPI_METHOD(fuse_native_set_noflush) {
  NAPI_ARGV(1)
  bool on = false;
  if (napi_get_value_bool(env, argv[0], &on) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "setNoFlush(on): a boolean");
    return NULL;
  }
  __atomic_store_n(&homesfs_noflush_on, on ? 1 : 0, __ATOMIC_RELEASE);
  return hs_js_num(env, (double) __atomic_load_n(&homesfs_noflush_count, __ATOMIC_RELAXED));
}

// noFlushCount() -> [opens answered with FOPEN_NOFLUSH, FLUSH requests received]
NAPI_METHOD(fuse_native_noflush_count) {
  napi_value out, a, b;
  napi_create_array_with_length(env, 2, &out);
  napi_create_double(env, (double) __atomic_load_n(&homesfs_noflush_count, __ATOMIC_RELAXED), &a);
  napi_create_double(env, (double) __atomic_load_n(&homesfs_flush_requests, __ATOMIC_RELAXED), &b);
  napi_set_element(env, out, 0, a);
  napi_set_element(env, out, 1, b);
  return out;
}

void homesfs_channel_export (napi_env env, napi_value exports) {
  hs_export_fn(env, exports, "fuse_native_set_flush_gate", fuse_native_set_flush_gate);
  hs_export_fn(env, exports, "fuse_native_set_noflush", fuse_native_set_noflush);
  hs_export_fn(env, exports, "fuse_native_noflush_count", fuse_native_noflush_count);
  hs_export_fn(env, exports, "fuse_native_set_single_reader", fuse_native_set_single_reader);
  hs_export_fn(env, exports, "fuse_native_lead_stats", fuse_native_lead_stats);
}
