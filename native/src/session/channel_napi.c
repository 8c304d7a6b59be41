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

// setFlushGate(buffer of 65536 uint16): from now on FLUSH consults it (hs_flush_is_noop).
NAPI_METHOD(hs_session_set_flush_gate_js) {
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
NAPI_METHOD(hs_session_set_single_reader_js) {
  NAPI_ARGV(1)
  bool on = false;
  if (napi_get_value_bool(env, argv[0], &on) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "setSingleReader(on): a boolean");
    return NULL;
  }
  __atomic_store_n(&hs_lead_wanted, on ? 1 : 0, __ATOMIC_RELEASE);
  return NULL;
}

// -> [on for this mount (0/1), handoffs, revocations, handoffs before reads that would wait]
NAPI_METHOD(hs_session_lead_stats_js) {
  napi_value out, v;
  napi_create_array_with_length(env, 4, &out);
  napi_create_uint32(env, (uint32_t) hs_lead_on, &v);
  napi_set_element(env, out, 0, v);
  napi_create_double(env, (double) __atomic_load_n(&hs_lead_handoffs, __ATOMIC_RELAXED), &v);
  napi_set_element(env, out, 1, v);
  napi_create_double(env, (double) __atomic_load_n(&hs_lead_revoked, __ATOMIC_RELAXED), &v);
  napi_set_element(env, out, 2, v);
  napi_create_double(env, (double) __atomic_load_n(&hs_lead_read_handoffs, __ATOMIC_RELAXED), &v);
  napi_set_element(env, out, 3, v);
  return out;
}

// setNoFlush(on): opens and creates of handles in a zero flush-gate slot are
// answered with FOPEN_NOFLUSH. -> opens answered so far.
NAPI_METHOD(hs_session_set_noflush_js) {
  NAPI_ARGV(1)
  bool on = false;
  if (napi_get_value_bool(env, argv[0], &on) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "setNoFlush(on): a boolean");
    return NULL;
  }
  __atomic_store_n(&hs_noflush_on, on ? 1 : 0, __ATOMIC_RELEASE);
  return hs_js_num(env, (double) __atomic_load_n(&hs_noflush_count, __ATOMIC_RELAXED));
}

// noFlushCount() -> [opens answered with FOPEN_NOFLUSH, FLUSH requests received]
NAPI_METHOD(hs_session_noflush_count_js) {
  napi_value out, a, b;
  napi_create_array_with_length(env, 2, &out);
  napi_create_double(env, (double) __atomic_load_n(&hs_noflush_count, __ATOMIC_RELAXED), &a);
  napi_create_double(env, (double) __atomic_load_n(&hs_flush_requests, __ATOMIC_RELAXED), &b);
  napi_set_element(env, out, 0, a);
  napi_set_element(env, out, 1, b);
  return out;
}

void hs_channel_export (napi_env env, napi_value exports) {
  hs_export_fn(env, exports, "hs_session_set_flush_gate", hs_session_set_flush_gate_js);
  hs_export_fn(env, exports, "hs_session_set_noflush", hs_session_set_noflush_js);
  hs_export_fn(env, exports, "hs_session_noflush_count", hs_session_noflush_count_js);
  hs_export_fn(env, exports, "hs_session_set_single_reader", hs_session_set_single_reader_js);
  hs_export_fn(env, exports, "hs_session_lead_stats", hs_session_lead_stats_js);
}
