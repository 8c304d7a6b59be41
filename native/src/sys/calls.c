// System calls JS needs and Node lacks, run on libuv's thread pool so the JS
// thread never blocks on the disk: utimensat without following symlinks,
// fallocate with every mode, mknod, renameat2 with flags, umount2 with
// flags, RLIMIT_NOFILE; and
// the UTF-8 check of a buffer. Each takes its arguments, validates them
// (TypeError EINVAL on a wrong type, never a crash) and calls back with 0 or
// -errno. No global state.
#define FUSE_USE_VERSION 29
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <node_api.h>
#include "sys/napi_args.h"
#include "sys/calls.h"
#include "sys/utf8.h"

NAPI_METHOD(hs_sys_utf8_valid_buffer_js) {
  NAPI_ARGV(1)
  NAPI_ARGV_BUFFER_CAST(unsigned char *, data, 0);
  return hs_js_bool(env, hs_utf8_valid_n(data, data_len));
}

// ---- One request on the thread pool -------------------------------------------
// Every asynchronous call is one of these: its arguments, the syscall that
// runs on the pool (returning 0 or -errno) and the JS callback, called with
// that result (-ECANCELED if the work was cancelled) on the JS thread.
typedef struct calls_req {
  napi_async_work work;
  napi_ref cb;
  int (*run) (struct calls_req *r);
  char *path;
  char *path2;                 // renameat2's new name
  int fd, fd2;
  int flags;
  mode_t mode;
  dev_t dev;
  off_t offset;
  off_t length;
  struct timespec ts[2];
  int res;
} calls_req_t;

static void calls_execute (napi_env env, void *data) {
  calls_req_t *r = (calls_req_t *) data;
  r->res = r->run(r);
}

static void calls_free (calls_req_t *r) {
  free(r->path);
  free(r->path2);
  free(r);
}

static void calls_complete (napi_env env, napi_status status, void *data) {
  calls_req_t *r = (calls_req_t *) data;
  napi_value cb, global, argv[1], result;
  int32_t res = (status == napi_ok) ? r->res : -ECANCELED;
  napi_get_reference_value(env, r->cb, &cb);
  napi_get_global(env, &global);
  napi_create_int32(env, res, &argv[0]);
  napi_delete_reference(env, r->cb);
  napi_delete_async_work(env, r->work);
  calls_free(r);
  napi_call_function(env, global, cb, 1, argv, &result);
}

// A new request for `what`, with argv[path_at] copied as its path unless
// path_at < 0, after checking that argv[cb_at] is a function. NULL with a
// TypeError (EINVAL) or an ENOMEM error thrown.
static calls_req_t * calls_new (napi_env env, napi_value *argv, int path_at, int cb_at, const char *what) {
  char msg[96];
  napi_valuetype t;
  if (napi_typeof(env, argv[cb_at], &t) != napi_ok || t != napi_function) {
    snprintf(msg, sizeof(msg), "%s: cb must be a function", what);
    napi_throw_type_error(env, "EINVAL", msg);
    return NULL;
  }
  size_t path_len = 0;
  if (path_at >= 0 && (napi_typeof(env, argv[path_at], &t) != napi_ok || t != napi_string ||
                       napi_get_value_string_utf8(env, argv[path_at], NULL, 0, &path_len) != napi_ok)) {
    snprintf(msg, sizeof(msg), "%s: path must be a string", what);
    napi_throw_type_error(env, "EINVAL", msg);
    return NULL;
  }
  calls_req_t *r = calloc(1, sizeof(*r));
  if (r != NULL && path_at >= 0 && (r->path = malloc(path_len + 1)) == NULL) { free(r); r = NULL; }
  if (r == NULL) {
    snprintf(msg, sizeof(msg), "%s: out of memory", what);
    napi_throw_error(env, "ENOMEM", msg);
    return NULL;
  }
  if (path_at >= 0) {
    napi_get_value_string_utf8(env, argv[path_at], r->path, path_len + 1, &path_len);
    if (strlen(r->path) != path_len) {  // a path with a NUL byte would name another file
      calls_free(r);
      snprintf(msg, sizeof(msg), "%s: path contains a NUL byte", what);
      napi_throw_type_error(env, "EINVAL", msg);
      return NULL;
    }
  }
  return r;
}

