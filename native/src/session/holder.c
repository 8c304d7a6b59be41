// What the holder (src/holder/) needs that Node lacks, and what a serving
// daemon hands it: a non-blocking poll of one descriptor, a pidfd, and the
// session's /dev/fuse descriptor with the kernel's INIT request.
//
// Invariants: nothing here reads or writes a descriptor it is given: the
// holder keeps a session alive by holding its /dev/fuse descriptor and must
// never take a request from it (a request read is a request lost).
// hs_holder_poll never blocks (timeout 0): the holder polls on a timer.
// poll(2) with events = 0 on /dev/fuse returns POLLERR once the connection
// is aborted or unmounted, and nothing before (fuse_dev_poll reports POLLIN
// only when asked). No global state; no locks.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <napi-macros.h>
#include <fuse_lowlevel.h>

#include "holder.h"
#include "loop.h"
#include "session.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

int hs_holder_poll (int fd, short events) {
  struct pollfd p = { fd, events, 0 };
  for (;;) {
    int r = poll(&p, 1, 0);
    if (r >= 0) return r == 0 ? 0 : p.revents;
    if (errno != EINTR) return -errno;
  }
}

int hs_holder_pidfd (int pid) {
  if (pid <= 0) return -EINVAL;
  // Close-on-exec by the kernel's default for pidfds.
  long fd = syscall(SYS_pidfd_open, (pid_t) pid, 0);
  return fd < 0 ? -errno : (int) fd;
}

// ---- exports ---------------------------------------------------------------------

static napi_value num (napi_env env, double v) {
  napi_value out;
  napi_create_double(env, v, &out);
  return out;
}

// poll(fd, events) -> revents (0: nothing yet) or -errno; never blocks
NAPI_METHOD(hs_holder_poll_js) {
  NAPI_ARGV(2)
  NAPI_ARGV_INT32(fd, 0)
  NAPI_ARGV_INT32(events, 1)
  return num(env, hs_holder_poll(fd, (short) events));
}

// pidfd(pid) -> fd (close-on-exec; POLLIN once the process exited) or -errno
NAPI_METHOD(hs_holder_pidfd_js) {
  NAPI_ARGV(1)
  NAPI_ARGV_INT32(pid, 0)
  return num(env, hs_holder_pidfd(pid));
}

// held() -> { fd, bufsize, init } of the serving session (this process's
// descriptor, sent as a copy), or null before INIT came. Unlike
// session_handed, no pause: nothing here changes while the session serves.
NAPI_METHOD(hs_holder_session_js) {
  int fd = -1;
  size_t bufsize = 0;
  char *init = NULL;
  size_t ilen = 0;
  napi_value out, v;
  if (hs_session_chan_fd(&fd, &bufsize) != 0 || hs_loop_init_request(&init, &ilen) != 0) {
    napi_get_null(env, &out);
    return out;
  }
  void *copy;
  napi_create_object(env, &out);
  napi_set_named_property(env, out, "fd", num(env, fd));
  napi_set_named_property(env, out, "bufsize", num(env, (double) bufsize));
  napi_create_buffer_copy(env, ilen, init, &copy, &v);
  napi_set_named_property(env, out, "init", v);
  free(init);
  return out;
}

void hs_holder_export (napi_env env, napi_value exports) {
  napi_value fn;
  napi_create_function(env, NULL, 0, hs_holder_poll_js, NULL, &fn);
  napi_set_named_property(env, exports, "hs_holder_poll", fn);
  napi_create_function(env, NULL, 0, hs_holder_pidfd_js, NULL, &fn);
  napi_set_named_property(env, exports, "hs_holder_pidfd", fn);
  napi_create_function(env, NULL, 0, hs_holder_session_js, NULL, &fn);
  napi_set_named_property(env, exports, "hs_holder_session", fn);
}
