// The one N-API glue of the addon (napi_args.c), for every *_napi.c file and
// export: napi-macros gives the method shape and plain arguments
// (NAPI_METHOD, NAPI_ARGV, NAPI_ARGV_INT32/UINT32/UTF8); this adds what it
// lacks: 64-bit integers, strings of any length, bytes, values back to
// JavaScript, and the export of a function under its name. Each reader
// returns 0 (or NULL) for a value of the wrong shape, with nothing thrown:
// the caller throws with its own usage. JS main thread only.
#ifndef HOMESFS_NAPI_ARGS_H
#define HOMESFS_NAPI_ARGS_H
#include <stddef.h>
#include <stdint.h>
#include <node_api.h>
#include <napi-macros.h>
#include "abi.h"

// 2^53 - 1 (abi.h): the largest integer a JavaScript number holds exactly.
#define HS_JS_MAX_SAFE ((double) HOMESFS_MAX_SAFE_INTEGER)

// A bigint, or a number that is a safe non-negative integer: 1, else 0.
int hs_arg_u64 (napi_env env, napi_value v, uint64_t *out);
// A string with no NUL inside, malloc'd (the caller frees it), *len its
// length; NULL for anything else.
char *hs_arg_string (napi_env env, napi_value v, size_t *len);
// The bytes of a Buffer or typed array ("" for an empty one), NULL for
// anything else; valid while the value is.
const char *hs_arg_bytes (napi_env env, napi_value v, size_t *len);
// values[i] as a uint32, or dflt when absent or not a number.
uint32_t hs_arg_u32_or (napi_env env, const napi_value *values, size_t n, size_t i, uint32_t dflt);

// Values for JavaScript. hs_js_str: null for NULL.
napi_value hs_js_str (napi_env env, const char *s);
napi_value hs_js_u32 (napi_env env, uint32_t v);
napi_value hs_js_num (napi_env env, double v);
napi_value hs_js_bool (napi_env env, int v);
// obj[name] = v (a number).
void hs_js_set_num (napi_env env, napi_value obj, const char *name, double v);

// exports[name] = fn.
void hs_export_fn (napi_env env, napi_value exports, const char *name, napi_callback fn);

// The handler a setter (`what`, for its errors) was given, as a thread-safe
// function that calls it through call_js and does not keep the process
// alive; *slot (atomic) holds it, set once. 1, or 0 with a JavaScript error
// thrown: EINVAL (not a function), EEXIST (*slot is set), EIO.
int hs_js_handler_tsfn (napi_env env, napi_value fn, const char *name, napi_threadsafe_function_call_js call_js, const char *what, napi_threadsafe_function *slot);
#endif
