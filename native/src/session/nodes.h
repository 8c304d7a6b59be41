// The session's node table: one node per backing inode the kernel knows
// (nodes.c). The kernel refers to files by node ID; the daemon's operations
// take paths. This table turns one into the other, and keeps the paths of
// requests in flight stable against renames.
//
// Invariants (every field below is guarded by the table's one mutex):
// - A node is reachable by its ID while the kernel may name it (nlookup > 0)
//   or a thread holds a reference (refs > 0); it is freed when both are 0.
// - One node per presented inode number (`ino`, the backing st_ino): every
//   name of a hard-linked file is an alias of the same node, so st_nlink and
//   size seen through any name are the same kernel inode's. A node whose last
//   name went (unlinked, renamed over) leaves the ino index: a new file that
//   reuses the number gets a node of its own.
// - An alias (parent, name) holds a reference on its parent, so a directory
//   with named children is never freed while a path could pass through it.
// - Path locks follow libfuse 2.9's tree locks: a request holds a shared lock
//   on every node of its path until it is answered, an unlink, rmdir or
//   rename also holds the node it removes or moves exclusively; so no rename
//   changes a path between the moment it is built and the moment the request
//   that uses it is answered. Only session workers ever wait for a path lock
//   (never the JavaScript thread: requests it continues already hold theirs).
#ifndef HOMESFS_NODES_H
#define HOMESFS_NODES_H
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

#define HS_ROOT_ID 1

typedef struct hs_node hs_node_t;

// The nodes one request holds locked (its path, and the node it removes).
typedef struct {
  hs_node_t **held;
  int n, cap;
  hs_node_t *wnode;
  hs_node_t *inline_held[24];
} hs_plock_t;

void hs_nodes_init (void);
// Frees every node (after the session's last worker is gone).
void hs_nodes_clear (void);

// The node of a kernel node ID, with a reference (NULL: unknown).
hs_node_t *hs_node_get (uint64_t nodeid);
void hs_node_ref (hs_node_t *n);
void hs_node_put (hs_node_t *n);
uint64_t hs_node_id (const hs_node_t *n);
// The presented inode number the node was found with (0: not known).
uint64_t hs_node_ino (hs_node_t *n);
// The home directory's node (two levels below the root) that n is in or is,
// by its first names: referenced, or NULL (n is the root or a tenant, or a
// name on the way is gone).
hs_node_t *hs_node_home (hs_node_t *n);

// The path of dir (and `name` below it, if not NULL), locked as described
// above until hs_path_unlock; wlock: the node named (dir, name), if the table
// has one, is locked exclusively. Waits for conflicting requests. 0 or -errno
// (-ENOENT: dir has no name any more). *path is malloc'd.
int hs_path_lock (hs_node_t *dir, const char *name, int wlock, char **path, hs_plock_t *pl);
// Two paths at once (rename: both wlock; link: neither).
int hs_path_lock2 (hs_node_t *d1, const char *n1, hs_node_t *d2, const char *n2, int wlock, char **p1, char **p2, hs_plock_t *pl1, hs_plock_t *pl2);
void hs_path_unlock (hs_plock_t *pl);
// The current path of n, unlocked (for requests that carry a handle and use
// the path only to name the file in logs), or NULL when it has no name.
char *hs_path_peek (hs_node_t *n);

// After a successful lookup (or create, mkdir, mknod, symlink, link) of
// (parent, name) that found presented inode `ino` of type `type` (S_IFMT)
// with `nlink` links: the node for it, its lookup count raised by one; the
// name becomes the one its paths are built from, and the only one when the
// inode has one link (or is a directory). 0 and *nodeid, or -ENOMEM.
int hs_node_found (hs_node_t *parent, const char *name, uint64_t ino, uint32_t type, uint32_t nlink, uint64_t *nodeid);
// The kernel forgets n lookups of a node.
void hs_node_forget (uint64_t nodeid, uint64_t nlookup);
// (parent, name) was removed.
void hs_node_removed (hs_node_t *parent, const char *name);
// (op, on) was renamed to (np, nn): whatever (np, nn) named loses that name. 0 or -ENOMEM.
int hs_node_renamed (hs_node_t *op, const char *on, hs_node_t *np, const char *nn);
// (op, on) and (np, nn) were exchanged (renameat2 RENAME_EXCHANGE): each name
// now names the node the other named (a directory keeps its children, a
// hard-linked file its other names). 0 or -ENOMEM.
int hs_node_exchanged (hs_node_t *op, const char *on, hs_node_t *np, const char *nn);

