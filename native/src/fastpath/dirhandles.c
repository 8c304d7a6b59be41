// Directory handles, counted, and counted as open files.
// An open directory holds no descriptor in the daemon and, its listing being
// streamed (fastpath_attr.c, dir.ts), at most one request's worth in libfuse. It
// counts twice:
//  - against caps of its own, per caller uid (uid 0 not) and in all
//    (Fuse.setDirHandleCaps: limits.dirHandlesPerUid, limits.dirHandles; 0:
//    no cap): what libfuse may hold for directory handles whatever files do;
//  - as one open file of its caller uid, of its home (the path's
//    /<tenant>/<key>; the root and tenant directories are in no home) and of
//    the daemon, against the open-file caps JS enforces for files
//    (limits.openFilesPerUid, the profile's maxOpenFiles, the daemon's
//    descriptors beside its reserve). JS publishes its file counts and caps
//    here on every change (hs_dh_set_files), and asks for the directory
//    counts here before it takes a slot (hs_dh_counts): OPENDIR checks
//    files + directories without a round trip to JS, and so does JS's open.
// Past any cap OPENDIR answers EMFILE (ENFILE for the daemon's files, as an
// open does). The handle's fh points at what RELEASEDIR gives back. Used when
// JS does not answer OPENDIR itself.

#define FUSE_USE_VERSION 29
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef HOMESFS_NO_NAPI
#include <node_api.h>
#include "sys/napi_args.h"
#endif
#include "fastpath/dirhandles.h"

#define DH_BUCKETS 1024
typedef struct dh_uid {
  struct dh_uid *next;
  uint32_t uid;
  uint32_t n;      // directory handles
  uint32_t files;  // open files, as JS published them
  uint32_t native; // files the binding opened or made that JS has not counted yet
} dh_uid_t;
// A home with directory handles open, or files, or an open-file cap JS published.
typedef struct dh_home {
  struct dh_home *next;
  char *prefix;
  size_t len;
  uint32_t dirs;
  uint32_t files;
  uint32_t native;
  uint32_t cap;    // maxOpenFiles, 0: none
} dh_home_t;
// What a handle gives back at RELEASEDIR.
typedef struct dh_handle {
  uint32_t uid;
  dh_home_t *home;  // alive while it counts this handle
} dh_handle_t;

static pthread_mutex_t dh_lock = PTHREAD_MUTEX_INITIALIZER;
// under dh_lock:
static dh_uid_t *dh_uids[DH_BUCKETS];
static dh_home_t *dh_homes[DH_BUCKETS];
static uint64_t dh_open = 0;
static uint64_t dh_files = 0;
static uint64_t dh_native = 0;
static dh_home_t dh_no_home;  // the token of a native file in no home (cannot be: a file is always in one)
static uint32_t dh_files_cap = 0, dh_files_cap_uid = 0;
static uint32_t dh_cap_uid = 0, dh_cap_all = 0; // atomic
static uint64_t dh_refused = 0;        // atomic

static uint32_t dh_hash (const char *s, size_t len) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t) s[i]) * 16777619u;
  return h;
}

// The home a path lies in: the length of its "/<tenant>/<key>", 0 for the root and tenant directories.
static size_t dh_home_len (const char *path) {
  if (path == NULL || path[0] != '/') return 0;
  const char *t_end = strchr(path + 1, '/');
  if (t_end == NULL || t_end[1] == 0) return 0;
  const char *k_end = strchr(t_end + 1, '/');
  return k_end == NULL ? strlen(path) : (size_t) (k_end - path);
}

// Under dh_lock.
static dh_uid_t **dh_uid_at (uint32_t uid) {
  dh_uid_t **at = &dh_uids[uid % DH_BUCKETS];
  while (*at != NULL && (*at)->uid != uid) at = &(*at)->next;
  return at;
}

static dh_home_t **dh_home_at (const char *prefix, size_t len) {
  dh_home_t **at = &dh_homes[dh_hash(prefix, len) % DH_BUCKETS];
  while (*at != NULL && ((*at)->len != len || memcmp((*at)->prefix, prefix, len) != 0)) at = &(*at)->next;
  return at;
}

static void dh_uid_tidy (dh_uid_t **at) {
  if (*at == NULL || (*at)->n > 0 || (*at)->files > 0 || (*at)->native > 0) return;
  dh_uid_t *gone = *at;
  *at = gone->next;
  free(gone);
}

