// Values between C and JavaScript for the session's requests (marshal.c):
// JavaScript never sees FUSE memory, and nothing it hands back is trusted
// before its shape is checked.
#ifndef HOMESFS_MARSHAL_H
#define HOMESFS_MARSHAL_H
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <node_api.h>

#include "sys/napi_args.h"

// 'now' | 'omit' | { sec, nsec }
napi_value hs_js_time (napi_env env, const struct timespec *ts);
// A stat JavaScript answered (HOMESFS_STAT_WORDS uint32 in a typed array): 0 or -EIO.
int hs_stat_from_js (napi_env env, napi_value v, struct stat *st);
// A statvfs (11 uint32): 0 or -EIO.
int hs_statvfs_from_js (napi_env env, napi_value v, struct statvfs *sv);
#endif
