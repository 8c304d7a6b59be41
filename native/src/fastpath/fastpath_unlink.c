// UNLINK in a home JS made mutable, and the threshold above which a file is
// left to JS to free (hs_fastpath_set_free_inline_max). The removal runs with
// its home pinned and no lock held across a syscall; the inode is marked as
// being unlinked here (fp_unlinking) from before its open check to after the
// fstat that follows the unlinkat, and claimed in claims.c across the
// unlinkat and that fstat; what left the home is only ever added to its
// pending array, atomically. RENAME of a regular file within a home
// (hs_fastpath_rename, at the end) lives here too: a name it replaces goes
// through the same marks, claim and release as an unlinked one.

#include "fastpath/fastpath_internal.h"
#include "fastpath/claims.h"

uint64_t fp_uanswered = 0;   // unlink, atomic
// A regular file with more allocated bytes than this is left to JS, which
// frees it off its thread: freeing a file's extents (at the close of the
// last descriptor after the unlink) takes time in proportion to them (seconds
// for a big fragmented file), and C unlinks and closes on the session's worker
// with its home pinned, which a change of that home (on JS's thread) waits
// for. JS sets it (hs_fastpath_set_free_inline_max, from src/backing/freeing.ts,
// the one definition); until then no file with allocated blocks is unlinked here.
uint64_t fp_free_inline_max = 0; // atomic
uint64_t fp_ubig = 0;        // unlinks left to JS for their size, atomic
uint64_t fp_ufallbacks = 0;  // unlink (only counted in homes JS made mutable), atomic

// ---- inodes a native unlink is removing a name of ---------------------------------
// JS counts an inode open (hs_fastpath_inode +1, attachInode) and then reads its
// nlink: 0 means a removal took the last name first and the open answers
// ENOENT. A native unlink checks that the inode is not open and then removes
// the name. For that to hold, the unlink's check and its unlinkat must not
// straddle the count: an unlink marks the inode here before its check and
// unmarks it after the fstat that follows its unlinkat, and a count (JS's, or
// a native open's registration) waits, after it is made, until the inode is
// unmarked (fp_unlinking_wait). Either the check came after the count (it saw
// the inode open: JS unlinks), or the mark came before the count, and the
// nlink read comes after the unlinkat. The wait is on JS's thread for one
// inode's unlinkat, which never waits for JS; an inode no native unlink is
// removing costs one atomic load.

typedef struct fp_unlinking {
  struct fp_unlinking *next;
  uint64_t dev, ino;
  uint32_t n;
} fp_unlinking_t;

#define FP_UNLINKING_BUCKETS 64
static pthread_mutex_t fp_unlinking_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fp_unlinked = PTHREAD_COND_INITIALIZER;
static fp_unlinking_t *fp_unlinking[FP_UNLINKING_BUCKETS];  // under fp_unlinking_lock
static uint32_t fp_unlinking_count = 0;  // marks, written under fp_unlinking_lock, read atomically

static fp_unlinking_t ** fp_unlinking_at (uint64_t dev, uint64_t ino) {
  fp_unlinking_t **at = &fp_unlinking[fp_inode_bucket(dev, ino) % FP_UNLINKING_BUCKETS];
  while (*at != NULL && ((*at)->dev != dev || (*at)->ino != ino)) at = &(*at)->next;
  return at;
}

// 0 marked; -1 no memory (the unlink goes to JS).
static int fp_unlinking_mark (uint64_t dev, uint64_t ino) {
  int res = 0;
  pthread_mutex_lock(&fp_unlinking_lock);
  fp_unlinking_t **at = fp_unlinking_at(dev, ino);
  if (*at == NULL && (*at = calloc(1, sizeof(fp_unlinking_t))) != NULL) { (*at)->dev = dev; (*at)->ino = ino; }
  if (*at == NULL) res = -1;
  else { (*at)->n++; __atomic_add_fetch(&fp_unlinking_count, 1, __ATOMIC_SEQ_CST); }
  pthread_mutex_unlock(&fp_unlinking_lock);
  return res;
}

