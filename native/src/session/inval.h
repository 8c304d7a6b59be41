// Invalidations of the kernel's caches (inval.c): the daemon is the only
// writer of the backing tree, so the kernel may keep names and attributes
// for long, provided the daemon says what changed behind its back.
#ifndef HOMESFS_INVAL_H
#define HOMESFS_INVAL_H
#include <stddef.h>
#include <stdint.h>

// What the queue's one thread sends for an entry: name NULL, the attributes
// of inode `ino`; else the name (name, len) in directory `ino`. 0 or -errno
// (-ENOENT: the kernel does not cache it).
typedef int (*hs_inval_send_fn) (void *ch, uint64_t ino, const char *name, size_t len);

// At mount: the channel notifications go to, and the thread that sends
// them (started once). Until then nothing is queued: the kernel caches nothing.
int hs_inval_start (void *ch);
// For tests: what the thread calls instead of libfuse's notify functions.
void hs_inval_set_sender (hs_inval_send_fn fn);

// Each resolves path ("/t/k/a") through the node table and queues; never
// waits for the kernel. -> entries queued, or -errno.
// The name's entry, its node's attributes and its directory's.
int hs_inval_path (const char *path);
// The attributes of every node at or below path.
int hs_inval_tree (const char *path);
// The name's entry and its directory's attributes (a name that came or went).
int hs_inval_entry (const char *path);

typedef struct {
  uint64_t queued;      // entries queued
  uint64_t sent;        // of them sent, the kernel dropped what it cached
  uint64_t not_cached;  // sent, the kernel had nothing (ENOENT)
  uint64_t failed;      // sent, another error (the mount is gone, ...)
  uint64_t pending;     // queued and not sent yet
} hs_inval_stats_t;
void hs_inval_stats (hs_inval_stats_t *s);
// Entries queued so far, and of them sent (whatever the kernel answered).
// The queue is FIFO: what was queued before *queued was read is sent once
// *done reaches it. An admin command waits for that before it answers.
void hs_inval_progress (uint64_t *queued, uint64_t *done);

#ifndef HOMESFS_NO_NAPI
#include <node_api.h>
void hs_inval_export (napi_env env, napi_value exports);
#endif
#endif
