// Backing IDs on the session's device, and the mark an open's answer carries
// (passthrough.h).
//
// Threads: session workers call the ioctls and set and take the mark; the
// JavaScript thread reads the counters. Lock: none: s_dev is written before
// the session serves, everything shared is an atomic, the mark thread-local.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <sys/ioctl.h>

#include "session/nodes.h"
#include "session/passthrough.h"
#include "session/proto.h"

static int s_dev = -1;
static int s_disabled;  // atomic
static int32_t s_last_error;  // atomic
static uint64_t s_pt, s_pt_direct, s_refused, s_ids_opened, s_ids_closed, s_id_failures;  // atomics

static __thread int t_pending;
static __thread uint64_t t_fh;
static __thread int32_t t_id;

void hs_pt_set_dev (int fd) {
  s_dev = fd;
  hs_node_backing_close = hs_pt_backing_close;
}

int hs_pt_may_begin (void) {
  return s_dev >= 0 && hs_proto_passthrough() && !__atomic_load_n(&s_disabled, __ATOMIC_RELAXED);
}

int32_t hs_pt_backing_open (int fd) {
  struct hs_backing_map map = { .fd = fd, .flags = 0, .padding = 0 };
  int id = ioctl(s_dev, HS_DEV_IOC_BACKING_OPEN, &map);
  if (id > 0) {
    __atomic_add_fetch(&s_ids_opened, 1, __ATOMIC_RELAXED);
    return id;
  }
  int err = id < 0 ? errno : EIO;
  __atomic_add_fetch(&s_id_failures, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&s_last_error, err, __ATOMIC_RELAXED);
  // No passthrough on this connection or no privilege (fuse_backing_open,
  // Linux fs/fuse/backing.c: EPERM without CAP_SYS_ADMIN, EOPNOTSUPP
  // without passthrough; ENOTTY from a kernel without the ioctl): no other
  // file would do better. ELOOP (a stacked backing filesystem) and EINVAL (a
  // file without read_iter) are this file's own.
  if (err == EPERM || err == EOPNOTSUPP || err == ENOTTY) __atomic_store_n(&s_disabled, 1, __ATOMIC_RELAXED);
  return -err;
}

void hs_pt_backing_close (int32_t id) {
  if (id <= 0 || s_dev < 0) return;
  uint32_t v = (uint32_t) id;
  if (ioctl(s_dev, HS_DEV_IOC_BACKING_CLOSE, &v) == 0) __atomic_add_fetch(&s_ids_closed, 1, __ATOMIC_RELAXED);
}

void hs_pt_mark (uint64_t fh_out, int32_t id) {
  t_pending = 1;
  t_fh = fh_out;
  t_id = id;
}

int hs_pt_take_mark (uint64_t *fh_out, int32_t *id) {
  if (!t_pending) return 0;
  t_pending = 0;
  *fh_out = t_fh;
  *id = t_id;
  return 1;
}

void hs_pt_count (int mode) {
  uint64_t *c = mode == HS_IO_PT ? &s_pt : mode == HS_IO_PT_DIRECT ? &s_pt_direct : mode == HS_IO_REFUSE ? &s_refused : NULL;
  if (c != NULL) __atomic_add_fetch(c, 1, __ATOMIC_RELAXED);
}

hs_pt_stats_t hs_pt_stats (void) {
  hs_pt_stats_t s = {
    .opens_pt = __atomic_load_n(&s_pt, __ATOMIC_RELAXED),
    .opens_pt_direct = __atomic_load_n(&s_pt_direct, __ATOMIC_RELAXED),
    .refused = __atomic_load_n(&s_refused, __ATOMIC_RELAXED),
    .ids_opened = __atomic_load_n(&s_ids_opened, __ATOMIC_RELAXED),
    .ids_closed = __atomic_load_n(&s_ids_closed, __ATOMIC_RELAXED),
    .id_failures = __atomic_load_n(&s_id_failures, __ATOMIC_RELAXED),
    .last_error = __atomic_load_n(&s_last_error, __ATOMIC_RELAXED),
    .disabled = __atomic_load_n(&s_disabled, __ATOMIC_RELAXED),
  };
  return s;
}