static void fp_unlinking_unmark (uint64_t dev, uint64_t ino) {
  pthread_mutex_lock(&fp_unlinking_lock);
  fp_unlinking_t **at = fp_unlinking_at(dev, ino);
  fp_unlinking_t *e = *at;
  if (e != NULL && --e->n == 0) {
    *at = e->next;
    free(e);
    pthread_cond_broadcast(&fp_unlinked);
  }
  __atomic_sub_fetch(&fp_unlinking_count, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&fp_unlinking_lock);
}

// After (dev, ino) was counted open, with no lock held: until no native
// unlink that may have missed the count is past its check.
void fp_unlinking_wait (uint64_t dev, uint64_t ino) {
  // The count was made under fp_lock's write lock, the mark before the unlink's
  // read lock: a mark that matters is visible here (see above).
  if (__atomic_load_n(&fp_unlinking_count, __ATOMIC_SEQ_CST) == 0) return;
  pthread_mutex_lock(&fp_unlinking_lock);
  while (*fp_unlinking_at(dev, ino) != NULL) pthread_cond_wait(&fp_unlinked, &fp_unlinking_lock);
  pthread_mutex_unlock(&fp_unlinking_lock);
}

// ---- UNLINK -------------------------------------------------------------------------------
// The copy of dir.ts's unlink and FsContext.settleRemoved for a home JS made
// mutable (its ledger built, no rescan gate closed, no tenant budget whose
// checks would need every byte at once). The home is pinned: a change of it
// (made immutable, republished, removed) returns only after this is done. The
// parent is reached by the confined walk, the node taken as an O_PATH
// descriptor, and the name removed only if the node is on the home's device,
// not a directory (EISDIR: JS) and not open in JS (that file's bytes stay until
// its last close: JS marks it; the mark above keeps an open from slipping in
// between). The name is one inode in the ledger, added to the home's pending
// pair (which the TypeScript ledger takes before it answers anything); nlink,
// read from the node after the removal, says whether it was the last name,
// whose removal adds the bytes (regular files) too.
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

// The name removed if the node (st, its O_PATH descriptor node) is not open in
// JS: 1 done, its release added to pending; 0 nothing changed. Marked (above)
// and claimed (claims.c) across the unlinkat and the fstat after it.
// A rename over it (sname not NULL: the source sname in spfd) removes the
// name the same way, by renameat2 of the source onto it. The source may be
// open: a rename moves a name, never an open file's bytes or charge, and
// JS's rename does not look (git renames its lock files at their close,
// before the daemon has carried their RELEASE out).
static int fp_unlink_node (int pfd, const char *name, int node, const struct stat *st, int64_t *pending,
                           int spfd, const char *sname) {
  uint64_t dev = (uint64_t) st->st_dev, ino = (uint64_t) st->st_ino;
  if (fp_unlinking_mark(dev, ino) != 0) return 0;
  pthread_rwlock_rdlock(&fp_lock);
  int open = fp_inode_open(dev, ino);
  pthread_rwlock_unlock(&fp_lock);
  // A name made here that JS has not counted yet is JS's to remove, as an open file is.
  if (!open) open = fp_making_queued(dev, ino);
  int done = 0;
#ifdef HOMESFS_TEST_HOOKS
  if (!open && fp_test_unlink_checked != NULL) fp_test_unlink_checked(dev, ino);
#endif
  if (!open && hs_claim_enter(dev, ino) == 0) {
    int gone = 0;
    struct stat after;
    // Busy across the removal and its release (src/fs/ledger-area.ts): a crash
    // between them leaves the home's checkpoint marked, never counting a name that went.
    __atomic_add_fetch(&pending[HOMESFS_ACCT_BUSY], 1, __ATOMIC_SEQ_CST);
    if ((sname == NULL ? unlinkat(pfd, name, 0) : renameat2(spfd, sname, pfd, name, 0)) == 0) {
      // fstat of an O_PATH descriptor does not fail; if it did, the name was the last one only if nlink said so before
      if (fstat(node, &after) != 0) { after = *st; after.st_nlink = st->st_nlink > 0 ? st->st_nlink - 1 : 0; }
      gone = after.st_nlink == 0;
      done = 1;
    }
    // Another name of the inode may go at the same time, in C or JS: of all
    // that see nlink 0, one gives the bytes back.
    int settles = hs_claim_leave(dev, ino, gone);
    if (done) {
      // Every name is an inode in the ledger (src/fs/context.ts removal): this one
      // goes whatever remains; the bytes with the last name.
      if (settles && S_ISREG(after.st_mode)) __atomic_add_fetch(&pending[HOMESFS_ACCT_RELEASED_BYTES], (int64_t) after.st_size, __ATOMIC_SEQ_CST);
      __atomic_add_fetch(&pending[HOMESFS_ACCT_RELEASED_INODES], 1, __ATOMIC_SEQ_CST);
    }
    __atomic_sub_fetch(&pending[HOMESFS_ACCT_BUSY], 1, __ATOMIC_SEQ_CST);
  }
  fp_unlinking_unmark(dev, ino);
  return done;
}

