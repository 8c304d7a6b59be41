// Per-operation latency on one directory, in µs, for bench/run.mjs.
//
//   micro DIR WARMDIR N
//
// DIR is where the ops run (a mount or the raw backing); WARMDIR is the same
// directory seen without FUSE (the backing), used to re-warm the backing's
// dentry and inode caches after the drop below, so "lookup" measures the FUSE
// path and not the disk. Prints one JSON object: mean µs per op.
//
// C, not node: a JS loop of sync fs calls adds a few µs per call, which is the
// size of what is being measured.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void die(const char *what, const char *name) {
  fprintf(stderr, "micro: %s %s: %s\n", what, name, strerror(errno));
  exit(1);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: micro DIR WARMDIR N\n");
    return 2;
  }
  const char *dir = argv[1];
  const char *warm = argv[2];
  int n = atoi(argv[3]);
  if (n <= 0) return 2;
  int dfd = open(dir, O_RDONLY | O_DIRECTORY);
  if (dfd < 0) die("open", dir);
  int wfd = open(warm, O_RDONLY | O_DIRECTORY);
  if (wfd < 0) die("open", warm);
  char name[64];
  double t0, create_us, open_us, lookup_us, getattr_us, unlink_us;

  // create+close: a new name each time (O_EXCL, as editors and tar do).
  t0 = now_us();
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "m%d", i);
    int fd = openat(dfd, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) die("create", name);
    close(fd);
  }
  create_us = (now_us() - t0) / n;

  // open+close of an existing file (dentry cached: OPEN, FLUSH, RELEASE).
  t0 = now_us();
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "m%d", i);
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("open", name);
    close(fd);
  }
  open_us = (now_us() - t0) / n;

  // Drop dentries and inodes (the FUSE ones get FORGET), then re-warm only the backing.
  sync();
  int dc = open("/proc/sys/vm/drop_caches", O_WRONLY);
  if (dc >= 0) {
    if (write(dc, "2", 1) != 1) die("write", "/proc/sys/vm/drop_caches");
    close(dc);
  }
  struct stat st;
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "m%d", i);
    if (fstatat(wfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) die("warm", name);
  }

  // lookup: the first stat of a name the kernel no longer knows (LOOKUP).
  t0 = now_us();
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "m%d", i);
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) die("lookup", name);
  }
  lookup_us = (now_us() - t0) / n;

  // getattr: a stat the kernel must ask about whatever its attribute timeout (GETATTR).
  struct statx sx;
  t0 = now_us();
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "m%d", i);
    if (statx(dfd, name, AT_SYMLINK_NOFOLLOW | AT_STATX_FORCE_SYNC, STATX_BASIC_STATS, &sx) < 0) die("getattr", name);
  }
  getattr_us = (now_us() - t0) / n;

  t0 = now_us();
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "m%d", i);
    if (unlinkat(dfd, name, 0) < 0) die("unlink", name);
  }
  unlink_us = (now_us() - t0) / n;

  printf("{\"lookup\":%.2f,\"getattr\":%.2f,\"createClose\":%.2f,\"openClose\":%.2f,\"unlink\":%.2f,\"droppedCaches\":%s}\n", lookup_us,
         getattr_us, create_us, open_us, unlink_us, dc >= 0 ? "true" : "false");
  return 0;
}
