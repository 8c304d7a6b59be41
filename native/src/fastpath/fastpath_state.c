// The fast path's tables and their lock (fastpath_internal.h has the lock
// map): the homes, the inodes open in JS, the handles JS published for
// fgetattr; their lookups, the policy generation, and JS's publication into
// them (hs_fastpath_set_home, _remove_home, _set_mutable, _inode, _inode_size,
// _set_handle, _remove_handle, _enable, _clear). The reserved names and the
// confined walk every op shares are fastpath_walk.c.
// Invariants: a table changes only under the write lock, never held across a
// syscall; an entry out of its table is freed by its last reference
// (fastpath_refs.c); a home's descriptor is C's own dup, closed with it; a
// home's replacement or removal moves the policy generation and gives its
// slots back to JS at once, and returns once no native op of it is past its
// checks (fp_drain); a change in place returns once no op that pinned it
// before is (fp_home_change).

#include "fastpath/fastpath_internal.h"

pthread_rwlock_t fp_lock;
pthread_once_t fp_once = PTHREAD_ONCE_INIT;
fp_home_t *fp_homes[FP_HOME_BUCKETS];
fp_inode_t *fp_inodes[FP_INODE_BUCKETS];

fp_handle_t *fp_handles[FP_HANDLE_BUCKETS];
uint32_t fp_handle_count = 0;
uint32_t fp_home_count = 0;
uint32_t fp_inode_count = 0;
int fp_enabled = 0;          // atomic

// The policy generation (fastpath.h): starts at 1 (0 means "JavaScript's" in
// dataplane.c), written under the write lock, read atomically.
uint64_t fp_policy_gen = 1;

uint64_t hs_fastpath_policy_gen (void) {
  return __atomic_load_n(&fp_policy_gen, __ATOMIC_ACQUIRE);
}

// Under the write lock: no native open is between reading its home's flags and reading this.
void fp_policy_moved_locked (void) {
  __atomic_add_fetch(&fp_policy_gen, 1, __ATOMIC_ACQ_REL);
}

void fp_init_lock (void) {
  pthread_rwlockattr_t attr;
  pthread_rwlockattr_init(&attr);
  // JS publishes rarely and must not wait behind a stream of lookups.
  pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init(&fp_lock, &attr);
  pthread_rwlockattr_destroy(&attr);
}

uint32_t fp_hash (const char *s, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) { h ^= (unsigned char) s[i]; h *= 16777619u; }
  return h;
}

uint32_t fp_inode_bucket (uint64_t dev, uint64_t ino) {
  uint64_t x = ino * 0x9E3779B97F4A7C15ull ^ dev;
  return (uint32_t) (x >> 40) % FP_INODE_BUCKETS;
}

// Under (at least) the read lock.
fp_home_t * fp_find_home (const char *prefix, size_t n, uint32_t h) {
  for (fp_home_t *e = fp_homes[h % FP_HOME_BUCKETS]; e != NULL; e = e->next) {
    if (e->hash == h && e->prefix_len == n && memcmp(e->prefix, prefix, n) == 0) return e;
  }
  return NULL;
}

fp_inode_t * fp_find_inode (uint64_t dev, uint64_t ino) {
  for (fp_inode_t *e = fp_inodes[fp_inode_bucket(dev, ino)]; e != NULL; e = e->next) {
    if (e->dev == dev && e->ino == ino) return e;
  }
  return NULL;
}

int fp_inode_open (uint64_t dev, uint64_t ino) {
  return fp_find_inode(dev, ino) != NULL;
}

// ---- homes ------------------------------------------------------------------------

// A home for prefix[0..plen) with its own dup of fd and one reference (the
// table's, once published); the caller fills in the rest. NULL with errno.
fp_home_t * fp_home_new (const char *prefix, size_t plen, int fd) {
  fp_home_t *e = calloc(1, sizeof(*e));
  char *p = malloc(plen + 1);
  if (e == NULL || p == NULL) { free(e); free(p); errno = ENOMEM; return NULL; }
  e->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (e->fd < 0) { int err = errno; free(e); free(p); errno = err; return NULL; }
  memcpy(p, prefix, plen);
  p[plen] = 0;
  e->prefix = p;
  e->prefix_len = plen;
  e->hash = fp_hash(p, plen);
  e->refs = 1;
  __atomic_add_fetch(&fp_homes_alive, 1, __ATOMIC_RELAXED);
  return e;
}

// Under the write lock: the entry for prefix taken out of the table (if token
// matches, or any with token < 0), its slots back to JS. NULL: none.
static fp_home_t * fp_home_take_locked (const char *prefix, size_t n, double token) {
  uint32_t h = fp_hash(prefix, n);
  fp_home_t **pp = &fp_homes[h % FP_HOME_BUCKETS];
  for (fp_home_t *e = *pp; e != NULL; pp = &e->next, e = e->next) {
    if (e->hash == h && e->prefix_len == n && memcmp(e->prefix, prefix, n) == 0) {
      if (token >= 0 && e->token != token) return NULL;
      *pp = e->next;
      fp_home_count--;
      fp_policy_moved_locked();
      fp_return_slots(e);
      return e;
    }
  }
  return NULL;
}

