// A crash-safe journal of the node table (nodes_journal.c): two memfds that
// another process (the holder) keeps open, so that a daemon started after
// this one died at any instruction rebuilds the table the kernel still
// refers to. Off (no cost) until opened, recovered or rebased.
#ifndef HOMESFS_NODES_JOURNAL_H
#define HOMESFS_NODES_JOURNAL_H
#include <stddef.h>
#include <stdint.h>

// Two new memfds (fds[0], fds[1]; close-on-exec, the caller's to keep and
// pass on), a snapshot of the current table in the first (the table is
// initialised if it was not), and every later mutation journaled. 0 or -errno (-EBUSY: a journal is on).
int hs_journal_open (int fds[2]);
// A resuming daemon, its table fresh (nothing served; initialised here if
// hs_nodes_init was not called yet): the
// table the journal in fd0/fd1 holds (the newest valid snapshot and the
// complete records after it), and journaling goes on into the same memfds.
// 0, -EINVAL (not a journal, or one that does not replay: the table is left
// fresh), -EBUSY (a journal is on, or the table is not fresh) or -errno.
int hs_journal_recover (int fd0, int fd1);
// A successor that imported the table from a live handover's bytes: a
// snapshot of the current table as a new generation in fd0/fd1, then
// journaling there (the stored epoch is kept). 0 or -errno.
int hs_journal_rebase (int fd0, int fd1);
// A successor of a live handover (nodes_journal_replay.c, "following"):
// before the pause, the fresh table loaded from the serving daemon's journal
// as far as it is written (fd0/fd1 mapped read-only; the caller may close
// them); *gen, the generation followed, for the serving daemon to compare
// with its own. 0, -EBUSY (not fresh, or already following), -EINVAL (no
// journal that replays) or -errno. In the pause, _finish applies what was
// appended since: 0, or -ESTALE (compacted meanwhile) / -errno with the
// table fresh again. _followed: whether a finished follow loaded the table
// (asked once, by the adopt, which then imports none). _drop: a takeover
// that does not go on, or that was handed the table after all (the table
// fresh again).
int hs_journal_follow (int fd0, int fd1, uint64_t *gen);
int hs_journal_follow_finish (void);
int hs_journal_followed (void);
void hs_journal_follow_drop (void);
// The epoch stored in the journal's header (the session's own file handles
// are told from a dead daemon's by it). 0 or -ENOENT (no journal).
int hs_journal_epoch_get (uint64_t *epoch);
int hs_journal_epoch_set (uint64_t epoch);
// What the last hs_journal_recover (or hs_journal_follow's load) did
// (measurements, logged by the resumed daemon): the snapshot it imported (bytes, nodes), the log it replayed
// (bytes, records), the wall time of the import (with the sweep) and of
// the replay, and the recovering thread's CPU time for both (what a loaded
// machine does not inflate). Zeros before any. Written by the recovering
// thread (the daemon's JavaScript thread, before the session serves), read
// by it after.
struct hs_journal_recovery {
  uint64_t snap_bytes, snap_nodes, log_bytes, records, import_ns, replay_ns, cpu_ns;
};
void hs_journal_recovered (struct hs_journal_recovery *out);
// Journaling stops; the memfds stay the caller's (they are only unmapped).
void hs_journal_close (void);

// For tests and measurements: a compaction now (0 or -errno), the log size
// past which one happens by itself (0: the default, max(64 MiB, 4 x the
// snapshot)), and where the next record goes (the memfd, 0 or 1; the byte
// offset in it; its generation).
int hs_journal_compact (void);
void hs_journal_set_limit (size_t bytes);
int hs_journal_where (int *active, uint64_t *pos, uint64_t *gen);
// How long the last compaction held the table's mutex: wall time, and the
// compacting thread's CPU time (what a loaded machine does not inflate).
void hs_journal_held (uint64_t *wall, uint64_t *cpu);
// Tests: called by a thread that compacted, after it dropped the table's
// mutex and before it punches the old log (NULL: nothing).
extern void (*hs_journal_before_punch) (void);
#endif