static void dh_home_tidy (dh_home_t **at) {
  if (*at == NULL || (*at)->dirs > 0 || (*at)->files > 0 || (*at)->native > 0 || (*at)->cap > 0) return;
  dh_home_t *gone = *at;
  *at = gone->next;
  free(gone->prefix);
  free(gone);
}

static dh_home_t *dh_home_new (const char *prefix, size_t len) {
  dh_home_t *e = calloc(1, sizeof(*e));
  if (e == NULL) return NULL;
  e->prefix = malloc(len + 1);
  if (e->prefix == NULL) { free(e); return NULL; }
  memcpy(e->prefix, prefix, len);
  e->prefix[len] = 0;
  e->len = len;
  return e;
}

// 0 when one more open file (a directory or a file) of the uid at `at` (NULL:
// uid 0) in the home at `home` (NULL: in none) fits beside the files and
// directories counted; else -EMFILE (the uid's or the home's cap) or -ENFILE
// (the daemon's). Under dh_lock.
static int dh_full (dh_uid_t **at, dh_home_t **home) {
  if (at != NULL && *at != NULL && dh_files_cap_uid > 0 && (*at)->n + (*at)->files + (*at)->native >= dh_files_cap_uid) return -EMFILE;
  if (home != NULL && *home != NULL && (*home)->cap > 0 && (*home)->dirs + (*home)->files + (*home)->native >= (*home)->cap) return -EMFILE;
  if (dh_files_cap > 0 && dh_open + dh_files + dh_native >= dh_files_cap) return -ENFILE;
  return 0;
}

// The counting alone, apart from libfuse and Node (native/test runs it): 0
// and *fh the handle, or -EMFILE/-ENFILE past a cap (-ENOMEM), nothing counted.
int hs_dh_take (uint32_t uid, const char *path, uint64_t *fh) {
  uint32_t cap_uid = __atomic_load_n(&dh_cap_uid, __ATOMIC_RELAXED);
  uint32_t cap_all = __atomic_load_n(&dh_cap_all, __ATOMIC_RELAXED);
  size_t hlen = dh_home_len(path);
  dh_handle_t *h = malloc(sizeof(*h));
  if (h == NULL) return -ENOMEM;
  int res = 0;
  pthread_mutex_lock(&dh_lock);
  dh_uid_t **at = uid != 0 ? dh_uid_at(uid) : NULL;
  dh_home_t **home = hlen > 0 ? dh_home_at(path, hlen) : NULL;
  if (cap_all > 0 && dh_open >= cap_all) res = -EMFILE;
  else if (at != NULL && cap_uid > 0 && *at != NULL && (*at)->n >= cap_uid) res = -EMFILE;
  else if ((res = dh_full(at, home)) != 0) {}
  else if (at != NULL && *at == NULL && (*at = calloc(1, sizeof(dh_uid_t))) == NULL) res = -ENOMEM;
  else if (home != NULL && *home == NULL && (*home = dh_home_new(path, hlen)) == NULL) res = -ENOMEM;
  if (res == 0) {
    if (at != NULL) { (*at)->uid = uid; (*at)->n++; }
    if (home != NULL) (*home)->dirs++;
    dh_open++;
    h->uid = uid;
    h->home = home != NULL ? *home : NULL;
  } else if (at != NULL) {
    dh_uid_tidy(at);  // an entry just made, when the home's could not be
  }
  pthread_mutex_unlock(&dh_lock);
  if (res != 0) {
    free(h);
    __atomic_add_fetch(&dh_refused, 1, __ATOMIC_RELAXED);
    return res;
  }
  *fh = (uint64_t) (uintptr_t) h;
  return 0;
}

void hs_dh_give (uint64_t fh) {
  dh_handle_t *h = (dh_handle_t *) (uintptr_t) fh;
  if (h == NULL) return;
  pthread_mutex_lock(&dh_lock);
  if (dh_open > 0) dh_open--;
  if (h->uid != 0) {
    dh_uid_t **at = dh_uid_at(h->uid);
    if (*at != NULL && (*at)->n > 0) (*at)->n--;
    dh_uid_tidy(at);
  }
  if (h->home != NULL) {
    if (h->home->dirs > 0) h->home->dirs--;
    dh_home_tidy(dh_home_at(h->home->prefix, h->home->len));
  }
  pthread_mutex_unlock(&dh_lock);
  free(h);
}

void hs_dh_set_caps (uint32_t per_uid, uint32_t all) {
  __atomic_store_n(&dh_cap_uid, per_uid, __ATOMIC_RELAXED);
  __atomic_store_n(&dh_cap_all, all, __ATOMIC_RELAXED);
}

