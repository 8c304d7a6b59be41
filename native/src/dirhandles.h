#ifndef HOMESFS_DIRHANDLES_H
#define HOMESFS_DIRHANDLES_H
#include <stdint.h>
#include <fuse.h>
// OPENDIR and RELEASEDIR when JS answers neither: a handle counted per caller
// uid and in all, EMFILE past the caps JS set.
int homesfs_dir_open (const char *path, struct fuse_file_info *info);
int homesfs_dir_release (const char *path, struct fuse_file_info *info);
// The counting behind them (no libfuse, no Node): 0 or -EMFILE/-ENOMEM.
int homesfs_dh_take (uint32_t uid);
void homesfs_dh_give (uint32_t uid);
void homesfs_dh_set_caps (uint32_t per_uid, uint32_t all);
void homesfs_dh_stats (uint64_t *open, uint64_t *refused);
#ifndef HOMESFS_NO_NAPI
#include <node_api.h>
void homesfs_dirhandles_export (napi_env env, napi_value exports);
#endif
#endif
