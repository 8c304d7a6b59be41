// handover/handover.c over real sockets in a temporary directory: listen,
// connect and accept; a message and descriptors that are usable on the other
// side (the same open file descriptions: offsets set by the sender are seen
// by the receiver); more descriptors than one message carries, in batches;
// and the safety: the socket file is 0600 from the start (a process of
// another uid cannot connect), a peer that is not root is refused by accept
// even when the file lets it connect, and a listener that is not root is
// refused by connect; a value handed as a sealed descriptor (hs_ho_memfd).
// A successor grows its descriptor table to the serving daemon's before the
// pause (hs_ho_reserve_fds). Children fork and setuid(65534) for the other uid.
// Built without Node (HOMESFS_NO_NAPI).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"
#include "../src/handover/handover.h"

#define NOBODY 65534
#define T_MS 10000

static char dir[64];

static void temp_dir (void) {
  strcpy(dir, "/tmp/hs-handover-XXXXXX");
  if (mkdtemp(dir) == NULL) abort();
}

static void sock_path (char *out, size_t size, const char *name) {
  snprintf(out, size, "%s/%s", dir, name);
}

static void remove_dir (void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "  could not remove %s\n", dir);
}

// A connection accepted on lfd (waits for the peer to connect).
static int accept_one (int lfd) {
  struct pollfd p = { lfd, POLLIN, 0 };
  if (poll(&p, 1, T_MS) != 1) return -ETIMEDOUT;
  return hs_ho_accept(lfd);
}

// Both ends of one connection in this process.
static int pair (const char *path, int *lfd, int *a, int *b) {
  *lfd = hs_ho_listen(path);
  if (*lfd < 0) return *lfd;
  *b = hs_ho_connect(path);
  if (*b < 0) return *b;
  *a = accept_one(*lfd);
  return *a < 0 ? *a : 0;
}

TEST(a_message_and_descriptors_reach_the_other_end_usable) {
  temp_dir();
  char path[128], file[128];
  sock_path(path, sizeof(path), "ho.sock");
  int lfd = -1, a = -1, b = -1;
  REQUIRE(pair(path, &lfd, &a, &b) == 0);
  // Two open file descriptions of one file, at offsets 3 and 5.
  sock_path(file, sizeof(file), "data");
  int f1 = open(file, O_RDWR | O_CREAT | O_CLOEXEC, 0600), f2 = open(file, O_RDWR | O_CLOEXEC);
  REQUIRE(f1 >= 0 && f2 >= 0);
  CHECK_EQ(write(f1, "0123456789", 10), 10);
  lseek(f1, 3, SEEK_SET);
  lseek(f2, 5, SEEK_SET);
  int fds[2] = { f1, f2 };
  CHECK_EQ(hs_ho_send(a, "hello", 5, fds, 2, T_MS), 0);
  char buf[HS_HO_MAX_MSG];
  int got[HS_HO_MAX_FDS], n = -1;
  CHECK_EQ(hs_ho_recv(b, buf, sizeof(buf), got, &n, T_MS), 5);
  CHECK(memcmp(buf, "hello", 5) == 0);
  REQUIRE(n == 2);
  // New descriptors, close-on-exec, on the same open files in order.
  CHECK(got[0] != f1 && got[1] != f2);
  CHECK((fcntl(got[0], F_GETFD) & FD_CLOEXEC) != 0);
  CHECK_EQ(lseek(got[0], 0, SEEK_CUR), 3);
  CHECK_EQ(lseek(got[1], 0, SEEK_CUR), 5);
  char c = 0;
  CHECK_EQ(read(got[1], &c, 1), 1);
  CHECK_EQ(c, '5');
  CHECK_EQ(lseek(f2, 0, SEEK_CUR), 6);
  // A message without descriptors, the other way.
  CHECK_EQ(hs_ho_send(b, "back", 4, NULL, 0, T_MS), 0);
  CHECK_EQ(hs_ho_recv(a, buf, sizeof(buf), got + 2, &n, T_MS), 4);
  CHECK_EQ(n, 0);
  // Nothing sent: the deadline, not a wait without end.
  CHECK_EQ(hs_ho_recv(a, buf, sizeof(buf), got + 2, &n, 50), -ETIMEDOUT);
  // The peer gone: -EPIPE.
  close(b);
  CHECK_EQ(hs_ho_recv(a, buf, sizeof(buf), got + 2, &n, T_MS), -EPIPE);
  close(got[0]); close(got[1]); close(f1); close(f2); close(a); close(lfd);
  remove_dir();
}

