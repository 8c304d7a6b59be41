// The addon's exports that are ours, in one place (called from the binding's
// NAPI_INIT through seam.h).
#include "seam.h"

void homesfs_export (napi_env env, napi_value exports) {
  homesfs_calls_export(env, exports);
  homesfs_channel_export(env, exports);
  homesfs_dirhandles_export(env, exports);
  homesfs_dp_export(env, exports);
  homesfs_fastpath_export(env, exports);
  homesfs_removals_export(env, exports);
}