// JS's open files after a change: uid's (uid 0: none), the home's at prefix
// (NULL: none) with its cap, all of them, and the caps per uid and in all (0: none).
int hs_dh_set_files (uint32_t uid, uint32_t uid_files, const char *prefix, uint32_t home_files, uint32_t home_cap, uint64_t total, uint32_t cap_uid, uint32_t cap_all) {
  int res = 0;
  pthread_mutex_lock(&dh_lock);
  dh_files = total;
  dh_files_cap_uid = cap_uid;
  dh_files_cap = cap_all;
  if (uid != 0) {
    dh_uid_t **at = dh_uid_at(uid);
    if (*at == NULL && uid_files > 0) {
      if ((*at = calloc(1, sizeof(dh_uid_t))) == NULL) res = -ENOMEM;
      else (*at)->uid = uid;
    }
    if (*at != NULL) { (*at)->files = uid_files; dh_uid_tidy(at); }
  }
  if (prefix != NULL && prefix[0] != 0) {
    size_t len = strlen(prefix);
    dh_home_t **at = dh_home_at(prefix, len);
    if (*at == NULL && (home_files > 0 || home_cap > 0) && (*at = dh_home_new(prefix, len)) == NULL) res = -ENOMEM;
    if (*at != NULL) { (*at)->files = home_files; (*at)->cap = home_cap; dh_home_tidy(at); }
  }
  pthread_mutex_unlock(&dh_lock);
  return res;
}

// Directory handles open: uid's (0 for uid 0), in the home at prefix (NULL: 0), in all.
void hs_dh_counts (uint32_t uid, const char *prefix, uint64_t out[3]) {
  pthread_mutex_lock(&dh_lock);
  dh_uid_t **at = uid != 0 ? dh_uid_at(uid) : NULL;
  dh_home_t **home = prefix != NULL && prefix[0] != 0 ? dh_home_at(prefix, strlen(prefix)) : NULL;
  out[0] = at != NULL && *at != NULL ? (*at)->n : 0;
  out[1] = home != NULL && *home != NULL ? (*home)->dirs : 0;
  out[2] = dh_open;
  pthread_mutex_unlock(&dh_lock);
}

// A file of uid's the binding is about to open or make in the home whose
// prefix is path's first len bytes, on a slot JS granted ahead: JS does not
// count it as open (an unused slot is no file) until it takes the binding's
// record in, so it is counted here meanwhile, if it fits beside the files and
// directory handles counted. Returns the token to give it back with
// (hs_dh_file_give, once JS counts it or it is gone), or NULL: no room
// (directory handles took it since the slot was granted) or no memory.
void *hs_dh_file_take (uint32_t uid, const char *path, size_t len) {
  void *token = NULL;
  pthread_mutex_lock(&dh_lock);
  dh_uid_t **at = uid != 0 ? dh_uid_at(uid) : NULL;
  dh_home_t **home = len > 0 ? dh_home_at(path, len) : NULL;
  if (dh_full(at, home) == 0 &&
      !(at != NULL && *at == NULL && (*at = calloc(1, sizeof(dh_uid_t))) == NULL) &&
      !(home != NULL && *home == NULL && (*home = dh_home_new(path, len)) == NULL)) {
    if (at != NULL) { (*at)->uid = uid; (*at)->native++; }
    if (home != NULL) (*home)->native++;
    dh_native++;
    token = home != NULL ? (void *) *home : (void *) &dh_no_home;
  } else if (at != NULL) {
    dh_uid_tidy(at);
  }
  pthread_mutex_unlock(&dh_lock);
  return token;
}

void hs_dh_file_give (uint32_t uid, void *token) {
  if (token == NULL) return;
  pthread_mutex_lock(&dh_lock);
  if (dh_native > 0) dh_native--;
  if (uid != 0) {
    dh_uid_t **at = dh_uid_at(uid);
    if (*at != NULL && (*at)->native > 0) (*at)->native--;
    dh_uid_tidy(at);
  }
  if (token != (void *) &dh_no_home) {
    dh_home_t *home = token;
    if (home->native > 0) home->native--;
    dh_home_tidy(dh_home_at(home->prefix, home->len));
  }
  pthread_mutex_unlock(&dh_lock);
}

void hs_dh_stats (uint64_t *open, uint64_t *refused) {
  pthread_mutex_lock(&dh_lock);
  *open = dh_open;
  pthread_mutex_unlock(&dh_lock);
  *refused = __atomic_load_n(&dh_refused, __ATOMIC_RELAXED);
}
