// What the session's op files share (ops_*.c): one record per request, the
// steps that every op takes (node, path, the native answer, JavaScript), and
// the replies.
//
// A request's record lives from the kernel's request to its answer. It holds
// references on the nodes it names and, while its path is in use, the path's
// locks (nodes.h); op_finish releases all of it after the reply. Exactly one
// reply is sent per request: every path through an op ends in one op_reply_*
// (or fuse_reply_none for FORGET).
#ifndef HOMESFS_OPS_H
#define HOMESFS_OPS_H
#include <stdint.h>
#include <sys/stat.h>
#include <fuse_lowlevel.h>

#include "abi.h"
#include "session/bridge.h"
#include "session/marshal.h"
#include "session/nodes.h"

// How the kernel may cache what the session answers (set at mount).
typedef struct {
  double attr_timeout, entry_timeout, negative_timeout;
  int kernel_cache;
  // A file unlinked while open loses its name at once (handle requests then
  // carry no path) instead of keeping a hidden one: for filesystems without
  // the daemon's hidden names (the binding's test fixture).
  int hard_remove;
} hs_conf_t;
extern hs_conf_t hs_conf;

typedef struct hs_op hs_op_t;
struct hs_op {
  hs_call_t call;              // first: the bridge's view of it
  fuse_req_t req;
  hs_node_t *node;             // the inode the request is about (referenced)
  hs_node_t *dir, *dir2;       // the directories of names (referenced)
  hs_node_t *home;             // a hiding's home directory, where the hidden name goes (referenced)
  char *name, *name2;          // copies of the request's names
  char *path, *path2;          // their paths while locked (or peeked)
  hs_plock_t pl, pl2;
  int locked, locked2;
  struct fuse_file_info fi;
  int has_fi;
  int step;                    // where a request of several JavaScript calls stands
  // the request's arguments
  struct stat attr;
  int to_set;
  uint32_t mode, flags, rdev, mask, uid, gid;
  int64_t offset, length, size;
  int datasync;
  char *data;                  // a write's copy, a symlink's target, a read's buffer
  size_t len;
  void *dh;                    // the directory handle (ops_dirs.c)
  struct fuse_entry_param e;
  uint64_t fh;                 // a handle a step made or uses
  uint64_t unique;              // the kernel's unique of req (a resent request's with bit 63), 0 without one
  int kept;                    // an open count change kept under unique until the answer (nodes.h hs_node_opened_by)
  uint64_t reopen_ino;         // an OPEN that reopens a dead handle: the inode it must reach (0: an ordinary open)
  char *spath;                 // the path a JavaScript step names (a copy)
  void (*then) (hs_op_t *op, int res, const struct stat *st); // after a getattr step
  int attr_volatile;           // JavaScript's attributes change without a request (a status file): not cached
  int plus;                    // a READDIRPLUS: 1 answered with lookups (a worker), 2 without (the JavaScript thread)
  int tmpfile;                 // a CREATE that is an O_TMPFILE open: the file has a hidden name from the start
};

hs_op_t *op_new (fuse_req_t req, uint32_t jsop);
// Releases the record (after its reply).
void op_finish (hs_op_t *op);
// Ends the request with errno err (0: success without data).
void op_reply_err (hs_op_t *op, int err);
void op_reply_attr (hs_op_t *op, const struct stat *st);
// A LOOKUP-like answer for (dir, name) with these attributes: the node found
// or made for them. ENOENT with a negative timeout becomes a negative entry.
void op_reply_entry (hs_op_t *op, hs_node_t *dir, const char *name, const struct stat *st);
// LOOKUP's answer: the entry of (op->dir, op->name), or res (ENOENT maybe a negative entry).
void op_reply_lookup (hs_op_t *op, int res, const struct stat *st);
// Fills op->e for (dir, name) (the node's lookup count raised): 0 or -errno.
int op_entry (hs_op_t *op, hs_node_t *dir, const char *name, const struct stat *st);

// The node of a request's inode: referenced, or the request answered ESTALE (NULL).
hs_node_t *op_node (hs_op_t *op, fuse_ino_t ino);
// Locks the path of op->node (dir, name), or answers the error and returns -1.
int op_lock (hs_op_t *op, hs_node_t *dir, const char *name, int wlock);
// The same, where a handle makes a name unnecessary: no name is NULL, not an error.
int op_lock_nullok (hs_op_t *op, hs_node_t *n);
// Strict UTF-8, or the request answered EILSEQ (-1).
int op_name_ok (hs_op_t *op, const char *name);

// Hands the request to JavaScript as op->call.op with these arguments.
void op_js (hs_op_t *op, hs_call_args_fn args, hs_call_done_fn done);
// The path after a getattr: the native answer if there is one, else JavaScript's.
// Then `then(op, res, st)` runs (on whichever thread had the answer).
typedef void (*op_stat_then) (hs_op_t *op, int res, const struct stat *st);
void op_getattr_path (hs_op_t *op, const char *path, op_stat_then then);
void op_fgetattr (hs_op_t *op, const char *path, uint64_t fh, op_stat_then then);

// The lowlevel ops, by family (ops_attr.c, ops_names.c, ops_files.c, ops_dirs.c).
void hs_ll_lookup (fuse_req_t req, fuse_ino_t parent, const char *name);
void hs_ll_forget (fuse_req_t req, fuse_ino_t ino, unsigned long nlookup);
void hs_ll_forget_multi (fuse_req_t req, size_t count, struct fuse_forget_data *forgets);
void hs_ll_getattr (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void hs_ll_setattr (fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, struct fuse_file_info *fi);
void hs_ll_access (fuse_req_t req, fuse_ino_t ino, int mask);
void hs_ll_readlink (fuse_req_t req, fuse_ino_t ino);
void hs_ll_statfs (fuse_req_t req, fuse_ino_t ino);
void hs_ll_mknod (fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev);
void hs_ll_mkdir (fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void hs_ll_symlink (fuse_req_t req, const char *link, fuse_ino_t parent, const char *name);
void hs_ll_link (fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname);
void hs_ll_unlink (fuse_req_t req, fuse_ino_t parent, const char *name);
void hs_ll_rmdir (fuse_req_t req, fuse_ino_t parent, const char *name);
void hs_ll_rename (fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent, const char *newname);
void hs_ll_open (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void hs_ll_create (fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi);
void hs_ll_read (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void hs_ll_write (fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off, struct fuse_file_info *fi);
void hs_ll_flush (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void hs_ll_release (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void hs_ll_fsync (fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void hs_ll_fallocate (fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length, struct fuse_file_info *fi);
void hs_ll_opendir (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void hs_ll_readdir (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void hs_ll_releasedir (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void hs_ll_fsyncdir (fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);

// Open directories as bytes for a successor (handover/dirs_handover.c): 0 or -errno.
int hs_dirs_export (char **out, size_t *len);
int hs_dirs_import (const char *buf, size_t len);
// Every open directory forgotten (an adoption that failed, tests).
void hs_dirs_clear (void);

// A create made by mknod of a regular file (libfuse's way) shares create's steps.
void hs_create_for_mknod (hs_op_t *op);
// A handle a request made and cannot hand on (an interrupted open, mknod's create): released as a RELEASE would.
void hs_release_handle (hs_op_t *op, uint64_t fh, const char *path);
#endif
