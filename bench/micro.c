// Per-operation latency on one directory, in µs, for bench/run.mjs.
//
//   micro DIR WARMDIR N [PID]
//
// DIR is where the ops run (a mount or the raw backing); WARMDIR is the same
// directory seen without FUSE (the backing), used to re-warm the backing's
// dentry and inode caches after the drop below, so "lookup" measures the FUSE
// path and not the disk. Prints one JSON object: mean µs per op and, with
// PID (the FUSE daemon), that daemon's CPU µs per op: the sum over its threads
// of /proc/PID/task/*/schedstat (ns on CPU), which stays meaningful on a
// loaded machine where wall time does not; and its context switches per op
// (all threads, voluntary and involuntary, from /proc/PID/task/*/status).
//
// C, not node: a JS loop of sync fs calls adds a few µs per call, which is the
// size of what is being measured.
#define _GNU_SOURCE
#include <dirent.h>
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

static int daemon_pid = 0;
/** context switches (voluntary + not) of every thread of daemon_pid, as of the last cpu_ns() */
static double switches_now = 0;

/**
 * ns on CPU of every thread of daemon_pid so far (0 without a pid); also
 * refreshes switches_now. Where a context switch is expensive (a
 * paravirtualised guest: every switch is a hypervisor round trip), the
 * switches per op explain most of a daemon's CPU per op.
 */
static double cpu_ns(void) {
  switches_now = 0;
  if (daemon_pid <= 0) return 0;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", daemon_pid);
  DIR *d = opendir(path);
  if (d == NULL) return 0;
  double total = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char p2[320];
    snprintf(p2, sizeof p2, "/proc/%d/task/%s/schedstat", daemon_pid, e->d_name);
    FILE *f = fopen(p2, "r");
    if (f == NULL) continue;
    unsigned long long ns = 0;
    if (fscanf(f, "%llu", &ns) == 1) total += (double) ns;
    fclose(f);
    snprintf(p2, sizeof p2, "/proc/%d/task/%s/status", daemon_pid, e->d_name);
    f = fopen(p2, "r");
    if (f == NULL) continue;
    char line[256];
    while (fgets(line, sizeof line, f) != NULL) {
      unsigned long long n = 0;
      if (sscanf(line, "voluntary_ctxt_switches: %llu", &n) == 1 || sscanf(line, "nonvoluntary_ctxt_switches: %llu", &n) == 1) switches_now += (double) n;
    }
    fclose(f);
  }
  closedir(d);
  return total;
}

static void die(const char *what, const char *name) {
  fprintf(stderr, "micro: %s %s: %s\n", what, name, strerror(errno));
  exit(1);
}

int main(int argc, char **argv) {
  if (argc != 4 && argc != 5) {
    fprintf(stderr, "usage: micro DIR WARMDIR N [PID]\n");
    return 2;
  }
  const char *dir = argv[1];
  const char *warm = argv[2];
  int n = atoi(argv[3]);
  if (n <= 0) return 2;
  if (argc == 5) daemon_pid = atoi(argv[4]);
  int dfd = open(dir, O_RDONLY | O_DIRECTORY);
  if (dfd < 0) die("open", dir);
  int wfd = open(warm, O_RDONLY | O_DIRECTORY);
  if (wfd < 0) die("open", warm);
  char name[64];
  double t0, c0, create_us, open_us, lookup_us, getattr_us, unlink_us;
  double create_cpu, open_cpu, lookup_cpu, getattr_cpu, unlink_cpu;
  double s0, create_sw, open_sw, lookup_sw, getattr_sw, unlink_sw;

  // create+close: a new name each time (O_EXCL, as editors and tar do).
  c0 = cpu_ns();
  s0 = switches_now;
  t0 = now_us();
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "m%d", i);
    int fd = openat(dfd, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) die("create", name);
    close(fd);
  }
  create_us = (now_us() - t0) / n;
  create_cpu = (cpu_ns() - c0) / 1e3 / n;
  create_sw = (switches_now - s0) / n;

  // open+close of an existing file (dentry cached: OPEN, FLUSH, RELEASE).
  c0 = cpu_ns();
  s0 = switches_now;
  t0 = now_us();
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "m%d", i);
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("open", name);
    close(fd);
  }
  open_us = (now_us() - t0) / n;
  open_cpu = (cpu_ns() - c0) / 1e3 / n;
  open_sw = (switches_now - s0) / n;

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
  c0 = cpu_ns();
  s0 = switches_now;
  t0 = now_us();
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "m%d", i);
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) die("lookup", name);
  }
  lookup_us = (now_us() - t0) / n;
  lookup_cpu = (cpu_ns() - c0) / 1e3 / n;
  lookup_sw = (switches_now - s0) / n;

  // getattr: a stat the kernel must ask about whatever its attribute timeout (GETATTR).
  struct statx sx;
  c0 = cpu_ns();
  s0 = switches_now;
  t0 = now_us();
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "m%d", i);
    if (statx(dfd, name, AT_SYMLINK_NOFOLLOW | AT_STATX_FORCE_SYNC, STATX_BASIC_STATS, &sx) < 0) die("getattr", name);
  }
  getattr_us = (now_us() - t0) / n;
  getattr_cpu = (cpu_ns() - c0) / 1e3 / n;
  getattr_sw = (switches_now - s0) / n;

  c0 = cpu_ns();
  s0 = switches_now;
  t0 = now_us();
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "m%d", i);
    if (unlinkat(dfd, name, 0) < 0) die("unlink", name);
  }
  unlink_us = (now_us() - t0) / n;
  unlink_cpu = (cpu_ns() - c0) / 1e3 / n;
  unlink_sw = (switches_now - s0) / n;

  // The namespace ops an install makes besides files: a directory per package,
  // its removal, relative symlinks (node_modules/.bin), hard links (pip's and
  // git's objects). Each a new name, timed as the rows above; then removed untimed.
  struct { const char *key; double us, cpu, sw; } ns[4] = { { "mkdir" }, { "rmdir" }, { "symlink" }, { "link" } };
