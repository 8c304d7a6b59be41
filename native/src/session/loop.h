// The session's worker threads (loop.c): they read requests and process
// them; a handover stops them at a request boundary and hands the device on.
#ifndef HOMESFS_LOOP_H
#define HOMESFS_LOOP_H
#include <stddef.h>
#include <stdint.h>
#include <fuse_lowlevel.h>

#define HS_LOOP_NOT_STARTED 0
#define HS_LOOP_RUNNING 1
#define HS_LOOP_ENDED 2

// Starts serving (se, ch) with one worker; more come as requests need them. 0 or -errno.
int hs_loop_start (struct fuse_session *se, struct fuse_chan *ch);
// HS_LOOP_*: ENDED once the device is gone (unmounted).
uint32_t hs_loop_state (void);
// No worker reads the device any more once each has finished the request it
// is in; never blocks. hs_loop_paused() says when every worker has parked.
void hs_loop_pause (void);
int hs_loop_paused (void);
// Interrupts the workers inside read(2) (a pause set meanwhile is then seen).
void hs_loop_kick (void);
// How long the worker longest inside one request has been in it, in ms (0:
// none is): a request the session answers itself is never in JavaScript's
// count, and a pause waits for it as for any other.
double hs_loop_busy_ms (void);
// Reading goes on.
void hs_loop_resume (void);

typedef struct { uint32_t workers, idle, parked, paused; } hs_loop_stats_t;
void hs_loop_stats (hs_loop_stats_t *s);

// A copy of the kernel's INIT request as this session read it (malloc'd):
// 0, or -ENOENT before one came.
int hs_loop_init_request (char **buf, size_t *len);
// The INIT a successor replayed: kept, to hand on at its own handover.
void hs_loop_keep_init (const char *buf, size_t len);
#endif