// Queues r with `run` and the callback argv[cb_at]; on failure throws and frees r.
static napi_value calls_queue (napi_env env, calls_req_t *r, int (*run) (calls_req_t *), napi_value cb, const char *what) {
  char name_s[64];
  snprintf(name_s, sizeof(name_s), "homesfs:%s", what);
  r->run = run;
  napi_value name;
  napi_create_string_utf8(env, name_s, NAPI_AUTO_LENGTH, &name);
  napi_create_reference(env, cb, 1, &(r->cb));
  if (napi_create_async_work(env, NULL, name, calls_execute, calls_complete, r, &(r->work)) != napi_ok ||
      napi_queue_async_work(env, r->work) != napi_ok) {
    napi_delete_reference(env, r->cb);
    calls_free(r);
    char msg[96];
    snprintf(msg, sizeof(msg), "%s: could not queue work", what);
    napi_throw_error(env, "EIO", msg);
  }
  return NULL;
}

static int calls_type_error (napi_env env, const char *msg) {
  napi_throw_type_error(env, "EINVAL", msg);
  return 0;
}

// ---- Fuse.utimensat(path, atime, mtime, cb) ------------------------------------
// utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW): nanosecond times, never
// through a symlink.

static int calls_parse_time (napi_env env, napi_value val, struct timespec *ts) {
  napi_valuetype t;
  if (napi_typeof(env, val, &t) != napi_ok) return 0;
  if (t == napi_string) {
    char s[8];
    size_t n = 0;
    if (napi_get_value_string_utf8(env, val, s, sizeof(s), &n) != napi_ok) return 0;
    if (strcmp(s, "now") == 0) { ts->tv_sec = 0; ts->tv_nsec = UTIME_NOW; return 1; }
    if (strcmp(s, "omit") == 0) { ts->tv_sec = 0; ts->tv_nsec = UTIME_OMIT; return 1; }
    return 0;
  }
  if (t != napi_object) return 0;
  napi_value sec_v, nsec_v;
  if (napi_get_named_property(env, val, "sec", &sec_v) != napi_ok) return 0;
  if (napi_get_named_property(env, val, "nsec", &nsec_v) != napi_ok) return 0;
  int64_t sec = 0;
  int64_t nsec = 0;
  napi_valuetype st, nt;
  napi_typeof(env, sec_v, &st);
  napi_typeof(env, nsec_v, &nt);
  if (st == napi_number) {
    double d;
    napi_get_value_double(env, sec_v, &d);
    if (d != d || d > 9.2e18 || d < -9.2e18 || (double) (int64_t) d != d) return 0;
    sec = (int64_t) d;
  } else if (st == napi_bigint) {
    bool lossless = false;
    napi_get_value_bigint_int64(env, sec_v, &sec, &lossless);
    if (!lossless) return 0;
  } else {
    return 0;
  }
  if (nt == napi_number) {
    double d;
    napi_get_value_double(env, nsec_v, &d);
    if (d != d || (double) (int64_t) d != d) return 0;
    nsec = (int64_t) d;
  } else if (nt == napi_bigint) {
    bool lossless = false;
    napi_get_value_bigint_int64(env, nsec_v, &nsec, &lossless);
    if (!lossless) return 0;
  } else if (nt == napi_undefined) {
    nsec = 0;
  } else {
    return 0;
  }
  if (nsec < 0 || nsec > 999999999) return 0;
  ts->tv_sec = (time_t) sec;
  ts->tv_nsec = (long) nsec;
  return 1;
}

