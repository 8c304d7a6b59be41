// Descriptors of directories below homes, kept between GETATTRs: the
// attributes of "a/b/name" are one fstatat(AT_SYMLINK_NOFOLLOW) below the
// kept descriptor of "a/b" instead of the confined walk of the whole path, an
// fstat and a close. It is the binding's copy of src/backing/dircache.ts
// (DirCache) for lookups that only read attributes, and it trusts a
// descriptor as DirCache trusts its deep ones: while no directory rename or
// rmdir went through the mount since the walk that opened it began
// (fp_dir_gen). Only the mount changes a home's tree (the backing root and
// tenant directories are root-only: docs/security.md, Backing safety), and
// every RENAME and RMDIR request the session finishes, whoever carried it out
// (JavaScript or this binding), moves the generation before its answer is
// written (hs_fastpath_dirs_moved), while it still holds its path locks: a
// GETATTR whose path passes through a renamed or removed directory holds
// that directory's node locked shared, so it either ran before the change
// or reads the moved generation. A descriptor is opened by the confined walk
// (RESOLVE_BENEATH, no symlinks, no mount crossing), so it is of a directory
// inside its home on the home's device, and no request through the mount
// can move a directory out of its home (a rename across homes is EXDEV).
// Unlike DirCache, no procfs readlink checks a shallow descriptor (it would
// take back most of what the walk saved: native-notes has the figures), so
// the cache is on only where no uid but root can change the backing tree
// (fp_dc_on: allowOpenBacking off); a directory root moves there by hand is
// stat'ed where it went until the next RENAME, RMDIR or republication.
// Only GETATTR uses these: every open, create and removal walks afresh.
//
// Keyed by the home's publication token (unique for the daemon's life: a
// republished home, a renamed or deleted one, never finds its old entries,
// and a home leaving the table closes them: fp_dc_forget) and the directory's
// path below the home. Direct-mapped: a new entry replaces the slot's.
//
// Threads: session workers (fp_dc_stat), whoever retires a home or clears
// the tables (fp_dc_forget), the JS thread and session workers
// (hs_fastpath_dirs_moved). Lock: fp_dc_lock guards the slots and every
// entry's refs; no syscall runs under it (a descriptor is closed by whoever
// drops its last reference, after the lock).

#include "fastpath/fastpath_internal.h"

// Out of limits.reserveFiles (docs/configuration.md), beside JS's 1024.
#define FP_DC_SLOTS 64

typedef struct fp_dc_entry {
  double token;
  uint64_t gen;       // fp_dir_gen when the walk that opened fd began
  int fd;
  uint32_t refs;      // under fp_dc_lock: the slot's, and one per fstatat using fd
  size_t len;
  char rel[];
} fp_dc_entry_t;

static pthread_mutex_t fp_dc_lock = PTHREAD_MUTEX_INITIALIZER;
static fp_dc_entry_t *fp_dc_slots[FP_DC_SLOTS];
static uint64_t fp_dir_gen = 0;   // atomic
// Atomic, set by JS at start (hs_fastpath_set_dircache): on only while no uid
// but root can reach the backing tree (allowOpenBacking off), where the
// generation sees every change of a home's tree.
uint64_t fp_dc_on = 0;
uint64_t fp_dc_hits = 0;          // atomic
uint64_t fp_dc_walks = 0;         // atomic
uint64_t fp_dc_held = 0;          // under fp_dc_lock (read atomically): entries in slots

void hs_fastpath_dirs_moved (void) {
  __atomic_add_fetch(&fp_dir_gen, 1, __ATOMIC_SEQ_CST);
}

// Under fp_dc_lock: one reference less; the entry to free (its fd to close) once none is left.
static fp_dc_entry_t * fp_dc_drop_locked (fp_dc_entry_t *e) {
  return e != NULL && --e->refs == 0 ? e : NULL;
}

static void fp_dc_free (fp_dc_entry_t *e) {
  if (e == NULL) return;
  close(e->fd);
  free(e);
}

