// The JS-main-thread side of session.c: its exports and what they call.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/uio.h>
#include "sys/napi_args.h"
#include "session/channel.h"
#include "session/handles.h"
#include "session/ops.h"
#include "handover/handover.h"
#include "session/loop.h"
#include "session/inval.h"
#include "handover/nodes_journal.h"
#include "session/session.h"
#include "session/proto.h"
#include "session/passthrough.h"
#include "session/nodes.h"

// The session's configuration and dispatch from JavaScript (mount and adopt share them).
static int conf_from_js (napi_env env, napi_value arr, napi_value dispatch) {
  double conf[7] = { 1, 1, 0, 0, 0, 0, 0 };
  for (uint32_t i = 0; i < 7; i++) {
    napi_value v;
    if (napi_get_element(env, arr, i, &v) != napi_ok || napi_get_value_double(env, v, &conf[i]) != napi_ok) {
      napi_throw_type_error(env, "EINVAL", "[attrTimeout, entryTimeout, negativeTimeout, kernelCache, hardRemove, readdirplus, passthrough]");
      return -1;
    }
  }
  napi_valuetype t;
  if (napi_typeof(env, dispatch, &t) != napi_ok || t != napi_function) {
    napi_throw_type_error(env, "EINVAL", "dispatch must be a function");
    return -1;
  }
  hs_conf.attr_timeout = conf[0];
  hs_conf.entry_timeout = conf[1];
  hs_conf.negative_timeout = conf[2];
  hs_conf.kernel_cache = conf[3] != 0;
  hs_conf.hard_remove = conf[4] != 0;
  // Asked at INIT (a mount's; an adopted session keeps what its INIT settled).
  hs_proto_want_plus(conf[5] != 0);
  // Asked at INIT too; an adopted session passes through new files only if it is still wanted.
  hs_proto_want_passthrough(conf[6] != 0);
  return 0;
}

// mount(mnt, mountOpts, lowlevelOpts, [attrTimeout, entryTimeout, negativeTimeout, kernelCache, hardRemove, readdirplus, passthrough], dispatch)
NAPI_METHOD(hs_session_mount_js) {
  NAPI_ARGV(5)
  NAPI_ARGV_UTF8(mnt, 4096, 0)
  NAPI_ARGV_UTF8(mopts, 4096, 1)
  NAPI_ARGV_UTF8(lopts, 4096, 2)
  if (conf_from_js(env, argv[3], argv[4]) != 0) return NULL;
  int err = hs_bridge_start(env, argv[4]);
  if (err == 0) err = hs_session_mount(mnt, mopts, lopts);
  if (err != 0) {
    char msg[128];
    snprintf(msg, sizeof(msg), "mount failed: %s", strerror(-err));
    napi_throw_error(env, "EIO", msg);
  }
  return NULL;
}

NAPI_METHOD(hs_session_loop_state_js) {
  napi_value out;
  napi_create_uint32(env, hs_session_loop_state(), &out);
  return out;
}

// -> [nodes in the table, of them reachable by inode number, calls JavaScript has not answered]
NAPI_METHOD(hs_session_stats_js) {
  uint64_t nodes = 0, known = 0;
  hs_nodes_stats(&nodes, &known);
  napi_value out, v;
  napi_create_array_with_length(env, 3, &out);
  napi_create_double(env, (double) nodes, &v);
  napi_set_element(env, out, 0, v);
  napi_create_double(env, (double) known, &v);
  napi_set_element(env, out, 1, v);
  napi_create_double(env, (double) hs_bridge_pending(), &v);
  napi_set_element(env, out, 2, v);
  return out;
}

