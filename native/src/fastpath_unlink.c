// UNLINK in a home JS made mutable, and the threshold above which a file is
// left to JS to free (fastpath_set_free_inline_max). The whole removal runs
// under fp_lock's read lock, with the inode claimed in removals.c across the
// unlinkat and the fstat after it; what left the home is only ever added to
// its pending array, atomically.

#include "fastpath_internal.h"
#include "removals.h"

uint64_t fp_uanswered = 0;   // unlink, atomic
// A regular file with more allocated bytes than this is left to JS, which
// frees it off its thread: freeing a file's extents (at the close of the
// last descriptor after the unlink) takes time in proportion to them (seconds
// for a big fragmented file), and C unlinks and closes under fp_lock, which
// every home's native answers wait behind. JS sets it
// (fastpath_set_free_inline_max, from src/backing/freeing.ts, the one
// definition); until then no file with allocated blocks is unlinked here.
static uint64_t fp_free_inline_max = 0; // atomic
uint64_t fp_ubig = 0;        // unlinks left to JS for their size, atomic
uint64_t fp_ufallbacks = 0;  // unlink (only counted in homes JS made mutable), atomic

// UNLINK, the copy of dir.ts's unlink and FsContext.settleRemoved for a home
// JS made mutable (its ledger built, no rescan gate closed, no tenant budget
// whose checks would need every byte at once). Under the read lock, so that
// JS's write-locked changes (an inode opened, the home made immutable, moved
// or removed) come entirely before or after: the parent is reached by the
// confined walk, the node taken as an O_PATH descriptor, and the name removed
// only if the node is on the home's device, not a directory (EISDIR: JS) and
// not open in JS (that file's bytes stay until its last close: JS marks it).
// The name is one inode in the ledger, added to the home's pending pair (which
// the TypeScript ledger takes before it answers anything); nlink, read from
// the node after the removal, says whether it was the last name, whose
// removal adds the bytes (regular files) too.
// Any failure before the removal goes to JS, which repeats it and maps and
// logs the errno (nothing has changed); after it, nothing can fail.

// Whether removing this name frees few blocks, if any: the rule of
// src/backing/freeing.ts slowToFree, with its threshold (fp_free_inline_max).
static int fp_frees_quickly (const struct stat *st) {
  if (!S_ISREG(st->st_mode)) return 1;
  if ((uint64_t) st->st_blocks * 512u <= __atomic_load_n(&fp_free_inline_max, __ATOMIC_RELAXED)) return 1;
  __atomic_add_fetch(&fp_ubig, 1, __ATOMIC_RELAXED);
  return 0;
}

int homesfs_fastpath_unlink (const char *path) {
  if (!__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE)) return HOMESFS_FASTPATH_FALLBACK;
  size_t plen;
  const char *rel;
  if (fp_split_path(path, &plen, &rel) != 0) return HOMESFS_FASTPATH_FALLBACK;
  const char *last_slash = strrchr(rel, '/');
  const char *name = last_slash ? last_slash + 1 : rel;
  uint32_t h = fp_hash(path, plen);

  int done = 0;
  int counted = 0;
  pthread_rwlock_rdlock(&fp_lock);
  fp_home_t *home = fp_find_home(path, plen, h);
  if (home != NULL && home->pending != NULL && fp_components_ok(rel, home->max_name)) {
    counted = 1;
    int pfd = fp_open_parent(home->fd, rel, last_slash);
    if (pfd >= 0) {
      int node = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
      struct stat st;
      if (node >= 0 && fstat(node, &st) == 0 &&
          (uint64_t) st.st_dev == home->dev &&
          !S_ISDIR(st.st_mode) &&
          !fp_inode_open((uint64_t) st.st_dev, (uint64_t) st.st_ino) &&
          fp_frees_quickly(&st) &&
          homesfs_removal_enter((uint64_t) st.st_dev, (uint64_t) st.st_ino) == 0) {
        // Entered (removals.c) before the unlinkat, left after the fstat, node held across both.
        int gone = 0;
        struct stat after;
        if (unlinkat(pfd, name, 0) == 0) {
          // fstat of an O_PATH descriptor does not fail; if it did, the name was the last one only if nlink said so before
          if (fstat(node, &after) != 0) { after = st; after.st_nlink = st.st_nlink > 0 ? st.st_nlink - 1 : 0; }
          gone = after.st_nlink == 0;
          done = 1;
        }
        // Another name of the inode may go at the same time, in C or JS: of all
        // that see nlink 0, one gives the bytes back.
        int settles = homesfs_removal_leave((uint64_t) st.st_dev, (uint64_t) st.st_ino, gone);
        if (done) {
          // Every name is an inode in the ledger (src/fs/context.ts removal): this one
          // goes whatever remains; the bytes with the last name.
          if (settles && S_ISREG(after.st_mode)) __atomic_add_fetch(&home->pending[HOMESFS_ACCT_RELEASED_BYTES], (int64_t) after.st_size, __ATOMIC_SEQ_CST);
          __atomic_add_fetch(&home->pending[HOMESFS_ACCT_RELEASED_INODES], 1, __ATOMIC_SEQ_CST);
        }
      }
      if (node >= 0) close(node);
      if (pfd != home->fd) close(pfd);
    }
  }
  pthread_rwlock_unlock(&fp_lock);
  if (counted) __atomic_add_fetch(done ? &fp_uanswered : &fp_ufallbacks, 1, __ATOMIC_RELAXED);
  return done ? 0 : HOMESFS_FASTPATH_FALLBACK;
}

// fastpath_set_free_inline_max(bytes): see fp_free_inline_max.
napi_value fp_set_free_inline_max (napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  double v = -1;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 || napi_get_value_double(env, argv[0], &v) != napi_ok || !(v >= 0)) {
    FP_THROW("fastpath_set_free_inline_max: a byte count >= 0");
  }
  __atomic_store_n(&fp_free_inline_max, (uint64_t) v, __ATOMIC_RELAXED);
  return NULL;
}
