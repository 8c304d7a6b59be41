#ifndef HOMESFS_DIRHANDLES_H
#define HOMESFS_DIRHANDLES_H
#include <fuse.h>
#include <node_api.h>
// OPENDIR and RELEASEDIR when JS answers neither: a handle counted per caller
// uid and in all, EMFILE past the caps JS set.
int homesfs_dir_open (const char *path, struct fuse_file_info *info);
int homesfs_dir_release (const char *path, struct fuse_file_info *info);
void homesfs_dirhandles_export (napi_env env, napi_value exports);
#endif