// adopt(fd, bufsize, init, nodes, dirs, lowlevelOpts, conf, dispatch): serve a handed-over session.
NAPI_METHOD(hs_session_adopt_js) {
  NAPI_ARGV(8)
  NAPI_ARGV_INT32(fd, 0)
  NAPI_ARGV_UINT32(bufsize, 1)
  size_t ilen = 0, nlen = 0, dlen = 0;
  const char *init = hs_arg_bytes(env, argv[2], &ilen), *nodes = hs_arg_bytes(env, argv[3], &nlen), *dirs = hs_arg_bytes(env, argv[4], &dlen);
  if (init == NULL || nodes == NULL || dirs == NULL) {
    napi_throw_type_error(env, "EINVAL", "adopt: init, nodes and dirs are buffers");
    return NULL;
  }
  NAPI_ARGV_UTF8(lopts, 4096, 5)
  if (conf_from_js(env, argv[6], argv[7]) != 0) return NULL;
  int err = hs_bridge_start(env, argv[7]);
  if (err == 0) err = hs_session_adopt(fd, bufsize, init, ilen, nodes, nlen, dirs, dlen, lopts);
  napi_value out;
  napi_create_int32(env, err, &out);
  return out;
}

// revive(fd, bufsize, init, epoch, lowlevelOpts, conf, dispatch): serve the
// session of a daemon that died (its descriptor and INIT kept by a holder),
// on the node table recovered before this (the journal's) -> [0 or -errno,
// the resend notification's result].
NAPI_METHOD(hs_session_revive_js) {
  NAPI_ARGV(7)
  NAPI_ARGV_INT32(fd, 0)
  NAPI_ARGV_UINT32(bufsize, 1)
  size_t ilen = 0;
  const char *init = hs_arg_bytes(env, argv[2], &ilen);
  if (init == NULL) {
    napi_throw_type_error(env, "EINVAL", "revive: init is a buffer");
    return NULL;
  }
  NAPI_ARGV_UINT32(epoch, 3)
  NAPI_ARGV_UTF8(lopts, 4096, 4)
  if (conf_from_js(env, argv[5], argv[6]) != 0) return NULL;
  int resent = 0;
  int err = hs_bridge_start(env, argv[6]);
  if (err == 0) err = hs_session_revive(fd, bufsize, init, ilen, epoch, lopts, &resent);
  napi_value out, v;
  napi_create_array_with_length(env, 2, &out);
  napi_create_int32(env, err, &v);
  napi_set_element(env, out, 0, v);
  napi_create_int32(env, resent, &v);
  napi_set_element(env, out, 1, v);
  return out;
}

// fhEpoch(set?) -> the epoch this daemon's handles carry (handles.h).
NAPI_METHOD(hs_session_fh_epoch_js) {
  NAPI_ARGV(1)
  napi_valuetype t = napi_undefined;
  if (argc >= 1) napi_typeof(env, argv[0], &t);
  if (t == napi_number) {
    uint32_t e = 0;
    napi_get_value_uint32(env, argv[0], &e);
    hs_fh_set_epoch(e);
  }
  napi_value out;
  napi_create_uint32(env, hs_fh_epoch(), &out);
  return out;
}

// -> [requests sent again, of them answered EIO, dead handles reopened]
NAPI_METHOD(hs_session_handle_stats_js) {
  uint64_t a = 0, b = 0, c = 0;
  hs_handles_stats(&a, &b, &c);
  napi_value out, v;
  napi_create_array_with_length(env, 3, &out);
  uint64_t all[3] = { a, b, c };
  for (uint32_t i = 0; i < 3; i++) {
    napi_create_double(env, (double) all[i], &v);
    napi_set_element(env, out, i, v);
  }
  return out;
}

// protocol() -> [minor, kernel's minor, max write, max pages, INIT flags,
// largest READ, largest WRITE, LOOKUPs, READDIRPLUSes, READs, kernel offers
// io_uring] (proto.h; zeros before INIT)
NAPI_METHOD(hs_session_proto_js) {
  hs_proto_t p = hs_proto_get();
  uint32_t r = 0, w = 0;
  uint64_t lookups = 0, plus = 0, reads = 0;
  hs_proto_largest(&r, &w);
  hs_proto_counts(&lookups, &plus, &reads);
  double all[11] = {
    p.minor, p.kernel_minor, p.max_write, p.max_pages, p.flags, r, w, (double) lookups, (double) plus, (double) reads,
    (p.kernel_flags2 & HS_FUSE2_OVER_IO_URING) ? 1 : 0,
  };
  napi_value out, v;
  napi_create_array_with_length(env, 11, &out);
  for (uint32_t i = 0; i < 11; i++) {
    napi_create_double(env, all[i], &v);
    napi_set_element(env, out, i, v);
  }
  return out;
}

