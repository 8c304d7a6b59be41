// The home ledgers' checkpoint area (src/fs/ledger-area.ts): one memfd the
// keeper holds beside the node table's journal, mapped shared and read and
// written by JavaScript as a BigInt64Array, whose per-home slots also hold
// each home's accounting array (abi.h ACCT_*), which the fast path adds to
// atomically. A daemon that resumes a session after a crash maps the same
// memfd and finds each home's counts as the dead daemon left them, with what
// was in flight marked (src/fs/ledger-area.ts says when a slot is exact).
//
// Runs on the JavaScript thread only (open, map); the mapping is never
// unmapped (the fast path keeps pointers into it for the process's life), so
// no lock guards anything here. The size is fixed: HOMESFS_LEDGER_AREA_BYTES.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "sys/napi_args.h"

#include "abi.h"
#include "handover/ledgers.h"

static void unmapped_never (napi_env env, void *data, void *hint) {
  (void) env; (void) data; (void) hint;
}

// -> an ArrayBuffer over fd's mapping, or NULL with *err set.
static napi_value map_area (napi_env env, int fd, int *err) {
  struct stat st;
  if (fstat(fd, &st) != 0) { *err = errno; return NULL; }
  if ((size_t) st.st_size != HOMESFS_LEDGER_AREA_BYTES) { *err = EINVAL; return NULL; }
  void *p = mmap(NULL, HOMESFS_LEDGER_AREA_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) { *err = errno; return NULL; }
  napi_value ab;
  if (napi_create_external_arraybuffer(env, p, HOMESFS_LEDGER_AREA_BYTES, unmapped_never, NULL, &ab) != napi_ok) {
    munmap(p, HOMESFS_LEDGER_AREA_BYTES);
    *err = ENOMEM;
    return NULL;
  }
  return ab;
}

static napi_value errno_value (napi_env env, int err) {
  napi_value v;
  napi_create_int32(env, -err, &v);
  return v;
}

// () -> [fd, ArrayBuffer] of a new zeroed area, or -errno.
NAPI_METHOD(hs_ledgers_open_js) {
  int fd = memfd_create("homesfs-ledgers", MFD_CLOEXEC);
  if (fd < 0) return errno_value(env, errno);
  if (ftruncate(fd, HOMESFS_LEDGER_AREA_BYTES) != 0) {
    int e = errno;
    close(fd);
    return errno_value(env, e);
  }
  int err = 0;
  napi_value ab = map_area(env, fd, &err);
  if (ab == NULL) {
    close(fd);
    return errno_value(env, err);
  }
  napi_value out, v;
  napi_create_array_with_length(env, 2, &out);
  napi_create_int32(env, fd, &v);
  napi_set_element(env, out, 0, v);
  napi_set_element(env, out, 1, ab);
  return out;
}

// (fd) -> ArrayBuffer over a kept area (the fd stays the caller's), or -errno.
NAPI_METHOD(hs_ledgers_map_js) {
  NAPI_ARGV(1)
  NAPI_ARGV_INT32(fd, 0)
  int err = 0;
  napi_value ab = map_area(env, fd, &err);
  return ab != NULL ? ab : errno_value(env, err);
}

void hs_ledgers_export (napi_env env, napi_value exports) {
  hs_export_fn(env, exports, "hs_handover_ledgers_open", hs_ledgers_open_js);
  hs_export_fn(env, exports, "hs_handover_ledgers_map", hs_ledgers_map_js);
}
