// See napi_args.h.
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sys/napi_args.h"

int hs_arg_u64 (napi_env env, napi_value v, uint64_t *out) {
  napi_valuetype t;
  if (napi_typeof(env, v, &t) != napi_ok) return 0;
  if (t == napi_bigint) {
    bool lossless = false;
    if (napi_get_value_bigint_uint64(env, v, out, &lossless) != napi_ok) return 0;
    return lossless;
  }
  if (t == napi_number) {
    double d;
    napi_get_value_double(env, v, &d);
    if (!(d >= 0) || d > HS_JS_MAX_SAFE || (double) (uint64_t) d != d) return 0;
    *out = (uint64_t) d;
    return 1;
  }
  return 0;
}

char *hs_arg_string (napi_env env, napi_value v, size_t *len) {
  size_t n = 0;
  if (napi_get_value_string_utf8(env, v, NULL, 0, &n) != napi_ok) return NULL;
  char *s = malloc(n + 1);
  if (s == NULL) return NULL;
  napi_get_value_string_utf8(env, v, s, n + 1, &n);
  if (strlen(s) != n) {
    free(s);
    return NULL;
  }
  *len = n;
  return s;
}

// An empty buffer may have no data pointer: it reads as "", so NULL only
// ever means "not bytes".
const char *hs_arg_bytes (napi_env env, napi_value v, size_t *len) {
  bool is_ta = false;
  void *data = NULL;
  *len = 0;
  if (v == NULL || napi_is_typedarray(env, v, &is_ta) != napi_ok || !is_ta) return NULL;
  if (napi_get_buffer_info(env, v, &data, len) != napi_ok) return NULL;
  return data != NULL ? (const char *) data : "";
}

uint32_t hs_arg_u32_or (napi_env env, const napi_value *values, size_t n, size_t i, uint32_t dflt) {
  uint32_t u = dflt;
  if (i < n && napi_get_value_uint32(env, values[i], &u) != napi_ok) u = dflt;
  return u;
}

napi_value hs_js_str (napi_env env, const char *s) {
  napi_value v;
  if (s == NULL) napi_get_null(env, &v);
  else napi_create_string_utf8(env, s, NAPI_AUTO_LENGTH, &v);
  return v;
}

napi_value hs_js_u32 (napi_env env, uint32_t u) {
  napi_value v;
  napi_create_uint32(env, u, &v);
  return v;
}

napi_value hs_js_num (napi_env env, double d) {
  napi_value v;
  napi_create_double(env, d, &v);
  return v;
}

napi_value hs_js_bool (napi_env env, int b) {
  napi_value v;
  napi_get_boolean(env, b != 0, &v);
  return v;
}

void hs_js_set_num (napi_env env, napi_value obj, const char *name, double v) {
  napi_set_named_property(env, obj, name, hs_js_num(env, v));
}

void hs_export_fn (napi_env env, napi_value exports, const char *name, napi_callback fn) {
  napi_value f;
  napi_create_function(env, name, NAPI_AUTO_LENGTH, fn, NULL, &f);
  napi_set_named_property(env, exports, name, f);
}

int hs_js_handler_tsfn (napi_env env, napi_value fn, const char *name, napi_threadsafe_function_call_js call_js, const char *what, napi_threadsafe_function *slot) {
  char msg[160];
  napi_valuetype t;
  if (napi_typeof(env, fn, &t) != napi_ok || t != napi_function) {
    snprintf(msg, sizeof(msg), "%s(fn): fn is a function", what);
    napi_throw_type_error(env, "EINVAL", msg);
    return 0;
  }
  if (__atomic_load_n(slot, __ATOMIC_ACQUIRE) != NULL) {
    snprintf(msg, sizeof(msg), "%s: a handler is already set", what);
    napi_throw_error(env, "EEXIST", msg);
    return 0;
  }
  napi_value n;
  napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &n);
  napi_threadsafe_function tsfn;
  if (napi_create_threadsafe_function(env, fn, NULL, n, 0, 1, NULL, NULL, NULL, call_js, &tsfn) != napi_ok) {
    snprintf(msg, sizeof(msg), "%s: cannot create the thread-safe function", what);
    napi_throw_error(env, "EIO", msg);
    return 0;
  }
  // The session keeps the process alive, never a handler on its own.
  napi_unref_threadsafe_function(env, tsfn);
  __atomic_store_n(slot, tsfn, __ATOMIC_RELEASE);
  return 1;
}
