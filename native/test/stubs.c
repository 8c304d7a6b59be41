// Link stubs for unit tests of files that also hold their Node (N-API, libuv)
// side: the C entry points under test use none of these, and any call aborts
// the test with the stub's name, so a test cannot pass through them.
// Declared without node_api.h on purpose: only the symbol names matter.
#include <stdio.h>
#include <stdlib.h>

#define STUB(name) \
  void name(void); \
  void name(void) { fprintf(stderr, "stub %s called in a unit test\n", #name); abort(); }

STUB(napi_call_function)
STUB(napi_call_threadsafe_function)
STUB(napi_create_arraybuffer)
STUB(napi_create_double)
STUB(napi_create_function)
STUB(napi_create_int64)
STUB(napi_create_object)
STUB(napi_create_reference)
STUB(napi_create_string_utf8)
STUB(napi_create_threadsafe_function)
STUB(napi_create_typedarray)
STUB(napi_create_uint32)
STUB(napi_get_boolean)
STUB(napi_get_cb_info)
STUB(napi_get_null)
STUB(napi_get_undefined)
STUB(napi_get_value_bigint_uint64)
STUB(napi_get_value_bool)
STUB(napi_get_value_int32)
STUB(napi_get_value_int64)
STUB(napi_get_value_uint32)
STUB(napi_set_named_property)
STUB(napi_throw_error)
STUB(napi_throw_type_error)
STUB(napi_typeof)
STUB(napi_unref_threadsafe_function)
STUB(uv_sem_destroy)
STUB(uv_sem_init)
STUB(uv_sem_post)
STUB(uv_sem_wait)
STUB(fuse_get_context)
STUB(homesfs_fastpath_wl_begin)
STUB(homesfs_fastpath_wl_end)
