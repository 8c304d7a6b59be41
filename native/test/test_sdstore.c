// handover/sdstore.c, systemd's notify protocol as the fd store needs it, to a
// receiver of this file's on a real socket (as systemd's: SOCK_DGRAM with
// SO_PASSCRED): a NOTIFY_SOCKET starting with '@' reaches the abstract name
// (the '@' a NUL, no trailing NUL: sd_notify's reading), one starting with
// '/' the socket file; each datagram carries the message, our credentials
// (systemd keeps descriptors only from the unit's pids) and the descriptors,
// which are the same open files on the other side. Anything else is refused
// before a socket is made. Built without Node (HOMESFS_NO_NAPI).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include "harness.h"
#include "../src/handover/sdstore.h"

// A notify socket as systemd binds it; `name` '@…' abstract, else a path.
static int receiver (const char *name) {
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  size_t n = strlen(name);
  memcpy(sa.sun_path, name, n);
  socklen_t len = (socklen_t) (offsetof(struct sockaddr_un, sun_path) + n);
  if (name[0] == '@') sa.sun_path[0] = '\0';
  else len++;
  int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (s < 0 || setsockopt(s, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) != 0 || bind(s, (struct sockaddr *) &sa, len) != 0) abort();
  return s;
}

typedef struct { char msg[256]; ssize_t len; struct ucred cred; int fds[4]; int nfds; } got_t;

static void take (int s, got_t *g) {
  memset(g, 0, sizeof(*g));
  union { char buf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int) * 4)]; struct cmsghdr align; } ctl;
  struct iovec iov = { g->msg, sizeof(g->msg) - 1 };
  struct msghdr mh = { 0 };
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctl.buf;
  mh.msg_controllen = sizeof(ctl.buf);
  g->len = recvmsg(s, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (g->len < 0) return;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET) continue;
    if (c->cmsg_type == SCM_CREDENTIALS) memcpy(&g->cred, CMSG_DATA(c), sizeof(g->cred));
    if (c->cmsg_type == SCM_RIGHTS) {
      g->nfds = (int) ((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      memcpy(g->fds, CMSG_DATA(c), sizeof(int) * (size_t) g->nfds);
    }
  }
}

static int same_file (int a, int b) {
  struct stat x, y;
  return fstat(a, &x) == 0 && fstat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

// One FDSTORE=1 to `name`, as the daemon sends it, checked on the receiver `s`.
static void stores_through (const char *name, int s) {
  int p[2];
  CHECK_EQ(pipe(p), 0);
  const char *msg = "FDSTORE=1\nFDNAME=homesfs-fuse";
  CHECK_EQ(hs_sd_notify_fds(name, msg, strlen(msg), &p[0], 1), 0);
  got_t g;
  take(s, &g);
  CHECK_EQ(g.len, (ssize_t) strlen(msg));
  CHECK(strcmp(g.msg, msg) == 0);
  CHECK_EQ(g.cred.pid, getpid());
  CHECK_EQ(g.cred.uid, getuid());
  CHECK_EQ(g.nfds, 1);
  CHECK(same_file(g.fds[0], p[0]));
  // A message without descriptors (FDSTOREREMOVE=1) goes the same way.
  msg = "FDSTOREREMOVE=1\nFDNAME=homesfs-fuse";
  CHECK_EQ(hs_sd_notify_fds(name, msg, strlen(msg), NULL, 0), 0);
  take(s, &g);
  CHECK(g.len > 0 && strcmp(g.msg, msg) == 0);
  CHECK_EQ(g.nfds, 0);
  CHECK_EQ(g.cred.pid, getpid());
  for (int i = 0; i < g.nfds; i++) close(g.fds[i]);
  close(p[0]);
  close(p[1]);
}

TEST(an_abstract_notify_socket_is_reached_by_its_name) {
  char name[64];
  snprintf(name, sizeof(name), "@homesfs-test-sdstore-%d", (int) getpid());
  // Bound as exactly its name: neither the socket file its letters would name nor the name
  // with a NUL after it reaches it.
  int s = receiver(name);
  stores_through(name, s);
  close(s);
}

TEST(a_socket_file_is_reached_by_its_path) {
  char dir[] = "/tmp/hs-sdstore-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char name[96];
  snprintf(name, sizeof(name), "%s/notify", dir);
  int s = receiver(name);
  stores_through(name, s);
  close(s);
  unlink(name);
  rmdir(dir);
}

TEST(anything_else_is_refused_before_a_socket_is_made) {
  CHECK_EQ(hs_sd_notify_fds("relative/notify", "A=1", 3, NULL, 0), -EAFNOSUPPORT);
  CHECK_EQ(hs_sd_notify_fds("", "A=1", 3, NULL, 0), -EINVAL);
  char longer[200];
  memset(longer, 'a', sizeof(longer) - 1);
  longer[0] = '/';
  longer[sizeof(longer) - 1] = '\0';
  CHECK_EQ(hs_sd_notify_fds(longer, "A=1", 3, NULL, 0), -EINVAL);
  int fds[17] = { 0 };
  CHECK_EQ(hs_sd_notify_fds("/run/nothing", "A=1", 3, fds, 17), -E2BIG);
}
