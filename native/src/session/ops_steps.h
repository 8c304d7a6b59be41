// The session's ops are split by thread: each op's request side runs on the
// session's workers (ops_*.c) and, when JavaScript answers it, its arguments
// and its answer run on the JS main thread (ops_*_napi.c, called by the
// bridge: an `args` fills the call's JavaScript arguments, a `done` reads the
// answer and replies to the kernel or posts the op's next step). What one
// side calls of the other is declared here; ops.h has what every op shares.
#ifndef HOMESFS_OPS_STEPS_H
#define HOMESFS_OPS_STEPS_H
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include "session/dirs.h"
#include "session/ops.h"

// libfuse's inode number for an entry it knows nothing of (fuse.h's FUSE_UNKNOWN_INO).
#define HS_UNKNOWN_INO 0xffffffffu

// Fills one READDIR reply from an offset on (entries with their own offsets),
// or, for entries given with offset 0 (libfuse's "the whole listing"), the
// directory handle's listing, from which replies are then cut.
typedef struct {
  fuse_req_t req;
  char *out;
  size_t len, size;
  hs_dh_t *dh;
  int whole;
} ops_dir_fill_t;

// A worker reopening a dead daemon's file waits here for JavaScript's open
// (ops_files.c); ops_reopen_done signals it.
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cond;
  int done, res;
  uint64_t fh;
} ops_reopen_wait_t;

// ---- ops_common.c and ops_common_napi.c ----
// JS main thread:
void ops_errno_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);
size_t ops_getattr_args (napi_env env, hs_call_t *c, napi_value *argv);
void ops_getattr_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);

// ---- ops_attr.c and ops_attr_napi.c ----
// JS main thread:
size_t ops_path_args (napi_env env, hs_call_t *c, napi_value *argv);
void ops_readlink_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);
size_t ops_setattr_args (napi_env env, hs_call_t *c, napi_value *argv);
void ops_setattr_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);
void ops_statfs_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);
// the op's own steps, called back from the JS side:
void ops_setattr_next (hs_op_t *op);

// ---- ops_names.c and ops_names_napi.c ----
// JS main thread:
void ops_hidden_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);
size_t ops_hidden_gone_args (napi_env env, hs_call_t *c, napi_value *argv);
void ops_hidden_gone_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);
size_t ops_hide_args (napi_env env, hs_call_t *c, napi_value *argv);
void ops_made_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);
size_t ops_name_args (napi_env env, hs_call_t *c, napi_value *argv);
void ops_removed_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);
void ops_renamed_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);
// the op's own steps, called back from the JS side:
void ops_entry_then (hs_op_t *op, int res, const struct stat *st);
void ops_hide_went_on (hs_op_t *op);

// ---- ops_files.c and ops_files_napi.c ----
// JS main thread:
void ops_create_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);
size_t ops_file_args (napi_env env, hs_call_t *c, napi_value *argv);
void ops_open_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);
void ops_read_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);
void ops_release_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);
void ops_released_quietly (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);
void ops_reopen_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);
void ops_write_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);
// the op's own steps, called back from the JS side:
void ops_apply_open_opts (struct fuse_file_info *fi, uint32_t opts);
void ops_create_then (hs_op_t *op, int res, const struct stat *st);
void ops_open_reply (hs_op_t *op);
void ops_release_node (hs_op_t *op);

// ---- ops_dirs.c and ops_dirs_napi.c ----
// JS main thread:
size_t ops_fsyncdir_args (napi_env env, hs_call_t *c, napi_value *argv);
void ops_fsyncdir_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);
size_t ops_readdir_args (napi_env env, hs_call_t *c, napi_value *argv);
void ops_readdir_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n);
// the op's own steps, called back from the JS side:
int ops_dir_append (hs_dh_t *dh, fuse_req_t req, const char *name, const struct stat *st);
int ops_dir_fill (void *ctx, const char *name, const struct stat *st, off_t off);
void ops_dir_reply_err_unlock (hs_op_t *op, hs_dh_t *dh, int err);
void ops_dir_reply_slice (hs_op_t *op, hs_dh_t *dh);
// A READDIR's answer from READDIR-form entries (list, len bytes): as they are,
// or for a READDIRPLUS in its form (ops_dirs_plus.c). The request is answered
// (op->req is NULL after); the caller finishes the op.
void ops_dir_reply_list (hs_op_t *op, const char *list, size_t len);
void ops_dir_reply_plus (hs_op_t *op, const char *list, size_t len, int lookups);

#endif