// Opens and hidden names (files unlinked while open keep a name of the form
// .fuse_hiddenXXXXXXXXYYYYYYYY until their last release, as libfuse 2.9's
// high-level API did: the daemon serves them from an open handle).
void hs_node_opened (hs_node_t *n);
// Whether the node is open and (parent, name) is its only name: removing it
// must hide it instead.
int hs_node_must_hide (hs_node_t *parent, const char *name);
// A hidden name for the node named (parent, name), free in directory `in`
// (where it goes: its home's root) (buf of 64), or -ENOENT.
int hs_node_hidden_name (hs_node_t *parent, const char *name, hs_node_t *in, char *buf, size_t size);
// A hidden name free in directory `in`, for a file made with no name (an
// O_TMPFILE open: ops_files.c) (buf of 64). Its digits start with ffffffff,
// never a node id's of the names hs_node_hidden_name makes for live nodes.
void hs_node_tmp_name (hs_node_t *in, char *buf, size_t size);
// After the rename to the hidden name went through.
void hs_node_mark_hidden (hs_node_t *n);
// The session's hiding went through (the node renamed to its hidden name):
// the node is marked hidden while it is open (0); when its last release came
// meanwhile (it found no hidden name to unlink), 1 and the hidden name's path
// in *path (malloc'd): the caller unlinks it now.
int hs_node_hide_done (hs_node_t *n, char **path);
// A release: when it was the last of a hidden node, 1 and its path in *path
// (malloc'd; the hidden name to unlink), else 0.
int hs_node_released (hs_node_t *n, char **path);
int hs_node_is_hidden (hs_node_t *n);

