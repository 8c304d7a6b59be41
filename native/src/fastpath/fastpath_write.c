// A WRITE's growth decided here, on the session's worker, for an inode whose
// charged size JS handed over, and JS's side of the hand-over
// (hs_fastpath_wl_delegate, _wl_revoke, _wl_size, _set_write_credit).
// Invariants: an inode's deleg/busy/acct change under fp_wlock, taken inside
// fp_lock's read lock so the inode is in its table (wl_end excepted: its
// ticket holds a reference of the inode record and of the accounting array,
// so neither is freed under it, whatever JS or hs_fastpath_clear did meanwhile);
// at most one write decided here is in flight per inode (busy), and JS takes
// an inode back only once none is.

#include "fastpath/fastpath_internal.h"

// ---- WRITE decided here --------------------------------------------------------
// A WRITE of a handle published for native writes (dataplane.c) costs JS one
// decision: the ledger's check-and-reserve of the growth. Here that decision
// is made on the session's worker for an inode whose charged size JS handed over
// (hs_fastpath_wl_delegate, or a file made here in a home JS let do so), from
// bytes JS reserved ahead in its ledger (src/policy/ledger.ts reserveBytes),
// which stay counted against the home's budget until they are used or taken
// back. The home's accounting array (JS's BigInt64Array, the same one native
// unlinks add their releases to) holds, beside those, the HOMESFS_ACCT_*
// slots of abi.h (grown, credit, the per-file limit, in flight, refund).
// The decision is writeAt's (src/fs/file.ts): start = EOF for O_APPEND, else
// the offset; after = max(size, start + len); growth = after - size. It is
// made here only when it is a yes by JS's rules too: the end within 2^53 - 1,
// within the per-file limit, and the growth within the credit left (which is
// inside the home's budget, JS reserved it there). Anything else (a refusal,
// an exhausted credit, an inode JS holds) goes to JS as before, which decides,
// logs a refusal and tops the credit up. Writes of one inode are one at a time
// here, as under JS's per-file lock (busy); JS takes an inode back
// (hs_fastpath_wl_revoke) before any size change of its own, and gets it only
// once no write decided here is in flight on it.
pthread_mutex_t fp_wlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fp_wcond = PTHREAD_COND_INITIALIZER;
uint64_t fp_wdecided = 0;   // atomic
uint64_t fp_wfallbacks = 0; // delegated inode, but JS decides (credit, limit, busy), atomic

