// The handover channel: a Unix SOCK_SEQPACKET socket between a serving
// daemon and its successor, carrying messages and descriptors (SCM_RIGHTS),
// which Node's sockets cannot. The conversation is TypeScript's
// (src/takeover.ts, src/fuse/handover-channel.ts); this file only moves
// bytes and descriptors, and says who is on the other end.
//
// Safety: the socket file is 0600 from the moment it exists (the caller
// puts it in a directory it keeps 0700: its run directory), and both ends
// check that the other is uid 0 (SO_PEERCRED, the credentials at connect and
// listen time): an owner can neither take nor feed a session. Every
// descriptor here is non-blocking and close-on-exec (received ones too);
// every send and receive has a deadline, so none blocks the JavaScript
// thread longer than the timeout it is given. A message is all or nothing:
// one cut short (MSG_TRUNC, MSG_CTRUNC) is refused and its descriptors
// closed. No global state.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#ifndef HOMESFS_NO_NAPI
#include "sys/napi_args.h"
#endif

#include "handover/handover.h"

static int un_addr (const char *path, struct sockaddr_un *sa) {
  memset(sa, 0, sizeof(*sa));
  sa->sun_family = AF_UNIX;
  if (strlen(path) >= sizeof(sa->sun_path)) return -ENAMETOOLONG;
  strcpy(sa->sun_path, path);
  return 0;
}

int hs_ho_listen (const char *path) {
  struct sockaddr_un sa;
  int err = un_addr(path, &sa);
  if (err != 0) return err;
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -errno;
  // A socket a dead predecessor left goes; anything else at path stays (bind fails).
  struct stat st;
  if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path);
  // Linux makes the file with the socket's own mode (less the umask): set
  // first, the file is 0600 from the moment it exists, and the process-wide
  // umask, which other threads' creations use, is never touched.
  if (fchmod(fd, 0600) != 0 || bind(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0 || listen(fd, 4) != 0) {
    err = -errno;
    close(fd);
    return err;
  }
  return fd;
}

// The uid at the other end of a connected socket: 0, or -EPERM when it is not root.
static int peer_is_root (int fd) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred) || cred.uid != 0) return -EPERM;
  return 0;
}

int hs_ho_accept (int lfd) {
  int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return -errno;
  // The credentials the peer had when it connected.
  if (peer_is_root(fd) != 0) {
    close(fd);
    return -EPERM;
  }
  return fd;
}

int hs_ho_connect (const char *path) {
  struct sockaddr_un sa;
  int err = un_addr(path, &sa);
  if (err != 0) return err;
  // Non-blocking: a full backlog is -EAGAIN, not a wait.
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -errno;
  if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0) {
    err = -errno;
    close(fd);
    return err;
  }
  // The one listening must be root too: a successor never hands anything to another uid.
  if (peer_is_root(fd) != 0) {
    close(fd);
    return -EPERM;
  }
  return fd;
}

static int64_t now_ms (void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// Until fd is ready for `events` or the deadline (ms, CLOCK_MONOTONIC) passes.
static int wait_for (int fd, short events, int64_t deadline) {
  struct pollfd p = { fd, events, 0 };
  for (;;) {
    int64_t left = deadline - now_ms();
    int r = poll(&p, 1, left < 0 ? 0 : (int) (left > INT32_MAX ? INT32_MAX : left));
    if (r > 0) return (p.revents & events) ? 0 : -EPIPE;
    if (r == 0) return -ETIMEDOUT;
    if (errno != EINTR) return -errno;
  }
}

// Control-message space for the most descriptors, aligned for its header.
typedef union {
  struct cmsghdr h;
  char buf[CMSG_SPACE(sizeof(int) * HS_HO_MAX_FDS)];
} ho_ctl_t;

int hs_ho_send (int fd, const void *buf, size_t len, const int *fds, int nfds, int timeout_ms) {
  // An empty message reads as the peer's end: never sent.
  if (nfds < 0 || nfds > HS_HO_MAX_FDS || len == 0 || len > HS_HO_MAX_MSG) return -EINVAL;
  struct iovec iov = { (void *) buf, len };
  ho_ctl_t ctl;
  struct msghdr m;
  memset(&m, 0, sizeof(m));
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (nfds > 0) {
    memset(&ctl, 0, sizeof(ctl));
    m.msg_control = ctl.buf;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t) nfds);
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t) nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t) nfds);
  }
  int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    int err = wait_for(fd, POLLOUT, deadline);
    if (err != 0) return err;
    ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return (size_t) n == len ? 0 : -EMSGSIZE;
    if (errno != EAGAIN && errno != EINTR) return -errno;
  }
}

