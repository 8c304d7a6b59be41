// Passthrough opens (Linux 6.9+): the backing IDs the session registers on
// its /dev/fuse descriptor, and the mark an open's answer carries (channel.c
// sets FOPEN_PASSTHROUGH and the ID in exactly that reply, as it sets
// FOPEN_NOFLUSH). Which opens are passed through, and why the kernel's one
// I/O mode per inode allows it, is nodes.h's (families) and ops_files.c's.
//
// Threads: the session's workers (opens, releases), the JavaScript thread
// (stats). The device descriptor is set before the session serves; counters
// are atomics; the mark is thread-local, set and consumed on one worker.
#ifndef HOMESFS_PASSTHROUGH_H
#define HOMESFS_PASSTHROUGH_H
#include <stdint.h>

// The session's device descriptor, for the backing ioctls (channel.c, when it
// makes the channel: a mount or an adoption).
void hs_pt_set_dev (int fd);
// A backing ID for backing descriptor fd (FUSE_DEV_IOC_BACKING_OPEN), or
// -errno. The first refusal that no other file would pass either (no
// passthrough in the kernel, no privilege) turns further tries off.
int32_t hs_pt_backing_open (int fd);
// Gives an ID back (FUSE_DEV_IOC_BACKING_CLOSE): the kernel's files opened
// with it keep their backing file.
void hs_pt_backing_close (int32_t id);
// Whether new families may be passed through (negotiated, wanted, and no
// backing open refused for a reason every other would share).
int hs_pt_may_begin (void);
// The reply this thread sends next, to the open of handle fh_out (as the
// kernel sees it): passed through with backing ID id.
void hs_pt_mark (uint64_t fh_out, int32_t id);
// channel.c: 1 and the mark's handle and ID (consumed), or 0.
int hs_pt_take_mark (uint64_t *fh_out, int32_t *id);
// Counts one answered open of a mode (nodes.h HS_IO_*).
void hs_pt_count (int mode);

typedef struct {
  uint64_t opens_pt, opens_pt_direct, refused;
  uint64_t ids_opened, ids_closed, id_failures;
  int32_t last_error;   // the last backing open's errno (positive), 0: none
  int disabled;         // a refusal turned new families off
} hs_pt_stats_t;
hs_pt_stats_t hs_pt_stats (void);
#endif
