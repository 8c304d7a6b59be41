// scandir.node, the start-up scan's directory lister.
//
// A separate, minimal addon (its own target in binding.gyp), not part of
// homesfs.node: the scan runs on worker threads, and loading homesfs.node there
// would run its module init again in the same process, next to the static
// tables of the session, the fast path and the data plane. This file has no
// static state at all, so each worker may load it.
//
// hs_sys_scandir(dirFd) lists one directory and lstat's each entry, relative to the
// directory only (never a path, never a symlink followed), and hands back raw
// facts in a few typed arrays. It decides nothing: which entries count, hard
// links, exclusions, what to descend into, vanished entries: all of that stays
// in the TypeScript walker (src/fs/scan-native.ts), which the JS walk
// (walkTree) specifies.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sys/napi_args.h"

#define SCANDIR_VERSION 1

static napi_value throw_errno(napi_env env, int err, const char *what) {
  const char *code = strerrorname_np(err);
  char msg[128];
  snprintf(msg, sizeof msg, "%s: %s", what, strerror(err));
  // err.code lets the walker tell "gone" (ENOENT, ENOTDIR, ELOOP) from a real failure
  napi_throw_error(env, code ? code : "EIO", msg);
  return NULL;
}

// Names, each NUL-terminated, back to back: what fstatat needs, and what JS
// gets (it slices them with nameEnd, so the NULs cost one byte a name and no copy).
typedef struct {
  char *buf;
  size_t len, cap;
  uint32_t count;
} names_t;

static int names_push(names_t *n, const char *name, size_t len) {
  if (n->len + len + 1 > n->cap) {
    size_t cap = n->cap ? n->cap * 2 : 16384;
    while (cap < n->len + len + 1) cap *= 2;
    char *b = realloc(n->buf, cap);
    if (!b) return ENOMEM;
    n->buf = b;
    n->cap = cap;
  }
  memcpy(n->buf + n->len, name, len + 1);
  n->len += len + 1;
  n->count++;
  return 0;
}

// All entries but "." and "..", in getdents order.
static int read_names(int fd, names_t *out) {
  size_t bufsize = 32768;
  char *buf = malloc(bufsize);
  if (!buf) return ENOMEM;
  int err = 0;
  for (;;) {
    ssize_t got = getdents64(fd, buf, bufsize);
    if (got < 0) {
      err = errno;
      break;
    }
    if (got == 0) break;
    for (ssize_t off = 0; off < got;) {
      struct dirent64 *d = (struct dirent64 *) (buf + off);
      off += d->d_reclen;
      const char *nm = d->d_name;
      if (nm[0] == '.' && (nm[1] == 0 || (nm[1] == '.' && nm[2] == 0))) continue;
      if ((err = names_push(out, nm, strlen(nm)))) goto done;
    }
  }
done:
  free(buf);
  return err;
}

static napi_value view(napi_env env, napi_typedarray_type t, size_t n, napi_value ab, size_t off) {
  napi_value v;
  napi_create_typedarray(env, t, n, ab, off, &v);
  return v;
}

// hs_sys_scandir(dirFd) -> { count, type, nlink, size, dev, ino, names, nameEnd }
//   type[i]   (st_mode >> 12) & 15: 4 dir, 8 file, 10 symlink, 1 FIFO, 12 socket...;
//             0 when the lstat failed (the entry vanished between getdents and fstatat)
//   nlink, size: Float64Array; dev, ino: BigUint64Array (keys must be exact)
//   names: Buffer of the raw names, each followed by a NUL; name i is
//          names[(i ? nameEnd[i-1] + 1 : 0) .. nameEnd[i])
static napi_value list(napi_env env, napi_callback_info info) {
  NAPI_ARGV(1)
  int32_t dirfd;
  if (argc < 1 ||
      napi_get_value_int32(env, argv[0], &dirfd) != napi_ok) {
    napi_throw_type_error(env, NULL, "hs_sys_scandir(dirFd): dirFd must be a number");
    return NULL;
  }
  // The walker's descriptors are O_PATH, which getdents refuses: a fresh
  // descriptor of the same directory ("." resolves to it, no name involved).
  int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return throw_errno(env, errno, "openat(dirFd, \".\")");
  names_t nm = {0};
  int err = read_names(fd, &nm);
  if (err) {
    close(fd);
    free(nm.buf);
    return throw_errno(env, err, "getdents64");
  }
  size_t n = nm.count;
  // one ArrayBuffer for all the numbers: 8-byte fields first, then 4, then 1
  size_t o_dev = 0, o_ino = 8 * n, o_size = 16 * n, o_nlink = 24 * n, o_end = 32 * n, o_type = 36 * n;
  void *data;
  napi_value ab;
  if (napi_create_arraybuffer(env, 37 * n, &data, &ab) != napi_ok) {
    close(fd);
    free(nm.buf);
    return NULL;
  }
  uint64_t *dev = (uint64_t *) ((char *) data + o_dev), *ino = (uint64_t *) ((char *) data + o_ino);
  double *size = (double *) ((char *) data + o_size), *nlink = (double *) ((char *) data + o_nlink);
  uint32_t *end = (uint32_t *) ((char *) data + o_end);
  uint8_t *type = (uint8_t *) data + o_type;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    const char *name = nm.buf + at;
    size_t len = strlen(name);
    end[i] = (uint32_t) (at + len);
    at += len + 1;
    struct stat st;
    if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      type[i] = 0;
      dev[i] = ino[i] = 0;
      size[i] = nlink[i] = 0;
      continue;
    }
    type[i] = (uint8_t) ((st.st_mode >> 12) & 15);
    dev[i] = (uint64_t) st.st_dev;
    ino[i] = (uint64_t) st.st_ino;
    size[i] = (double) st.st_size;
    nlink[i] = (double) st.st_nlink;
  }
  close(fd);
  napi_value names, result, count;
  napi_status s = napi_create_buffer_copy(env, nm.len, nm.len ? nm.buf : "", NULL, &names);
  free(nm.buf);
  if (s != napi_ok) return NULL;
  napi_create_object(env, &result);
  napi_create_uint32(env, (uint32_t) n, &count);
  napi_set_named_property(env, result, "count", count);
  napi_set_named_property(env, result, "type", view(env, napi_uint8_array, n, ab, o_type));
  napi_set_named_property(env, result, "nlink", view(env, napi_float64_array, n, ab, o_nlink));
  napi_set_named_property(env, result, "size", view(env, napi_float64_array, n, ab, o_size));
  napi_set_named_property(env, result, "dev", view(env, napi_biguint64_array, n, ab, o_dev));
  napi_set_named_property(env, result, "ino", view(env, napi_biguint64_array, n, ab, o_ino));
  napi_set_named_property(env, result, "nameEnd", view(env, napi_uint32_array, n, ab, o_end));
  napi_set_named_property(env, result, "names", names);
  return result;
}

NAPI_MODULE_INIT() {
  napi_value version;
  hs_export_fn(env, exports, "hs_sys_scandir", list);
  napi_create_uint32(env, SCANDIR_VERSION, &version);
  napi_set_named_property(env, exports, "SCANDIR_VERSION", version);
  return exports;
}