static int calls_utimensat (calls_req_t *r) {
  return utimensat(AT_FDCWD, r->path, r->ts, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
}

NAPI_METHOD(hs_sys_utimensat_js) {
  NAPI_ARGV(4)
  struct timespec ts[2];
  if (!calls_parse_time(env, argv[1], &ts[0]) || !calls_parse_time(env, argv[2], &ts[1])) {
    calls_type_error(env, "utimensat: times must be 'now', 'omit' or { sec, nsec } with 0 <= nsec < 1e9");
    return NULL;
  }
  calls_req_t *r = calls_new(env, argv, 0, 3, "utimensat");
  if (r == NULL) return NULL;
  r->ts[0] = ts[0];
  r->ts[1] = ts[1];
  return calls_queue(env, r, calls_utimensat, argv[3], "utimensat");
}

// ---- Fuse.fallocate(fd, mode, offset, length, cb) ------------------------------
// Node has none. The daemon decides what a mode may do and what it is charged
// (src/policy/fallocate.ts) and only then asks for the syscall on the backing
// descriptor of a handle it holds.

static int calls_fallocate (calls_req_t *r) {
  return fallocate(r->fd, r->flags, r->offset, r->length) == 0 ? 0 : -errno;
}

NAPI_METHOD(hs_sys_backing_fallocate_js) {
  NAPI_ARGV(5)
  int32_t fd = -1, mode = -1;
  int64_t offset = -1, length = -1;
  if (napi_get_value_int32(env, argv[0], &fd) != napi_ok || napi_get_value_int32(env, argv[1], &mode) != napi_ok ||
      napi_get_value_int64(env, argv[2], &offset) != napi_ok || napi_get_value_int64(env, argv[3], &length) != napi_ok ||
      fd < 0 || mode < 0 || offset < 0 || length <= 0) {
    calls_type_error(env, "fallocate: fd >= 0, mode >= 0, offset >= 0 and length > 0 must be numbers");
    return NULL;
  }
  calls_req_t *r = calls_new(env, argv, -1, 4, "fallocate");
  if (r == NULL) return NULL;
  r->fd = fd;
  r->flags = mode;
  r->offset = (off_t) offset;
  r->length = (off_t) length;
  return calls_queue(env, r, calls_fallocate, argv[4], "fallocate");
}

// ---- Fuse.mknod(path, mode, dev, cb) --------------------------------------------
// Node has no mknod: the daemon creates FIFOs, sockets and device nodes in the
// backing tree with this, addressing `/proc/self/fd/<dir>/<name>` (the last
// component is never followed: mknod fails with EEXIST on any existing name).

static int calls_mknod (calls_req_t *r) {
  return mknod(r->path, r->mode, r->dev) == 0 ? 0 : -errno;
}

NAPI_METHOD(hs_sys_backing_mknod_js) {
  NAPI_ARGV(4)
  uint32_t mode = 0, dev = 0;
  if (napi_get_value_uint32(env, argv[1], &mode) != napi_ok || napi_get_value_uint32(env, argv[2], &dev) != napi_ok) {
    calls_type_error(env, "mknod: mode and dev must be numbers");
    return NULL;
  }
  calls_req_t *r = calls_new(env, argv, 0, 3, "mknod");
  if (r == NULL) return NULL;
  r->mode = (mode_t) mode;
  r->dev = (dev_t) dev;
  return calls_queue(env, r, calls_mknod, argv[3], "mknod");
}

// ---- Fuse.renameat2(olddirfd, oldname, newdirfd, newname, flags, cb) -----------------
// Node has no renameat2: the daemon's RENAME_NOREPLACE (atomic: no check
// then rename that a racing create could slip between) and RENAME_EXCHANGE
// in the backing tree. Both names are single components below directory
// descriptors the daemon holds, so nothing on the way can be a symlink, and
// rename never follows its last components. A name with a '/' (or empty,
// "." or "..") is refused here too: EINVAL, nothing renamed.

static int calls_component_ok (const char *name) {
  return name[0] != 0 && strchr(name, '/') == NULL && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

static int calls_renameat2 (calls_req_t *r) {
  return renameat2(r->fd, r->path, r->fd2, r->path2, (unsigned int) r->flags) == 0 ? 0 : -errno;
}

NAPI_METHOD(hs_sys_backing_renameat2_js) {
  NAPI_ARGV(6)
  int32_t fd = -1, fd2 = -1;
  uint32_t flags = 0;
  if (napi_get_value_int32(env, argv[0], &fd) != napi_ok || napi_get_value_int32(env, argv[2], &fd2) != napi_ok ||
      napi_get_value_uint32(env, argv[4], &flags) != napi_ok || fd < 0 || fd2 < 0) {
    calls_type_error(env, "renameat2: olddirfd >= 0, newdirfd >= 0 and flags must be numbers");
    return NULL;
  }
  calls_req_t *r = calls_new(env, argv, 1, 5, "renameat2");
  if (r == NULL) return NULL;
  size_t len = 0;
  napi_valuetype t;
  if (napi_typeof(env, argv[3], &t) != napi_ok || t != napi_string || napi_get_value_string_utf8(env, argv[3], NULL, 0, &len) != napi_ok) {
    calls_free(r);
    calls_type_error(env, "renameat2: newname must be a string");
    return NULL;
  }
  if ((r->path2 = malloc(len + 1)) == NULL) {
    calls_free(r);
    napi_throw_error(env, "ENOMEM", "renameat2: out of memory");
    return NULL;
  }
  napi_get_value_string_utf8(env, argv[3], r->path2, len + 1, &len);
  if (strlen(r->path2) != len || !calls_component_ok(r->path) || !calls_component_ok(r->path2)) {
    calls_free(r);
    calls_type_error(env, "renameat2: names must be single components without NUL bytes");
    return NULL;
  }
  r->fd = fd;
  r->fd2 = fd2;
  r->flags = (int) flags;
  return calls_queue(env, r, calls_renameat2, argv[5], "renameat2");
}

// ---- Fuse.umount2(mnt, flags, cb) ------------------------------------------------
// The daemon unmounts without a child process and without a descriptor (under
// descriptor pressure `umount` could not even be spawned). Off the JS thread,
// as every call that may reach the mount: the JS thread serves its requests.

static int calls_umount2 (calls_req_t *r) {
  return umount2(r->path, r->flags) == 0 ? 0 : -errno;
}

NAPI_METHOD(hs_sys_umount2_js) {
  NAPI_ARGV(3)
  int32_t flags = 0;
  if (napi_get_value_int32(env, argv[1], &flags) != napi_ok) {
    calls_type_error(env, "umount2: flags must be a number");
    return NULL;
  }
  calls_req_t *r = calls_new(env, argv, 0, 2, "umount2");
  if (r == NULL) return NULL;
  r->flags = flags;
  return calls_queue(env, r, calls_umount2, argv[2], "umount2");
}

// ---- Fuse.nofile(soft, hard) ----------------------------------------------------
// Get and set RLIMIT_NOFILE (Node has no setrlimit); synchronous.
// nofile(soft, hard): 0 for either keeps it; returns [res, soft, hard] with
// res 0 or -errno of setrlimit, and the limits in force afterwards (Infinity
// for RLIM_INFINITY).
static napi_value calls_rlim_value (napi_env env, rlim_t v) {
  return hs_js_num(env, v == RLIM_INFINITY ? (double) INFINITY : (double) v);
}

NAPI_METHOD(hs_sys_nofile_js) {
  NAPI_ARGV(2)
  double want_soft = 0, want_hard = 0;
  if (napi_get_value_double(env, argv[0], &want_soft) != napi_ok || napi_get_value_double(env, argv[1], &want_hard) != napi_ok ||
      !(want_soft >= 0) || !(want_hard >= 0)) {
    napi_throw_type_error(env, "EINVAL", "nofile: soft and hard must be numbers >= 0");
    return NULL;
  }
  struct rlimit rl;
  int32_t res = 0;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) res = -errno;
  if (res == 0 && (want_soft > 0 || want_hard > 0)) {
    struct rlimit next = rl;
    if (want_hard > 0) next.rlim_max = (rlim_t) want_hard;
    if (want_soft > 0) next.rlim_cur = (rlim_t) want_soft;
    if (setrlimit(RLIMIT_NOFILE, &next) != 0) res = -errno;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 && res == 0) res = -errno;
  }
  napi_value out, v;
  napi_create_array_with_length(env, 3, &out);
  napi_create_int32(env, res, &v);
  napi_set_element(env, out, 0, v);
  napi_set_element(env, out, 1, calls_rlim_value(env, rl.rlim_cur));
  napi_set_element(env, out, 2, calls_rlim_value(env, rl.rlim_max));
  return out;
}

void hs_calls_export (napi_env env, napi_value exports) {
  hs_export_fn(env, exports, "hs_sys_utimensat", hs_sys_utimensat_js);
  hs_export_fn(env, exports, "hs_sys_backing_mknod", hs_sys_backing_mknod_js);
  hs_export_fn(env, exports, "hs_sys_backing_fallocate", hs_sys_backing_fallocate_js);
  hs_export_fn(env, exports, "hs_sys_backing_renameat2", hs_sys_backing_renameat2_js);
  hs_export_fn(env, exports, "hs_sys_umount2", hs_sys_umount2_js);
  hs_export_fn(env, exports, "hs_sys_nofile", hs_sys_nofile_js);
  hs_export_fn(env, exports, "hs_sys_utf8_valid_buffer", hs_sys_utf8_valid_buffer_js);
}
