// Internal to the data plane (dataplane.c, dataplane_write.c, and their JS
// side, dataplane_napi.c): the handle
// table's entry, what the write path reaches into, and the write path's
// N-API calls the exports name. Hidden visibility: nothing here leaves homesfs.node.
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
#include <uv.h>
#include "fastpath/queue.h"
#include "fastpath/fastpath.h"
#include "abi.h"

#pragma GCC visibility push(hidden)

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
  // (hs_fastpath_policy_gen) it read with the home's flags: once a
  // policy change has moved the generation on, they are stale and nothing of
  // the handle is served here until JavaScript has adopted it and published
  // again (setFlags), so no handle opened under an old policy writes or reads
  // past a change JavaScript has answered.
  uint64_t gen;
} dp_entry_t;

// Whether the entry's flags hold under the policy now (see gen above).
static inline int dp_current(const dp_entry_t *e) {
  return e->gen == 0 || e->gen == hs_fastpath_policy_gen();
}

// dataplane.c: the table and its lock, the counters stats reports.
extern pthread_mutex_t dp_lock;
extern uint64_t dp_published;
extern uint64_t dp_writes, dp_write_bytes, dp_write_fallbacks;
dp_entry_t **dp_find(uint64_t fh);
dp_entry_t *dp_take(uint64_t fh, uint32_t flag);
void dp_put(dp_entry_t *e);

// ---- dataplane_write.c: a write request and its messages to JavaScript ----

// Where a write request stands. JavaScript moves it out of DP_W_ASKED with
// writeDecision (PROCEED at an offset, or FALLBACK: send it the data) or with
// writeDone (DONE: its final answer, a refusal); out of DP_W_REPORTED (a short
// or failed pwrite, reported) with writeDone.
#define DP_W_ASKED 0
#define DP_W_PROCEED 1
#define DP_W_DONE 2
#define DP_W_FALLBACK 3
#define DP_W_REPORTED 4
#define DP_W_WRITING 5
#define DP_W_PROCEED_WAIT 6  // PROCEED, and answer only after writeDone even when it lands whole

typedef struct dp_wreq {
  struct dp_wreq *next;
  uint32_t id;
  int state;
  int64_t value; // PROCEED: the offset; DONE: bytes written or -errno
  uv_sem_t sem;
  // the request, read by the JS thread while the session's worker waits
  uint64_t fh;
  int64_t offset;
  uint32_t len;
  const char *path;
  uint32_t uid, gid, pid;
} dp_wreq_t;

typedef struct dp_msg {
  int kind; // HOMESFS_WRITE_DECIDE (req) or HOMESFS_WRITE_DONE (id, result)
  int on_stack;
  uint32_t id;
  dp_wreq_t *req;
  int64_t result;
} dp_msg_t;

// Whole writes already answered to the kernel: (id, bytes) for JavaScript to
// release the file's lock. Taken by takeWriteReports, which JavaScript calls
// before every decision and every other request it serves (and on a short
// timer), so a report no longer costs a wake of the JS thread of its own.
typedef struct dp_report {
  hq_link_t link;  // first
  uint32_t id;
  int64_t result;
} dp_report_t;

napi_value hs_fastpath_dp_set_write_handler_js(napi_env env, napi_callback_info info);
napi_value hs_fastpath_dp_write_decision_js(napi_env env, napi_callback_info info);
napi_value hs_fastpath_dp_write_done_js(napi_env env, napi_callback_info info);
napi_value hs_fastpath_dp_take_write_reports_js(napi_env env, napi_callback_info info);

// Shared with dataplane_napi.c (JS's side): the queues JS takes under
// dp_lock, the write handler's thread-safe function, the counters (atomics).
extern hq_t dp_reports;
extern napi_threadsafe_function dp_tsfn;
extern napi_ref dp_handler_ref;
int dp_settle(uint32_t id, int from, int to, int64_t value);
void dp_report_fill(hq_link_t *r, void *data, uint32_t i);
extern uint64_t dp_reads;
extern uint64_t dp_bytes;
extern uint64_t dp_fallbacks;
extern int dp_release_deferred;
extern hq_t dp_releases;
extern uint64_t dp_releases_answered;
void dp_release_fill(hq_link_t *r, void *data, uint32_t i);

#pragma GCC visibility pop
#endif