static uint32_t fp_dc_slot (double token, const char *rel, size_t len) {
  uint64_t t = fp_double_bits(token);
  return (fp_hash(rel, len) ^ (uint32_t) (t * 0x9E3779B97F4A7C15ull >> 32)) % FP_DC_SLOTS;
}

int fp_dc_stat (const fp_home_t *home, const char *rel, size_t dlen, struct stat *st) {
  if (!__atomic_load_n(&fp_dc_on, __ATOMIC_ACQUIRE)) return FP_DC_WALK;
  const char *name = rel + dlen + 1;
  uint32_t slot = fp_dc_slot(home->token, rel, dlen);
  uint64_t gen = __atomic_load_n(&fp_dir_gen, __ATOMIC_SEQ_CST);
  fp_dc_entry_t *e, *gone = NULL;
  pthread_mutex_lock(&fp_dc_lock);
  e = fp_dc_slots[slot];
  if (e != NULL && e->token == home->token && e->gen == gen && e->len == dlen && memcmp(e->rel, rel, dlen) == 0) {
    e->refs++;
  } else {
    e = NULL;
  }
  pthread_mutex_unlock(&fp_dc_lock);

  if (e != NULL) {
    __atomic_add_fetch(&fp_dc_hits, 1, __ATOMIC_RELAXED);
  } else {
    char *dir = strndup(rel, dlen);
    int fd = dir == NULL ? -1 : fp_openat2(home->fd, dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int err = dir == NULL ? ENOMEM : errno;
    free(dir);
    // A missing component: the whole path's walk meets it too. ENOTDIR may be
    // a symlink in the way (the walk's ELOOP, JS's), so the walk decides it.
    if (fd < 0) return err == ENOENT ? -ENOENT : FP_DC_WALK;
    __atomic_add_fetch(&fp_dc_walks, 1, __ATOMIC_RELAXED);
#ifdef HOMESFS_TEST_HOOKS
    if (fp_test_dir_walked != NULL) fp_test_dir_walked();
#endif
    e = malloc(sizeof(*e) + dlen + 1);
    if (e == NULL) {
      close(fd);
      return FP_DC_WALK;
    }
    e->token = home->token;
    e->gen = gen;
    e->fd = fd;
    e->refs = 2;
    e->len = dlen;
    memcpy(e->rel, rel, dlen);
    e->rel[dlen] = 0;
    pthread_mutex_lock(&fp_dc_lock);
    if (__atomic_load_n(&fp_dc_on, __ATOMIC_ACQUIRE)) {
      fp_dc_entry_t *old = fp_dc_slots[slot];
      fp_dc_slots[slot] = e;
      if (old == NULL) __atomic_add_fetch(&fp_dc_held, 1, __ATOMIC_RELAXED);
      gone = fp_dc_drop_locked(old);
    } else {
      e->refs = 1;  // turned off meanwhile (its forget ran before this): used once, kept by no slot
    }
    pthread_mutex_unlock(&fp_dc_lock);
    fp_dc_free(gone);
  }

  int r = fstatat(e->fd, name, st, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT);
  int err = errno;
  pthread_mutex_lock(&fp_dc_lock);
  gone = fp_dc_drop_locked(e);
  pthread_mutex_unlock(&fp_dc_lock);
  fp_dc_free(gone);
  if (r == 0) return 0;
  return err == ENOENT ? -ENOENT : FP_DC_WALK;
}

void fp_dc_forget (double token, int all) {
  fp_dc_entry_t *gone[FP_DC_SLOTS];
  size_t n = 0;
  pthread_mutex_lock(&fp_dc_lock);
  for (size_t i = 0; i < FP_DC_SLOTS; i++) {
    fp_dc_entry_t *e = fp_dc_slots[i];
    if (e == NULL || (!all && e->token != token)) continue;
    fp_dc_slots[i] = NULL;
    __atomic_sub_fetch(&fp_dc_held, 1, __ATOMIC_RELAXED);
    if ((gone[n] = fp_dc_drop_locked(e)) != NULL) n++;
  }
  pthread_mutex_unlock(&fp_dc_lock);
  for (size_t i = 0; i < n; i++) fp_dc_free(gone[i]);
}
