// What the journal's writer (nodes_journal.c) and reader
// (nodes_journal_replay.c) share: the layout of a memfd, of a record, and
// the journal's state. Everything is used under hs_nt.mu (nodes_journal.c's
// header states the invariants).
#ifndef HOMESFS_NODES_JOURNAL_INTERNAL_H
#define HOMESFS_NODES_JOURNAL_INTERNAL_H
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

#define JR_MAGIC 0x524a5348u       // "HSJR"
#define JR_VERSION 1u
#define JR_HDR 4096                // the header's page; the snapshot follows
#define JR_SIZE (1ULL << 30)       // each memfd: sparse, pages only where written
#define JR_MAX_SIZE (1ULL << 36)   // a recovered memfd larger than this is not ours
#define JR_CHUNK (1u << 16)        // pages allocated ahead at a time
#define JR_MIN_LIMIT (64u << 20)   // the log compacts past max(this, 4 x the snapshot)
#define JR_MIN_INTERVAL_NS 5000000000ULL  // and not sooner than this after the last compaction,
#define JR_FULL (JR_SIZE / 4)            // unless the log reaches this far into its memfd

typedef struct {
  uint32_t magic, version;
  uint64_t gen;         // stored last (release): 0, no snapshot here
  uint64_t snap_len;    // bytes of the snapshot at JR_HDR
  uint64_t snap_sum;    // jr_sum(gen, snapshot)
  uint64_t log_start;   // JR_HDR + snap_len rounded up to 8
  uint64_t epoch;       // the session's (hs_journal_epoch_set)
} jr_hdr_t;

// A record's body (after its commit word), then len1 + len2 bytes of names.
// FOUND: a parent, b ino, c the node ID given, type, nlink, name1.
// FORGET: a node, b count. REMOVED: a parent, name1. RENAMED: a old parent,
// b new parent, name1 old, name2 new. EXCHANGED: as RENAMED (the two names
// swapped their nodes). OPENED, RELEASED: a node, b the
// unique of the request (0: none). ANSWERED, REFUSED: a a unique. PENDING
// (only after a snapshot): a a unique, b its node, c OPENED or RELEASED.
// The others (nt_jr_value): a.
typedef struct {
  uint32_t kind, len1, len2, type;
  uint32_t nlink, pad;
  uint64_t a, b, c;
} jr_body_t;

struct nt_journal {
  int fd[2];
  char *map[2];
  size_t size[2];
  int active;           // the memfd records go to
  uint64_t gen;         // its generation
  size_t pos;           // where the next record goes
  size_t log_start;
  size_t reserved;      // bytes of the active memfd allocated from 0
  size_t snap_len;
  int clean[2];         // the memfd has no pages (a snapshot needs no punch first): under jr_punch_mu
  size_t pre[2];        // of a clean memfd, the bytes from 0 allocated and mapped ahead: under jr_punch_mu
  uint64_t last_compact_ns;  // CLOCK_MONOTONIC of the last compaction (JR_MIN_INTERVAL_NS)
};

extern struct nt_journal jr;

// The journal made the one this process writes (jr = *j), and undone: under
// hs_nt.mu, and they take jr_punch_mu (a punch of another thread that was
// owed one of these memfds no longer happens).
void jr_attach (const struct nt_journal *j);
void jr_detach (void);

uint64_t jr_sum (uint64_t seed, const void *p, size_t len);
// A record's checksum seed: its generation and offset (a stale record of
// another generation or place never checks out).
static inline uint64_t jr_seed (uint64_t gen, size_t pos) {
  return gen * 0x9e3779b97f4a7c15ULL ^ (uint64_t) pos;
}
int jr_map (struct nt_journal *j, int fd0, int fd1, int writable);
void jr_unmap (struct nt_journal *j);
int jr_snapshot (struct nt_journal *j, int to, uint64_t gen, uint64_t epoch);
void jr_punch (struct nt_journal *j, int at);

#pragma GCC visibility pop
#endif
