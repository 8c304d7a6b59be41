// The node journal's exports (nodes_journal.h) for the daemon: the memfds it
// opens and hands to the holder, a recovery or rebase from the memfds the
// holder hands back, and the stored epoch. Results are numbers: a negative
// one is -errno. No state of its own (the journal's lock is the table's).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdint.h>
#include "sys/napi_args.h"

#include "handover/nodes_journal.h"
#include "session/session.h"

// journal_open() -> [fd0, fd1], or -errno
NAPI_METHOD(hs_journal_open_js) {
  int fds[2];
  int err = hs_journal_open(fds);
  if (err != 0) return hs_js_num(env, err);
  napi_value list;
  napi_create_array_with_length(env, 2, &list);
  napi_set_element(env, list, 0, hs_js_num(env, fds[0]));
  napi_set_element(env, list, 1, hs_js_num(env, fds[1]));
  return list;
}

// journal_recover(fd0, fd1) -> the stored epoch, or -errno
NAPI_METHOD(hs_journal_recover_js) {
  NAPI_ARGV(2)
  NAPI_ARGV_INT32(fd0, 0)
  NAPI_ARGV_INT32(fd1, 1)
  int err = hs_journal_recover(fd0, fd1);
  uint64_t epoch = 0;
  if (err == 0) err = hs_journal_epoch_get(&epoch);
  return hs_js_num(env, err != 0 ? err : (double) epoch);
}

// journal_rebase(fd0, fd1) -> 0 or -errno
NAPI_METHOD(hs_journal_rebase_js) {
  NAPI_ARGV(2)
  NAPI_ARGV_INT32(fd0, 0)
  NAPI_ARGV_INT32(fd1, 1)
  return hs_js_num(env, hs_journal_rebase(fd0, fd1));
}

// journal_epoch(set?) -> the epoch (after setting it), or -ENOENT (no journal)
NAPI_METHOD(hs_journal_epoch_js) {
  NAPI_ARGV(1)
  napi_valuetype t = napi_undefined;
  if (argc >= 1) napi_typeof(env, argv[0], &t);
  int err = 0;
  if (t == napi_number) {
    double v = 0;
    napi_get_value_double(env, argv[0], &v);
    if (v < 0 || v > HS_JS_MAX_SAFE) return hs_js_num(env, -EINVAL);
    err = hs_journal_epoch_set((uint64_t) v);
  }
  uint64_t epoch = 0;
  if (err == 0) err = hs_journal_epoch_get(&epoch);
  return hs_js_num(env, err != 0 ? err : (double) epoch);
}

// journal_follow(fd0, fd1) -> the generation followed (>= 1), or -errno
NAPI_METHOD(hs_journal_follow_js) {
  NAPI_ARGV(2)
  NAPI_ARGV_INT32(fd0, 0)
  NAPI_ARGV_INT32(fd1, 1)
  uint64_t gen = 0;
  int err = hs_journal_follow(fd0, fd1, &gen);
  return hs_js_num(env, err != 0 ? err : (double) gen);
}

// journal_follow_finish() -> 0 or -errno (-ESTALE: compacted since)
NAPI_METHOD(hs_journal_follow_finish_js) {
  return hs_js_num(env, hs_journal_follow_finish());
}

NAPI_METHOD(hs_journal_follow_drop_js) {
  hs_journal_follow_drop();
  return NULL;
}

// journal_gen() -> the generation records go to now, or -ENOENT (no journal)
NAPI_METHOD(hs_journal_gen_js) {
  int active = 0;
  uint64_t pos = 0, gen = 0;
  int err = hs_journal_where(&active, &pos, &gen);
  return hs_js_num(env, err != 0 ? err : (double) gen);
}

// journal_recovered() -> [snapshot bytes, snapshot nodes, log bytes, records,
// import ns, replay ns, CPU ns] of the last recovery (measurements; zeros before one)
NAPI_METHOD(hs_journal_recovered_js) {
  struct hs_journal_recovery r;
  hs_journal_recovered(&r);
  double v[] = { (double) r.snap_bytes, (double) r.snap_nodes, (double) r.log_bytes, (double) r.records, (double) r.import_ns, (double) r.replay_ns, (double) r.cpu_ns };
  napi_value list;
  napi_create_array_with_length(env, 7, &list);
  for (uint32_t i = 0; i < 7; i++) napi_set_element(env, list, i, hs_js_num(env, v[i]));
  return list;
}

void hs_journal_export (napi_env env, napi_value exports) {
  hs_export_fn(env, exports, "hs_handover_journal_recovered", hs_journal_recovered_js);
  hs_export_fn(env, exports, "hs_handover_journal_follow", hs_journal_follow_js);
  hs_export_fn(env, exports, "hs_handover_journal_follow_finish", hs_journal_follow_finish_js);
  hs_export_fn(env, exports, "hs_handover_journal_follow_drop", hs_journal_follow_drop_js);
  hs_export_fn(env, exports, "hs_handover_journal_gen", hs_journal_gen_js);
  hs_export_fn(env, exports, "hs_handover_journal_open", hs_journal_open_js);
  hs_export_fn(env, exports, "hs_handover_journal_recover", hs_journal_recover_js);
  hs_export_fn(env, exports, "hs_handover_journal_rebase", hs_journal_rebase_js);
  hs_export_fn(env, exports, "hs_handover_journal_epoch", hs_journal_epoch_js);
}
