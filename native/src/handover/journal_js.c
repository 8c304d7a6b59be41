// The node journal's exports (nodes_journal.h) for the daemon: the memfds it
// opens and hands to the holder, a recovery or rebase from the memfds the
// holder hands back, and the stored epoch. Results are numbers: a negative
// one is -errno. No state of its own (the journal's lock is the table's).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdint.h>
#include <napi-macros.h>

#include "handover/nodes_journal.h"
#include "session/session.h"

static napi_value num (napi_env env, double v) {
  napi_value out;
  napi_create_double(env, v, &out);
  return out;
}

// journal_open() -> [fd0, fd1], or -errno
NAPI_METHOD(hs_journal_open_js) {
  int fds[2];
  int err = hs_journal_open(fds);
  if (err != 0) return num(env, err);
  napi_value list;
  napi_create_array_with_length(env, 2, &list);
  napi_set_element(env, list, 0, num(env, fds[0]));
  napi_set_element(env, list, 1, num(env, fds[1]));
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
  return num(env, err != 0 ? err : (double) epoch);
}

// journal_rebase(fd0, fd1) -> 0 or -errno
NAPI_METHOD(hs_journal_rebase_js) {
  NAPI_ARGV(2)
  NAPI_ARGV_INT32(fd0, 0)
  NAPI_ARGV_INT32(fd1, 1)
  return num(env, hs_journal_rebase(fd0, fd1));
}

// journal_epoch(set?) -> the epoch (after setting it), or -ENOENT (no journal)
NAPI_METHOD(hs_journal_epoch_js) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  napi_valuetype t = napi_undefined;
  if (argc >= 1) napi_typeof(env, argv[0], &t);
  int err = 0;
  if (t == napi_number) {
    double v = 0;
    napi_get_value_double(env, argv[0], &v);
    if (v < 0 || v > 9007199254740991.0) return num(env, -EINVAL);
    err = hs_journal_epoch_set((uint64_t) v);
  }
  uint64_t epoch = 0;
  if (err == 0) err = hs_journal_epoch_get(&epoch);
  return num(env, err != 0 ? err : (double) epoch);
}

// journal_follow(fd0, fd1) -> the generation followed (>= 1), or -errno
NAPI_METHOD(hs_journal_follow_js) {
  NAPI_ARGV(2)
  NAPI_ARGV_INT32(fd0, 0)
  NAPI_ARGV_INT32(fd1, 1)
  uint64_t gen = 0;
  int err = hs_journal_follow(fd0, fd1, &gen);
  return num(env, err != 0 ? err : (double) gen);
}

// journal_follow_finish() -> 0 or -errno (-ESTALE: compacted since)
NAPI_METHOD(hs_journal_follow_finish_js) {
  return num(env, hs_journal_follow_finish());
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
  return num(env, err != 0 ? err : (double) gen);
}

// journal_recovered() -> [snapshot bytes, snapshot nodes, log bytes, records,
// import ns, replay ns, CPU ns] of the last recovery (measurements; zeros before one)
NAPI_METHOD(hs_journal_recovered_js) {
  struct hs_journal_recovery r;
  hs_journal_recovered(&r);
  double v[] = { (double) r.snap_bytes, (double) r.snap_nodes, (double) r.log_bytes, (double) r.records, (double) r.import_ns, (double) r.replay_ns, (double) r.cpu_ns };
  napi_value list;
  napi_create_array_with_length(env, 7, &list);
  for (uint32_t i = 0; i < 7; i++) napi_set_element(env, list, i, num(env, v[i]));
  return list;
}

void hs_journal_export (napi_env env, napi_value exports) {
  napi_value fn;
  napi_create_function(env, NULL, 0, hs_journal_recovered_js, NULL, &fn);
  napi_set_named_property(env, exports, "session_journal_recovered", fn);
  napi_create_function(env, NULL, 0, hs_journal_follow_js, NULL, &fn);
  napi_set_named_property(env, exports, "session_journal_follow", fn);
  napi_create_function(env, NULL, 0, hs_journal_follow_finish_js, NULL, &fn);
  napi_set_named_property(env, exports, "session_journal_follow_finish", fn);
  napi_create_function(env, NULL, 0, hs_journal_follow_drop_js, NULL, &fn);
  napi_set_named_property(env, exports, "session_journal_follow_drop", fn);
  napi_create_function(env, NULL, 0, hs_journal_gen_js, NULL, &fn);
  napi_set_named_property(env, exports, "session_journal_gen", fn);
  napi_create_function(env, NULL, 0, hs_journal_open_js, NULL, &fn);
  napi_set_named_property(env, exports, "session_journal_open", fn);
  napi_create_function(env, NULL, 0, hs_journal_recover_js, NULL, &fn);
  napi_set_named_property(env, exports, "session_journal_recover", fn);
  napi_create_function(env, NULL, 0, hs_journal_rebase_js, NULL, &fn);
  napi_set_named_property(env, exports, "session_journal_rebase", fn);
  napi_create_function(env, NULL, 0, hs_journal_epoch_js, NULL, &fn);
  napi_set_named_property(env, exports, "session_journal_epoch", fn);
}
