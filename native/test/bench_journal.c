// Measures the node journal (not a test: `make -C native/test bench`, built
// without sanitizers): the cost of hs_node_found and hs_node_forget with the
// journal off and on, the stall a compaction at 100,000 nodes causes to
// another thread's table work (the slowest lookup+forget of a thread running
// beside it), and a recovery of 100,000 nodes and a 64 MiB log.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "../src/session/nodes.h"
#include "../src/handover/nodes_journal.h"

static double now_ns (void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

enum { NAMES = 100000, DIRS = 100 };
static char names[NAMES][16];
static uint64_t ids[NAMES], dirs[DIRS];

// Every name looked up (a new node each) then forgotten: ns per call of each.
static void found_forget (const char *label) {
  hs_node_t *root = hs_node_get(HS_ROOT_ID);
  hs_node_t *d = hs_node_get(dirs[0]);
  double best_f = 1e18, best_g = 1e18;
  for (int round = 0; round < 5; round++) {
    double t0 = now_ns();
    for (int i = 0; i < NAMES; i++) hs_node_found(d, names[i], 1000000 + (uint64_t) i, S_IFREG, 1, &ids[i]);
    double t1 = now_ns();
    for (int i = 0; i < NAMES; i++) hs_node_forget(ids[i], 1);
    double t2 = now_ns();
    if ((t1 - t0) / NAMES < best_f) best_f = (t1 - t0) / NAMES;
    if ((t2 - t1) / NAMES < best_g) best_g = (t2 - t1) / NAMES;
  }
  printf("%-12s found %6.1f ns/op   forget %6.1f ns/op   (best of 5 x %d, table of %d dirs)\n", label, best_f, best_g, NAMES, DIRS);
  hs_node_put(d);
  hs_node_put(root);
}

// 100,000 files in 100 directories, each looked up once.
static void fill (void) {
  hs_node_t *root = hs_node_get(HS_ROOT_ID);
  char dn[16];
  for (int k = 0; k < DIRS; k++) {
    snprintf(dn, sizeof(dn), "dir%03d", k);
    hs_node_found(root, dn, 10 + (uint64_t) k, S_IFDIR, 2, &dirs[k]);
  }
  for (int i = 0; i < NAMES; i++) {
    hs_node_t *d = hs_node_get(dirs[i % DIRS]);
    hs_node_found(d, names[i], 2000000 + (uint64_t) i, S_IFREG, 1, &ids[i]);
    hs_node_put(d);
  }
  hs_node_put(root);
}

// The mutex's hold as the journal measures it (absent from builds before it: weak).
__attribute__((weak)) void hs_journal_held (uint64_t *wall, uint64_t *cpu);

static double cpu_now_ns (void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static int dbl_cmp (const void *a, const void *b) {
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

static volatile int stall_stop;
static double stall_max;

static void *staller (void *arg) {
  (void) arg;
  hs_node_t *d = hs_node_get(dirs[DIRS - 1]);
  for (unsigned i = 0; !__atomic_load_n(&stall_stop, __ATOMIC_ACQUIRE); i++) {
    double t0 = now_ns();
    uint64_t id;
    hs_node_found(d, "staller", 9000000, S_IFREG, 1, &id);
    hs_node_forget(id, 1);
    double dt = now_ns() - t0;
    if (dt > stall_max) stall_max = dt;
    if (i % 64 == 0) usleep(50);
  }
  hs_node_put(d);
  return NULL;
}

int main (void) {
  for (int i = 0; i < NAMES; i++) snprintf(names[i], sizeof(names[i]), "file-%06d", i);
  hs_nodes_init();
  char dn[16];
  hs_node_t *root = hs_node_get(HS_ROOT_ID);
  for (int k = 0; k < DIRS; k++) { snprintf(dn, sizeof(dn), "dir%03d", k); hs_node_found(root, dn, 10 + (uint64_t) k, S_IFDIR, 2, &dirs[k]); }
  hs_node_put(root);
  found_forget("journal off");
  int fds[2];
  if (hs_journal_open(fds) != 0) return 1;
  found_forget("journal on");
  hs_journal_close();
  close(fds[0]); close(fds[1]);

  hs_nodes_clear();
  hs_nodes_init();
  fill();
  if (hs_journal_open(fds) != 0) return 1;
  // The stall as another home sees it: a thread doing lookups and forgets
  // (a request's table work) records its slowest call while compactions run.
  // Each compaction follows a log of ~64 MiB (the size that triggers one), so
  // that it has a full old log to punch, as in service.
  hs_journal_set_limit((size_t) 1 << 40);
  double best = 1e18, worst = 0, stall_worst = 0, stall_sum = 0;
  double call_cpu[10], held_cpu[10], held_wall[10];
  for (int r = 0; r < 10; r++) {
    int active;
    uint64_t pos, gen, start;
    hs_journal_where(&active, &start, &gen);
    for (int i = 0; ; i++) {
      hs_journal_where(&active, &pos, &gen);
      if (pos - start >= (64u << 20)) break;
      hs_node_t *d = hs_node_get(dirs[i % DIRS]);
      uint64_t id;
      hs_node_found(d, names[i % NAMES], 2000000 + (uint64_t) (i % NAMES), S_IFREG, 1, &id);
      hs_node_put(d);
      hs_node_forget(id, 1);
    }
    stall_stop = 0;
    stall_max = 0;
    pthread_t t;
    pthread_create(&t, NULL, staller, NULL);
    usleep(20000);
    double t0 = now_ns(), c0 = cpu_now_ns();
    hs_journal_compact();
    double ms = (now_ns() - t0) / 1e6;
    call_cpu[r] = (cpu_now_ns() - c0) / 1e6;
    held_cpu[r] = held_wall[r] = -1;
    if (hs_journal_held) {
      uint64_t w, c;
      hs_journal_held(&w, &c);
      held_wall[r] = w / 1e6;
      held_cpu[r] = c / 1e6;
    }
    usleep(60000);  // anything the compacting thread does after it returns (nothing may stall others)
    __atomic_store_n(&stall_stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    if (ms < best) best = ms;
    if (ms > worst) worst = ms;
    if (stall_max > stall_worst) stall_worst = stall_max;
    stall_sum += stall_max;
  }
  hs_journal_set_limit(0);
  uint64_t nodes, known;
  hs_nodes_stats(&nodes, &known);
  printf("compaction at %llu nodes after a 64 MiB log: the call %.1f ms best, %.1f ms worst of 10\n", (unsigned long long) nodes, best, worst);
  printf("  another thread's slowest lookup+forget meanwhile (the stall): %.1f ms mean, %.1f ms worst of 10\n", stall_sum / 10 / 1e6, stall_worst / 1e6);
  qsort(call_cpu, 10, sizeof(double), dbl_cmp);
  printf("  the compacting thread's CPU time in the call: median %.1f ms (min %.1f, max %.1f)\n", call_cpu[5], call_cpu[0], call_cpu[9]);
  if (hs_journal_held) {
    qsort(held_cpu, 10, sizeof(double), dbl_cmp);
    qsort(held_wall, 10, sizeof(double), dbl_cmp);
    printf("  of which with the mutex held: CPU median %.1f ms (min %.1f, max %.1f), wall median %.1f ms\n", held_cpu[5], held_cpu[0], held_cpu[9], held_wall[5]);
  } else printf("  (this build holds the mutex for the whole call)\n");

  // A 64 MiB log: lookups and forgets of the table's nodes (no compaction).
  hs_journal_set_limit((size_t) 1 << 40);
  int active;
  uint64_t pos, gen, start;
  hs_journal_where(&active, &start, &gen);
  for (int i = 0; ; i++) {
    hs_journal_where(&active, &pos, &gen);
    if (pos - start >= (64u << 20)) break;
    hs_node_t *d = hs_node_get(dirs[i % DIRS]);
    uint64_t id;
    hs_node_found(d, names[i % NAMES], 2000000 + (uint64_t) (i % NAMES), S_IFREG, 1, &id);
    hs_node_put(d);
    hs_node_forget(id, 1);
  }
  hs_nodes_clear();
  hs_nodes_init();
  double t0 = now_ns();
  int err = hs_journal_recover(fds[0], fds[1]);
  double ms = (now_ns() - t0) / 1e6;
  hs_nodes_stats(&nodes, &known);
  printf("recovery of %llu nodes + %.1f MiB log: %.1f ms (err %d)\n", (unsigned long long) nodes, (pos - start) / 1048576.0, ms, err);
  return 0;
}
