// What the holder (src/holder/) needs that Node lacks, and what a serving
// daemon hands it: a non-blocking poll of one descriptor, the identity of
// the process that registers (its pid and a pidfd, from the socket), the
// session's /dev/fuse descriptor with the kernel's INIT request, and for the
// daemon a pidfd of the holder that answered it (to notice its exit).
//
// Runs on the JavaScript thread of the holder (poll, peer) and of the daemon
// (session, peer_pidfd, poll), nothing else.
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
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "sys/napi_args.h"
#include <fuse_lowlevel.h>

#include "handover/holder.h"
#include "session/loop.h"
#include "session/session.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
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

int hs_holder_peer (int sock, int *pid, int *pidfd) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -errno;
  if (len != sizeof(cred) || cred.pid <= 0) return -ESRCH;
  *pid = cred.pid;
  // The pidfd of the very process that connected (the socket holds its struct
  // pid), not of whatever process has that number now: a dead peer's pid
  // reused by another process cannot look alive. Since Linux 6.16 a reaped
  // peer still gets one (it polls readable); before, ESRCH.
  int fd = -1;
  len = sizeof(fd);
  if (getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) == 0 && len == sizeof(fd) && fd >= 0) {
    *pidfd = fd;
    return 0;
  }
  if (errno == ESRCH) {
    *pidfd = -ESRCH;
    return 0;
  }
  // Before Linux 6.5 (ENOPROTOOPT): by number, which a pid reused since the
  // peer's death would pass for it (the window between its exit and here).
  *pidfd = hs_holder_pidfd(cred.pid);
  return 0;
}

int hs_holder_peer_pidfd (int sock, int *pid, int *pidfd) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -errno;
  // 0: the peer runs in a pid namespace where ours cannot name it
  *pid = len == sizeof(cred) && cred.pid > 0 ? cred.pid : 0;
  // SO_PEERPIDFD names the process by its struct pid, whatever pid namespace
  // it runs in (a holder in another container's namespace has no number here).
  int fd = -1;
  len = sizeof(fd);
  if (getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) == 0 && len == sizeof(fd) && fd >= 0) {
    *pidfd = fd;
    return 0;
  }
  if (errno != ENOPROTOOPT) {
    *pidfd = -errno;
    return 0;
  }
  // Before Linux 6.5: by number, when the peer has one in our namespace.
  *pidfd = *pid > 0 ? hs_holder_pidfd(*pid) : -ESRCH;
  return 0;
}

// ---- exports ---------------------------------------------------------------------

// poll(fd, events) -> revents (0: nothing yet) or -errno; never blocks
NAPI_METHOD(hs_holder_poll_js) {
  NAPI_ARGV(2)
  NAPI_ARGV_INT32(fd, 0)
  NAPI_ARGV_INT32(events, 1)
  return hs_js_num(env, hs_holder_poll(fd, (short) events));
}

// { pid, pidfd } of a peer lookup that returned r (or r itself, -errno)
static napi_value peer_reply (napi_env env, int r, int pid, int pidfd) {
  if (r < 0) return hs_js_num(env, r);
  napi_value out;
  napi_create_object(env, &out);
  napi_set_named_property(env, out, "pid", hs_js_num(env, pid));
  napi_set_named_property(env, out, "pidfd", hs_js_num(env, pidfd));
  return out;
}

// peer(socketFd) -> { pid, pidfd } of the process at the other end (pidfd:
// close-on-exec, POLLIN once it exited; or -errno, -ESRCH: it is gone), or -errno
NAPI_METHOD(hs_holder_peer_js) {
  NAPI_ARGV(1)
  NAPI_ARGV_INT32(sock, 0)
  int pid = 0, pidfd = -1;
  int r = hs_holder_peer(sock, &pid, &pidfd);
  return peer_reply(env, r, pid, pidfd);
}

// peerPidfd(socketFd) -> { pid (0: none in our pid namespace), pidfd } of
// the process at the other end, in any pid namespace (pidfd: close-on-exec,
// POLLIN once it exited; or -errno), or -errno
NAPI_METHOD(hs_holder_peer_pidfd_js) {
  NAPI_ARGV(1)
  NAPI_ARGV_INT32(sock, 0)
  int pid = 0, pidfd = -1;
  int r = hs_holder_peer_pidfd(sock, &pid, &pidfd);
  return peer_reply(env, r, pid, pidfd);
}

// held() -> { fd, bufsize, init } of the serving session (this process's
// descriptor, sent as a copy), or null before INIT came. Unlike
// hs_session_handed, no pause: nothing here changes while the session serves.
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
  napi_set_named_property(env, out, "fd", hs_js_num(env, fd));
  napi_set_named_property(env, out, "bufsize", hs_js_num(env, (double) bufsize));
  napi_create_buffer_copy(env, ilen, init, &copy, &v);
  napi_set_named_property(env, out, "init", v);
  free(init);
  return out;
}

void hs_holder_export (napi_env env, napi_value exports) {
  hs_export_fn(env, exports, "hs_handover_holder_poll", hs_holder_poll_js);
  hs_export_fn(env, exports, "hs_handover_holder_peer", hs_holder_peer_js);
  hs_export_fn(env, exports, "hs_handover_holder_peer_pidfd", hs_holder_peer_pidfd_js);
  hs_export_fn(env, exports, "hs_handover_holder_session", hs_holder_session_js);
}