// Under fp_lock's read lock and fp_wlock, for e delegated and not busy, with
// its accounting array held: the charged size going from `before` to `after`
// decided here, as writeAt and truncateInode decide it: growth (past before)
// within the per-file limit and taken from the credit; then the growth shown
// at once (a concurrent getattr of the charged size sees the larger one), the
// inode busy and counted in flight, and the ticket (start, len: the write's)
// holding references of the inode record and the array, which the end writes
// into after the locks are gone. 0, or HOMESFS_FASTPATH_FALLBACK with nothing
// changed. The caller checked the end against 2^53 - 1.
static int fp_wl_take (fp_inode_t *e, fp_acct_t *held, uint64_t before, uint64_t after, uint64_t start, uint32_t len, hs_wl_ticket_t *t) {
  int64_t *acct = held->data;
  uint64_t growth = after > before ? after - before : 0;
  if (growth > 0) {
    int64_t maxf = __atomic_load_n(&acct[HOMESFS_ACCT_MAXFILE], __ATOMIC_ACQUIRE);
    if (maxf > 0 && after > (uint64_t) maxf) return HOMESFS_FASTPATH_FALLBACK;
    int64_t c = __atomic_load_n(&acct[HOMESFS_ACCT_CREDIT_BYTES], __ATOMIC_ACQUIRE);
    do {
      if (c < 0 || (uint64_t) c < growth) return HOMESFS_FASTPATH_FALLBACK;
    } while (!__atomic_compare_exchange_n(&acct[HOMESFS_ACCT_CREDIT_BYTES], &c, c - (int64_t) growth, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
    __atomic_store_n(&e->size_bits, fp_double_bits((double) after), __ATOMIC_RELEASE);
  }
  e->busy = 1;
  __atomic_add_fetch(&acct[HOMESFS_ACCT_INFLIGHT], 1, __ATOMIC_ACQ_REL);
  __atomic_add_fetch(&e->refs, 1, __ATOMIC_RELAXED);
  fp_acct_get(held);
  t->inode = e;
  t->acct_ref = held;
  t->acct = acct;
  t->before = before;
  t->start = start;
  t->growth = growth;
  t->len = len;
  return 0;
}

// Returns 0 and fills the ticket when the write may go ahead (its growth
// charged), HOMESFS_FASTPATH_FALLBACK when JS decides.
int hs_fastpath_wl_begin (uint64_t dev, uint64_t ino, int64_t offset, uint32_t len, int append, hs_wl_ticket_t *t) {
  if (offset < 0) return HOMESFS_FASTPATH_FALLBACK;
  int r = HOMESFS_FASTPATH_FALLBACK;
  int delegated = 0;
  pthread_rwlock_rdlock(&fp_lock);
  fp_inode_t *e = fp_find_inode(dev, ino);
  if (e != NULL) {
    pthread_mutex_lock(&fp_wlock);
    fp_acct_t *held = e->acct;
    int64_t *acct = held != NULL ? held->data : NULL;
    if (e->deleg == 1 && !e->busy && acct != NULL && e->has_size) {
      delegated = 1;
      uint64_t before = (uint64_t) fp_bits_double(__atomic_load_n(&e->size_bits, __ATOMIC_ACQUIRE));
      uint64_t start = append ? before : (uint64_t) offset;
      uint64_t end = start + len;
      if (end <= HOMESFS_MAX_SAFE_INTEGER) r = fp_wl_take(e, held, before, end > before ? end : before, start, len, t);
    }
    pthread_mutex_unlock(&fp_wlock);
  }
  pthread_rwlock_unlock(&fp_lock);
  if (r != 0 && delegated) __atomic_add_fetch(&fp_wfallbacks, 1, __ATOMIC_RELAXED);
  return r;
}

// The pwrite of a write begun above returned n (bytes, or -errno): charge
// what landed, as writeAt does, and give back the rest of what was taken. The
// ticket's references keep the inode record and the array alive until here.
void hs_fastpath_wl_end (hs_wl_ticket_t *t, int64_t n) {
  fp_inode_t *e = t->inode;
  pthread_mutex_lock(&fp_wlock);
  uint64_t used = t->growth;
  if (n < (int64_t) t->len) {
    // A write that failed landed nothing, wherever it was aimed: the size stays
    // (a write past the end does not move it), as writeAt charges nothing on a throw.
    uint64_t real = t->before;
    if (n > 0 && t->start + (uint64_t) n > real) real = t->start + (uint64_t) n;
    used = real - t->before;
    if (t->growth > 0) __atomic_store_n(&e->size_bits, fp_double_bits((double) real), __ATOMIC_RELEASE);
    if (t->growth > used) __atomic_add_fetch(&t->acct[HOMESFS_ACCT_REFUND], (int64_t) (t->growth - used), __ATOMIC_ACQ_REL);
  }
  if (used > 0) __atomic_add_fetch(&t->acct[HOMESFS_ACCT_GROWN], (int64_t) used, __ATOMIC_ACQ_REL);
  e->busy = 0;
  __atomic_sub_fetch(&t->acct[HOMESFS_ACCT_INFLIGHT], 1, __ATOMIC_ACQ_REL);
  pthread_cond_broadcast(&fp_wcond);
  pthread_mutex_unlock(&fp_wlock);
  fp_acct_put(t->acct_ref);
  fp_inode_put(e);
  if (n == (int64_t) t->len) __atomic_add_fetch(&fp_wdecided, 1, __ATOMIC_RELAXED);
}

// ---- FTRUNCATE decided here ------------------------------------------------------
// truncateInode's decision (src/fs/file.ts: ledger.resize(before, size), then
// ftruncate) for a delegated inode, made as a write's is: growth (size past
// the charged size) within the per-file limit and the credit left, taken from
// the credit before the call; a cut gives its bytes back to the ledger
// (RELEASED_BYTES, applied with the growth by takePending) once the call
// succeeded. One at a time per inode with its writes (busy), counted in flight
// (INFLIGHT: a kill meanwhile leaves the home scanned). Anything else (a
// refusal, exhausted credit, an inode JS holds, a size past 2^53 - 1) is JS's.
uint64_t fp_truncate_on = 0;       // atomic, set by JS at start (fuse.nativeTruncate)
uint64_t fp_tdecided = 0;          // atomic
uint64_t fp_tfallbacks = 0;        // delegated inode, but JS decides, atomic

int hs_fastpath_wl_resize_begin (uint64_t dev, uint64_t ino, int64_t size, hs_wl_ticket_t *t) {
  if (size < 0 || (uint64_t) size > HOMESFS_MAX_SAFE_INTEGER || !__atomic_load_n(&fp_truncate_on, __ATOMIC_ACQUIRE)) return HOMESFS_FASTPATH_FALLBACK;
  int r = HOMESFS_FASTPATH_FALLBACK;
  int delegated = 0;
  pthread_rwlock_rdlock(&fp_lock);
  fp_inode_t *e = fp_find_inode(dev, ino);
  if (e != NULL) {
    pthread_mutex_lock(&fp_wlock);
    fp_acct_t *held = e->acct;
    int64_t *acct = held != NULL ? held->data : NULL;
    if (e->deleg == 1 && !e->busy && acct != NULL && e->has_size) {
      delegated = 1;
      uint64_t before = (uint64_t) fp_bits_double(__atomic_load_n(&e->size_bits, __ATOMIC_ACQUIRE));
      // The ticket's start is the new size (resize_end's cut), its length 0.
      r = fp_wl_take(e, held, before, (uint64_t) size, (uint64_t) size, 0, t);
    }
    pthread_mutex_unlock(&fp_wlock);
  }
  pthread_rwlock_unlock(&fp_lock);
  if (r != 0 && delegated) __atomic_add_fetch(&fp_tfallbacks, 1, __ATOMIC_RELAXED);
  return r;
}

void hs_fastpath_wl_resize_end (hs_wl_ticket_t *t, int err) {
  fp_inode_t *e = t->inode;
  pthread_mutex_lock(&fp_wlock);
  if (err == 0) {
    if (t->growth > 0) __atomic_add_fetch(&t->acct[HOMESFS_ACCT_GROWN], (int64_t) t->growth, __ATOMIC_ACQ_REL);
    if (t->start < t->before) {
      __atomic_store_n(&e->size_bits, fp_double_bits((double) t->start), __ATOMIC_RELEASE);
      __atomic_add_fetch(&t->acct[HOMESFS_ACCT_RELEASED_BYTES], (int64_t) (t->before - t->start), __ATOMIC_ACQ_REL);
    }
  } else if (t->growth > 0) {
    // Nothing changed: the size as it was, the credit no longer reserved (JS tops it up).
    __atomic_store_n(&e->size_bits, fp_double_bits((double) t->before), __ATOMIC_RELEASE);
    __atomic_add_fetch(&t->acct[HOMESFS_ACCT_REFUND], (int64_t) t->growth, __ATOMIC_ACQ_REL);
  }
  e->busy = 0;
  __atomic_sub_fetch(&t->acct[HOMESFS_ACCT_INFLIGHT], 1, __ATOMIC_ACQ_REL);
  pthread_cond_broadcast(&fp_wcond);
  pthread_mutex_unlock(&fp_wlock);
  fp_acct_put(t->acct_ref);
  fp_inode_put(e);
  if (err == 0) __atomic_add_fetch(&fp_tdecided, 1, __ATOMIC_RELAXED);
}

// Until no write decided here with that home's array is in flight (JS took its credit back first).
void fp_wl_wait_home (int64_t *acct) {
  pthread_mutex_lock(&fp_wlock);
  while (__atomic_load_n(&acct[HOMESFS_ACCT_INFLIGHT], __ATOMIC_ACQUIRE) > 0) pthread_cond_wait(&fp_wcond, &fp_wlock);
  pthread_mutex_unlock(&fp_wlock);
}

// C owns the charged size of (dev, ino) from now on (starting at size), its
// growth decided from a's credit: 1; 0 when the inode is not tracked or a
// write decided here is still in flight on it. The inode holds a reference of
// a from then on (the caller's stays the caller's).
int fp_wl_delegate_to (uint64_t dev, uint64_t ino, double size, fp_acct_t *a) {
  int kept = 0;
  fp_acct_t *was = NULL;
  pthread_rwlock_rdlock(&fp_lock);
  fp_inode_t *e = fp_find_inode(dev, ino);
  if (e != NULL) {
    pthread_mutex_lock(&fp_wlock);
    if (!e->busy) {
      __atomic_store_n(&e->size_bits, fp_double_bits(size), __ATOMIC_RELEASE);
      __atomic_store_n(&e->has_size, 1, __ATOMIC_RELEASE);
      if (e->acct != a) {
        was = e->acct;
        fp_acct_get(a);
        e->acct = a;
      }
      e->deleg = 1;
      kept = 1;
    }
    pthread_mutex_unlock(&fp_wlock);
  }
  pthread_rwlock_unlock(&fp_lock);
  fp_acct_put(was);
  return kept;
}

// The holder of the array at data: the inode's own when it already charges
// that array (the common case: the same home's, handed over again), else a new one.
fp_acct_t * fp_acct_of_inode (uint64_t dev, uint64_t ino, const int64_t *data) {
  fp_acct_t *a = NULL;
  pthread_rwlock_rdlock(&fp_lock);
  fp_inode_t *e = fp_find_inode(dev, ino);
  if (e != NULL) {
    pthread_mutex_lock(&fp_wlock);
    if (e->acct != NULL && e->acct->data == data) { a = e->acct; fp_acct_get(a); }
    pthread_mutex_unlock(&fp_wlock);
  }
  pthread_rwlock_unlock(&fp_lock);
  return a;
}

// The charged size of (dev, ino), JS's again; -1: a write decided here is
// still in flight (no new one starts: ask again soon); -2: the inode is not
// tracked or was not handed over.
double fp_wl_take_back (uint64_t dev, uint64_t ino) {
  double out_size = -2;
  pthread_rwlock_rdlock(&fp_lock);
  fp_inode_t *e = fp_find_inode(dev, ino);
  if (e != NULL) {
    pthread_mutex_lock(&fp_wlock);
    if (e->deleg) {
      e->deleg = 0;
      if (e->busy) {
        out_size = -1;
        e->deleg = 2;  // being taken back: no new decision, and the next call finishes it
      } else {
        out_size = fp_bits_double(__atomic_load_n(&e->size_bits, __ATOMIC_ACQUIRE));
      }
    }
    pthread_mutex_unlock(&fp_wlock);
  }
  pthread_rwlock_unlock(&fp_lock);
  return out_size;
}

static void fp_change_write_credit (fp_home_t *e, void *arg) {
  e->pol.wl_on = *(const int *) arg ? 1 : 0;
}

int fp_home_set_write_credit (const char *prefix, size_t n, double token, int on) {
  return fp_home_change(prefix, n, token, fp_change_write_credit, &on);
}
