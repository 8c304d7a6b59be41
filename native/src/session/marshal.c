// Values between C and JavaScript (see marshal.h).
//
// A stat crosses as HOMESFS_STAT_WORDS uint32 (src/fuse/session.ts writes
// them): 0 mode, 1 uid, 2 gid, 3-4 size, 5 dev, 6 nlink, 7-8 ino, 9 rdev,
// 10 blksize, 11-12 blocks, then atime, mtime, ctime as int64 seconds (two
// words) and nanoseconds (one word) each. 64-bit values are low word first.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <sys/types.h>
#include <string.h>

#include "abi.h"
#include "session/marshal.h"





napi_value hs_js_time (napi_env env, const struct timespec *ts) {
  napi_value out, v;
  if (ts->tv_nsec == UTIME_NOW) return hs_js_str(env, "now");
  if (ts->tv_nsec == UTIME_OMIT) return hs_js_str(env, "omit");
  napi_create_object(env, &out);
  napi_create_int64(env, (int64_t) ts->tv_sec, &v);
  napi_set_named_property(env, out, "sec", v);
  napi_create_uint32(env, (uint32_t) ts->tv_nsec, &v);
  napi_set_named_property(env, out, "nsec", v);
  return out;
}

static const uint32_t *u32s (napi_env env, napi_value v, size_t count) {
  bool is_ta = false;
  napi_typedarray_type type;
  size_t length = 0;
  void *data = NULL;
  if (v == NULL || napi_is_typedarray(env, v, &is_ta) != napi_ok || !is_ta) return NULL;
  if (napi_get_typedarray_info(env, v, &type, &length, &data, NULL, NULL) != napi_ok) return NULL;
  if (type != napi_uint32_array || length < count || data == NULL) return NULL;
  return (const uint32_t *) data;
}

static uint64_t u64 (const uint32_t *w) {
  return (uint64_t) w[0] | ((uint64_t) w[1] << 32);
}

static void ts_from (struct timespec *ts, const uint32_t *w) {
  ts->tv_sec = (time_t) (int64_t) u64(w);
  ts->tv_nsec = w[2] >= 1000000000u ? 999999999 : (long) w[2];
}

int hs_stat_from_js (napi_env env, napi_value v, struct stat *st) {
  const uint32_t *w = u32s(env, v, HOMESFS_STAT_WORDS);
  if (w == NULL) return -EIO;
  memset(st, 0, sizeof(*st));
  st->st_mode = w[0];
  st->st_uid = w[1];
  st->st_gid = w[2];
  st->st_size = (off_t) u64(w + 3);
  st->st_dev = w[5];
  st->st_nlink = w[6];
  st->st_ino = (ino_t) u64(w + 7);
  st->st_rdev = w[9];
  st->st_blksize = w[10];
  st->st_blocks = (blkcnt_t) u64(w + 11);
  ts_from(&st->st_atim, w + 13);
  ts_from(&st->st_mtim, w + 16);
  ts_from(&st->st_ctim, w + 19);
  return 0;
}

int hs_statvfs_from_js (napi_env env, napi_value v, struct statvfs *sv) {
  const uint32_t *w = u32s(env, v, 11);
  if (w == NULL) return -EIO;
  memset(sv, 0, sizeof(*sv));
  sv->f_bsize = w[0];
  sv->f_frsize = w[1];
  sv->f_blocks = w[2];
  sv->f_bfree = w[3];
  sv->f_bavail = w[4];
  sv->f_files = w[5];
  sv->f_ffree = w[6];
  sv->f_favail = w[7];
  sv->f_fsid = w[8];
  sv->f_flag = w[9];
  sv->f_namemax = w[10];
  return 0;
}