// A home taken out of the table: once no native op of it is past its checks,
// the table's reference goes (the last pin's unpin frees it otherwise).
static void fp_home_retire (fp_home_t *e) {
  if (e == NULL) return;
  fp_drain(e, 3);
  // After the drain: a GETATTR that pinned the home before may have kept a descriptor of it until its unpin.
  fp_dc_forget(e->token, 0);
  fp_home_put(e);
}

// e (from fp_home_new) published, replacing whatever its prefix had.
void fp_home_publish (fp_home_t *e) {
  pthread_rwlock_wrlock(&fp_lock);
  fp_home_t *old = fp_home_take_locked(e->prefix, e->prefix_len, -1);
  e->next = fp_homes[e->hash % FP_HOME_BUCKETS];
  fp_homes[e->hash % FP_HOME_BUCKETS] = e;
  fp_home_count++;
  pthread_rwlock_unlock(&fp_lock);
  fp_home_retire(old);
}

int fp_home_remove (const char *prefix, size_t n, double token) {
  pthread_rwlock_wrlock(&fp_lock);
  fp_home_t *e = fp_home_take_locked(prefix, n, token);
  pthread_rwlock_unlock(&fp_lock);
  fp_home_retire(e);
  return e != NULL;
}

// Serialises the changes in place: each waits for the pins of the epoch
// before its own flip, which must not be the one the next flip reuses.
static pthread_mutex_t fp_flip_lock = PTHREAD_MUTEX_INITIALIZER;

// change(e, arg) on the home published for (prefix, token), under the write
// lock: 1, once no native op that pinned the home before the change is past
// its checks (they decide from their copy of the old pol); 0: no such home.
int fp_home_change (const char *prefix, size_t n, double token, void (*change) (fp_home_t *e, void *arg), void *arg) {
  uint32_t h = fp_hash(prefix, n);
  pthread_mutex_lock(&fp_flip_lock);
  pthread_rwlock_wrlock(&fp_lock);
  fp_home_t *e = fp_find_home(prefix, n, h);
  uint32_t before = 0;
  if (e != NULL && e->token == token) {
    change(e, arg);
    before = e->epoch & 1;
    e->epoch++;
    fp_home_get(e);
  } else {
    e = NULL;
  }
  pthread_rwlock_unlock(&fp_lock);
  if (e != NULL) {
    fp_drain(e, 1u << before);
    fp_home_put(e);
  }
  pthread_mutex_unlock(&fp_flip_lock);
  return e != NULL;
}

struct fp_pending_change { fp_acct_t *now, *was; };

static void fp_change_pending (fp_home_t *e, void *arg) {
  struct fp_pending_change *c = arg;
  // Creates need a mutable home (a rescan walks a still tree): made immutable, its create slots go back.
  if (c->now == NULL) fp_return_create_slots(e);
  c->was = e->pol.pending;
  e->pol.pending = c->now;
}

// The home's pending array (a: its holder, whose reference the home takes
// over), or NULL: C may not unlink (nor create) there. 0: no such home.
int fp_home_set_pending (const char *prefix, size_t n, double token, fp_acct_t *a) {
  struct fp_pending_change c = { a, NULL };
  if (!fp_home_change(prefix, n, token, fp_change_pending, &c)) {
    fp_acct_put(a);
    return 0;
  }
  // Made immutable: every native unlink and create that saw the home mutable
  // has finished (fp_home_change waited for their pins; a create holds its pin
  // until its record is queued), so the caller's next settle adopts every file
  // made in the home before now. And writes decided here that took byte credit
  // before JS took it back (the caller did, ledger.ts reclaimBytes): once they
  // have settled, every byte they added is in the array for the ledger's next takePending.
  if (a == NULL && c.was != NULL && c.was->len >= HOMESFS_ACCT_LEN) fp_wl_wait_home(c.was->data);
  fp_acct_put(c.was);
  return 1;
}

