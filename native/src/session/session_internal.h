// What a session's start shares between a mount (session.c) and a session
// served from another daemon's device (handover/session_adopt.c). JS main
// thread only, before the session's workers start.
#ifndef HOMESFS_SESSION_INTERNAL_H
#define HOMESFS_SESSION_INTERNAL_H
#include <fuse_lowlevel.h>

// Whether this process serves (or served) a session: one per process.
int hs_session_started (void);
// libfuse's low-level session with our ops and the options ll_opts ("" for
// none): NULL for no memory or an option libfuse refuses.
struct fuse_session *hs_session_new (const char *ll_opts);
// Whether ll_init ran (a replayed INIT libfuse accepted), and its reset before a replay.
void hs_session_inited_reset (void);
int hs_session_inited (void);
// From now on se and ch are the session: the single reader's lead, the
// invalidations' channel and the workers start. 0 or -errno.
int hs_session_serve (struct fuse_session *se, struct fuse_chan *ch);
#endif