int hs_fastpath_unlink (const char *path) {
  if (!__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE)) return HOMESFS_FASTPATH_FALLBACK;
  size_t plen;
  const char *rel;
  if (fp_split_path(path, &plen, &rel) != 0) return HOMESFS_FASTPATH_FALLBACK;
  const char *last_slash = strrchr(rel, '/');
  const char *name = last_slash ? last_slash + 1 : rel;

  int done = 0;
  fp_pin_t pin;
  if (!fp_pin(path, plen, rel, &pin)) return HOMESFS_FASTPATH_FALLBACK;
  const fp_home_t *home = pin.home;
  // The pending array is the home's while the pin is held (fp_home_set_pending drains the pins before it lets one go).
  int counted = pin.pol.pending != NULL && pin.pol.pending->len >= HOMESFS_ACCT_LEN && pin.names_ok;
  if (counted) {
    int pfd = fp_open_parent(home->fd, rel, last_slash);
    if (pfd >= 0) {
      int node = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
      struct stat st;
      if (node >= 0 && fstat(node, &st) == 0 &&
          (uint64_t) st.st_dev == home->dev &&
          !S_ISDIR(st.st_mode) &&
          fp_frees_quickly(&st)) {
        done = fp_unlink_node(pfd, name, node, &st, pin.pol.pending->data, -1, NULL);
      }
      // The last close of an unlinked file frees its blocks: no lock held, only this home's pin.
      if (node >= 0) close(node);
      if (pfd != home->fd) close(pfd);
    }
  }
  fp_unpin(&pin);
  if (counted) __atomic_add_fetch(done ? &fp_uanswered : &fp_ufallbacks, 1, __ATOMIC_RELAXED);
  return done ? 0 : HOMESFS_FASTPATH_FALLBACK;
}

// ---- RMDIR ------------------------------------------------------------------------------
// The copy of dir.ts's rmdir for a home JS made mutable (fuse.nativeRmdir, set
// once at start: fp_rmdir_on): the parent reached by the confined walk, the
// node an O_PATH descriptor of a directory on the home's device, removed with
// unlinkat(AT_REMOVEDIR) under the home's busy count, and its one inode added
// to the home's pending pair (a directory holds no bytes in the ledger). Any
// failure (ENOTEMPTY, a name gone, anything the walk refuses) goes to JS,
// which repeats it and maps and logs the errno: a failed rmdir changes nothing.
//
// JS's rmdir also moves the home's directory generation (src/backing/store.ts
// dirsChanged), by which its directory cache trusts descriptors whose path
// procfs cannot read back (HOMESFS_DIRCACHE_READLINK_MAX bytes and longer,
// src/backing/dircache.ts). A directory removed here has a shorter backing
// path: no such descriptor is of it, and none of anything below it (it is
// empty: every directory that was below was removed before, by JS when deep).
uint64_t fp_rmdir_on = 0;       // atomic, set by JS at start
uint64_t fp_rdanswered = 0;     // atomic
uint64_t fp_rdfallbacks = 0;    // rmdir (only counted in homes JS made mutable), atomic

