// The holder's system calls and the serving session's descriptor (holder.c).
#ifndef HOMESFS_HOLDER_H
#define HOMESFS_HOLDER_H
#include <node_api.h>

// poll(2) of one descriptor for `events`, timeout 0: revents, 0, or -errno.
int hs_holder_poll (int fd, short events);
// pidfd_open(2): a descriptor that polls readable once pid exited, or -errno.
int hs_holder_pidfd (int pid);
// The process at the other end of the connected unix socket `sock`, as the
// kernel recorded it at connect(): *pid (SO_PEERCRED) and *pidfd, a pidfd of
// that process (SO_PEERPIDFD; by number before Linux 6.5) or -errno (-ESRCH:
// it is gone). 0, or -errno when the socket has no peer credentials.
int hs_holder_peer (int sock, int *pid, int *pidfd);
// The process at the other end of the connected unix socket `sock` (for a
// client: the process that listened), in whatever pid namespace it runs:
// *pid its number in ours (0: it has none here) and *pidfd a pidfd of it
// (SO_PEERPIDFD; by number before Linux 6.5, -ESRCH when it has none here)
// or -errno. 0, or -errno when the socket has no peer credentials.
int hs_holder_peer_pidfd (int sock, int *pid, int *pidfd);
void hs_holder_export (napi_env env, napi_value exports);
#endif
