// Helpers of the scale workload of bench/run.mjs (BENCH_ONLY=scale).
//
//   scale populate ROOT FILES PERDIR   ROOT/dNNNN/fNNNN, empty files, PERDIR a directory;
//                                      prints the seconds it took (no fsync)
//   scale probe DIR                    until SIGTERM: create+close, statx(FORCE_SYNC) and
//                                      unlink of a new name in DIR, each op timed; SIGUSR1
//                                      starts the next phase (0 = during the scan, 1 = after).
//                                      Prints one JSON object per phase: iterations, seconds,
//                                      and per op the count, p50, p99 and max in µs.
//   scale hold ROOT N PERDIR           open the first N files of a populated ROOT read-only
//                                      and hold them: prints "ready SECS" once all are open,
//                                      then waits for SIGTERM (or stdin closing)
//
// C, like micro.c: the probe's latencies are the daemon's, not an interpreter's, and
// creating a million files must take seconds, not minutes.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what, const char *name) {
  fprintf(stderr, "scale: %s %s: %s\n", what, name, strerror(errno));
  exit(1);
}

static int populate(const char *root, long files, long perdir) {
  double t0 = now_s();
  int rfd = open(root, O_RDONLY | O_DIRECTORY);
  if (rfd < 0) die("open", root);
  char name[64];
  long ndirs = (files + perdir - 1) / perdir;
  for (long d = 0; d < ndirs; d++) {
    snprintf(name, sizeof name, "d%04ld", d);
    if (mkdirat(rfd, name, 0700) != 0 && errno != EEXIST) die("mkdir", name);
    int dfd = openat(rfd, name, O_RDONLY | O_DIRECTORY);
    if (dfd < 0) die("open", name);
    for (long f = 0; f < perdir && d * perdir + f < files; f++) {
      snprintf(name, sizeof name, "f%04ld", f);
      int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0) die("create", name);
      close(fd);
    }
    close(dfd);
  }
  printf("%.3f\n", now_s() - t0);
  return 0;
}

// ---- probe

enum { OP_CREATE, OP_STAT, OP_UNLINK, NOPS };
static const char *op_names[NOPS] = { "create", "stat", "unlink" };

struct samples {
  float *us;
  long n, cap;
};
struct phase {
  struct samples op[NOPS];
  long iterations;
  double t0, t1;
};

static volatile sig_atomic_t want_phase = 0;
static volatile sig_atomic_t stop = 0;
static void on_usr1(int s) { (void) s; want_phase = 1; }
static void on_term(int s) { (void) s; stop = 1; }

static void add(struct samples *s, double us) {
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 65536;
    s->us = realloc(s->us, s->cap * sizeof *s->us);
    if (!s->us) die("realloc", "samples");
  }
  s->us[s->n++] = (float) us;
}
static int cmpf(const void *a, const void *b) {
  float x = *(const float *) a, y = *(const float *) b;
  return x < y ? -1 : x > y;
}
static double pct(struct samples *s, double p) {
  if (s->n == 0) return 0;
  long i = (long) (p * (s->n - 1));
  return s->us[i];
}

static int probe(const char *dir) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_flags = SA_RESTART;
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, NULL);
  sa.sa_handler = on_term;
  sigaction(SIGTERM, &sa, NULL);
  int dfd = open(dir, O_RDONLY | O_DIRECTORY);
  if (dfd < 0) die("open", dir);
  struct phase ph[2];
  memset(ph, 0, sizeof ph);
  int cur = 0;
  ph[0].t0 = now_s();
  char name[64];
  long i = 0;
  while (!stop) {
    if (want_phase && cur == 0) {
      ph[0].t1 = now_s();
      cur = 1;
      ph[1].t0 = ph[0].t1;
    }
    snprintf(name, sizeof name, "p%ld", i++);
    double a = now_s();
    int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) die("create", name);
    close(fd);
    double b = now_s();
    struct statx stx;
    if (statx(dfd, name, AT_STATX_FORCE_SYNC | AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &stx) != 0) die("statx", name);
    double c = now_s();
    if (unlinkat(dfd, name, 0) != 0) die("unlink", name);
    double d = now_s();
    add(&ph[cur].op[OP_CREATE], (b - a) * 1e6);
    add(&ph[cur].op[OP_STAT], (c - b) * 1e6);
    add(&ph[cur].op[OP_UNLINK], (d - c) * 1e6);
    ph[cur].iterations++;
  }
  ph[cur].t1 = now_s();
  printf("[");
  for (int p = 0; p <= cur; p++) {
    double secs = ph[p].t1 - ph[p].t0;
    printf("%s{\"phase\":%d,\"secs\":%.3f,\"iterations\":%ld,\"iterationsPerSec\":%.1f", p ? "," : "", p, secs, ph[p].iterations,
           secs > 0 ? ph[p].iterations / secs : 0);
    for (int o = 0; o < NOPS; o++) {
      struct samples *s = &ph[p].op[o];
      if (s->n) qsort(s->us, s->n, sizeof *s->us, cmpf);
      printf(",\"%s\":{\"n\":%ld,\"p50\":%.1f,\"p99\":%.1f,\"max\":%.1f}", op_names[o], s->n, pct(s, 0.5), pct(s, 0.99), s->n ? s->us[s->n - 1] : 0.0);
    }
    printf("}");
  }
  printf("]\n");
  return 0;
}

// ---- hold

static int hold(const char *root, long n, long perdir) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t) n + 64) {
    rl.rlim_cur = (rlim_t) n + 64;
    if (rl.rlim_max < rl.rlim_cur) rl.rlim_max = rl.rlim_cur; // root may raise the hard limit
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) die("setrlimit", "RLIMIT_NOFILE");
  }
  double t0 = now_s();
  char path[4096];
  for (long i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/d%04ld/f%04ld", root, i / perdir, i % perdir);
    if (open(path, O_RDONLY | O_CLOEXEC) < 0) die("open", path);
  }
  printf("ready %.3f\n", now_s() - t0);
  fflush(stdout);
  char buf[64];
  while (read(0, buf, sizeof buf) > 0) {
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "populate") == 0) return populate(argv[2], atol(argv[3]), atol(argv[4]));
  if (argc == 3 && strcmp(argv[1], "probe") == 0) return probe(argv[2]);
  if (argc == 5 && strcmp(argv[1], "hold") == 0) return hold(argv[2], atol(argv[3]), atol(argv[4]));
  fprintf(stderr, "usage: scale populate ROOT FILES PERDIR | scale probe DIR | scale hold ROOT N PERDIR\n");
  return 2;
}
