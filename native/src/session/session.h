// native/src/session/: the FUSE session and its transport, on libfuse 2.9's
// low-level API with a loop of our own.
//   channel.c, lead.h  the /dev/fuse channel: reads, replies, the single reader's lead
//   loop.c             the worker threads that read and answer requests
//   nodes*.c           the node table: IDs, counts, names, paths and tree locks
//   ops_*.c, ops.h     one file per op family; marshal.c, bridge.c hand a request to JS
//   handles.c, inval.c file handles and their reopen; cache invalidations
//   session.c          mount, adopt, revive and the exports that drive them
// Threads: the session's workers (loop.c; one of them reads the device at a
// time) run the ops; JS's answers arrive on the JS main thread (bridge.c);
// inval.c sends from a thread of its own. Locks: hs_nt.mu (nodes.c) guards
// the node table; w_mu (loop.c) the worker list; dt_mu then a record's mu
// (ops_dirs.c) the open directories; d_mu (handles.c), q_mu (bridge.c, and a
// separate q_mu in inval.c) their own tables, each a leaf. native-notes §5
// has the full table and the order.
//
// session.c: mount, loop, and the exports that drive them.
#ifndef HOMESFS_SESSION_H
#define HOMESFS_SESSION_H
#include <stddef.h>
#include <stdint.h>
#include <node_api.h>

// Mounts mnt (options for the kernel mount, and for libfuse's low-level
// session) and starts the loop: 0 or -errno.
int hs_session_mount (const char *mnt, const char *mount_opts, const char *ll_opts);
// Serves the session a predecessor handed over: its /dev/fuse descriptor
// (owned from now on: closed on failure) and request size, the kernel's INIT request as it read
// it, its node table and open directories (nodes_handover.c, dirs_handover.c). 0 or -errno.
// Starts importing a handed-over node table on a thread of its own, for
// hs_session_adopt to wait for (a copy of the bytes is kept). 0 or -errno.
int hs_session_preimport (const char *nodes, size_t len);
int hs_session_adopt (int fd, size_t bufsize, const char *init, size_t init_len, const char *nodes, size_t nodes_len, const char *dirs, size_t dirs_len, const char *ll_opts);
// Serves the session of a daemon that died: its descriptor (owned) and INIT
// as a holder kept them, on the node table recovered before (the journal's),
// handles of epoch `epoch`; the kernel is asked to send again what the dead
// daemon read but never answered (*resent: that notification's result).
int hs_session_revive (int fd, size_t bufsize, const char *init, size_t init_len, uint32_t epoch, const char *ll_opts, int *resent);
// 0 not started, 1 serving, 2 ended (unmounted).
uint32_t hs_session_loop_state (void);
// The session's /dev/fuse descriptor (still this process's) and request
// size: 0, or -ENOENT before the session started.
int hs_session_chan_fd (int *fd, size_t *bufsize);
void hs_session_export (napi_env env, napi_value exports);
// The node journal's exports (journal_js.c).
void hs_journal_export (napi_env env, napi_value exports);
#endif
