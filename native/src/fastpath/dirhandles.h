#ifndef HOMESFS_DIRHANDLES_H
#define HOMESFS_DIRHANDLES_H
#include <stdint.h>
// OPENDIR and RELEASEDIR (session/ops_dirs.c): a handle counted per caller
// uid, per home and in all, as a directory handle and as an open file, EMFILE
// (ENFILE: the daemon's files) past the caps JS set. No libfuse, no Node:
// 0 and *fh, or -EMFILE/-ENFILE/-ENOMEM.
int hs_dh_take (uint32_t uid, const char *path, uint64_t *fh);
void hs_dh_give (uint64_t fh);
// JS's open files (uid 0 and prefix NULL: none of theirs) and their caps (0: none).
int hs_dh_set_files (uint32_t uid, uint32_t uid_files, const char *prefix, uint32_t home_files, uint32_t home_cap, uint64_t total, uint32_t cap_uid, uint32_t cap_all);
// Directory handles open: uid's, the home's at prefix, in all.
void hs_dh_counts (uint32_t uid, const char *prefix, uint64_t out[3]);
void hs_dh_set_caps (uint32_t per_uid, uint32_t all);
// A file the binding opens or makes on a slot JS granted, counted until JS
// counts it: a token to give back, or NULL (no room beside directory handles).
void *hs_dh_file_take (uint32_t uid, const char *path, size_t len);
void hs_dh_file_give (uint32_t uid, void *token);
void hs_dh_stats (uint64_t *open, uint64_t *refused);
#ifndef HOMESFS_NO_NAPI
#include <node_api.h>
void hs_dirhandles_export (napi_env env, napi_value exports);
#endif
#endif
