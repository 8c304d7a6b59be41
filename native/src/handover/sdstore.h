// systemd's notify socket with descriptors (sdstore.c).
#ifndef HOMESFS_SDSTORE_H
#define HOMESFS_SDSTORE_H
#include <stddef.h>
#ifndef HOMESFS_NO_NAPI
#include <node_api.h>
#endif

// One notification datagram to `path` ('/…' or abstract '@…') with `fds`
// (SCM_RIGHTS) and our pid/uid/gid (SCM_CREDENTIALS): 0 or -errno.
int hs_sd_notify_fds (const char *path, const char *msg, size_t mlen, const int *fds, size_t nfds);
// Sets FD_CLOEXEC on fd: 0 or -errno.
int hs_sd_cloexec (int fd);
#ifndef HOMESFS_NO_NAPI
void hs_sdstore_export (napi_env env, napi_value exports);
#endif
#endif
