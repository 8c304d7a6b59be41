// The FUSE session: the mount, libfuse 2.9's low-level API on our channel
// (channel.c), the loop of worker threads, and the op table (ops_*.c).
//
// The kernel's node IDs are ours (nodes.c): one per backing inode, so hard
// links are one kernel inode, and a successor can be handed the table.
// Requests are decoded by libfuse (fuse_session_process through its loop)
// and answered by our ops, natively or through JavaScript (bridge.c); no
// worker ever waits for JavaScript.
//
// Invariants: one session per process (s_se, s_ch are set once by mount and
// never freed: a reply JavaScript gives after the loop ended finds a closed
// descriptor, not freed memory); s_loop_state moves 0 -> 1 -> 2 only, written
// by the loop thread with atomic stores.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <napi-macros.h>

#include "../channel.h"
#include "ops.h"
#include "inval.h"
#include "session.h"

#define LOOP_NOT_STARTED 0
#define LOOP_RUNNING 1
#define LOOP_ENDED 2

static struct fuse_session *s_se;
static struct fuse_chan *s_ch;
static pthread_t s_thread;
static uint32_t s_loop_state;

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

static void *loop_main (void *arg) {
  (void) arg;
  __atomic_store_n(&s_loop_state, LOOP_RUNNING, __ATOMIC_SEQ_CST);
  fuse_session_loop_mt(s_se);
  __atomic_store_n(&s_loop_state, LOOP_ENDED, __ATOMIC_SEQ_CST);
  return NULL;
}

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
  ch = homesfs_wrap_chan(ch);
  struct fuse_session *se = fuse_lowlevel_new(&largs, &ll_ops, sizeof(ll_ops), NULL);
  fuse_opt_free_args(&largs);
  if (se == NULL) {
    fuse_unmount(mnt, ch);
    return -EINVAL;
  }
  fuse_session_add_chan(se, ch);
  homesfs_lead_start();
  s_se = se;
  s_ch = ch;
  if (pthread_create(&s_thread, NULL, loop_main, NULL) != 0) {
    fuse_session_remove_chan(ch);
    fuse_unmount(mnt, ch);
    s_se = NULL;
    s_ch = NULL;
    return -EAGAIN;
  }
  pthread_detach(s_thread);
  // The kernel's caches are invalidated through this channel from now on (inval.c).
  hs_inval_start(ch);
  return 0;
}

uint32_t hs_session_loop_state (void) {
  return __atomic_load_n(&s_loop_state, __ATOMIC_SEQ_CST);
}

// ---- exports ---------------------------------------------------------------------

// mount(mnt, mountOpts, lowlevelOpts, [attrTimeout, entryTimeout, negativeTimeout, kernelCache, hardRemove], dispatch)
NAPI_METHOD(hs_session_mount_js) {
  NAPI_ARGV(5)
  NAPI_ARGV_UTF8(mnt, 4096, 0)
  NAPI_ARGV_UTF8(mopts, 4096, 1)
  NAPI_ARGV_UTF8(lopts, 4096, 2)
  double conf[5] = { 1, 1, 0, 0, 0 };
  for (uint32_t i = 0; i < 5; i++) {
    napi_value v;
    if (napi_get_element(env, argv[3], i, &v) != napi_ok || napi_get_value_double(env, v, &conf[i]) != napi_ok) {
      napi_throw_type_error(env, "EINVAL", "mount: [attrTimeout, entryTimeout, negativeTimeout, kernelCache, hardRemove]");
      return NULL;
    }
  }
  napi_valuetype t;
  if (napi_typeof(env, argv[4], &t) != napi_ok || t != napi_function) {
    napi_throw_type_error(env, "EINVAL", "mount: dispatch must be a function");
    return NULL;
  }
  hs_conf.attr_timeout = conf[0];
  hs_conf.entry_timeout = conf[1];
  hs_conf.negative_timeout = conf[2];
  hs_conf.kernel_cache = conf[3] != 0;
  hs_conf.hard_remove = conf[4] != 0;
  int err = hs_bridge_start(env, argv[4]);
  if (err == 0) err = hs_session_mount(mnt, mopts, lopts);
  if (err != 0) {
    char msg[128];
    snprintf(msg, sizeof(msg), "mount failed: %s", strerror(-err));
    napi_throw_error(env, "EIO", msg);
  }
  return NULL;
}

NAPI_METHOD(hs_session_loop_state_js) {
  napi_value out;
  napi_create_uint32(env, hs_session_loop_state(), &out);
  return out;
}

// -> [nodes in the table, of them reachable by inode number, calls JavaScript has not answered]
NAPI_METHOD(hs_session_stats_js) {
  uint64_t nodes = 0, known = 0;
  hs_nodes_stats(&nodes, &known);
  napi_value out, v;
  napi_create_array_with_length(env, 3, &out);
  napi_create_double(env, (double) nodes, &v);
  napi_set_element(env, out, 0, v);
  napi_create_double(env, (double) known, &v);
  napi_set_element(env, out, 1, v);
  napi_create_double(env, (double) hs_bridge_pending(), &v);
  napi_set_element(env, out, 2, v);
  return out;
}

void hs_session_export (napi_env env, napi_value exports) {
  napi_value fn;
  napi_create_function(env, NULL, 0, hs_session_mount_js, NULL, &fn);
  napi_set_named_property(env, exports, "session_mount", fn);
  napi_create_function(env, NULL, 0, hs_session_loop_state_js, NULL, &fn);
  napi_set_named_property(env, exports, "session_loop_state", fn);
  napi_create_function(env, NULL, 0, hs_session_stats_js, NULL, &fn);
  napi_set_named_property(env, exports, "session_stats", fn);
  hs_bridge_export(env, exports);
  hs_inval_export(env, exports);
}