// passthrough() -> [negotiated, kernel offers it, new families allowed, opens
// passed through, opens passed through with direct I/O, opens refused, backing
// IDs opened, closed, failed, the last failure's errno, turned off, nodes
// holding an ID now]
NAPI_METHOD(hs_session_passthrough_js) {
  hs_proto_t p = hs_proto_get();
  hs_pt_stats_t s = hs_pt_stats();
  double all[12] = {
    (p.flags2 & HS_FUSE2_PASSTHROUGH) ? 1 : 0, (p.kernel_flags2 & HS_FUSE2_PASSTHROUGH) ? 1 : 0, hs_pt_may_begin(),
    (double) s.opens_pt, (double) s.opens_pt_direct, (double) s.refused,
    (double) s.ids_opened, (double) s.ids_closed, (double) s.id_failures, s.last_error, s.disabled,
    (double) hs_nodes_backing_count(),
  };
  napi_value out, v;
  napi_create_array_with_length(env, 12, &out);
  for (uint32_t i = 0; i < 12; i++) {
    napi_create_double(env, all[i], &v);
    napi_set_element(env, out, i, v);
  }
  return out;
}

// passedThrough(ino: bigint) -> whether the node of that presented inode number is passed through now
NAPI_METHOD(hs_session_passed_through_js) {
  NAPI_ARGV(1)
  uint64_t ino = 0;
  bool lossless = false;
  napi_value out;
  if (argc < 1 || napi_get_value_bigint_uint64(env, argv[0], &ino, &lossless) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "passedThrough(ino: bigint)");
    return NULL;
  }
  napi_get_boolean(env, hs_nodes_passthrough_ino(ino) != 0, &out);
  return out;
}

// deadHandles() -> a Buffer of (dead handle, ours) u64 pairs, host order (handles.h), or -errno
NAPI_METHOD(hs_session_dead_export_js) {
  uint64_t *pairs = NULL;
  size_t n = 0;
  int err = hs_handles_export(&pairs, &n);
  napi_value out;
  if (err != 0) napi_create_int32(env, err, &out);
  else {
    void *copy = NULL;
    napi_create_buffer_copy(env, n * 2 * sizeof(uint64_t), pairs, &copy, &out);
  }
  free(pairs);
  return out;
}

// deadHandlesImport(buffer) -> 0 or -errno (-EINVAL: not whole pairs)
NAPI_METHOD(hs_session_dead_import_js) {
  NAPI_ARGV(1)
  size_t len = 0;
  const char *b = hs_arg_bytes(env, argv[0], &len);
  napi_value out;
  if (b == NULL || len % (2 * sizeof(uint64_t)) != 0) {
    napi_create_int32(env, -EINVAL, &out);
    return out;
  }
  size_t n = len / (2 * sizeof(uint64_t));
  uint64_t *pairs = malloc(len > 0 ? len : 1);
  int err = pairs == NULL ? -ENOMEM : 0;
  if (err == 0) {
    memcpy(pairs, b, len);
    err = hs_handles_import(pairs, n);
  }
  free(pairs);
  napi_create_int32(env, err, &out);
  return out;
}

// preimport(nodes): start importing a handed-over node table (see above) -> 0 or -errno.
NAPI_METHOD(hs_session_preimport_js) {
  NAPI_ARGV(1)
  size_t len = 0;
  const char *nodes = hs_arg_bytes(env, argv[0], &len);
  if (nodes == NULL) {
    napi_throw_type_error(env, "EINVAL", "preimport: nodes is a buffer");
    return NULL;
  }
  napi_value out;
  napi_create_int32(env, hs_session_preimport(nodes, len), &out);
  return out;
}

// pause(): stop reading at request boundaries (never blocks); paused() -> every worker parked
NAPI_METHOD(hs_session_pause_js) {
  hs_loop_pause();
  return NULL;
}

NAPI_METHOD(hs_session_paused_js) {
  hs_loop_kick();
  return hs_js_bool(env, hs_loop_paused() && hs_bridge_pending() == 0);
}

