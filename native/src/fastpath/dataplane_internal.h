// Internal to the data plane (dataplane.c, dataplane_write.c): the handle
// table's entry, what the write path reaches into, and the write path's
// N-API calls the exports name. Hidden visibility: nothing here leaves fuse.node.
//
// Locks: dp_lock (a mutex, a leaf: nothing else is taken under it) guards the
// fh -> entry table (dp_table), each entry's in-flight count (dp_drained is
// its condition: unpublish waits for zero), the write requests waiting for
// JavaScript (dp_pending) and the queues JavaScript takes (whole writes'
// reports, deferred RELEASEs). An entry is freed only once it is out of the
// table and its in-flight count is zero, so a READ or WRITE counted in
// (dp_take) never uses a descriptor JavaScript closed. Counters and
// dp_published are relaxed atomics.
#ifndef HOMESFS_DATAPLANE_INTERNAL_H
#define HOMESFS_DATAPLANE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <node_api.h>
#include "fastpath/fastpath.h"

#pragma GCC visibility push(hidden)

// JavaScript sees offsets as doubles: beyond 2^53 - 1 its read answers 0
// (src/fs/file.ts MAX_OFFSET). Such reads go to JavaScript, which decides.
#define DP_MAX_OFFSET 9007199254740991ULL

typedef struct dp_entry {
  struct dp_entry *next;
  uint64_t fh;
  int fd;
  uint32_t flags;
  uint32_t inflight;
  // the inode behind the handle, for a write whose growth fastpath_write.c decides
  uint64_t dev, ino;
  int append;
  // 0: JavaScript published these flags under its current policy. Else the
  // binding published them at a native open, under the policy generation
  // (homesfs_fastpath_policy_gen) it read with the home's flags: once a
  // policy change has moved the generation on, they are stale and nothing of
  // the handle is served here until JavaScript has adopted it and published
  // again (setFlags), so no handle opened under an old policy writes or reads
  // past a change JavaScript has answered.
  uint64_t gen;
} dp_entry_t;

// Whether the entry's flags hold under the policy now (see gen above).
static inline int dp_current(const dp_entry_t *e) {
  return e->gen == 0 || e->gen == homesfs_fastpath_policy_gen();
}

// dataplane.c: the table and its lock, the counters stats reports.
extern pthread_mutex_t dp_lock;
extern uint64_t dp_published;
extern uint64_t dp_writes, dp_write_bytes, dp_write_fallbacks;
dp_entry_t **dp_find(uint64_t fh);
dp_entry_t *dp_take(uint64_t fh, uint32_t flag);
void dp_put(dp_entry_t *e);

// dataplane_write.c: the write path's calls from JavaScript.
napi_value homesfs_dp_set_write_handler(napi_env env, napi_callback_info info);
napi_value homesfs_dp_write_decision(napi_env env, napi_callback_info info);
napi_value homesfs_dp_write_done(napi_env env, napi_callback_info info);
napi_value homesfs_dp_take_write_reports(napi_env env, napi_callback_info info);

#pragma GCC visibility pop

#endif