// The descriptors of a received message into fds (at most HS_HO_MAX_FDS; any beyond are closed).
static void take_fds (struct msghdr *m, int *fds, int *nfds) {
  for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c != NULL; c = CMSG_NXTHDR(m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int k = (int) ((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < k; i++) {
      int got;
      memcpy(&got, CMSG_DATA(c) + sizeof(int) * (size_t) i, sizeof(int));
      if (*nfds < HS_HO_MAX_FDS) fds[(*nfds)++] = got;
      else close(got);
    }
  }
}

int hs_ho_recv (int fd, void *buf, size_t cap, int *fds, int *nfds, int timeout_ms) {
  *nfds = 0;
  int64_t deadline = now_ms() + timeout_ms;
  struct iovec iov = { buf, cap };
  ho_ctl_t ctl;
  struct msghdr m;
  ssize_t n;
  for (;;) {
    int err = wait_for(fd, POLLIN, deadline);
    if (err != 0) return err;
    memset(&m, 0, sizeof(m));
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl.buf;
    m.msg_controllen = sizeof(ctl.buf);
    n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n >= 0) break;
    if (errno != EAGAIN && errno != EINTR) return -errno;
  }
  take_fds(&m, fds, nfds);
  // A message cut short or descriptors dropped: nothing of it can be
  // trusted. No bytes: the peer is gone. Either way its descriptors close.
  int res = (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 ? -EMSGSIZE : n == 0 ? -EPIPE : (int) n;
  if (res < 0) {
    for (int i = 0; i < *nfds; i++) close(fds[i]);
    *nfds = 0;
  }
  return res;
}

// The successor's descriptor table grown, before the pause, to the size of
// the serving daemon's (its FDSize in /proc; the peer's pid from
// SO_PEERCRED). In a process with threads (Node's), each doubling of the
// table waits for an RCU grace period (the kernel's expand_fdtable): the
// ~1,000 descriptors of a handover, taken into a table at its start size,
// paid 3-4 of them, 30-37 ms, inside the pause. One descriptor put at the
// top and closed again grows it once, now. -> the size reached or -errno.
int hs_ho_reserve_fds (int fd) {
  struct ucred cred;
  socklen_t clen = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0) return -errno;
  if (clen != sizeof(cred) || cred.pid <= 0) return -ESRCH;
  char path[64], buf[4096];
  snprintf(path, sizeof(path), "/proc/%d/status", (int) cred.pid);
  int sfd = open(path, O_RDONLY | O_CLOEXEC);
  if (sfd < 0) return -errno;
  ssize_t n = read(sfd, buf, sizeof(buf) - 1);
  int err = n < 0 ? -errno : 0;
  close(sfd);
  if (err != 0) return err;
  buf[n] = '\0';
  const char *at = strstr(buf, "\nFDSize:");
  long size = at != NULL ? strtol(at + 8, NULL, 10) : 0;
  if (size <= 0) return -ENOENT;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (rlim_t) size > rl.rlim_cur) size = (long) rl.rlim_cur;
  int top = fcntl(fd, F_DUPFD_CLOEXEC, (int) size - 1);
  if (top < 0) return -errno;
  close(top);
  return (int) size;
}

// A value of any size as one descriptor: an anonymous file holding `len`
// bytes of `buf`, sealed (no write, growth or shrink from anyone), read from
// offset 0. It goes in one SCM_RIGHTS slot instead of many 64 KiB messages,
// each a wake-up of the other side. -> fd (close-on-exec) or -errno.
int hs_ho_memfd (const void *buf, size_t len) {
  int fd = memfd_create("homesfs-handover", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -errno;
  for (size_t at = 0; at < len;) {
    ssize_t n = pwrite(fd, (const char *) buf + at, len - at, (off_t) at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? -errno : -EIO;
      close(fd);
      return err;
    }
    at += (size_t) n;
  }
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    int err = -errno;
    close(fd);
    return err;
  }
  return fd;
}

// ---- exports ---------------------------------------------------------------------
#ifndef HOMESFS_NO_NAPI

// listen(path) -> fd or -errno
NAPI_METHOD(hs_handover_listen_js) {
  NAPI_ARGV(1)
  NAPI_ARGV_UTF8(path, 4096, 0)
  return hs_js_num(env, hs_ho_listen(path));
}

// accept(listenFd) -> fd, -EAGAIN (none waiting), -EPERM (a peer that is not root: refused)
NAPI_METHOD(hs_handover_accept_js) {
  NAPI_ARGV(1)
  NAPI_ARGV_INT32(lfd, 0)
  return hs_js_num(env, hs_ho_accept(lfd));
}