TEST(more_descriptors_than_one_message_carries_go_in_batches) {
  temp_dir();
  char path[128], file[128];
  sock_path(path, sizeof(path), "ho.sock");
  int lfd = -1, a = -1, b = -1;
  REQUIRE(pair(path, &lfd, &a, &b) == 0);
  // 300 descriptions of one file, each at its own offset; sent and received
  // here, so 600 descriptors are open at once.
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < 1024) { rl.rlim_cur = rl.rlim_max < 1024 ? rl.rlim_max : 1024; setrlimit(RLIMIT_NOFILE, &rl); }
  enum { N = 300 };
  int sent[N], got[N], n = 0;
  sock_path(file, sizeof(file), "data");
  for (int i = 0; i < N; i++) {
    sent[i] = open(file, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    REQUIRE(sent[i] >= 0);
    lseek(sent[i], i, SEEK_SET);
  }
  // One message cannot carry them all.
  CHECK_EQ(hs_ho_send(a, "x", 1, sent, HS_HO_MAX_FDS + 1, T_MS), -EINVAL);
  int batches = 0;
  for (int at = 0; at < N; at += HS_HO_MAX_FDS, batches++) {
    int k = N - at < HS_HO_MAX_FDS ? N - at : HS_HO_MAX_FDS;
    uint32_t first = (uint32_t) at;
    CHECK_EQ(hs_ho_send(a, &first, sizeof(first), sent + at, k, T_MS), 0);
  }
  CHECK_EQ(batches, 2);
  char buf[HS_HO_MAX_MSG];
  while (n < N) {
    int k = 0;
    int res = hs_ho_recv(b, buf, sizeof(buf), got + n, &k, T_MS);
    CHECK_EQ(res, 4);
    if (res != 4 || k == 0) break;
    uint32_t first;
    memcpy(&first, buf, 4);
    CHECK_EQ(first, n);
    n += k;
  }
  CHECK_EQ(n, N);
  int wrong = 0;
  for (int i = 0; i < n; i++) {
    if (lseek(got[i], 0, SEEK_CUR) != i) wrong++;
    close(got[i]);
  }
  CHECK_EQ(wrong, 0);
  for (int i = 0; i < N; i++) close(sent[i]);
  close(a); close(b); close(lfd);
  remove_dir();
}

// In a child as uid 65534: connect to path; exit 0 when connect gives
// `want_err` (0: connected), and when connected, wait for the peer to close.
static pid_t child_connect (const char *path, int want_err) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  if (setgid(NOBODY) != 0 || setuid(NOBODY) != 0) _exit(2);
  int fd = hs_ho_connect(path);
  if (want_err != 0) _exit(fd == want_err ? 0 : 3);
  // The listener is root, so connect succeeds from here.
  if (fd < 0) _exit(4);
  char buf[16];
  int fds[HS_HO_MAX_FDS], n = 0;
  int res = hs_ho_recv(fd, buf, sizeof(buf), fds, &n, T_MS);
  _exit(res == -EPIPE ? 0 : 5);
}

static int exit_code (pid_t pid) {
  int st = 0;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return -1;
  return WEXITSTATUS(st);
}