int hs_fastpath_rmdir (const char *path) {
  if (!__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE) || !__atomic_load_n(&fp_rmdir_on, __ATOMIC_RELAXED)) return HOMESFS_FASTPATH_FALLBACK;
  size_t plen;
  const char *rel;
  // the root, a tenant, a home itself: JS's (it refuses them)
  if (fp_split_path(path, &plen, &rel) != 0 || rel[0] == '\0') return HOMESFS_FASTPATH_FALLBACK;
  const char *last_slash = strrchr(rel, '/');
  const char *name = last_slash ? last_slash + 1 : rel;

  int done = 0;
  fp_pin_t pin;
  if (!fp_pin(path, plen, rel, &pin)) return HOMESFS_FASTPATH_FALLBACK;
  const fp_home_t *home = pin.home;
  int counted = pin.pol.pending != NULL && pin.pol.pending->len >= HOMESFS_ACCT_LEN && pin.names_ok;
  if (counted) {
    int pfd = fp_open_parent(home->fd, rel, last_slash);
    if (pfd >= 0) {
      int node = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
      struct stat st;
      char where[64], real[HOMESFS_DIRCACHE_READLINK_MAX];
      snprintf(where, sizeof(where), "/proc/self/fd/%d", pfd);
      ssize_t rl = readlink(where, real, sizeof(real));
      // The directory's backing path: the parent's, a slash and the name (see above).
      int shallow = rl > 0 && (size_t) rl + 1 + strlen(name) < HOMESFS_DIRCACHE_READLINK_MAX;
      // A directory made here that JS has not counted yet is JS's to remove (fp_making_queued).
      if (node >= 0 && shallow && fstat(node, &st) == 0 && (uint64_t) st.st_dev == home->dev && S_ISDIR(st.st_mode) &&
          !fp_making_queued((uint64_t) st.st_dev, (uint64_t) st.st_ino)) {
        int64_t *pending = pin.pol.pending->data;
        __atomic_add_fetch(&pending[HOMESFS_ACCT_BUSY], 1, __ATOMIC_SEQ_CST);
        if (unlinkat(pfd, name, AT_REMOVEDIR) == 0) {
          __atomic_add_fetch(&pending[HOMESFS_ACCT_RELEASED_INODES], 1, __ATOMIC_SEQ_CST);
          done = 1;
        }
        __atomic_sub_fetch(&pending[HOMESFS_ACCT_BUSY], 1, __ATOMIC_SEQ_CST);
      }
      if (node >= 0) close(node);
      if (pfd != home->fd) close(pfd);
    }
  }
  fp_unpin(&pin);
  if (counted) __atomic_add_fetch(done ? &fp_rdanswered : &fp_rdfallbacks, 1, __ATOMIC_RELAXED);
  return done ? 0 : HOMESFS_FASTPATH_FALLBACK;
}

// ---- RENAME -------------------------------------------------------------------------------
// The copy of dir.ts's rename (flags 0, or RENAME_NOREPLACE as renameFlagged)
// for the one case every rule of it is decidable from what JS published: a
// regular file to a name in the same home, that home mutable (as for an
// unlink) and opened for native renames (hs_fastpath_set_rename: binary
// content, no per-directory entry limit, the depth limit published), neither
// name reserved or too long (fp_components_ok, as for a create), the target's
// depth within the limit, and any target not open in JS (the source may be). A
// target that exists must be a regular file on the home's device that frees
// quickly (fp_frees_quickly, as an unlink), not the source's inode; it goes as
// an unlinked name does (fp_unlink_node: the same marks, claim and release).
// Without a target the rename is renameat2 with RENAME_NOREPLACE, so a name
// made meanwhile is never replaced unseen (EEXIST: JS does it all again).
// Directories, symlinks, open files, cross-home renames (JS answers EXDEV),
// the daemon's own levels and every failure go to JS with nothing changed.
uint64_t fp_rnanswered = 0;   // rename, atomic
uint64_t fp_rnfallbacks = 0;  // rename (only counted in homes JS opened for it), atomic

// Under nothing: whether rel2's components pass (the reserved names are read under the read lock).
int fp_names_ok (const char *rel, uint32_t max_name) {
  pthread_rwlock_rdlock(&fp_lock);
  int ok = fp_components_ok(rel, max_name);
  pthread_rwlock_unlock(&fp_lock);
  return ok;
}

