// native/src/handover/: what lets another daemon serve this session, as one
// module: a live successor (handover.c's root-only socket, nodes_handover.c's
// node-table export and import, dirs_handover.c's of the open directories)
// and a successor after a crash (holder.c keeps /dev/fuse and INIT,
// nodes_journal*.c journal the node table into a memfd, ledgers.c maps the
// homes' ledgers, sdstore.c hands descriptors to systemd's store), and the
// last step of both, session_adopt.c: serving the session from the handed
// descriptor with the kernel's INIT replayed.
// Threads: the JS main thread for every export (journal_js.c, ledgers.c,
// holder.c, sdstore.c, handover.c); the journal is written by the session's
// workers under hs_nt.mu as they change the table; a handed-over table is
// imported on a thread of its own (pre_mu, nodes_handover.c). Locks: hs_nt.mu
// (session/nodes.c) then jr_punch_mu (nodes_journal.c); pre_mu is a leaf.
//
// handover.c: the channel between a serving daemon and its successor,
// messages and descriptors over a root-only SOCK_SEQPACKET socket.
#ifndef HOMESFS_HANDOVER_H
#define HOMESFS_HANDOVER_H
#include <stddef.h>
#ifndef HOMESFS_NO_NAPI
#include <node_api.h>
#endif

// SCM_MAX_FD: the most descriptors one message carries.
#define HS_HO_MAX_FDS 253
// The largest message (the sender splits what is larger).
#define HS_HO_MAX_MSG (64 * 1024)

// Each returns a descriptor (or a byte count) >= 0, or -errno. accept:
// -EAGAIN when no peer waits, -EPERM for a peer that is not root (refused);
// connect: -EPERM when the listener is not root. send: 1..HS_HO_MAX_MSG
// bytes and at most HS_HO_MAX_FDS descriptors (they stay open here). recv:
// fds holds HS_HO_MAX_FDS; -EPIPE once the peer is gone.
int hs_ho_listen (const char *path);
int hs_ho_accept (int lfd);
int hs_ho_connect (const char *path);
int hs_ho_send (int fd, const void *buf, size_t len, const int *fds, int nfds, int timeout_ms);
int hs_ho_recv (int fd, void *buf, size_t cap, int *fds, int *nfds, int timeout_ms);
int hs_ho_memfd (const void *buf, size_t len);
// Grow this process's descriptor table to the size of the peer's on `fd`
// (a connected handover socket): the size, or -errno (nothing changed).
int hs_ho_reserve_fds (int fd);

#ifndef HOMESFS_NO_NAPI
void hs_handover_export (napi_env env, napi_value exports);
#endif
#endif