TEST(the_socket_file_is_for_root_alone) {
  temp_dir();
  // The directory lets anyone through: the file's own mode is what keeps
  // another uid out.
  chmod(dir, 0755);
  char path[128];
  sock_path(path, sizeof(path), "ho.sock");
  mode_t old = umask(0);  // the mode must not come from the umask
  int lfd = hs_ho_listen(path);
  umask(old);
  REQUIRE(lfd >= 0);
  struct stat st;
  REQUIRE(lstat(path, &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK_EQ(st.st_mode & 0777, 0600);
  CHECK_EQ(st.st_uid, 0);
  CHECK_EQ(exit_code(child_connect(path, -EACCES)), 0);
  // Nobody got in.
  CHECK_EQ(hs_ho_accept(lfd), -EAGAIN);
  // A new listener on the path replaces a stale socket, never another file.
  close(lfd);
  lfd = hs_ho_listen(path);
  CHECK(lfd >= 0);
  char file[128];
  sock_path(file, sizeof(file), "plain");
  int f = open(file, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  close(f);
  CHECK_EQ(hs_ho_listen(file), -EADDRINUSE);
  CHECK_EQ(access(file, F_OK), 0);
  close(lfd);
  remove_dir();
}

TEST(a_peer_that_is_not_root_is_refused_by_accept) {
  temp_dir();
  chmod(dir, 0755);
  char path[128];
  sock_path(path, sizeof(path), "ho.sock");
  int lfd = hs_ho_listen(path);
  REQUIRE(lfd >= 0);
  // The file opened to everyone: only the peer check is left to refuse.
  chmod(path, 0666);
  pid_t pid = child_connect(path, 0);
  CHECK_EQ(accept_one(lfd), -EPERM);
  // Refused means closed: the child sees its peer gone.
  CHECK_EQ(exit_code(pid), 0);
  // A root peer is still let in.
  int b = hs_ho_connect(path);
  CHECK(b >= 0);
  int a = accept_one(lfd);
  CHECK(a >= 0);
  close(a); close(b); close(lfd);
  remove_dir();
}

TEST(a_listener_that_is_not_root_is_refused_by_connect) {
  temp_dir();
  chmod(dir, 0755);
  char path[128];
  sock_path(path, sizeof(path), "ho.sock");
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    if (chown(dir, NOBODY, NOBODY) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0) _exit(2);
    int lfd = hs_ho_listen(path);
    if (lfd < 0) _exit(3);
    char c = 'r';
    if (write(ready[1], &c, 1) != 1) _exit(4);
    // Up while the parent connects (its refused connection wakes this).
    struct pollfd p = { lfd, POLLIN, 0 };
    poll(&p, 1, T_MS);
    _exit(0);
  }
  close(ready[1]);
  char c = 0;
  REQUIRE(read(ready[0], &c, 1) == 1);
  close(ready[0]);
  CHECK_EQ(hs_ho_connect(path), -EPERM);
  CHECK_EQ(exit_code(pid), 0);
  remove_dir();
}

TEST(a_value_as_a_descriptor_holds_its_bytes_and_nothing_changes_them) {
  static char big[300 * 1024];
  for (size_t i = 0; i < sizeof(big); i++) big[i] = (char) (i * 7);
  int fd = hs_ho_memfd(big, sizeof(big));
  REQUIRE(fd >= 0);
  CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  struct stat st;
  REQUIRE(fstat(fd, &st) == 0);
  CHECK_EQ((long long) st.st_size, (long long) sizeof(big));
  static char back[sizeof(big)];
  CHECK_EQ(pread(fd, back, sizeof(back), 0), (ssize_t) sizeof(back));
  CHECK(memcmp(back, big, sizeof(big)) == 0);
  // Sealed: no one writes, grows or shrinks it after it was made.
  CHECK_EQ(pwrite(fd, "x", 1, 0), -1);
  CHECK_EQ(errno, EPERM);
  CHECK_EQ(ftruncate(fd, 1), -1);
  CHECK_EQ(fcntl(fd, F_ADD_SEALS, 0), -1);
  close(fd);
  // An empty value is a descriptor too.
  fd = hs_ho_memfd(NULL, 0);
  REQUIRE(fd >= 0);
  REQUIRE(fstat(fd, &st) == 0);
  CHECK_EQ((long long) st.st_size, 0LL);
  close(fd);
}

// This process's descriptor table size (FDSize in /proc/self/status).
static long fd_table_size (void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL) return -1;
  char line[256];
  long size = -1;
  while (fgets(line, sizeof(line), f) != NULL)
    if (strncmp(line, "FDSize:", 7) == 0) size = strtol(line + 7, NULL, 10);
  fclose(f);
  return size;
}

TEST(the_successor_grows_its_descriptor_table_to_the_serving_daemons_at_once) {
  temp_dir();
  char path[128];
  sock_path(path, sizeof(path), "ho.sock");
  int ready[2], done[2];
  REQUIRE(pipe(ready) == 0);
  REQUIRE(pipe(done) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    close(done[1]);
    // The serving daemon's table, grown by its open files: 4096 slots.
    int top = fcntl(0, F_DUPFD_CLOEXEC, 3000);
    if (top < 0) _exit(2);
    int lfd = hs_ho_listen(path);
    if (lfd < 0) _exit(3);
    char c = 'r';
    if (write(ready[1], &c, 1) != 1) _exit(4);
    int a = accept_one(lfd);
    if (read(done[0], &c, 1) != 1) _exit(5);
    _exit(a >= 0 ? 0 : 6);
  }
  close(ready[1]);
  close(done[0]);
  char c = 0;
  REQUIRE(read(ready[0], &c, 1) == 1);
  close(ready[0]);
  long before = fd_table_size();
  REQUIRE(before > 0 && before < 4096);
  int fd = hs_ho_connect(path);
  REQUIRE(fd >= 0);
  CHECK_EQ(hs_ho_reserve_fds(fd), 4096);
  CHECK_EQ(fd_table_size(), 4096L);
  // Nothing is left open at the top: the slot was only for the growth.
  CHECK_EQ(fcntl(4095, F_GETFD), -1);
  CHECK_EQ(errno, EBADF);
  // Past RLIMIT_NOFILE it stops there (a lower limit: the table stays as it is).
  struct rlimit old, low = { 1024, 0 };
  REQUIRE(getrlimit(RLIMIT_NOFILE, &old) == 0);
  low.rlim_max = old.rlim_max;
  REQUIRE(setrlimit(RLIMIT_NOFILE, &low) == 0);
  CHECK_EQ(hs_ho_reserve_fds(fd), 1024);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &old) == 0);
  REQUIRE(write(done[1], "d", 1) == 1);
  close(done[1]);
  close(fd);
  CHECK_EQ(exit_code(pid), 0);
  remove_dir();
}
