// systemd's file descriptor store (sd_pid_notify_with_fds without libsystemd):
// what Node cannot do itself, one notification datagram carrying descriptors
// (SCM_RIGHTS) and our credentials (SCM_CREDENTIALS) to $NOTIFY_SOCKET, and
// close-on-exec for the descriptors systemd passes back at a restart.
//
// Invariants: one sendmsg per call, on a socket of its own closed before the
// return (no descriptor of ours outlives the call but those given). The
// credentials are this process's own pid/uid/gid: systemd attributes the
// message (and the descriptors it stores) to the sender's pid, and must see
// the main pid for FDSTORE=1 to be accepted. A socket path starting with '@'
// is in the abstract namespace (the '@' becomes a NUL byte), as sd_notify
// reads it. No global state; no locks. Runs on the daemon's JavaScript
// thread (and in native/test/test_sdstore.c, built without Node:
// HOMESFS_NO_NAPI).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#ifndef HOMESFS_NO_NAPI
#include "sys/napi_args.h"
#endif

#include "handover/sdstore.h"

// At most what the holder's registration needs and far under SCM_MAX_FD (253).
#define SD_MAX_FDS 16

static int sd_address (const char *path, struct sockaddr_un *sa, socklen_t *len) {
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof(sa->sun_path)) return -EINVAL;
  if (path[0] != '/' && path[0] != '@') return -EAFNOSUPPORT;
  memset(sa, 0, sizeof(*sa));
  sa->sun_family = AF_UNIX;
  memcpy(sa->sun_path, path, n);
  if (path[0] == '@') sa->sun_path[0] = '\0';
  // Abstract names are exactly their length (no trailing NUL); paths carry it.
  *len = (socklen_t) (offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '@' ? 0 : 1));
  return 0;
}

int hs_sd_notify_fds (const char *path, const char *msg, size_t mlen, const int *fds, size_t nfds) {
  if (nfds > SD_MAX_FDS) return -E2BIG;
  struct sockaddr_un sa;
  socklen_t salen;
  int r = sd_address(path, &sa, &salen);
  if (r != 0) return r;
  union {
    char buf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int) * SD_MAX_FDS)];
    struct cmsghdr align;
  } ctl;
  memset(&ctl, 0, sizeof(ctl));
  struct iovec iov = { (void *) msg, mlen };
  struct msghdr mh = { 0 };
  mh.msg_name = &sa;
  mh.msg_namelen = salen;
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctl.buf;
  mh.msg_controllen = CMSG_SPACE(sizeof(struct ucred)) + (nfds > 0 ? CMSG_SPACE(sizeof(int) * nfds) : 0);
  struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_CREDENTIALS;
  c->cmsg_len = CMSG_LEN(sizeof(struct ucred));
  struct ucred cred = { getpid(), getuid(), getgid() };
  memcpy(CMSG_DATA(c), &cred, sizeof(cred));
  if (nfds > 0) {
    c = CMSG_NXTHDR(&mh, c);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -errno;
  ssize_t n;
  do n = sendmsg(s, &mh, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  r = n < 0 ? -errno : ((size_t) n == mlen ? 0 : -EMSGSIZE);
  close(s);
  return r;
}

int hs_sd_cloexec (int fd) {
  int f = fcntl(fd, F_GETFD);
  if (f < 0) return -errno;
  return fcntl(fd, F_SETFD, f | FD_CLOEXEC) == 0 ? 0 : -errno;
}

#ifndef HOMESFS_NO_NAPI
// ---- exports ---------------------------------------------------------------------

// sd_notify_fds(socketPath, message, fds[]) -> 0 or -errno
NAPI_METHOD(hs_sd_notify_fds_js) {
  NAPI_ARGV(3)
  char path[sizeof(((struct sockaddr_un *) 0)->sun_path) + 1];
  size_t plen = 0;
  if (napi_get_value_string_utf8(env, argv[0], path, sizeof(path), &plen) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "sd_notify_fds: a socket path");
    return NULL;
  }
  if (plen >= sizeof(path) - 1) return hs_js_num(env, -ENAMETOOLONG);
  size_t mlen = 0;
  if (napi_get_value_string_utf8(env, argv[1], NULL, 0, &mlen) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "sd_notify_fds: a message");
    return NULL;
  }
  char *msg = malloc(mlen + 1);
  if (msg == NULL) return hs_js_num(env, -ENOMEM);
  napi_get_value_string_utf8(env, argv[1], msg, mlen + 1, &mlen);
  uint32_t nfds = 0;
  bool arr = false;
  napi_is_array(env, argv[2], &arr);
  if (arr) napi_get_array_length(env, argv[2], &nfds);
  if (!arr || nfds > SD_MAX_FDS) {
    free(msg);
    return hs_js_num(env, arr ? -E2BIG : -EINVAL);
  }
  int fds[SD_MAX_FDS];
  for (uint32_t i = 0; i < nfds; i++) {
    napi_value v;
    napi_get_element(env, argv[2], i, &v);
    if (napi_get_value_int32(env, v, &fds[i]) != napi_ok || fds[i] < 0) {
      free(msg);
      return hs_js_num(env, -EBADF);
    }
  }
  int r = hs_sd_notify_fds(path, msg, mlen, fds, nfds);
  free(msg);
  return hs_js_num(env, r);
}

// sd_cloexec(fd) -> 0 or -errno
NAPI_METHOD(hs_sd_cloexec_js) {
  NAPI_ARGV(1)
  NAPI_ARGV_INT32(fd, 0)
  return hs_js_num(env, hs_sd_cloexec(fd));
}

void hs_sdstore_export (napi_env env, napi_value exports) {
  hs_export_fn(env, exports, "hs_handover_sd_notify_fds", hs_sd_notify_fds_js);
  hs_export_fn(env, exports, "hs_handover_sd_cloexec", hs_sd_cloexec_js);
}
#endif
