// Measures the node journal (not a test: `make -C native/test bench`, built
// without sanitizers): the cost of hs_node_found and hs_node_forget with the
// journal off and on, the stall of a compaction at 100,000 nodes (the
// mutex is held for it), and a recovery of 100,000 nodes and a 64 MiB log.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "../src/session/nodes.h"
#include "../src/session/nodes_journal.h"

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
  double best = 1e18, worst = 0;
  for (int r = 0; r < 10; r++) {
    double t0 = now_ns();
    hs_journal_compact();
    double ms = (now_ns() - t0) / 1e6;
    if (ms < best) best = ms;
    if (ms > worst) worst = ms;
  }
  uint64_t nodes, known;
  hs_nodes_stats(&nodes, &known);
  printf("compaction at %llu nodes: %.1f ms best, %.1f ms worst of 10 (the stall: hs_nt.mu held)\n", (unsigned long long) nodes, best, worst);

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
