// The holder's system calls and the serving session's descriptor (holder.c).
#ifndef HOMESFS_HOLDER_H
#define HOMESFS_HOLDER_H
#include <node_api.h>

// poll(2) of one descriptor for `events`, timeout 0: revents, 0, or -errno.
int hs_holder_poll (int fd, short events);
// pidfd_open(2): a descriptor that polls readable once pid exited, or -errno.
int hs_holder_pidfd (int pid);
void hs_holder_export (napi_env env, napi_value exports);
#endif
