// native/src/fastpath/: what the session answers in C from state JS
// publishes: the fast path (fastpath_*.c: getattr, readdir, open, create,
// mkdir, link, unlink, rename, setattr, writes' growth), the data plane (dataplane*.c: reads,
// writes, releases of native handles), the directory-handle caps
// (dirhandles.c), the one claim on an inode's last names (claims.c) and
// the queues JS takes whole (queue.h).
// Threads: the session's workers call in; JS publishes and takes queues on
// the JS main thread (fastpath_napi.c and each file's exports). Locks:
// fastpath_internal.h's lock map (fp_lock, fp_flip_lock, fp_wlock,
// fp_open_lock, ...), dp_lock (dataplane.c), dh_lock (dirhandles.c) and
// rm_lock (claims.c); native-notes §5 has the order.
//
// GETATTR (and so LOOKUP, which libfuse 2.9 answers with the
// getattr op) answered on the session's worker thread from state JS publishes.
// See fastpath_internal.h (the files, the locks) and native-notes/native-layer.md in homesfs.
#ifndef HOMESFS_FASTPATH_H
#define HOMESFS_FASTPATH_H

#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <node_api.h>

// Returned by hs_fastpath_getattr when JS must answer.
#define HOMESFS_FASTPATH_FALLBACK 1

// 0: *st is the answer. -ENOENT/-ENOTDIR: that is the answer (*st untouched).
// HOMESFS_FASTPATH_FALLBACK: ask JS (nothing was written).
int hs_fastpath_getattr (const char *path, struct stat *st);

// A RENAME or RMDIR request is finishing (JavaScript's or this binding's,
// whatever its result), before its answer: the directory descriptors kept
// for GETATTR (fastpath_dircache.c) are no longer trusted.
void hs_fastpath_dirs_moved (void);

// fgetattr of a handle JS published (hs_fastpath_set_handle): 0 answered, else fallback.
int hs_fastpath_fgetattr (uint64_t fh, struct stat *st);

// libfuse 2.9's fuse_fill_dir_t, without including fuse.h here.
typedef int (*hs_fill_t) (void *buf, const char *name, const struct stat *st, off_t off);

// READDIR of a published home or a directory below it, from `offset` (0: the
// start) on: 0 when the entries from there went to `filler` with their own
// offsets until it was full, -errno on a failure once a listing is under way,
// else HOMESFS_FASTPATH_FALLBACK with nothing filled (JS lists it whole).
// `name_ok` is the binding's strict UTF-8 check.
int hs_fastpath_readdir (const char *path, void *buf, hs_fill_t filler, off_t offset, int (*name_ok) (const unsigned char *, size_t));

// UNLINK in a home JS made mutable: 0 done (what left the home is in its
// pending pair), HOMESFS_FASTPATH_FALLBACK: ask JS (nothing was changed).
int hs_fastpath_unlink (const char *path);
// RMDIR of an empty directory in a home JS made mutable (fuse.nativeRmdir):
// 0 removed (its inode released to the ledger), or FALLBACK: JS's.
int hs_fastpath_rmdir (const char *path);

// RENAME (flags 0 or RENAME_NOREPLACE) of a regular file within a home JS
// opened for it: 0 done (a replaced file's release is in the home's pending
// pair), HOMESFS_FASTPATH_FALLBACK: ask JS (nothing was changed).
int hs_fastpath_rename (const char *path, const char *path2, uint32_t flags);

// OPEN, read-only, in a home JS opened for it, by the uid JS granted slots
// to: 0 answered (*fh is the handle, *direct_io its open flag; JS adopts it
// through hs_fastpath_take_opens), HOMESFS_FASTPATH_FALLBACK: ask JS (nothing
// was changed; a slot taken is given back through the same queue).
int hs_fastpath_open (const char *path, int flags, uint32_t uid, uint64_t *fh, int *direct_io);