// Requests the kernel may send again (FUSE_NOTIFY_RESEND after a crash: the
// same unique with bit 63 set, only when no answer reached the kernel). An
// open's and a release's change of the open count is journaled before the
// answer, so the resent request must not make it twice. `unique` is the
// request's as the kernel sent it (0: no request, a replay): the change is
// kept under it (the resend bit cleared) until hs_node_answered; a resent
// request whose first run's change is kept (same kind, same node) makes none
// (a resent release still returns the hidden name to unlink when that
// change left it at no open). The open's and release's uniques go into the
// journal with their records, and the changes still kept go into each
// snapshot, so a second crash finds them too.
#define HS_UNIQUE_RESEND (1ULL << 63)
void hs_node_opened_by (hs_node_t *n, uint64_t unique);
int hs_node_released_by (hs_node_t *n, char **path, uint64_t unique);
// After the answer to `unique` was written (or it needs none): its change is
// certain, no resend will come. Journaled when a change was kept.
void hs_node_answered (uint64_t unique);
// A resent request answered with an error (handles.c: a CREATE with O_EXCL,
// answered EIO unrun; op_finish: an OPEN or CREATE that failed this time):
// the open its first run counted is taken back (the kernel got no handle),
// journaled.
void hs_node_refused (uint64_t unique);
// Passthrough (Linux 6.9+, fs/fuse/iomode.c). The kernel keeps each inode in
// one I/O mode: while one open of it is passed through (FOPEN_PASSTHROUGH,
// with a backing ID), every other open of it must be passed through too, with
// the same backing file, or it fails with EIO; a passthrough open of an inode
// with cached opens fails the same way. The daemon cannot see the kernel's
// opens, only its own, which are never fewer: the kernel drops an open's mode
// before it sends the RELEASE (fuse_file_put) and takes it up only after the
// answer. So each node's opens form one family, decided by the open that
// finds none counted:
// - passed through (pt_id set): readers HS_IO_PT; every other open
//   HS_IO_PT_DIRECT (FOPEN_PASSTHROUGH | FOPEN_DIRECT_IO: its reads and writes
//   still come to the daemon, only an mmap maps the backing file), or, when
//   its home's content policy must see its data (which such an mmap would
//   not), HS_IO_REFUSE, not counted;
// - cached: every open HS_IO_CACHED, as without passthrough.
// The family ends with the node's last release, which gives its backing ID
// back (hs_node_backing_close). The ID is journaled and handed over with the
// node, so a successor answers with the ID the kernel's files use.
#define HS_IO_CACHED 0
#define HS_IO_PT 1
#define HS_IO_PT_DIRECT 2
#define HS_IO_REFUSE 3
// What an open's handle needs: HS_OPEN_PLAIN_READER (read-only, its reads
// need no policy: it may be passed through), HS_OPEN_PLAIN (its data need no
// policy), HS_OPEN_POLICY (its home's content policy sees its data).
#define HS_OPEN_PLAIN_READER 0
#define HS_OPEN_PLAIN 1
#define HS_OPEN_POLICY 2
// Whether an open of n now would begin its family (nothing counted, no
// backing ID): a reader that may be passed through needs an ID made first.
int hs_node_family_free (hs_node_t *n);
// Counts the open as hs_node_opened_by does (not a refused one) and returns
// its mode. new_id: a backing ID made for it (0: none); it becomes the node's
// when this open begins a passed-through family, else it is returned in
// *spare for the caller to close. *id: the ID to answer with.
int hs_node_open_mode (hs_node_t *n, uint64_t unique, int need, int32_t new_id, int32_t *id, int32_t *spare);
// Gives a backing ID back (the session: FUSE_DEV_IOC_BACKING_CLOSE on its
// device). NULL: nothing is closed (tests).
extern void (*hs_node_backing_close) (int32_t id);
// Whether the node of presented inode number ino is passed through now (a
// family holds a backing ID): JavaScript refuses a text home's open of it.
int hs_nodes_passthrough_ino (uint64_t ino);
// The node's backing ID (0: none), and how many nodes hold one.
int32_t hs_node_backing (hs_node_t *n);
uint64_t hs_nodes_backing_count (void);

// For tests and status: how many requests' changes are kept.
uint64_t hs_nodes_pending (void);

// The table as bytes for a successor (*out malloc'd), taken when no request
// is in flight; and read back into a table that has served nothing yet
// (-EINVAL: not a table of this format, or inconsistent). 0 or -errno.
int hs_nodes_export (char **out, size_t *len);
int hs_nodes_import (const char *buf, size_t len);
// The same import started early on a thread of its own (a copy of the bytes
// is kept), for a successor with other work to do before it serves; and its
// end: the early import's result when it was given these very bytes, else
// (none started, or other bytes: the table starts over) the import done here.
// Nothing else may use the table between the two. 0 or -errno.
int hs_nodes_import_start (const char *buf, size_t len);
int hs_nodes_import_finish (const char *buf, size_t len);
// What an invalidation of the kernel's caches names (inval.c), found through
// the alias index under the table's mutex: for the virtual path "/t/k/a/b",
// the node ID of "/t/k/a" in *dir and of the path itself in *nodeid (0: the
// table has no such node, so the kernel caches nothing under that ID), and
// its last component (*name, *len point into path). "/": no directory, the
// root itself. 0 or -ENOENT (no table).
int hs_nodes_resolve (const char *path, uint64_t *dir, uint64_t *nodeid, const char **name, size_t *len);
// The IDs of every node at or below path's node, by the names paths are
// built from (malloc'd in *ids; none when the table has no node for path).
// 0 or -ENOMEM.
int hs_nodes_below (const char *path, uint64_t **ids, size_t *count);

// The file type (S_IFMT) of a node, or 0 when the table has no such node.
uint32_t hs_node_type (uint64_t nodeid);
// For status and tests: nodes in the table, of which with a lookup count.
void hs_nodes_stats (uint64_t *nodes, uint64_t *known);
#endif
