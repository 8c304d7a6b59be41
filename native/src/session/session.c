// The FUSE session: the mount, libfuse 2.9's low-level API on our channel
// (channel.c), the loop of worker threads, and the op table (ops_*.c).
//
// The kernel's node IDs are ours (nodes.c): one per backing inode, so hard
// links are one kernel inode, and a successor can be handed the table.
// Requests are decoded by libfuse (fuse_session_process through its loop)
// and answered by our ops, natively or through JavaScript (bridge.c); no
// worker ever waits for JavaScript.
//
// A session starts either by mounting, or by adopting the device of a daemon
// that hands its session over or died (handover/session_adopt.c: the
// descriptor, the kernel's INIT request replayed into this session's libfuse
// state, the node table and open directories as they were), which shares
// hs_session_new and hs_session_serve with the mount (session_internal.h).
// The workers (loop.c) stop at a request boundary for a handover of this
// session, and go on if it fails.
//
// Invariants: one session per process (s_se, s_ch are set once and never
// freed: a reply JavaScript gives after the loop ended finds a closed
// descriptor, not freed memory).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/uio.h>
#include "sys/napi_args.h"

#include "session/channel.h"
#include "session/handles.h"
#include "session/ops.h"
#include "handover/handover.h"
#include "session/loop.h"
#include "session/inval.h"
#include "handover/nodes_journal.h"
#include "session/session.h"
#include "session/session_internal.h"

static struct fuse_session *s_se;
static struct fuse_chan *s_ch;

static int s_inited;  // atomic: ll_init ran (an adopted session's replayed INIT was accepted)

// INIT reached the session: JavaScript hears that the mount answers. Nothing waits for its answer.
static size_t no_args (napi_env env, hs_call_t *c, napi_value *argv) {
  (void) env; (void) c; (void) argv;
  return 0;
}

static void init_done (napi_env env, hs_call_t *c, int32_t res, napi_value *values, size_t n) {
  (void) env; (void) res; (void) values; (void) n;
  op_finish((hs_op_t *) c);
}

static void ll_init (void *userdata, struct fuse_conn_info *conn) {
  (void) userdata; (void) conn;
  __atomic_store_n(&s_inited, 1, __ATOMIC_SEQ_CST);
  hs_op_t *op = op_new(NULL, HOMESFS_OP_INIT);
  if (op != NULL) op_js(op, no_args, init_done);
}

static const struct fuse_lowlevel_ops ll_ops = {
  .init = ll_init,
  .lookup = hs_ll_lookup,
  .forget = hs_ll_forget,
  .forget_multi = hs_ll_forget_multi,
  .getattr = hs_ll_getattr,
  .setattr = hs_ll_setattr,
  .readlink = hs_ll_readlink,
  .mknod = hs_ll_mknod,
  .mkdir = hs_ll_mkdir,
  .unlink = hs_ll_unlink,
  .rmdir = hs_ll_rmdir,
  .symlink = hs_ll_symlink,
  .rename = hs_ll_rename,
  .link = hs_ll_link,
  .open = hs_ll_open,
  .read = hs_ll_read,
  .write = hs_ll_write,
  .flush = hs_ll_flush,
  .release = hs_ll_release,
  .fsync = hs_ll_fsync,
  .opendir = hs_ll_opendir,
  .readdir = hs_ll_readdir,
  .releasedir = hs_ll_releasedir,
  .fsyncdir = hs_ll_fsyncdir,
  .statfs = hs_ll_statfs,
  .access = hs_ll_access,
  .create = hs_ll_create,
  .fallocate = hs_ll_fallocate,
  // Extended attributes are in no profile: unregistered, the kernel hears
  // ENOSYS once and stops asking (it would otherwise ask for
  // security.capability before every write). No lock ops either: the kernel
  // keeps POSIX and BSD locks itself, right while this is the backing's only mount.
};

// An option string "-o a,b" as libfuse arguments; "" for none.
static int make_args (struct fuse_args *args, const char *opts) {
  *args = (struct fuse_args) FUSE_ARGS_INIT(0, NULL);
  if (fuse_opt_add_arg(args, "homesfs") != 0) return -1;
  if (opts[0] != '\0' && (fuse_opt_add_arg(args, "-o") != 0 || fuse_opt_add_arg(args, opts) != 0)) return -1;
  return 0;
}

int hs_session_mount (const char *mnt, const char *mount_opts, const char *ll_opts) {
  if (s_se != NULL) return -EEXIST;
  hs_nodes_init();
  // A new connection: no handle of another daemon's to tell apart.
  hs_fh_set_epoch(1);
  struct fuse_args margs, largs;
  if (make_args(&margs, mount_opts) != 0 || make_args(&largs, ll_opts) != 0) return -ENOMEM;
  struct fuse_chan *ch = fuse_mount(mnt, &margs);
  fuse_opt_free_args(&margs);
  if (ch == NULL) {
    fuse_opt_free_args(&largs);
    return -EIO;
  }
  // libfuse 2.9 opens /dev/fuse without O_CLOEXEC: every child the daemon
  // spawns would keep a dead daemon's mount connected.
  int fd = fuse_chan_fd(ch);
  int flags = fcntl(fd, F_GETFD);
  if (flags >= 0) fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  ch = hs_wrap_chan(ch);
  struct fuse_session *se = fuse_lowlevel_new(&largs, &ll_ops, sizeof(ll_ops), NULL);
  fuse_opt_free_args(&largs);
  if (se == NULL) {
    fuse_unmount(mnt, ch);
    return -EINVAL;
  }
  fuse_session_add_chan(se, ch);
  int err = hs_session_serve(se, ch);
  if (err != 0) {
    fuse_session_remove_chan(ch);
    fuse_unmount(mnt, ch);
    s_se = NULL;
    s_ch = NULL;
  }
  return err;
}

uint32_t hs_session_loop_state (void) {
  return hs_loop_state();
}

int hs_session_chan_fd (int *fd, size_t *bufsize) {
  if (s_ch == NULL) return -ENOENT;
  *fd = fuse_chan_fd(s_ch);
  *bufsize = fuse_chan_bufsize(s_ch);
  return 0;
}

// ---- what a successor's start shares with a mount (handover/session_adopt.c) ----

int hs_session_started (void) {
  return s_se != NULL;
}

struct fuse_session *hs_session_new (const char *ll_opts) {
  struct fuse_args largs;
  if (make_args(&largs, ll_opts) != 0) {
    fuse_opt_free_args(&largs);
    return NULL;
  }
  struct fuse_session *se = fuse_lowlevel_new(&largs, &ll_ops, sizeof(ll_ops), NULL);
  fuse_opt_free_args(&largs);
  return se;
}

void hs_session_inited_reset (void) {
  __atomic_store_n(&s_inited, 0, __ATOMIC_SEQ_CST);
}

int hs_session_inited (void) {
  return __atomic_load_n(&s_inited, __ATOMIC_SEQ_CST);
}

int hs_session_serve (struct fuse_session *se, struct fuse_chan *ch) {
  hs_lead_start();
  s_se = se;
  s_ch = ch;
  // The kernel's caches are invalidated through this channel from now on (inval.c).
  hs_inval_start(ch);
  return hs_loop_start(se, ch);
}