// connect(path) -> fd or -errno
NAPI_METHOD(hs_handover_connect_js) {
  NAPI_ARGV(1)
  NAPI_ARGV_UTF8(path, 4096, 0)
  return hs_js_num(env, hs_ho_connect(path));
}

// send(fd, buffer, fds: number[], timeoutMs) -> 0 or -errno
NAPI_METHOD(hs_handover_send_js) {
  NAPI_ARGV(4)
  NAPI_ARGV_INT32(fd, 0)
  void *data = NULL;
  size_t len = 0;
  if (napi_get_buffer_info(env, argv[1], &data, &len) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "send: a buffer");
    return NULL;
  }
  uint32_t n = 0;
  int fds[HS_HO_MAX_FDS];
  if (napi_get_array_length(env, argv[2], &n) != napi_ok || n > HS_HO_MAX_FDS) {
    napi_throw_type_error(env, "EINVAL", "send: at most 253 descriptors");
    return NULL;
  }
  for (uint32_t i = 0; i < n; i++) {
    napi_value v;
    if (napi_get_element(env, argv[2], i, &v) != napi_ok || napi_get_value_int32(env, v, &fds[i]) != napi_ok) {
      napi_throw_type_error(env, "EINVAL", "send: descriptors are numbers");
      return NULL;
    }
  }
  NAPI_ARGV_INT32(timeout, 3)
  return hs_js_num(env, hs_ho_send(fd, data, len, fds, (int) n, timeout));
}

// recv(fd, timeoutMs) -> { res, data?: Buffer, fds: number[] } (res: bytes or -errno)
NAPI_METHOD(hs_handover_recv_js) {
  NAPI_ARGV(2)
  NAPI_ARGV_INT32(fd, 0)
  NAPI_ARGV_INT32(timeout, 1)
  char *buf = malloc(HS_HO_MAX_MSG);
  if (buf == NULL) return hs_js_num(env, -ENOMEM);
  int fds[HS_HO_MAX_FDS];
  int nfds = 0;
  int res = hs_ho_recv(fd, buf, HS_HO_MAX_MSG, fds, &nfds, timeout);
  napi_value out, v, list;
  napi_create_object(env, &out);
  napi_set_named_property(env, out, "res", hs_js_num(env, res));
  if (res >= 0) {
    void *copy = NULL;
    napi_create_buffer_copy(env, (size_t) res, buf, &copy, &v);
    napi_set_named_property(env, out, "data", v);
  }
  napi_create_array_with_length(env, (size_t) nfds, &list);
  for (int i = 0; i < nfds; i++) napi_set_element(env, list, (uint32_t) i, hs_js_num(env, fds[i]));
  napi_set_named_property(env, out, "fds", list);
  free(buf);
  return out;
}

// memfd(buffer) -> a sealed descriptor holding its bytes, or -errno
NAPI_METHOD(hs_handover_memfd_js) {
  NAPI_ARGV(1)
  void *data = NULL;
  size_t len = 0;
  if (napi_get_buffer_info(env, argv[0], &data, &len) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "memfd: a buffer");
    return NULL;
  }
  return hs_js_num(env, hs_ho_memfd(data, len));
}

// reserve_fds(fd) -> the descriptor table's size now (that of the peer on fd), or -errno
NAPI_METHOD(hs_handover_reserve_fds_js) {
  NAPI_ARGV(1)
  NAPI_ARGV_INT32(fd, 0)
  return hs_js_num(env, hs_ho_reserve_fds(fd));
}

// close(fd): a descriptor the handover made or received and will not use.
NAPI_METHOD(hs_handover_close_js) {
  NAPI_ARGV(1)
  NAPI_ARGV_INT32(fd, 0)
  return hs_js_num(env, close(fd) == 0 ? 0 : -errno);
}

void hs_handover_export (napi_env env, napi_value exports) {
  hs_export_fn(env, exports, "hs_handover_listen", hs_handover_listen_js);
  hs_export_fn(env, exports, "hs_handover_accept", hs_handover_accept_js);
  hs_export_fn(env, exports, "hs_handover_connect", hs_handover_connect_js);
  hs_export_fn(env, exports, "hs_handover_send", hs_handover_send_js);
  hs_export_fn(env, exports, "hs_handover_recv", hs_handover_recv_js);
  hs_export_fn(env, exports, "hs_handover_close", hs_handover_close_js);
  hs_export_fn(env, exports, "hs_handover_memfd", hs_handover_memfd_js);
  hs_export_fn(env, exports, "hs_handover_reserve_fds", hs_handover_reserve_fds_js);
}
#endif
