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
// that hands its session over (hs_session_adopt: the descriptor, the kernel's
// INIT request replayed into this session's libfuse state, the node table
// and open directories as they were). The workers (loop.c) stop at a request
// boundary for a handover of this session, and go on if it fails.
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
  hs_lead_start();
  s_se = se;
  s_ch = ch;
  // The kernel's caches are invalidated through this channel from now on (inval.c).
  hs_inval_start(ch);
  int err = hs_loop_start(se, ch);
  if (err != 0) {
    fuse_session_remove_chan(ch);
    fuse_unmount(mnt, ch);
    s_se = NULL;
    s_ch = NULL;
  }
  return err;
}

// The reply to a replayed INIT went to the kernel already, from the daemon it was sent to.
static int discard_send (struct fuse_chan *ch, const struct iovec iov[], size_t count) {
  (void) ch; (void) iov; (void) count;
  return 0;
}

// An INIT request as the kernel sent it: its header's length and opcode.
static int is_init (const char *init, size_t len) {
  uint32_t hlen, opcode;
  if (len < 40) return 0;  // struct fuse_in_header
  memcpy(&hlen, init, sizeof(hlen));
  memcpy(&opcode, init + 4, sizeof(opcode));
  return hlen == len && opcode == 26;  // FUSE_INIT
}

// The new session on fd (owned: closed on failure), INIT replayed into it. 0 or -errno.
static int adopt_session (int fd, size_t bufsize, const char *init, size_t init_len, const char *ll_opts, struct fuse_session **sep, struct fuse_chan **chp) {
  struct fuse_args largs;
  struct fuse_chan *ch = hs_chan_on_fd(fd, bufsize);
  if (ch == NULL) {
    close(fd);
    return -ENOMEM;
  }
  if (make_args(&largs, ll_opts) != 0) {
    fuse_opt_free_args(&largs);
    fuse_chan_destroy(ch);
    return -ENOMEM;
  }
  struct fuse_session *se = fuse_lowlevel_new(&largs, &ll_ops, sizeof(ll_ops), NULL);
  fuse_opt_free_args(&largs);
  struct fuse_chan_ops discard = { .send = discard_send };
  struct fuse_chan *replay = se != NULL ? fuse_chan_new(&discard, -1, bufsize, NULL) : NULL;
  if (replay == NULL) {
    if (se != NULL) fuse_session_destroy(se);
    fuse_chan_destroy(ch);
    return se == NULL ? -EINVAL : -ENOMEM;
  }
  fuse_session_add_chan(se, ch);
  // libfuse refuses every request before INIT: the kernel's, replayed, sets
  // the same negotiated state (its reply goes nowhere: the kernel had it).
  // ll_init runs only for an INIT libfuse accepted.
  __atomic_store_n(&s_inited, 0, __ATOMIC_SEQ_CST);
  fuse_session_process(se, init, init_len, replay);
  fuse_chan_destroy(replay);
  if (!__atomic_load_n(&s_inited, __ATOMIC_SEQ_CST)) {
    fuse_session_destroy(se);  // destroys ch, which closes fd
    return -EPROTO;
  }
  *sep = se;
  *chp = ch;
  return 0;
}

// Before it serves: the table it imported goes, so that a retry starts fresh.
static void adopt_undo (void) {
  hs_dirs_clear();
  hs_nodes_clear();
  hs_nodes_init();
}

// A successor imports the node table early (hs_session_preimport: on a thread
// of its own while JavaScript adopts the rest; nodes_handover.c), and the
// adopt finishes that import.
int hs_session_preimport (const char *nodes, size_t len) {
  if (s_se != NULL) return -EEXIST;
  hs_nodes_init();
  return hs_nodes_import_start(nodes, len);
}

int hs_session_adopt (int fd, size_t bufsize, const char *init, size_t init_len, const char *nodes, size_t nodes_len, const char *dirs, size_t dirs_len, const char *ll_opts) {
  int err = 0;
  if (s_se != NULL) err = -EEXIST;
  else if (!is_init(init, init_len)) err = -EINVAL;
  if (err == 0) {
    hs_nodes_init();
    // No table handed over: this successor loaded it by following the journal (nodes_journal.h).
    if (nodes_len == 0) err = hs_journal_followed() ? 0 : -EINVAL;
    else err = hs_nodes_import_finish(nodes, nodes_len);
    if (err != 0) adopt_undo();
    else if ((err = hs_dirs_import(dirs, dirs_len)) != 0) adopt_undo();
  }
  if (err != 0) {
    close(fd);
    return err;
  }
  struct fuse_session *se = NULL;
  struct fuse_chan *ch = NULL;
  if ((err = adopt_session(fd, bufsize, init, init_len, ll_opts, &se, &ch)) != 0) {
    adopt_undo();
    return err;
  }
  hs_loop_keep_init(init, init_len);
  hs_lead_start();
  s_se = se;
  s_ch = ch;
  hs_inval_start(ch);
  return hs_loop_start(se, ch);
}

// The kernel sends again every request the connection's daemons read but
// never answered (Linux 6.9+, FUSE_NOTIFY_RESEND; their uniques marked with
// bit 63). Written before the first read, so none is read twice.
#define HS_NOTIFY_RESEND 7
static int notify_resend (struct fuse_chan *ch) {
  struct { uint32_t len; int32_t error; uint64_t unique; } out = { 16, HS_NOTIFY_RESEND, 0 };
  struct iovec iov = { &out, sizeof(out) };
  return fuse_chan_send(ch, &iov, 1);
}

int hs_session_revive (int fd, size_t bufsize, const char *init, size_t init_len, uint32_t epoch, const char *ll_opts, int *resent) {
  if (s_se != NULL) {
    close(fd);
    return -EEXIST;
  }
  if (!is_init(init, init_len)) {
    close(fd);
    return -EINVAL;
  }
  struct fuse_session *se = NULL;
  struct fuse_chan *ch = NULL;
  int err = adopt_session(fd, bufsize, init, init_len, ll_opts, &se, &ch);
  if (err != 0) return err;
  hs_fh_set_epoch(epoch);
  hs_loop_keep_init(init, init_len);
  *resent = notify_resend(ch);
  hs_lead_start();
  s_se = se;
  s_ch = ch;
  hs_inval_start(ch);
  return hs_loop_start(se, ch);
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
