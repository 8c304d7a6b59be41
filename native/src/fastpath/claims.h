// Which remover of an inode's last names gives its bytes back: one claim per
// inode, shared by C's unlink (fastpath_unlink.c) and JS's removals (src/fs/context.ts
// removal, through src/fuse/native-claims.ts).
#ifndef HOMESFS_CLAIMS_H
#define HOMESFS_CLAIMS_H
#include <stdint.h>
#include <node_api.h>
// Before the unlinkat/rename that may remove a name of (dev, ino), with a
// descriptor of the inode held until hs_claim_leave: 0, or -ENOMEM.
int hs_claim_enter (uint64_t dev, uint64_t ino);
// After the removal and an fstat of that descriptor; gone: it said nlink 0.
// Returns 1 for the one remover that settles the inode, 0 for the others.
int hs_claim_leave (uint64_t dev, uint64_t ino, int gone);
// Inodes entered and not left; removers that saw nlink 0 after another settled it.
void hs_claim_stats (uint64_t *in_flight, uint64_t *raced);
void hs_claims_export (napi_env env, napi_value exports);
#endif