// RELEASE of a handle opened above and not adopted by JS yet: 1 answered
// (closed, its slot back in its home's list or queued for JS), 0: JS's.
int hs_fastpath_release (uint64_t fh);

// UTIMENS / CHMOD / CHOWN by path below a home JS published them for: 0 done,
// HOMESFS_FASTPATH_FALLBACK: ask JS (nothing was changed).
int hs_fastpath_utimens (const char *path, const struct timespec tv[2]);
int hs_fastpath_chmod (const char *path, uint32_t mode);
int hs_fastpath_chown (const char *path, uint32_t uid, uint32_t gid);

// CREATE of a new name in a home JS opened for it: 0 answered (*fh the
// handle, *direct_io its open flag; JS adopts it through hs_fastpath_take_opens;
// *attr the new file as an fgetattr of the handle presents it when
// *presented is 1, else the caller asks for that fgetattr),
// HOMESFS_FASTPATH_FALLBACK: ask JS (nothing was made; a slot taken goes back).
int hs_fastpath_create (const char *path, uint32_t mode, int flags, uint32_t uid, uint32_t gid, uint64_t *fh, int *direct_io, struct stat *attr, int *presented);

// MKDIR of a new name in a home JS opened for creates and mkdirs: 0 made
// (JS counts it through hs_fastpath_take_opens; the answer is the new node
// as a getattr of the path presents it: *attr when *presented is 1, else the
// caller asks for that getattr), HOMESFS_FASTPATH_FALLBACK: ask JS (nothing
// was made; a slot taken goes back).
int hs_fastpath_mkdir (const char *path, uint32_t mode, uint32_t uid, uint32_t gid, struct stat *attr, int *presented);
// SYMLINK of a new name to `target` in a home JS opened for creates and
// symlinks: 0 made (a record queued; *attr and *presented as for MKDIR), or
// HOMESFS_FASTPATH_FALLBACK with nothing made.
int hs_fastpath_symlink (const char *path, const char *target, uint32_t uid, uint32_t gid, struct stat *attr, int *presented);

// LINK of the file at path to the new name path2, both in a home JS opened
// for creates and links: 0 linked (JS counts the name's inode through
// hs_fastpath_take_opens; *attr and *presented as for MKDIR, of path2, with
// the charged size of a file JS holds open),
// HOMESFS_FASTPATH_FALLBACK: ask JS (nothing was made; a slot taken goes back).
int hs_fastpath_link (const char *path, const char *path2, uint32_t uid, uint32_t gid, struct stat *attr, int *presented);

// Adds the fastpath_* functions to the module's exports.
// A WRITE's growth decided here (fastpath_write.c): what wl_begin took, for
// wl_end to settle. It holds a reference of the inode's record and of the
// home's accounting array until wl_end.
typedef struct {
  void *inode;
  void *acct_ref;
  int64_t *acct;
  uint64_t before, start, growth;
  uint32_t len;
} hs_wl_ticket_t;

int hs_fastpath_wl_begin (uint64_t dev, uint64_t ino, int64_t offset, uint32_t len, int append, hs_wl_ticket_t *t);
void hs_fastpath_wl_end (hs_wl_ticket_t *t, int64_t n);
// An ftruncate's size change decided the same way (fastpath_write.c): 0 with
// the ticket (the growth charged from credit), HOMESFS_FASTPATH_FALLBACK when
// JS decides; _end with the ftruncate's result (0 or -errno) settles it.
int hs_fastpath_wl_resize_begin (uint64_t dev, uint64_t ino, int64_t size, hs_wl_ticket_t *t);
void hs_fastpath_wl_resize_end (hs_wl_ticket_t *t, int err);

// Moves on (under the write lock) whenever a home's open flags are set or a
// home is withdrawn or replaced: what a native open published to the data
// plane under an older generation waits for JavaScript (dataplane.c).
uint64_t hs_fastpath_policy_gen (void);

void hs_fastpath_export (napi_env env, napi_value exports);

#endif
