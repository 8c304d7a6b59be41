// homesfs.node: the addon's one entry point. Every export is ours: the
// session (session/), the native fast path and data plane it answers from,
// the system calls Node lacks, and the ABI the daemon checks first.
#include "sys/napi_args.h"
#include "abi.h"
#include "sys/calls.h"
#include "sys/fdwatch.h"
#include "session/channel.h"
#include "fastpath/dataplane.h"
#include "fastpath/dirhandles.h"
#include "fastpath/fastpath.h"
#include "fastpath/claims.h"
#include "handover/holder.h"
#include "handover/ledgers.h"
#include "handover/sdstore.h"
#include "session/session.h"

// ABI: { VERSION, and every constant and string of abi.h }, for the daemon to compare
// with its own copy before it trusts anything else of this addon.
static void export_abi (napi_env env, napi_value exports) {
  napi_value abi, v;
  napi_create_object(env, &abi);
  napi_create_uint32(env, HOMESFS_ABI_VERSION, &v);
  napi_set_named_property(env, abi, "VERSION", v);
  // Doubles: every value is exact in one (MAX_SAFE_INTEGER is the widest).
#define HOMESFS_ABI_SET(name, value) \
  napi_create_double(env, (double) (value), &v); \
  napi_set_named_property(env, abi, #name, v);
  HOMESFS_ABI_CONSTANTS(HOMESFS_ABI_SET)
#undef HOMESFS_ABI_SET
#define HOMESFS_ABI_SET_STRING(name, value) \
  napi_create_string_utf8(env, HOMESFS_##name, sizeof(HOMESFS_##name) - 1, &v); \
  napi_set_named_property(env, abi, #name, v);
  HOMESFS_ABI_STRINGS(HOMESFS_ABI_SET_STRING)
#undef HOMESFS_ABI_SET_STRING
  napi_set_named_property(env, exports, "ABI", abi);
}

NAPI_INIT() {
  export_abi(env, exports);
  hs_session_export(env, exports);
  hs_holder_export(env, exports);
  hs_ledgers_export(env, exports);
  hs_sdstore_export(env, exports);
  hs_calls_export(env, exports);
  hs_fdwatch_export(env, exports);
  hs_channel_export(env, exports);
  hs_dirhandles_export(env, exports);
  hs_dp_export(env, exports);
  hs_fastpath_export(env, exports);
  hs_claims_export(env, exports);
}