#define TIMED(row, body)                                   \
  do {                                                     \
    c0 = cpu_ns();                                         \
    s0 = switches_now;                                     \
    t0 = now_us();                                         \
    for (int i = 0; i < n; i++) {                          \
      body                                                 \
    }                                                      \
    ns[row].us = (now_us() - t0) / n;                      \
    ns[row].cpu = (cpu_ns() - c0) / 1e3 / n;               \
    ns[row].sw = (switches_now - s0) / n;                  \
  } while (0)
  TIMED(0, snprintf(name, sizeof name, "d%d", i); if (mkdirat(dfd, name, 0755) < 0) die("mkdir", name););
  TIMED(1, snprintf(name, sizeof name, "d%d", i); if (unlinkat(dfd, name, AT_REMOVEDIR) < 0) die("rmdir", name););
  int src = openat(dfd, "src", O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (src < 0) die("create", "src");
  close(src);
  TIMED(2, snprintf(name, sizeof name, "s%d", i); if (symlinkat("src", dfd, name) < 0) die("symlink", name););
  TIMED(3, snprintf(name, sizeof name, "l%d", i); if (linkat(dfd, "src", dfd, name, 0) < 0) die("link", name););
#undef TIMED
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof name, "s%d", i);
    if (unlinkat(dfd, name, 0) < 0) die("unlink", name);
    snprintf(name, sizeof name, "l%d", i);
    if (unlinkat(dfd, name, 0) < 0) die("unlink", name);
  }
  if (unlinkat(dfd, "src", 0) < 0) die("unlink", "src");

  char extra[3][256];
  for (int k = 0; k < 3; k++) {
    size_t at = 0;
    for (int r = 0; r < 4; r++) {
      double v = k == 0 ? ns[r].us : k == 1 ? ns[r].cpu : ns[r].sw;
      at += (size_t) snprintf(extra[k] + at, sizeof extra[k] - at, ",\"%s\":%.2f", ns[r].key, v);
    }
  }
  printf("{\"lookup\":%.2f,\"getattr\":%.2f,\"createClose\":%.2f,\"openClose\":%.2f,\"unlink\":%.2f%s,\"droppedCaches\":%s,"
         "\"cpu\":{\"lookup\":%.2f,\"getattr\":%.2f,\"createClose\":%.2f,\"openClose\":%.2f,\"unlink\":%.2f%s},"
         "\"switches\":{\"lookup\":%.2f,\"getattr\":%.2f,\"createClose\":%.2f,\"openClose\":%.2f,\"unlink\":%.2f%s}}\n",
         lookup_us, getattr_us, create_us, open_us, unlink_us, extra[0], dc >= 0 ? "true" : "false", lookup_cpu, getattr_cpu, create_cpu, open_cpu,
         unlink_cpu, extra[1], lookup_sw, getattr_sw, create_sw, open_sw, unlink_sw, extra[2]);
  return 0;
}