// busyMs() -> how long the oldest request a worker is inside has been there, in ms (0: none)
NAPI_METHOD(hs_session_busy_ms_js) {
  napi_value out;
  napi_create_double(env, hs_loop_busy_ms(), &out);
  return out;
}

NAPI_METHOD(hs_session_resume_js) {
  hs_loop_resume();
  return NULL;
}

// handed(withNodes = true) -> { fd, bufsize, init, nodes, dirs }: what a
// successor needs, taken while paused; nodes empty when not asked for (a
// successor that followed the journal has the table).
NAPI_METHOD(hs_session_handed_js) {
  NAPI_ARGV(1)
  bool with_nodes = true;
  if (argc >= 1) napi_get_value_bool(env, argv[0], &with_nodes);
  char *init = NULL, *nodes = NULL, *dirs = NULL;
  size_t ilen = 0, nlen = 0, dlen = 0;
  int fd = -1;
  size_t bufsize = 0;
  if (hs_session_chan_fd(&fd, &bufsize) != 0 || !hs_loop_paused()) {
    napi_throw_error(env, "EBUSY", "handed: the session is not paused");
    return NULL;
  }
  int err = hs_loop_init_request(&init, &ilen);
  if (err == 0 && with_nodes) err = hs_nodes_export(&nodes, &nlen);
  if (err == 0) err = hs_dirs_export(&dirs, &dlen);
  napi_value out = NULL, v;
  if (err == 0) {
    void *copy;
    napi_create_object(env, &out);
    napi_create_int32(env, fd, &v);
    napi_set_named_property(env, out, "fd", v);
    napi_create_uint32(env, (uint32_t) bufsize, &v);
    napi_set_named_property(env, out, "bufsize", v);
    napi_create_buffer_copy(env, ilen, init, &copy, &v);
    napi_set_named_property(env, out, "init", v);
    napi_create_buffer_copy(env, nlen, nodes, &copy, &v);
    napi_set_named_property(env, out, "nodes", v);
    napi_create_buffer_copy(env, dlen, dirs, &copy, &v);
    napi_set_named_property(env, out, "dirs", v);
    napi_create_uint32(env, hs_fh_epoch(), &v);
    napi_set_named_property(env, out, "epoch", v);
  } else {
    napi_throw_error(env, "EIO", "handed: the session's state could not be taken");
  }
  free(init);
  free(nodes);
  free(dirs);
  return out;
}

void hs_session_export (napi_env env, napi_value exports) {
  hs_export_fn(env, exports, "hs_session_mount", hs_session_mount_js);
  hs_export_fn(env, exports, "hs_session_loop_state", hs_session_loop_state_js);
  hs_export_fn(env, exports, "hs_session_stats", hs_session_stats_js);
  hs_export_fn(env, exports, "hs_session_adopt", hs_session_adopt_js);
  hs_export_fn(env, exports, "hs_session_revive", hs_session_revive_js);
  hs_export_fn(env, exports, "hs_session_fh_epoch", hs_session_fh_epoch_js);
  hs_export_fn(env, exports, "hs_session_handle_stats", hs_session_handle_stats_js);
  hs_export_fn(env, exports, "hs_session_proto", hs_session_proto_js);
  hs_export_fn(env, exports, "hs_session_passthrough", hs_session_passthrough_js);
  hs_export_fn(env, exports, "hs_session_passed_through", hs_session_passed_through_js);
  hs_export_fn(env, exports, "hs_session_dead_handles", hs_session_dead_export_js);
  hs_export_fn(env, exports, "hs_session_dead_handles_import", hs_session_dead_import_js);
  hs_export_fn(env, exports, "hs_session_preimport", hs_session_preimport_js);
  hs_export_fn(env, exports, "hs_session_pause", hs_session_pause_js);
  hs_export_fn(env, exports, "hs_session_paused", hs_session_paused_js);
  hs_export_fn(env, exports, "hs_session_busy_ms", hs_session_busy_ms_js);
  hs_export_fn(env, exports, "hs_session_resume", hs_session_resume_js);
  hs_export_fn(env, exports, "hs_session_handed", hs_session_handed_js);
  hs_bridge_export(env, exports);
  hs_handover_export(env, exports);
  hs_inval_export(env, exports);
  hs_journal_export(env, exports);
}
