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

// A C string, or JavaScript null for NULL.
napi_value hs_js_str (napi_env env, const char *s);
napi_value hs_js_u32 (napi_env env, uint32_t v);
napi_value hs_js_num (napi_env env, double v);
napi_value hs_js_bool (napi_env env, int v);
// 'now' | 'omit' | { sec, nsec }
napi_value hs_js_time (napi_env env, const struct timespec *ts);
// A stat JavaScript answered (HOMESFS_STAT_WORDS uint32 in a typed array): 0 or -EIO.
int hs_stat_from_js (napi_env env, napi_value v, struct stat *st);
// A statvfs (11 uint32): 0 or -EIO.
int hs_statvfs_from_js (napi_env env, napi_value v, struct statvfs *sv);
// The bytes of a Buffer or typed array (NULL: not one).
const char *hs_bytes_from_js (napi_env env, napi_value v, size_t *len);
// A uint32 (a default when absent or not a number).
uint32_t hs_u32_from_js (napi_env env, const napi_value *values, size_t n, size_t i, uint32_t dflt);
#endif
