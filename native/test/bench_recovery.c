// Measures a crash recovery of the node table at a million nodes (not a test:
// `make -C native/test bench-recovery`, built without sanitizers): the
// journal's shapes a resumed daemon can meet, each recovered 5 times, best
// and worst, with the split hs_journal_recovered reports (the snapshot's
// import, the records' replay):
//   records   1,000 directories of 1,000 files, each looked up once into a
//             fresh journal (no snapshot; what crash-scale.test.ts makes)
//   snapshot  the same table compacted: the snapshot alone
//   churn     the snapshot, then the longest log its compaction lets grow
//             (4 x the snapshot: past it the next record compacts, the
//             interval since the last compaction being over or the log past
//             JR_FULL): files forgotten and looked up again
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
#include "../src/handover/nodes_journal.h"

enum { DIRS = 1000, PER_DIR = 1000 };
static uint64_t dirs[DIRS];

static double now_ms (void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void name_of (char *buf, size_t n, int j) { snprintf(buf, n, "f%04d", j); }

// Every file of every directory looked up once (the directories first).
static void fill (void) {
  hs_node_t *root = hs_node_get(HS_ROOT_ID);
  char nm[16];
  for (int i = 0; i < DIRS; i++) {
    snprintf(nm, sizeof(nm), "d%04d", i);
    hs_node_found(root, nm, 100 + (uint64_t) i, S_IFDIR, 2, &dirs[i]);
  }
  hs_node_put(root);
  for (int i = 0; i < DIRS; i++) {
    hs_node_t *d = hs_node_get(dirs[i]);
    for (int j = 0; j < PER_DIR; j++) {
      uint64_t id;
      name_of(nm, sizeof(nm), j);
      hs_node_found(d, nm, 1000000 + (uint64_t) i * PER_DIR + (uint64_t) j, S_IFREG, 1, &id);
    }
    hs_node_put(d);
  }
}

// Until the log reaches `bytes` past where it is: a file forgotten, then looked up again (a new node).
static void churn (size_t bytes) {
  int active;
  uint64_t start, pos, gen;
  hs_journal_where(&active, &start, &gen);
  char nm[16];
  for (uint64_t k = 0;; k++) {
    hs_journal_where(&active, &pos, &gen);
    if (pos - start >= bytes) break;
    int i = (int) (k / PER_DIR % DIRS), j = (int) (k % PER_DIR);
    hs_node_t *d = hs_node_get(dirs[i]);
    name_of(nm, sizeof(nm), j);
    uint64_t id;
    // The node the name has now (a lookup of it: count 2), forgotten whole, then found anew.
    hs_node_found(d, nm, 1000000 + (uint64_t) i * PER_DIR + (uint64_t) j, S_IFREG, 1, &id);
    hs_node_forget(id, 2);
    hs_node_found(d, nm, 1000000 + (uint64_t) i * PER_DIR + (uint64_t) j, S_IFREG, 1, &id);
    hs_node_put(d);
  }
}

// The journal in fds recovered `runs` times into a fresh table (each recovery
// journals on, so the table is dropped and the journal detached after it).
static void recover (const char *label, int fds[2]) {
  double best = 1e18, worst = 0;
  struct hs_journal_recovery r = { 0 };
  uint64_t nodes = 0, known = 0;
  // Each recovery zeroes the torn tail and punches the other memfd: what it reads stays the same.
  for (int run = 0; run < 5; run++) {
    hs_journal_close();
    hs_nodes_clear();
    hs_nodes_init();
    double t0 = now_ms();
    int err = hs_journal_recover(fds[0], fds[1]);
    double ms = now_ms() - t0;
    if (err != 0) {
      printf("%-9s recovery failed: %s\n", label, strerror(-err));
      exit(1);
    }
    if (ms < best) best = ms;
    if (ms > worst) worst = ms;
    hs_journal_recovered(&r);
    hs_nodes_stats(&nodes, &known);
  }
  printf("%-9s %8llu nodes: snapshot %7llu nodes %6.1f MiB, log %8llu records %6.1f MiB: recovery %6.1f ms best, %6.1f worst of 5 (last: import %6.1f ms, replay %6.1f ms)\n",
         label, (unsigned long long) nodes, (unsigned long long) r.snap_nodes, r.snap_bytes / 1048576.0, (unsigned long long) r.records, r.log_bytes / 1048576.0,
         best, worst, r.import_ns / 1e6, r.replay_ns / 1e6);
}

int main (void) {
  hs_nodes_init();
  int fds[2];
  if (hs_journal_open(fds) != 0) return 1;
  // No automatic compaction while the shapes are made.
  hs_journal_set_limit((size_t) 1 << 40);
  fill();
  recover("records", fds);
  // What a compaction at this size holds the table's mutex for (every home's requests wait meanwhile).
  double t0 = now_ms();
  if (hs_journal_compact() != 0) return 1;
  uint64_t held_wall = 0, held_cpu = 0;
  hs_journal_held(&held_wall, &held_cpu);
  printf("compaction of 1001001 nodes: the call %.1f ms, the mutex held %.1f ms (CPU %.1f ms)\n", now_ms() - t0, held_wall / 1e6, held_cpu / 1e6);
  recover("snapshot", fds);
  // The log a compaction lets grow past this snapshot: 4 x its size (nodes_journal.c, jr_limit).
  int active;
  uint64_t pos, gen;
  hs_journal_where(&active, &pos, &gen);
  churn((size_t) (pos - 4096) * 4);
  recover("churn", fds);
  hs_journal_close();
  hs_nodes_clear();
  close(fds[0]);
  close(fds[1]);
  return 0;
}