// Every home, open inode and handle dropped (shutdown, tests). A lazily
// unmounted mount may still serve: nothing waits for a home's pins here (the
// last one frees it) nor for a write ticket's inode (the same); only for an
// fgetattr using a handle's descriptor, which its owner closes after.
void fp_clear_all (void) {
  fp_home_t *homes = NULL;
  fp_inode_t *inodes = NULL;
  fp_handle_t *handles = NULL;
  pthread_rwlock_wrlock(&fp_lock);
  for (size_t i = 0; i < FP_HOME_BUCKETS; i++) {
    while (fp_homes[i] != NULL) {
      fp_home_t *e = fp_homes[i];
      fp_homes[i] = e->next;
      fp_return_slots(e);
      e->next = homes;
      homes = e;
    }
  }
  if (homes != NULL) fp_policy_moved_locked();
  for (size_t i = 0; i < FP_INODE_BUCKETS; i++) {
    while (fp_inodes[i] != NULL) {
      fp_inode_t *e = fp_inodes[i];
      fp_inodes[i] = e->next;
      e->next = inodes;
      inodes = e;
    }
  }
  for (size_t i = 0; i < FP_HANDLE_BUCKETS; i++) {
    while (fp_handles[i] != NULL) {
      fp_handle_t *e = fp_handles[i];
      fp_handles[i] = e->next;
      e->next = handles;
      handles = e;
    }
  }
  fp_home_count = 0;
  fp_inode_count = 0;
  fp_handle_count = 0;
  pthread_rwlock_unlock(&fp_lock);
  fp_dc_forget(0, 1);
  while (homes != NULL) { fp_home_t *n = homes->next; fp_home_put(homes); homes = n; }
  while (inodes != NULL) { fp_inode_t *n = inodes->next; fp_inode_put(inodes); inodes = n; }
  while (handles != NULL) { fp_handle_t *n = handles->next; fp_handle_retire(handles); handles = n; }
}

// ---- inodes open in JS ----------------------------------------------------------

// Under the write lock: the inode counted open once more, *fresh (calloc'ed,
// maybe with its size and delegation set) entered for it if it had no record
// (then *fresh is NULL: the table has it).
void fp_inode_add_locked (uint64_t dev, uint64_t ino, fp_inode_t **fresh) {
  fp_inode_t *e = fp_find_inode(dev, ino);
  if (e != NULL) {
    e->count++;
    return;
  }
  e = *fresh;
  *fresh = NULL;
  e->dev = dev;
  e->ino = ino;
  e->count = 1;
  e->refs = 1;
  uint32_t b = fp_inode_bucket(dev, ino);
  e->next = fp_inodes[b];
  fp_inodes[b] = e;
  fp_inode_count++;
}

// Under the write lock: the inode counted open once less; its record, taken
// out of the table, when that was the last count (for fp_inode_put after the lock).
fp_inode_t * fp_inode_drop_locked (uint64_t dev, uint64_t ino) {
  fp_inode_t **pp = &fp_inodes[fp_inode_bucket(dev, ino)];
  for (fp_inode_t *e = *pp; e != NULL; pp = &e->next, e = e->next) {
    if (e->dev != dev || e->ino != ino) continue;
    if (--e->count > 0) return NULL;
    *pp = e->next;
    fp_inode_count--;
    return e;
  }
  return NULL;
}

// JS's inode(+1 | -1): 0, or -ENOMEM. Counted open, the inode's native
// unlink past its open check (if one is) is waited out: the caller's nlink
// read (attachInode) comes after its removal, so it either saw the inode open
// or removed the name before that read.
int fp_inode_delta (uint64_t dev, uint64_t ino, int delta) {
  fp_inode_t *fresh = delta > 0 ? calloc(1, sizeof(*fresh)) : NULL;
  if (delta > 0 && fresh == NULL) return -ENOMEM;
  fp_inode_t *gone = NULL;
  pthread_rwlock_wrlock(&fp_lock);
  if (delta > 0) fp_inode_add_locked(dev, ino, &fresh);
  else gone = fp_inode_drop_locked(dev, ino);
  pthread_rwlock_unlock(&fp_lock);
  free(fresh);
  fp_inode_put(gone);
  if (delta > 0) fp_unlinking_wait(dev, ino);
  return 0;
}

// ---- handles ------------------------------------------------------------------------

// Under the write lock: the handle fh taken out of the table (for fp_handle_retire after the lock), or NULL.
fp_handle_t * fp_unlink_handle_locked (uint64_t fh) {
  fp_handle_t **pp = &fp_handles[fh % FP_HANDLE_BUCKETS];
  for (fp_handle_t *e = *pp; e != NULL; pp = &e->next, e = e->next) {
    if (e->fh == fh) {
      *pp = e->next;
      fp_handle_count--;
      return e;
    }
  }
  return NULL;
}

// e published for fgetattr, replacing whatever fh had (retired: once no fgetattr uses it).
void fp_handle_publish (fp_handle_t *e) {
  pthread_rwlock_wrlock(&fp_lock);
  fp_handle_t *old = fp_unlink_handle_locked(e->fh);
  e->next = fp_handles[e->fh % FP_HANDLE_BUCKETS];
  fp_handles[e->fh % FP_HANDLE_BUCKETS] = e;
  fp_handle_count++;
  pthread_rwlock_unlock(&fp_lock);
  fp_handle_retire(old);
}

// fh no longer published: on return no fgetattr uses its descriptor.
void fp_handle_remove (uint64_t fh) {
  pthread_rwlock_wrlock(&fp_lock);
  fp_handle_t *old = fp_unlink_handle_locked(fh);
  pthread_rwlock_unlock(&fp_lock);
  fp_handle_retire(old);
}
