// Directory handles, counted.
// An open directory holds no descriptor in the daemon and, its listing being
// streamed (fastpath.c, dir.ts), at most one request's worth in libfuse: no
// open-file cap sees it, yet each costs memory. So OPENDIR counts it per
// caller uid (uid 0 not) and in all, against caps JS sets
// (Fuse.setDirHandleCaps: limits.dirHandlesPerUid, limits.dirHandles; 0: no
// cap); past either it answers EMFILE. The handle's fh is its uid + 1, for
// RELEASEDIR to give it back. Used when JS does not answer OPENDIR itself.

#define FUSE_USE_VERSION 29
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <fuse.h>
#ifndef HOMESFS_NO_NAPI
#include <node_api.h>
#include <napi-macros.h>
#endif
#include "dirhandles.h"

#define DH_BUCKETS 1024
typedef struct dh_uid {
  struct dh_uid *next;
  uint32_t uid;
  uint32_t n;
} dh_uid_t;
static pthread_mutex_t dh_lock = PTHREAD_MUTEX_INITIALIZER;
static dh_uid_t *dh_uids[DH_BUCKETS];  // under dh_lock
static uint64_t dh_open = 0;           // under dh_lock
static uint32_t dh_cap_uid = 0, dh_cap_all = 0; // atomic
static uint64_t dh_refused = 0;        // atomic

// The counting alone, apart from libfuse and Node (native/test runs it):
// 0 and the handle counted, or -EMFILE past a cap (-ENOMEM), nothing counted.
int homesfs_dh_take (uint32_t uid) {
  uint32_t cap_uid = __atomic_load_n(&dh_cap_uid, __ATOMIC_RELAXED);
  uint32_t cap_all = __atomic_load_n(&dh_cap_all, __ATOMIC_RELAXED);
  int res = 0;
  pthread_mutex_lock(&dh_lock);
  dh_uid_t **at = &dh_uids[uid % DH_BUCKETS];
  while (*at != NULL && (*at)->uid != uid) at = &(*at)->next;
  if (cap_all > 0 && dh_open >= cap_all) res = -EMFILE;
  else if (uid != 0 && cap_uid > 0 && *at != NULL && (*at)->n >= cap_uid) res = -EMFILE;
  else if (uid != 0 && *at == NULL && (*at = calloc(1, sizeof(dh_uid_t))) == NULL) res = -ENOMEM;
  if (res == 0) {
    if (uid != 0) { (*at)->uid = uid; (*at)->n++; }
    dh_open++;
  }
  pthread_mutex_unlock(&dh_lock);
  if (res != 0) __atomic_add_fetch(&dh_refused, 1, __ATOMIC_RELAXED);
  return res;
}

void homesfs_dh_give (uint32_t uid) {
  pthread_mutex_lock(&dh_lock);
  if (dh_open > 0) dh_open--;
  if (uid != 0) {
    dh_uid_t **at = &dh_uids[uid % DH_BUCKETS];
    while (*at != NULL && (*at)->uid != uid) at = &(*at)->next;
    if (*at != NULL && --(*at)->n == 0) {
      dh_uid_t *gone = *at;
      *at = gone->next;
      free(gone);
    }
  }
  pthread_mutex_unlock(&dh_lock);
}

void homesfs_dh_set_caps (uint32_t per_uid, uint32_t all) {
  __atomic_store_n(&dh_cap_uid, per_uid, __ATOMIC_RELAXED);
  __atomic_store_n(&dh_cap_all, all, __ATOMIC_RELAXED);
}

void homesfs_dh_stats (uint64_t *open, uint64_t *refused) {
  pthread_mutex_lock(&dh_lock);
  *open = dh_open;
  pthread_mutex_unlock(&dh_lock);
  *refused = __atomic_load_n(&dh_refused, __ATOMIC_RELAXED);
}

int homesfs_dir_open (const char *path, struct fuse_file_info *info) {
  uint32_t uid = (uint32_t) fuse_get_context()->uid;
  int res = homesfs_dh_take(uid);
  if (res != 0) return res;
  info->fh = (uint64_t) uid + 1;
  return 0;
}

int homesfs_dir_release (const char *path, struct fuse_file_info *info) {
  if (info->fh == 0) return 0;
  homesfs_dh_give((uint32_t) (info->fh - 1));
  return 0;
}

#ifndef HOMESFS_NO_NAPI
// Fuse.setDirHandleCaps(perUid, all)
NAPI_METHOD(fuse_native_set_dir_caps) {
  NAPI_ARGV(2)
  uint32_t per_uid = 0, all = 0;
  if (napi_get_value_uint32(env, argv[0], &per_uid) != napi_ok || napi_get_value_uint32(env, argv[1], &all) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "setDirHandleCaps: two counts");
    return NULL;
  }
  homesfs_dh_set_caps(per_uid, all);
  return NULL;
}

// Fuse.dirHandleStats() -> { open, refused }
NAPI_METHOD(fuse_native_dir_stats) {
  uint64_t open = 0, refused = 0;
  homesfs_dh_stats(&open, &refused);
  napi_value out, v;
  napi_create_object(env, &out);
  napi_create_double(env, (double) open, &v);
  napi_set_named_property(env, out, "open", v);
  napi_create_double(env, (double) refused, &v);
  napi_set_named_property(env, out, "refused", v);
  return out;
}

void homesfs_dirhandles_export (napi_env env, napi_value exports) {
  NAPI_EXPORT_FUNCTION(fuse_native_set_dir_caps)
  NAPI_EXPORT_FUNCTION(fuse_native_dir_stats)
}
#endif
