// The file handles the kernel holds (handles.c): each one carries the epoch
// of the daemon that made it, so a daemon that resumed a session after its
// predecessor died tells the dead daemon's handles from its own, and reopens
// what they named instead of reading through another file's handle.
#ifndef HOMESFS_HANDLES_H
#define HOMESFS_HANDLES_H
#include <stddef.h>
#include <stdint.h>
#include <fuse_lowlevel.h>

// Handles are (epoch << HS_FH_EPOCH_SHIFT) | the daemon's own number (a
// JavaScript handle number, a directory table index: all far below 2^48).
#define HS_FH_EPOCH_SHIFT 48
#define HS_FH_INNER_MASK ((1ULL << HS_FH_EPOCH_SHIFT) - 1)

// The epoch this daemon's handles carry (0 when a predecessor that knew no
// epochs handed its session over: its handles are plain numbers).
void hs_fh_set_epoch (uint32_t epoch);
uint32_t hs_fh_epoch (void);
// The handle the kernel is given for one of ours (0 stays 0: no handle).
static inline uint64_t hs_fh_out (uint64_t inner) {
  return inner == 0 ? 0 : ((uint64_t) hs_fh_epoch() << HS_FH_EPOCH_SHIFT) | (inner & HS_FH_INNER_MASK);
}

// What the session does with a request before libfuse decodes it: handles
// of this epoch become the daemon's numbers; a dead daemon's handle becomes
// the one reopened for it (reopened here on first use, with the request's
// caller and the open flags the kernel sends, through the same open as any
// other: the same policy). After a resume, a request the dead daemon had read
// but not answered comes again (the kernel's FUSE_NOTIFY_RESEND); one whose
// effect cannot be known (a create with O_EXCL, mkdir, unlink, rename, ...)
// is answered EIO instead of done twice (and the open its first run counted,
// if any, taken back: hs_node_refused). Returns 1 when the request was
// answered here, 0 when it goes on to libfuse (buf possibly rewritten).
int hs_handles_filter (char *buf, size_t len, struct fuse_chan *ch);
// The unique of the request this thread last passed through the filter, as
// the kernel sent it (a resent one with bit 63): the request libfuse then
// decodes on this thread, whose op records it (op_new).
extern __thread uint64_t hs_req_unique;

// How many requests came again, of which answered EIO, and how many dead
// handles were reopened (for status).
void hs_handles_stats (uint64_t *resent, uint64_t *refused, uint64_t *reopened);
// Forgets every dead handle's mapping (a session that ends).
void hs_handles_clear (void);
// A live handover of a session that survived a crash: the dead handles'
// mappings go with it, so that the successor, which adopts our handles
// under the same numbers, neither reopens them again nor leaves ours open.
// Export: a malloc'd array of *count (dead handle, ours) pairs, every
// mapping that is ready (the session is paused: none is being reopened).
// Import, before the successor serves: the predecessor's pairs. 0 or -errno
// (-EEXIST: a mapping of that dead handle there already; nothing imported).
int hs_handles_export (uint64_t **pairs, size_t *count);
int hs_handles_import (const uint64_t *pairs, size_t count);

// The reopen steps the ops provide (ops_files.c, ops_dirs.c): a handle of the
// daemon's own for node `nodeid`, as caller uid/gid/pid. 0 and *inner, or -errno.
int hs_reopen_file (uint64_t nodeid, int flags, uint32_t uid, uint32_t gid, uint32_t pid, uint64_t *inner);
int hs_reopen_dir (uint64_t nodeid, uint32_t uid, uint64_t *inner);
#endif
