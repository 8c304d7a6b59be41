// The channel to /dev/fuse and the flush gate, FOPEN_NOFLUSH and
// single-reader logic that ride on it (channel.c).
#ifndef HOMESFS_CHANNEL_H
#define HOMESFS_CHANNEL_H
#include <fuse_lowlevel.h>

// 1 when this FLUSH is a no-op JS need not see (its handle's gate slot is 0).
int hs_flush_is_noop (const struct fuse_file_info *info);
// After an OPEN or CREATE answered res on this thread: a reader in a zero
// gate slot gets FOPEN_NOFLUSH in the reply this thread sends next.
void hs_noflush_after_open (int res, const struct fuse_file_info *info);
// The kernel channel fuse_mount made, replaced by ours (same descriptor, dup'd).
struct fuse_chan * hs_wrap_chan (struct fuse_chan *ch);
// Our channel on an inherited /dev/fuse descriptor (a handover), or NULL.
struct fuse_chan * hs_chan_on_fd (int fd, size_t bufsize);
// 1: no thread starts reading the device any more (those inside read(2) are
// signalled by the session); 0: reading goes on.
void hs_chan_stop (int on);
// At mount: starts the single reader (and its watchdog) if JS asked for it.
void hs_lead_start (void);
#ifndef HOMESFS_NO_NAPI
#include <node_api.h>
void hs_channel_export (napi_env env, napi_value exports);
#endif
#endif