// The rename in the pinned home: 1 done, 0 nothing changed.
static int fp_rename_in (const fp_pin_t *pin, const char *rel, const char *rel2, uint32_t flags) {
  const fp_home_t *home = pin->home;
  const char *ls = strrchr(rel, '/'), *ls2 = strrchr(rel2, '/');
  const char *name = ls ? ls + 1 : rel, *name2 = ls2 ? ls2 + 1 : rel2;
  uint32_t depth = 1;
  for (const char *c = rel2; *c; c++) if (*c == '/') depth++;
  if (pin->pol.rename_depth != 0 && depth > pin->pol.rename_depth) return 0;
  int done = 0;
  int spfd = fp_open_parent(home->fd, rel, ls);
  if (spfd < 0) return 0;
  int dpfd = fp_open_parent(home->fd, rel2, ls2);
  int snode = -1, dnode = -1;
  struct stat sst, dst;
  if (dpfd >= 0 && (snode = openat(spfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC)) >= 0 && fstat(snode, &sst) == 0 &&
      S_ISREG(sst.st_mode) && (uint64_t) sst.st_dev == home->dev) {
    dnode = openat(dpfd, name2, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (dnode < 0 && errno == ENOENT) {
      // No target: nothing leaves the ledger, and the source may be open (fp_unlink_node says why).
      if (renameat2(spfd, name, dpfd, name2, RENAME_NOREPLACE) == 0) done = 1;
    } else if (dnode >= 0 && flags == 0 && fstat(dnode, &dst) == 0 && S_ISREG(dst.st_mode) && (uint64_t) dst.st_dev == home->dev &&
               !(dst.st_ino == sst.st_ino && dst.st_dev == sst.st_dev) && fp_frees_quickly(&dst)) {
      done = fp_unlink_node(dpfd, name2, dnode, &dst, pin->pol.pending->data, spfd, name);
    }
  }
  // The last close of a replaced file frees its blocks: no lock held, only this home's pin.
  if (dnode >= 0) close(dnode);
  if (snode >= 0) close(snode);
  if (dpfd >= 0 && dpfd != home->fd) close(dpfd);
  if (spfd != home->fd) close(spfd);
  return done;
}

int hs_fastpath_rename (const char *path, const char *path2, uint32_t flags) {
  if (!__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE)) return HOMESFS_FASTPATH_FALLBACK;
  if (flags != 0 && flags != RENAME_NOREPLACE) return HOMESFS_FASTPATH_FALLBACK;
  size_t plen, plen2;
  const char *rel, *rel2;
  if (fp_split_path(path, &plen, &rel) != 0 || fp_split_path(path2, &plen2, &rel2) != 0) return HOMESFS_FASTPATH_FALLBACK;
  // Between homes: JS's (EXDEV).
  if (plen != plen2 || memcmp(path, path2, plen) != 0) return HOMESFS_FASTPATH_FALLBACK;
  fp_pin_t pin;
  if (!fp_pin(path, plen, rel, &pin)) return HOMESFS_FASTPATH_FALLBACK;
  // The pending array is the home's while the pin is held (as for an unlink).
  int counted = pin.pol.rename_on && pin.pol.pending != NULL && pin.pol.pending->len >= HOMESFS_ACCT_LEN;
  int done = 0;
  if (counted && pin.names_ok && fp_names_ok(rel2, pin.home->max_name)) done = fp_rename_in(&pin, rel, rel2, flags);
  fp_unpin(&pin);
  if (counted) __atomic_add_fetch(done ? &fp_rnanswered : &fp_rnfallbacks, 1, __ATOMIC_RELAXED);
  return done ? 0 : HOMESFS_FASTPATH_FALLBACK;
}

struct fp_rename_change { int on; uint32_t depth; };

static void fp_change_rename (fp_home_t *e, void *arg) {
  const struct fp_rename_change *c = arg;
  e->pol.rename_on = c->on ? 1 : 0;
  e->pol.rename_depth = c->depth;
}

int fp_home_set_rename (const char *prefix, size_t n, double token, int on, uint32_t depth) {
  struct fp_rename_change c = { on, depth };
  return fp_home_change(prefix, n, token, fp_change_rename, &c);
}
