// The native fast path: getattr/lookup, readdir, open, create, unlink, setattr and write decisions.
//
// libfuse 2.9 answers LOOKUP with the getattr op, so answering getattr here,
// on libfuse's own thread, takes both off the JS thread. JS stays the control
// plane: it publishes, per home, everything the answer depends on, and C never
// re-derives policy. Whenever C is unsure it answers nothing and the request
// goes to JS as before (HOMESFS_FASTPATH_FALLBACK): a fallback costs time,
// never behaviour.
//
// Published per home (keyed by the mount path prefix "/<tenant>/<key>"):
//  - a dup of the home's verified O_PATH descriptor, which C owns and closes
//    (under the write lock), so JS retiring its own descriptor cannot race;
//  - the device every presented node must be on;
//  - the presented owner, or "owner from the stat" (profile chown: allow);
//  - per file type, keep/or masks: presented mode = type | (perms & keep) | or
//    (JS derives them from its own presentedMode and publishes a type only if
//    that function has this form for all 4096 permission values);
//  - the profile's longest name.
// Global: the (dev, ino) of every inode open in JS, with the size JS charges
// it once published (a getattr answers the larger of that and the disk's),
// and names that only JS answers (".homesfs", libfuse's hidden names, ...).
//
// The walk: openat2(home_fd, rel, O_PATH|O_NOFOLLOW|O_CLOEXEC,
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV|RESOLVE_NO_MAGICLINKS)
// then fstat, under the read lock. The kernel refuses ".." out of the home,
// any symlink in the path (a trailing one is opened itself: O_NOFOLLOW) and
// any mount crossing. Fallback on: fewer than three components, an empty,
// ".", ".." or reserved component or one longer than the home's limit, any
// errno but ENOENT and ENOTDIR, another device, an inode open in JS, an inode
// number in the daemon's synthetic range (top bit) and a file type without
// masks.
//
// Negative answers: ENOENT or ENOTDIR from the walk is answered here. Every
// name JS presents without a backing node (".homesfs", its status file,
// libfuse's hidden names) is reserved, so it never gets this far; for any
// other name JS's own walk (O_NOFOLLOW|O_DIRECTORY component by component,
// then lstat) meets the same first missing or non-directory component and
// answers the same errno, with nothing changed and nothing logged above
// debug. A symlink in the way (ELOOP here, ENOTDIR in JS) still goes to JS.

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/openat2.h>

#include "abi.h"
#include "fastpath.h"
#include "removals.h"
#include "dataplane.h"
#include "dirhandles.h"

#define FP_HOME_BUCKETS 4096
#define FP_INODE_BUCKETS 16384
#define FP_MAX_RESERVED 32
#define FP_RESERVED_LEN 64

typedef struct fp_home {
  struct fp_home *next;
  char *prefix;
  size_t prefix_len;
  uint32_t hash;
  int fd;
  uint64_t dev;
  uint32_t uid;
  uint32_t gid;
  int owner_from_stat;
  uint32_t max_name;
  uint32_t types;       // bit t: masks published for type index t (mode >> 12)
  uint32_t keep[16];
  uint32_t or[16];
  double token;
  // Set while JS lets C unlink in this home (fastpath_set_mutable): JS's
  // BigInt64Array [bytes, inodes] the ledger takes releases from, and the
  // reference that keeps it alive (dropped on the JS thread, under the write lock).
  int64_t *pending;
  size_t pending_len;
  napi_ref pending_ref;
  napi_env env;
  // Read-only opens answered here (fastpath_set_open): HOMESFS_OPEN_* flags, and
  // the open-file slots JS took, each for one caller uid and with a handle
  // number JS reserved (under fp_open_lock).
  uint32_t open_flags;
  struct fp_open_rec *credits;
  // SETATTRs by path answered here (fastpath_set_attr_ops): HOMESFS_ATTR_* flags,
  // and chmod's form: new = asked & chmod_m, nothing changed when that equals
  // current & chmod_k (JS publishes it only for a profile whose chmodDecision
  // has that form).
  uint32_t attr_flags;
  uint32_t chmod_m;
  uint32_t chmod_k;
  // CREATE answered here (fastpath_set_create), only while the home is
  // mutable too (pending set): the new file's mode is (asked & mode_m) |
  // mode_or, its owner the published one, its depth at most max_depth (0: no
  // limit); and the slots JS granted for creates, each an open-file slot, an
  // inode the ledger reserved and a handle number (under fp_open_lock).
  uint32_t create_on;
  uint32_t create_owner;   // 0: the published owner (owner-only); 1: the caller, a setgid parent's group kept (chown allow)
  uint32_t mode_m;
  uint32_t mode_or;
  uint32_t max_depth;
  struct fp_open_rec *ccredits;
  // Files made here start with their size owned by C, charged from
  // the byte credit in pending, when JS set it (fastpath_set_write_credit).
  uint32_t wl_on;
} fp_home_t;

typedef struct fp_inode {
  struct fp_inode *next;
  uint64_t dev;
  uint64_t ino;
  uint32_t count;
  // The size JS charges the open file (its ledger's record), once JS published
  // it (fastpath_inode_size): a getattr then answers max(charged, on disk), as
  // JS does; before that, JS answers. Written under the read lock (the entry
  // is freed only under the write lock), read atomically: a double's bits.
  uint64_t size_bits;
  int has_size;
  // Write decisions (see "WRITE decided here" below), under
  // fp_wlock: deleg set while C owns the charged size (size_bits) and may
  // grow it from the home's byte credit in acct; busy while a write decided
  // here is between its decision and its settling.
  int deleg;
  int busy;
  int64_t *acct;
} fp_inode_t;

// An open file JS handed to the kernel: fgetattr(fh) is fstat(fd) presented
// like any node of its home. fd is JS's own: JS removes the entry (write
// lock) before it closes the descriptor, so C never reads a closed or reused one.
typedef struct fp_handle {
  struct fp_handle *next;
  uint64_t fh;
  int fd;
  uint32_t uid;
  uint32_t gid;
  int owner_from_stat;
  uint32_t types;
  uint32_t keep[16];
  uint32_t or[16];
} fp_handle_t;

typedef struct {
  char name[FP_RESERVED_LEN];
  size_t len;
  int prefix;           // "name*": every name that begins with name
} fp_reserved_t;

static pthread_rwlock_t fp_lock;
static pthread_once_t fp_once = PTHREAD_ONCE_INIT;
static fp_home_t *fp_homes[FP_HOME_BUCKETS];
static fp_inode_t *fp_inodes[FP_INODE_BUCKETS];
#define FP_HANDLE_BUCKETS 16384
static fp_handle_t *fp_handles[FP_HANDLE_BUCKETS];
static uint32_t fp_handle_count = 0;
static fp_reserved_t fp_reserved[FP_MAX_RESERVED];
static size_t fp_reserved_n = 0;
static uint32_t fp_home_count = 0;
static uint32_t fp_inode_count = 0;
static int fp_enabled = 0;          // atomic
static uint64_t fp_answered = 0;    // atomic
static uint64_t fp_fallbacks = 0;   // atomic (only counted while enabled)
static uint64_t fp_fanswered = 0;   // fgetattr, atomic
static uint64_t fp_ffallbacks = 0;  // fgetattr, atomic
static uint64_t fp_negative = 0;    // ENOENT/ENOTDIR answered (also in fp_answered), atomic
static uint64_t fp_ranswered = 0;   // readdir, atomic
static uint64_t fp_uanswered = 0;   // unlink, atomic
// A regular file with more allocated bytes than this is left to JS, which
// frees it off its thread: freeing a file's extents (at the close of the
// last descriptor after the unlink) takes time in proportion to them (seconds
// for a big fragmented file), and C unlinks and closes under fp_lock, which
// every home's native answers wait behind. JS sets it
// (fastpath_set_free_inline_max, from src/backing/freeing.ts, the one
// definition); until then no file with allocated blocks is unlinked here.
static uint64_t fp_free_inline_max = 0; // atomic
static uint64_t fp_ubig = 0;        // unlinks left to JS for their size, atomic
static uint64_t fp_ufallbacks = 0;  // unlink (only counted in homes JS made mutable), atomic
static uint64_t fp_tanswered = 0;   // utimens, atomic
static uint64_t fp_canswered = 0;   // chmod, atomic
static uint64_t fp_oanswered_chown = 0;  // chown, atomic
static uint64_t fp_sfallbacks = 0;  // utimens and chmod (only counted in homes JS opened for them), atomic
static uint64_t fp_canswered_create = 0;  // create, atomic
static uint64_t fp_cfallbacks = 0;  // create (only counted in homes JS opened for it), atomic
static uint64_t fp_oanswered = 0;   // open, atomic
static uint64_t fp_ofallbacks = 0;  // open (only counted in homes JS opened for it), atomic

// ---- WRITE decided here --------------------------------------------------------
// A WRITE of a handle published for native writes (dataplane.c) costs JS one
// decision: the ledger's check-and-reserve of the growth. Here that decision
// is made on libfuse's thread for an inode whose charged size JS handed over
// (fastpath_wl_delegate, or a file made here in a home JS let do so), from
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
// (fastpath_wl_revoke) before any size change of its own, and gets it only
// once no write decided here is in flight on it.
static pthread_mutex_t fp_wlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fp_wcond = PTHREAD_COND_INITIALIZER;
static uint64_t fp_wdecided = 0;   // atomic
static uint64_t fp_wfallbacks = 0; // delegated inode, but JS decides (credit, limit, busy), atomic

static fp_inode_t * fp_find_inode (uint64_t dev, uint64_t ino);

static inline double fp_bits_double (uint64_t bits) { double d; memcpy(&d, &bits, sizeof(d)); return d; }
static inline uint64_t fp_double_bits (double d) { uint64_t b; memcpy(&b, &d, sizeof(b)); return b; }

// Returns 0 and fills the ticket when the write may go ahead (its growth
// charged), HOMESFS_FASTPATH_FALLBACK when JS decides.
int homesfs_fastpath_wl_begin (uint64_t dev, uint64_t ino, int64_t offset, uint32_t len, int append, homesfs_wl_ticket_t *t) {
  if (offset < 0) return HOMESFS_FASTPATH_FALLBACK;
  int r = HOMESFS_FASTPATH_FALLBACK;
  int delegated = 0;
  pthread_rwlock_rdlock(&fp_lock);
  fp_inode_t *e = fp_find_inode(dev, ino);
  if (e != NULL) {
    pthread_mutex_lock(&fp_wlock);
    int64_t *acct = e->acct;
    if (e->deleg == 1 && !e->busy && acct != NULL && e->has_size) {
      delegated = 1;
      uint64_t before = (uint64_t) fp_bits_double(__atomic_load_n(&e->size_bits, __ATOMIC_ACQUIRE));
      uint64_t start = append ? before : (uint64_t) offset;
      uint64_t end = start + len;
      uint64_t after = end > before ? end : before;
      uint64_t growth = after - before;
      int ok = end <= 9007199254740991ULL;
      if (ok && growth > 0) {
        int64_t maxf = __atomic_load_n(&acct[HOMESFS_ACCT_MAXFILE], __ATOMIC_ACQUIRE);
        if (maxf > 0 && after > (uint64_t) maxf) ok = 0;
        int64_t c = __atomic_load_n(&acct[HOMESFS_ACCT_CREDIT], __ATOMIC_ACQUIRE);
        while (ok) {
          if (c < 0 || (uint64_t) c < growth) { ok = 0; break; }
          if (__atomic_compare_exchange_n(&acct[HOMESFS_ACCT_CREDIT], &c, c - (int64_t) growth, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) break;
        }
      }
      if (ok) {
        if (growth > 0) __atomic_store_n(&e->size_bits, fp_double_bits((double) after), __ATOMIC_RELEASE);
        e->busy = 1;
        __atomic_add_fetch(&acct[HOMESFS_ACCT_INFLIGHT], 1, __ATOMIC_ACQ_REL);
        t->inode = e;
        t->acct = acct;
        t->before = before;
        t->start = start;
        t->growth = growth;
        t->len = len;
        r = 0;
      }
    }
    pthread_mutex_unlock(&fp_wlock);
  }
  pthread_rwlock_unlock(&fp_lock);
  if (r != 0 && delegated) __atomic_add_fetch(&fp_wfallbacks, 1, __ATOMIC_RELAXED);
  return r;
}

// The pwrite of a write begun above returned n (bytes, or -errno): charge
// what landed, as writeAt does, and give back the rest of what was taken. The
// inode is alive: the kernel releases a handle only after its writes were
// answered, and JS drops an inode only after its last handle's release.
void homesfs_fastpath_wl_end (homesfs_wl_ticket_t *t, int64_t n) {
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
  if (n == (int64_t) t->len) __atomic_add_fetch(&fp_wdecided, 1, __ATOMIC_RELAXED);
}

// Until no write decided here with that home's array is in flight (JS took its credit back first).
static void fp_wl_wait_home (int64_t *acct) {
  pthread_mutex_lock(&fp_wlock);
  while (__atomic_load_n(&acct[HOMESFS_ACCT_INFLIGHT], __ATOMIC_ACQUIRE) > 0) pthread_cond_wait(&fp_wcond, &fp_wlock);
  pthread_mutex_unlock(&fp_wlock);
}

// ---- OPEN ----------------------------------------------------------------------
// A read-only OPEN of a regular file in a home JS opened for it (binary
// content: no read needs policy), by a caller uid JS granted an open-file slot
// for there, is answered here. Every slot is one JS took from its own
// accounting (src/policy/openfiles.ts: the home's, that uid's and the
// daemon's caps) before granting it, with a handle number JS reserved: the
// caps stay JS's and exact, a refusal is always JS's (no slot
// here: JS answers, and refuses if it must). What C does is JS's open of such
// a file (file.ts openIn), step for step: the confined walk (O_RDONLY|
// O_NOFOLLOW|O_NONBLOCK), a regular file on the home's device, the inode
// counted open before its nlink is read (as attachInode does, under the write
// lock, so a native unlink either saw it open or removed the last name first:
// then JS repeats the open and answers ENOENT), the handle published for
// fgetattr and, if JS said so, for native reads. The handle is queued for JS
// (takeOpens), which adopts it before it serves anything else: until then
// nothing but READ, FLUSH, fgetattr and RELEASE can name it, and each of those
// is answered here or takes the queue first. A slot not used (a fallback, a
// home withdrawn or republished) goes back to JS through the same queue.
// The home's flags and the queue's record kinds: HOMESFS_OPEN_* and
// HOMESFS_REC_* of abi.h.


typedef struct fp_open_rec {
  struct fp_open_rec *next;
  uint32_t kind;
  uint32_t fh;
  int32_t fd;
  uint32_t published;   // DP_READ when the data plane has it
  uint32_t uid;         // the caller this slot was taken for
  uint32_t oflags;      // a created handle's open flags (access mode, O_APPEND)
  uint64_t dev;
  uint64_t ino;
  // An open slot: its home, and fp_credit_gen when the slot was taken from
  // the home's list (a handle closed before JS adopted it gives its
  // slot back to that list while no slot went back to JS since).
  struct fp_home *home;
  uint64_t gen;
  // While taken for a native open or create: its count beside the directory
  // handles (dirhandles.c), given back once JS takes the record in or the
  // file is gone.
  void *dh;
} fp_open_rec_t;

static void fp_dh_give (fp_open_rec_t *r) {
  if (r->dh == NULL) return;
  homesfs_dh_file_give(r->uid, r->dh);
  r->dh = NULL;
}

static pthread_mutex_t fp_open_lock = PTHREAD_MUTEX_INITIALIZER;  // every home's credits, and the queue
// Native creates past their home's check and not yet queued for JS (under
// fp_open_lock): making a home immutable waits for them (fp_set_mutable), so
// a rescan that follows finds every file made before it already queued.
static uint32_t fp_creates_inflight = 0;
static pthread_cond_t fp_creates_done = PTHREAD_COND_INITIALIZER;
static fp_open_rec_t *fp_opens = NULL;
static fp_open_rec_t **fp_opens_tail = &fp_opens;
static uint32_t fp_open_queued = 0;
static uint32_t fp_credit_count = 0;  // under fp_open_lock
// Bumped (under fp_open_lock) whenever slots go back to JS: a home withdrawn,
// republished or freed, a reclaim. A slot taken out before the last bump may
// belong to a home that is gone, or be one JS counted in when it took slots
// back: it goes to JS through the queue, never back to a list.
static uint64_t fp_credit_gen = 0;
static uint64_t fp_oclosed = 0;  // opens closed here before JS adopted them, atomic
// The policy generation (fastpath.h): starts at 1 (0 means "JavaScript's" in
// dataplane.c), written under the write lock, read atomically.
static uint64_t fp_policy_gen = 1;

uint64_t homesfs_fastpath_policy_gen (void) {
  return __atomic_load_n(&fp_policy_gen, __ATOMIC_ACQUIRE);
}

// Under the write lock: no native open is between reading its home's flags and reading this.
static void fp_policy_moved_locked (void) {
  __atomic_add_fetch(&fp_policy_gen, 1, __ATOMIC_ACQ_REL);
}

// Under fp_open_lock.
static void fp_queue_locked (fp_open_rec_t *r) {
  r->next = NULL;
  *fp_opens_tail = r;
  fp_opens_tail = &r->next;
  fp_open_queued++;
}

static void fp_queue (fp_open_rec_t *r) {
  pthread_mutex_lock(&fp_open_lock);
  fp_queue_locked(r);
  pthread_mutex_unlock(&fp_open_lock);
}

// A native create's record queued: it is no longer in flight.
static void fp_queue_create_done (fp_open_rec_t *r) {
  pthread_mutex_lock(&fp_open_lock);
  fp_queue_locked(r);
  if (--fp_creates_inflight == 0) pthread_cond_broadcast(&fp_creates_done);
  pthread_mutex_unlock(&fp_open_lock);
}

// The home's create slots back to JS (each with its reserved inode).
static void fp_return_create_credits (fp_home_t *e) {
  pthread_mutex_lock(&fp_open_lock);
  while (e->ccredits != NULL) {
    fp_open_rec_t *r = e->ccredits;
    e->ccredits = r->next;
    fp_credit_count--;
    r->kind = HOMESFS_REC_UNUSED_CREATE;
    fp_queue_locked(r);
  }
  pthread_mutex_unlock(&fp_open_lock);
}

// Every credit of the home back to JS (under the write lock, or the read lock for a home JS is changing).
static void fp_return_credits (fp_home_t *e) {
  pthread_mutex_lock(&fp_open_lock);
  fp_credit_gen++;
  while (e->credits != NULL) {
    fp_open_rec_t *r = e->credits;
    e->credits = r->next;
    fp_credit_count--;
    r->kind = HOMESFS_REC_UNUSED;
    fp_queue_locked(r);
  }
  pthread_mutex_unlock(&fp_open_lock);
  fp_return_create_credits(e);
}
static uint64_t fp_rfallbacks = 0;  // readdir, atomic

static void fp_init_lock (void) {
  pthread_rwlockattr_t attr;
  pthread_rwlockattr_init(&attr);
  // JS publishes rarely and must not wait behind a stream of lookups.
  pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init(&fp_lock, &attr);
  pthread_rwlockattr_destroy(&attr);
}

static uint32_t fp_hash (const char *s, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) { h ^= (unsigned char) s[i]; h *= 16777619u; }
  return h;
}

static uint32_t fp_inode_bucket (uint64_t dev, uint64_t ino) {
  uint64_t x = ino * 0x9E3779B97F4A7C15ull ^ dev;
  return (uint32_t) (x >> 40) % FP_INODE_BUCKETS;
}

// Under (at least) the read lock.
static fp_home_t * fp_find_home (const char *prefix, size_t n, uint32_t h) {
  for (fp_home_t *e = fp_homes[h % FP_HOME_BUCKETS]; e != NULL; e = e->next) {
    if (e->hash == h && e->prefix_len == n && memcmp(e->prefix, prefix, n) == 0) return e;
  }
  return NULL;
}

static fp_inode_t * fp_find_inode (uint64_t dev, uint64_t ino) {
  for (fp_inode_t *e = fp_inodes[fp_inode_bucket(dev, ino)]; e != NULL; e = e->next) {
    if (e->dev == dev && e->ino == ino) return e;
  }
  return NULL;
}

static int fp_inode_open (uint64_t dev, uint64_t ino) {
  return fp_find_inode(dev, ino) != NULL;
}

static int fp_reserved_name (const char *c, size_t n) {
  for (size_t i = 0; i < fp_reserved_n; i++) {
    const fp_reserved_t *r = &fp_reserved[i];
    if (r->prefix ? (n >= r->len && memcmp(c, r->name, r->len) == 0) : (n == r->len && memcmp(c, r->name, n) == 0)) return 1;
  }
  return 0;
}

// Every component below the home: non-empty, not "." or "..", not reserved,
// not longer than the home's limit. Under the read lock.
static int fp_components_ok (const char *rel, uint32_t max_name) {
  const char *c = rel;
  for (;;) {
    const char *slash = strchr(c, '/');
    size_t n = slash ? (size_t) (slash - c) : strlen(c);
    if (n == 0 || n > max_name) return 0;
    if (c[0] == '.' && (n == 1 || (n == 2 && c[1] == '.'))) return 0;
    if (fp_reserved_name(c, n)) return 0;
    if (!slash) return 1;
    c = slash + 1;
  }
}

static void fp_fallback (void) {
  __atomic_add_fetch(&fp_fallbacks, 1, __ATOMIC_RELAXED);
}

int homesfs_fastpath_getattr (const char *path, struct stat *out) {
  if (!__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE)) return HOMESFS_FASTPATH_FALLBACK;
  if (path == NULL || path[0] != '/') { fp_fallback(); return HOMESFS_FASTPATH_FALLBACK; }
  const char *t_end = strchr(path + 1, '/');
  if (t_end == NULL) { fp_fallback(); return HOMESFS_FASTPATH_FALLBACK; }
  const char *k_end = strchr(t_end + 1, '/');
  // the root, a tenant and a home itself (revalidated by JS on every lookup)
  if (k_end == NULL || k_end[1] == 0) { fp_fallback(); return HOMESFS_FASTPATH_FALLBACK; }
  size_t plen = (size_t) (k_end - path);
  const char *rel = k_end + 1;
  uint32_t h = fp_hash(path, plen);

  int answered = 0;
  pthread_rwlock_rdlock(&fp_lock);
  fp_home_t *home = fp_find_home(path, plen, h);
  if (home != NULL && fp_components_ok(rel, home->max_name)) {
    struct open_how how;
    memset(&how, 0, sizeof(how));
    how.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS;
    int fd = (int) syscall(SYS_openat2, home->fd, rel, &how, sizeof(how));
    if (fd < 0 && errno == ENOSYS) {
      // A kernel before 5.6: nothing to walk with, JS answers everything.
      __atomic_store_n(&fp_enabled, 0, __ATOMIC_RELEASE);
    } else if (fd < 0 && (errno == ENOENT || errno == ENOTDIR)) {
      answered = -errno;
    }
    struct stat st;
    if (fd >= 0) {
      int r = fstat(fd, &st);
      close(fd);
      uint32_t t = ((uint32_t) st.st_mode & S_IFMT) >> 12;
      // The open set is read after the fstat: an inode not open now was not
      // open when it was read, so JS would have answered the same then. An
      // open one is answered with its charged size, once JS published it.
      fp_inode_t *oi = r == 0 ? fp_find_inode((uint64_t) st.st_dev, (uint64_t) st.st_ino) : NULL;
      int sized = oi != NULL && __atomic_load_n(&oi->has_size, __ATOMIC_ACQUIRE);
      if (r == 0 &&
          (uint64_t) st.st_dev == home->dev &&
          ((uint64_t) st.st_ino >> 63) == 0 &&
          (home->types & (1u << t)) != 0 &&
          (oi == NULL || sized)) {
        uint32_t perms = (uint32_t) st.st_mode & 07777;
        if (sized && S_ISREG(st.st_mode)) {
          uint64_t bits = __atomic_load_n(&oi->size_bits, __ATOMIC_ACQUIRE);
          double charged;
          memcpy(&charged, &bits, sizeof(charged));
          if (charged > (double) st.st_size) st.st_size = (off_t) charged;
        }
        *out = st;
        out->st_mode = (mode_t) ((t << 12) | (perms & home->keep[t]) | home->or[t]);
        if (!home->owner_from_stat) {
          out->st_uid = home->uid;
          out->st_gid = home->gid;
        }
        answered = 1;
      }
    }
  }
  pthread_rwlock_unlock(&fp_lock);
  if (!answered) { fp_fallback(); return HOMESFS_FASTPATH_FALLBACK; }
  __atomic_add_fetch(&fp_answered, 1, __ATOMIC_RELAXED);
  if (answered < 0) {
    __atomic_add_fetch(&fp_negative, 1, __ATOMIC_RELAXED);
    return answered;
  }
  return 0;
}

int homesfs_fastpath_fgetattr (uint64_t fh, struct stat *out) {
  if (!__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE)) return HOMESFS_FASTPATH_FALLBACK;
  int answered = 0;
  pthread_rwlock_rdlock(&fp_lock);
  fp_handle_t *e = fp_handles[fh % FP_HANDLE_BUCKETS];
  while (e != NULL && e->fh != fh) e = e->next;
  struct stat st;
  if (e != NULL && fstat(e->fd, &st) == 0) {
    uint32_t t = ((uint32_t) st.st_mode & S_IFMT) >> 12;
    if (((uint64_t) st.st_ino >> 63) == 0 && (e->types & (1u << t)) != 0) {
      *out = st;
      out->st_mode = (mode_t) ((t << 12) | (((uint32_t) st.st_mode & 07777) & e->keep[t]) | e->or[t]);
      if (!e->owner_from_stat) {
        out->st_uid = e->uid;
        out->st_gid = e->gid;
      }
      answered = 1;
    }
  }
  pthread_rwlock_unlock(&fp_lock);
  __atomic_add_fetch(answered ? &fp_fanswered : &fp_ffallbacks, 1, __ATOMIC_RELAXED);
  return answered ? 0 : HOMESFS_FASTPATH_FALLBACK;
}

// READDIR, the copy of dir.ts's readdirBacking for a home's directories (its
// root too), streamed: every request is answered from the directory itself at
// the kernel's offset, so libfuse keeps one request's worth per open handle
// (its offset form of the filler) instead of a copy of the whole listing, and
// an open handle costs no descriptor and no memory in proportion to the
// directory. The offsets are the backing filesystem's own (getdents64's d_off,
// which lseek on a new descriptor of the directory accepts again: ext4's hash
// cookies, tmpfs's stable offsets), so the entries come in the directory's
// order, not sorted. Each entry as JS would list it: its name UTF-8 (JS could
// never look another up again), lstat'ed (fstatat AT_SYMLINK_NOFOLLOW), left
// out when it vanished or lies on another device, with its inode number and
// type; "." and ".." as the directory gives them. An inode number in the
// synthetic range makes JS fail the whole listing: that goes to JS, as does a
// directory the confined walk cannot open (a symlink or mount anywhere) or one
// C does not serve at all (JS streams its big listings by offsets of its own:
// a directory is always listed by one side, unless its home is republished
// while a listing is under way, which then may end early). A failure of a
// listing C has under way (offset > 0) answers its errno, never JS.

static int fp_readdir_fallback (void) {
  __atomic_add_fetch(&fp_rfallbacks, 1, __ATOMIC_RELAXED);
  return HOMESFS_FASTPATH_FALLBACK;
}

#define FP_DENTS_BUF 32768

struct fp_linux_dirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

// Opens the directory `rel` of the home `path` names (the home itself when rel
// is empty) by the confined walk; -1 when C cannot serve it.
static int fp_open_listed_dir (const char *path, uint64_t *dev) {
  if (path == NULL || path[0] != '/') return -1;
  const char *t_end = strchr(path + 1, '/');
  if (t_end == NULL) return -1;
  const char *k_end = strchr(t_end + 1, '/');
  size_t plen = k_end == NULL ? strlen(path) : (size_t) (k_end - path);
  const char *rel = k_end == NULL || k_end[1] == 0 ? "" : k_end + 1;
  if (k_end == NULL && t_end[1] == 0) return -1;
  uint32_t h = fp_hash(path, plen);
  struct open_how how;
  memset(&how, 0, sizeof(how));
  how.flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS;
  int dfd = -1;
  // Under the read lock only while the home's descriptor is used.
  pthread_rwlock_rdlock(&fp_lock);
  fp_home_t *home = fp_find_home(path, plen, h);
  if (home != NULL && (rel[0] == 0 || fp_components_ok(rel, home->max_name))) {
    *dev = home->dev;
    dfd = rel[0] == 0 ? openat(home->fd, ".", how.flags) : (int) syscall(SYS_openat2, home->fd, rel, &how, sizeof(how));
  }
  pthread_rwlock_unlock(&fp_lock);
  return dfd;
}

int homesfs_fastpath_readdir (const char *path, void *buf, homesfs_fill_t filler, off_t offset, int (*name_ok) (const unsigned char *, size_t)) {
  if (!__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE)) return HOMESFS_FASTPATH_FALLBACK;
  uint64_t dev = 0;
  // Not a directory C serves (unpublished, a reserved name, a symlink or mount on the way): JS's, at any offset.
  int dfd = fp_open_listed_dir(path, &dev);
  if (dfd < 0) return fp_readdir_fallback();
  struct stat self;
  if (fstat(dfd, &self) != 0 || (uint64_t) self.st_dev != dev) {
    close(dfd);
    if (offset > 0) return -EIO;
    return fp_readdir_fallback();
  }
  if (offset > 0 && lseek(dfd, offset, SEEK_SET) < 0) {
    int err = errno;
    close(dfd);
    return -err;
  }
  char *dents = malloc(FP_DENTS_BUF);
  if (dents == NULL) { close(dfd); return offset > 0 ? -ENOMEM : fp_readdir_fallback(); }
  int full = 0, fallback = 0, err = 0;
  struct stat out;
  while (!full && !fallback && !err) {
    long got = syscall(SYS_getdents64, dfd, dents, FP_DENTS_BUF);
    if (got < 0) { err = errno; break; }
    if (got == 0) break;
    for (long pos = 0; pos < got && !full; ) {
      struct fp_linux_dirent64 *e = (struct fp_linux_dirent64 *) (dents + pos);
      pos += e->d_reclen;
      const char *nm = e->d_name;
      memset(&out, 0, sizeof(out));
      if (nm[0] == '.' && (nm[1] == 0 || (nm[1] == '.' && nm[2] == 0))) {
        // "." and "..": what the directory says (".." of a home root is its tenant's, as JS lists it).
        out.st_ino = (ino_t) e->d_ino;
        out.st_mode = S_IFDIR;
      } else {
        size_t len = strlen(nm);
        if (len > 255 || !name_ok((const unsigned char *) nm, len)) continue;
        struct stat st;
        if (fstatat(dfd, nm, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // vanished meanwhile
        if ((uint64_t) st.st_dev != dev) continue;                       // a mount point: never served
        if (((uint64_t) st.st_ino >> 63) != 0) { fallback = 1; break; }
        out.st_ino = st.st_ino;
        out.st_mode = st.st_mode & S_IFMT;
      }
      if (((uint64_t) out.st_ino >> 63) != 0) { fallback = 1; break; }
      // The entry's own d_off: where the next request starts when this one is the last that fits.
      full = filler(buf, nm, &out, (off_t) e->d_off);
    }
  }
  free(dents);
  close(dfd);
  // A failing getdents, or an inode JS would refuse: a listing not yet under way goes to JS, which maps the errno.
  if (fallback || err) {
    if (offset > 0) return fallback ? -EIO : -err;
    return fp_readdir_fallback();
  }
  __atomic_add_fetch(&fp_ranswered, 1, __ATOMIC_RELAXED);
  return 0;
}

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
  if (path == NULL || path[0] != '/') return HOMESFS_FASTPATH_FALLBACK;
  const char *t_end = strchr(path + 1, '/');
  if (t_end == NULL) return HOMESFS_FASTPATH_FALLBACK;
  const char *k_end = strchr(t_end + 1, '/');
  if (k_end == NULL || k_end[1] == 0) return HOMESFS_FASTPATH_FALLBACK;
  size_t plen = (size_t) (k_end - path);
  const char *rel = k_end + 1;
  const char *last_slash = strrchr(rel, '/');
  const char *name = last_slash ? last_slash + 1 : rel;
  uint32_t h = fp_hash(path, plen);

  int done = 0;
  int counted = 0;
  pthread_rwlock_rdlock(&fp_lock);
  fp_home_t *home = fp_find_home(path, plen, h);
  if (home != NULL && home->pending != NULL && fp_components_ok(rel, home->max_name)) {
    counted = 1;
    int pfd = home->fd;
    if (last_slash != NULL) {
      char *prel = strndup(rel, (size_t) (last_slash - rel));
      struct open_how how;
      memset(&how, 0, sizeof(how));
      how.flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
      how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS;
      pfd = prel == NULL ? -1 : (int) syscall(SYS_openat2, home->fd, prel, &how, sizeof(how));
      free(prel);
    }
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

static fp_handle_t * fp_unlink_handle_locked (uint64_t fh);

// ---- SETATTR by path: UTIMENS, CHMOD and CHOWN -----------------------------------
// JS's utimens (attr.ts) is utimensat(AT_SYMLINK_NOFOLLOW) of one validated
// name below the confined parent, with no decision at all; its chmod is
// chmodDecision on the node's mode, then chmod of the node through its O_PATH
// descriptor, nothing for a symlink. Both are done here, below a home JS
// published them for, on the same walk as unlink: the parent by openat2
// (RESOLVE_BENEATH|NO_SYMLINKS|NO_XDEV), the name as one component. The home
// itself, the daemon's levels, reserved names (.homesfs, libfuse's hidden
// names: JS finds those by their handles) and any error go to JS, which
// repeats the call (both are idempotent: a failed one changed nothing) and
// maps and logs the errno.
// chown (profile chown: owner-only): only the no-op JS answers with success,
// a chown to the home's owner (or -1) of a node that exists; the refusal of
// any other stays JS's (it is logged and counted).
// chown (profile chown: allow): lchown of the name, as JS does.

// The home published for `want`, and the parent directory of the last
// component of `rel` (its own O_PATH descriptor, or the home's): 0, or
// fallback. Leaves the read lock held on success.
static int fp_attr_begin (const char *path, uint32_t want, fp_home_t **home_out, int *pfd_out, const char **name_out) {
  if (!__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE)) return HOMESFS_FASTPATH_FALLBACK;
  if (path == NULL || path[0] != '/') return HOMESFS_FASTPATH_FALLBACK;
  const char *t_end = strchr(path + 1, '/');
  if (t_end == NULL) return HOMESFS_FASTPATH_FALLBACK;
  const char *k_end = strchr(t_end + 1, '/');
  if (k_end == NULL || k_end[1] == 0) return HOMESFS_FASTPATH_FALLBACK;
  size_t plen = (size_t) (k_end - path);
  const char *rel = k_end + 1;
  const char *last_slash = strrchr(rel, '/');
  uint32_t h = fp_hash(path, plen);
  pthread_rwlock_rdlock(&fp_lock);
  fp_home_t *home = fp_find_home(path, plen, h);
  if (home == NULL || (home->attr_flags & want) == 0) { pthread_rwlock_unlock(&fp_lock); return HOMESFS_FASTPATH_FALLBACK; }
  if (!fp_components_ok(rel, home->max_name)) {
    pthread_rwlock_unlock(&fp_lock);
    __atomic_add_fetch(&fp_sfallbacks, 1, __ATOMIC_RELAXED);
    return HOMESFS_FASTPATH_FALLBACK;
  }
  int pfd = home->fd;
  if (last_slash != NULL) {
    char *prel = strndup(rel, (size_t) (last_slash - rel));
    struct open_how how;
    memset(&how, 0, sizeof(how));
    how.flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS;
    pfd = prel == NULL ? -1 : (int) syscall(SYS_openat2, home->fd, prel, &how, sizeof(how));
    free(prel);
  }
  if (pfd < 0) {
    pthread_rwlock_unlock(&fp_lock);
    __atomic_add_fetch(&fp_sfallbacks, 1, __ATOMIC_RELAXED);
    return HOMESFS_FASTPATH_FALLBACK;
  }
  *home_out = home;
  *pfd_out = pfd;
  *name_out = last_slash ? last_slash + 1 : rel;
  return 0;
}

static int fp_attr_end (fp_home_t *home, int pfd, int done, uint64_t *counter) {
  if (pfd != home->fd) close(pfd);
  pthread_rwlock_unlock(&fp_lock);
  __atomic_add_fetch(done ? counter : &fp_sfallbacks, 1, __ATOMIC_RELAXED);
  return done ? 0 : HOMESFS_FASTPATH_FALLBACK;
}

int homesfs_fastpath_utimens (const char *path, const struct timespec tv[2]) {
  fp_home_t *home;
  int pfd;
  const char *name;
  if (fp_attr_begin(path, HOMESFS_ATTR_UTIMENS, &home, &pfd, &name) != 0) return HOMESFS_FASTPATH_FALLBACK;
  // The node must be on the home's device, as every node JS touches.
  struct stat st;
  int done = fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && (uint64_t) st.st_dev == home->dev &&
             utimensat(pfd, name, tv, AT_SYMLINK_NOFOLLOW) == 0;
  return fp_attr_end(home, pfd, done, &fp_tanswered);
}

int homesfs_fastpath_chown (const char *path, uint32_t uid, uint32_t gid) {
  fp_home_t *home;
  int pfd;
  const char *name;
  if (fp_attr_begin(path, HOMESFS_ATTR_CHOWN_OWNER | HOMESFS_ATTR_CHOWN_ALLOW, &home, &pfd, &name) != 0) return HOMESFS_FASTPATH_FALLBACK;
  int done = 0;
  if ((home->attr_flags & HOMESFS_ATTR_CHOWN_ALLOW) != 0) {
    done = fchownat(pfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) == 0;
  } else if ((uid == UINT32_MAX || uid == home->uid) && (gid == UINT32_MAX || gid == home->gid)) {
    struct stat st;
    done = fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && (uint64_t) st.st_dev == home->dev;
  }
  return fp_attr_end(home, pfd, done, &fp_oanswered_chown);
}

int homesfs_fastpath_chmod (const char *path, uint32_t mode) {
  fp_home_t *home;
  int pfd;
  const char *name;
  if (fp_attr_begin(path, HOMESFS_ATTR_CHMOD, &home, &pfd, &name) != 0) return HOMESFS_FASTPATH_FALLBACK;
  int done = 0;
  int node = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (node >= 0 && fstat(node, &st) == 0 && (uint64_t) st.st_dev == home->dev) {
    if (S_ISLNK(st.st_mode)) {
      done = 1; // Linux has no symlink modes: JS answers success and changes nothing
    } else {
      uint32_t want = mode & home->chmod_m;
      if (want == ((uint32_t) st.st_mode & home->chmod_k)) {
        done = 1;
      } else {
        // chmod through the O_PATH descriptor's magic link acts on that inode, never on a name.
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", node);
        done = chmod(proc, (mode_t) want) == 0;
      }
    }
  }
  if (node >= 0) close(node);
  return fp_attr_end(home, pfd, done, &fp_canswered);
}

// The inode counted open and the handle published, under the write lock (as
// fastpath_inode(+1) and fastpath_set_handle do for JS), or both undone.
static int fp_open_register (uint64_t dev, uint64_t ino, fp_handle_t *he, fp_inode_t *fresh) {
  uint32_t b = fp_inode_bucket(dev, ino);
  pthread_rwlock_wrlock(&fp_lock);
  fp_inode_t *e = fp_find_inode(dev, ino);
  if (e != NULL) {
    e->count++;
  } else {
    fresh->dev = dev; fresh->ino = ino; fresh->count = 1;
    fresh->next = fp_inodes[b];
    fp_inodes[b] = fresh;
    fp_inode_count++;
    fresh = NULL;
  }
  fp_handle_t *old = fp_unlink_handle_locked(he->fh);
  he->next = fp_handles[he->fh % FP_HANDLE_BUCKETS];
  fp_handles[he->fh % FP_HANDLE_BUCKETS] = he;
  fp_handle_count++;
  pthread_rwlock_unlock(&fp_lock);
  free(old);
  free(fresh);
  return 0;
}

static void fp_open_unregister (uint64_t dev, uint64_t ino, uint32_t fh) {
  uint32_t b = fp_inode_bucket(dev, ino);
  fp_inode_t *gone = NULL;
  pthread_rwlock_wrlock(&fp_lock);
  fp_inode_t **pp = &fp_inodes[b];
  for (fp_inode_t *e = *pp; e != NULL; pp = &e->next, e = e->next) {
    if (e->dev == dev && e->ino == ino) {
      if (--e->count == 0) { *pp = e->next; gone = e; fp_inode_count--; }
      break;
    }
  }
  fp_handle_t *he = fp_unlink_handle_locked(fh);
  pthread_rwlock_unlock(&fp_lock);
  free(gone);
  free(he);
}

// The first slot of the home granted for uid, taken out (NULL if none). Under fp_open_lock.
static fp_open_rec_t * fp_pop_credit_locked (fp_home_t *home, uint32_t uid) {
  for (fp_open_rec_t **pp = &home->credits; *pp != NULL; pp = &(*pp)->next) {
    if ((*pp)->uid == uid) {
      fp_open_rec_t *r = *pp;
      *pp = r->next;
      fp_credit_count--;
      r->home = home;
      r->gen = fp_credit_gen;
      return r;
    }
  }
  return NULL;
}

int homesfs_fastpath_open (const char *path, int flags, uint32_t uid, uint64_t *fh, int *direct_io) {
  if (!__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE)) return HOMESFS_FASTPATH_FALLBACK;
  // Read-only and nothing that changes the file (O_TRUNC truncates even then): the rest is JS's.
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC) != 0) return HOMESFS_FASTPATH_FALLBACK;
  if (path == NULL || path[0] != '/') return HOMESFS_FASTPATH_FALLBACK;
  const char *t_end = strchr(path + 1, '/');
  if (t_end == NULL) return HOMESFS_FASTPATH_FALLBACK;
  const char *k_end = strchr(t_end + 1, '/');
  if (k_end == NULL || k_end[1] == 0) return HOMESFS_FASTPATH_FALLBACK;
  size_t plen = (size_t) (k_end - path);
  const char *rel = k_end + 1;
  uint32_t h = fp_hash(path, plen);

  fp_handle_t *he = calloc(1, sizeof(*he));
  fp_inode_t *fresh = calloc(1, sizeof(*fresh));
  if (he == NULL || fresh == NULL) { free(he); free(fresh); return HOMESFS_FASTPATH_FALLBACK; }

  int counted = 0;
  int fd = -1;
  uint32_t oflags = 0;
  uint64_t gen = 0;
  fp_open_rec_t *credit = NULL;
  struct stat st;
  pthread_rwlock_rdlock(&fp_lock);
  fp_home_t *home = fp_find_home(path, plen, h);
  if (home != NULL && (home->open_flags & HOMESFS_OPEN_ON) != 0) {
    counted = 1;
    if (fp_components_ok(rel, home->max_name)) {
      struct open_how how;
      memset(&how, 0, sizeof(how));
      how.flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
      how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS;
      fd = (int) syscall(SYS_openat2, home->fd, rel, &how, sizeof(how));
    }
    if (fd >= 0) {
      // A slot JS granted is room under its open-file caps, but directory handles (dirhandles.c) may have
      // taken that room since: then JS decides (and refuses, taking its slots back). Counted there until
      // JS takes the record in.
      void *dh = NULL;
      if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t) st.st_dev == home->dev && ((uint64_t) st.st_ino >> 63) == 0 &&
          (dh = homesfs_dh_file_take(uid, path, plen)) != NULL) {
        pthread_mutex_lock(&fp_open_lock);
        credit = fp_pop_credit_locked(home, uid);
        pthread_mutex_unlock(&fp_open_lock);
        if (credit == NULL) homesfs_dh_file_give(uid, dh);
        else credit->dh = dh;
      }
      if (credit != NULL) {
        oflags = home->open_flags;
        gen = fp_policy_gen;
        he->fh = credit->fh;
        he->fd = fd;
        he->uid = home->uid;
        he->gid = home->gid;
        he->owner_from_stat = home->owner_from_stat;
        he->types = home->types;
        memcpy(he->keep, home->keep, sizeof(he->keep));
        memcpy(he->or, home->or, sizeof(he->or));
      } else {
        close(fd);
        fd = -1;
      }
    }
  }
  pthread_rwlock_unlock(&fp_lock);

  if (credit == NULL) {
    free(he);
    free(fresh);
    if (counted) __atomic_add_fetch(&fp_ofallbacks, 1, __ATOMIC_RELAXED);
    return HOMESFS_FASTPATH_FALLBACK;
  }
  uint64_t dev = (uint64_t) st.st_dev, ino = (uint64_t) st.st_ino;
  uint32_t handle = credit->fh;
  fp_open_register(dev, ino, he, fresh);
  // nlink after the inode counts as open: 0 means an unlink removed the last
  // name first (JS's attachInode answers ENOENT there; JS repeats the open).
  struct stat now;
  if (fstat(fd, &now) != 0 || now.st_nlink == 0) {
    fp_open_unregister(dev, ino, handle);
    close(fd);
    fp_dh_give(credit);
    fp_queue(credit);  // kind is still UNUSED: the slot goes back
    __atomic_add_fetch(&fp_ofallbacks, 1, __ATOMIC_RELAXED);
    return HOMESFS_FASTPATH_FALLBACK;
  }
  credit->kind = HOMESFS_REC_OPENED;
  credit->fd = fd;
  credit->dev = dev;
  credit->ino = ino;
  credit->published = (oflags & HOMESFS_OPEN_DP_READ) != 0 && homesfs_dp_publish_fd(handle, fd, 1, dev, ino, 0, gen) ? 1 : 0;
  fp_queue(credit);
  *fh = handle;
  *direct_io = (oflags & HOMESFS_OPEN_DIRECT_IO) != 0;
  __atomic_add_fetch(&fp_oanswered, 1, __ATOMIC_RELAXED);
  return 0;
}

// RELEASE of a handle opened here that JS has not adopted yet: a
// read-only open and close with no request in between, the common case of
// `cat`, `stat`-then-read and compilers probing headers. Nothing of it reached
// JS, so nothing needs to: its record leaves the queue, what the open did is
// undone (the data plane entry, the fgetattr handle, the inode's open count,
// the descriptor) and its slot goes back to the home's list for the next
// open, as if it had never been taken. JS counted the slot as granted all
// along, so its caps and views are unchanged. If slots went back to JS since
// this one was taken (fp_credit_gen: a reclaim before a cap, a home withdrawn,
// republished or freed), the slot goes to JS through the queue instead, as an
// unused one. Returns 1 when the RELEASE was answered here; 0: the handle is
// JS's (adopted, or not opened here), and the RELEASE goes on as before.
int homesfs_fastpath_release (uint64_t fh) {
  if (!__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE)) return 0;
  if (__atomic_load_n(&fp_open_queued, __ATOMIC_RELAXED) == 0) return 0;
  fp_open_rec_t *r = NULL;
  pthread_mutex_lock(&fp_open_lock);
  for (fp_open_rec_t **pp = &fp_opens; *pp != NULL; pp = &(*pp)->next) {
    if ((*pp)->kind == HOMESFS_REC_OPENED && (*pp)->fh == fh) {
      r = *pp;
      *pp = r->next;
      if (fp_opens_tail == &r->next) fp_opens_tail = pp;
      fp_open_queued--;
      break;
    }
  }
  pthread_mutex_unlock(&fp_open_lock);
  if (r == NULL) return 0;
  // The kernel sends RELEASE after the handle's last READ was answered: nothing is in flight.
  if (r->published) homesfs_dp_unpublish_fd(fh);
  fp_open_unregister(r->dev, r->ino, (uint32_t) fh);
  close(r->fd);
  fp_dh_give(r);
  r->kind = HOMESFS_REC_UNUSED;
  r->fd = -1;
  r->published = 0;
  r->dev = 0;
  r->ino = 0;
  pthread_mutex_lock(&fp_open_lock);
  if (r->gen == fp_credit_gen && r->home != NULL) {
    r->next = r->home->credits;
    r->home->credits = r;
    fp_credit_count++;
  } else {
    fp_queue_locked(r);
  }
  pthread_mutex_unlock(&fp_open_lock);
  __atomic_add_fetch(&fp_oclosed, 1, __ATOMIC_RELAXED);
  return 1;
}

// CREATE: JS's createIn for a new name, step for step, in a
// mutable home JS opened for it (binary content, owner-only ownership, no
// per-directory entry limit, a new file's mode of the form published): the
// depth, the confined walk to the parent, a create slot for the caller's uid
// (an open-file slot, an inode the ledger already reserved, a handle number),
// O_CREAT|O_EXCL|O_NOFOLLOW|O_NONBLOCK with the published mode, a regular file
// on the home's device, fchown to the published owner, the inode counted open
// and the handle published, the data plane told, the create queued for JS,
// which adopts it (and commits the reserved inode) before anything else. A
// name that exists (O_CREAT without O_EXCL opens it; O_TRUNC truncates it, a
// ledger change) and every doubt go to JS, with nothing made. A failure
// after the file was made removes it again before JS is asked.
int homesfs_fastpath_create (const char *path, uint32_t mode, int flags, uint32_t uid, uint32_t gid, uint64_t *fh, int *direct_io) {
  if (!__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE)) return HOMESFS_FASTPATH_FALLBACK;
  if (path == NULL || path[0] != '/') return HOMESFS_FASTPATH_FALLBACK;
  const char *t_end = strchr(path + 1, '/');
  if (t_end == NULL) return HOMESFS_FASTPATH_FALLBACK;
  const char *k_end = strchr(t_end + 1, '/');
  if (k_end == NULL || k_end[1] == 0) return HOMESFS_FASTPATH_FALLBACK;
  size_t plen = (size_t) (k_end - path);
  const char *rel = k_end + 1;
  const char *last_slash = strrchr(rel, '/');
  const char *name = last_slash ? last_slash + 1 : rel;
  uint32_t depth = 1;
  for (const char *c = rel; *c; c++) if (*c == '/') depth++;
  uint32_t h = fp_hash(path, plen);

  fp_handle_t *he = calloc(1, sizeof(*he));
  fp_inode_t *fresh = calloc(1, sizeof(*fresh));
  if (he == NULL || fresh == NULL) { free(he); free(fresh); return HOMESFS_FASTPATH_FALLBACK; }

  int counted = 0;
  int fd = -1;
  int pfd = -1;
  uint32_t oflags = 0;
  uint32_t dpw = 0;
  uint64_t gen = 0;
  int64_t *wl_acct = NULL;
  fp_open_rec_t *credit = NULL;
  struct stat st;
  pthread_rwlock_rdlock(&fp_lock);
  fp_home_t *home = fp_find_home(path, plen, h);
  if (home != NULL && home->create_on && home->pending != NULL && (home->open_flags & HOMESFS_OPEN_ON) != 0) {
    counted = 1;
    if ((home->max_depth == 0 || depth <= home->max_depth) && fp_components_ok(rel, home->max_name)) {
      pfd = home->fd;
      if (last_slash != NULL) {
        char *prel = strndup(rel, (size_t) (last_slash - rel));
        struct open_how how;
        memset(&how, 0, sizeof(how));
        how.flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
        how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS;
        pfd = prel == NULL ? -1 : (int) syscall(SYS_openat2, home->fd, prel, &how, sizeof(how));
        free(prel);
      }
    }
    void *dh = NULL;
    if (pfd >= 0 && (dh = homesfs_dh_file_take(uid, path, plen)) != NULL) {  // as for opens: directory handles may hold the room
      pthread_mutex_lock(&fp_open_lock);
      for (fp_open_rec_t **pp = &home->ccredits; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->uid == uid) { credit = *pp; *pp = credit->next; fp_credit_count--; fp_creates_inflight++; break; }
      }
      pthread_mutex_unlock(&fp_open_lock);
      if (credit == NULL) homesfs_dh_file_give(uid, dh);
      else credit->dh = dh;
    }
    mode_t m = (mode_t) ((mode & home->mode_m) | home->mode_or);
    // setuid/setgid asked: JS sets them again after the chown (which clears them), by descriptor.
    if (credit != NULL && (m & 06000) != 0) {
      fp_dh_give(credit);
      fp_queue_create_done(credit);
      credit = NULL;
    }
    // Whose file it is on disk (context.ts diskOwner/ownNew): the home's owner, or the caller with a setgid parent's group.
    uint32_t own_uid = home->uid, own_gid = home->gid;
    if (credit != NULL && home->create_owner == 1) {
      struct stat pst;
      own_uid = uid;
      own_gid = gid;
      if (fstat(pfd, &pst) != 0) {
        fp_dh_give(credit);
        fp_queue_create_done(credit);
        credit = NULL;
      } else if ((pst.st_mode & S_ISGID) != 0) {
        own_gid = (uint32_t) -1;
      }
    }
    if (credit != NULL) {
      // As file.ts backingFlags: read-only stays read-only, anything else is read-write (the UTF-8 check reads around writes).
      int acc = (flags & O_ACCMODE) == O_RDONLY ? O_RDONLY : O_RDWR;
      fd = openat(pfd, name, acc | (flags & O_APPEND) | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, m);
      if (fd >= 0) {
        int known = fstat(fd, &st) == 0;
        if (!(known && S_ISREG(st.st_mode) && (uint64_t) st.st_dev == home->dev && ((uint64_t) st.st_ino >> 63) == 0 &&
              fchown(fd, own_uid, own_gid) == 0)) {
          // Made but not as JS would have it: nothing is left. The name is
          // removed only while it is still the file made here (another may
          // have been renamed over it since); Linux has no unlink by
          // descriptor, so this narrows the window to the two calls. A file
          // whose identity is unknown (fstat failed) is left where it is.
          struct stat named;
          if (known && fstatat(pfd, name, &named, AT_SYMLINK_NOFOLLOW) == 0 && named.st_dev == st.st_dev && named.st_ino == st.st_ino) unlinkat(pfd, name, 0);
          close(fd);
          fd = -1;
        }
      }
      if (fd >= 0) {
        oflags = (uint32_t) ((flags & O_ACCMODE) | (flags & O_APPEND));
        he->fh = credit->fh;
        he->fd = fd;
        he->uid = home->uid;
        he->gid = home->gid;
        he->owner_from_stat = home->owner_from_stat;
        he->types = home->types;
        memcpy(he->keep, home->keep, sizeof(he->keep));
        memcpy(he->or, home->or, sizeof(he->or));
        *direct_io = (home->open_flags & HOMESFS_OPEN_DIRECT_IO) != 0;
        credit->published = (home->open_flags & HOMESFS_OPEN_DP_READ) != 0 ? 1 : 0;
        dpw = home->open_flags;
        gen = fp_policy_gen;
        if (home->wl_on && home->pending_len >= HOMESFS_ACCT_LEN) wl_acct = home->pending;
      }
    }
    if (pfd >= 0 && pfd != home->fd) close(pfd);
  }
  pthread_rwlock_unlock(&fp_lock);

  if (fd < 0) {
    free(he);
    free(fresh);
    if (credit != NULL) { fp_dh_give(credit); fp_queue_create_done(credit); } // kind is still UNUSED_CREATE: slot and inode go back
    if (counted) __atomic_add_fetch(&fp_cfallbacks, 1, __ATOMIC_RELAXED);
    return HOMESFS_FASTPATH_FALLBACK;
  }
  uint64_t dev = (uint64_t) st.st_dev, ino = (uint64_t) st.st_ino;
  uint32_t handle = credit->fh;
  // A new file: its charged size is 0, and where JS let it, C owns it from
  // the start, so its first writes need no decision from JS either.
  fresh->size_bits = 0;  // the bits of 0.0
  fresh->has_size = 1;
  if (wl_acct != NULL) { fresh->deleg = 1; fresh->acct = wl_acct; }
  fp_open_register(dev, ino, he, fresh);
  // What a handle of a binary home publishes (context.ts publishData): reads, and, writable, writes decided without their data.
  uint32_t dp = (credit->published ? 1u : 0u) | ((oflags & O_ACCMODE) != O_RDONLY && (dpw & HOMESFS_OPEN_DP_WRITE) != 0 ? 2u : 0u);
  credit->published = dp != 0 && homesfs_dp_publish_fd(handle, fd, dp, dev, ino, (oflags & O_APPEND) != 0, gen) ? dp : 0;
  credit->kind = HOMESFS_REC_CREATED;
  credit->fd = fd;
  credit->dev = dev;
  credit->ino = ino;
  credit->oflags = oflags;
  fp_queue_create_done(credit);
  *fh = handle;
  __atomic_add_fetch(&fp_canswered_create, 1, __ATOMIC_RELAXED);
  return 0;
}

// ---------------------------------------------------------------------------
// The control plane (JS thread).

#define FP_THROW(msg) do { napi_throw_type_error(env, "EINVAL", (msg)); return NULL; } while (0)

static char * fp_string (napi_env env, napi_value v, size_t *len) {
  size_t n = 0;
  if (napi_get_value_string_utf8(env, v, NULL, 0, &n) != napi_ok) return NULL;
  char *s = malloc(n + 1);
  if (s == NULL) return NULL;
  napi_get_value_string_utf8(env, v, s, n + 1, &n);
  if (strlen(s) != n) { free(s); return NULL; }
  *len = n;
  return s;
}

static int fp_u64 (napi_env env, napi_value v, uint64_t *out) {
  napi_valuetype t;
  if (napi_typeof(env, v, &t) != napi_ok) return 0;
  if (t == napi_bigint) {
    bool lossless = false;
    if (napi_get_value_bigint_uint64(env, v, out, &lossless) != napi_ok) return 0;
    return lossless;
  }
  if (t == napi_number) {
    double d;
    napi_get_value_double(env, v, &d);
    if (!(d >= 0) || d > 9007199254740991.0 || (double) (uint64_t) d != d) return 0;
    *out = (uint64_t) d;
    return 1;
  }
  return 0;
}

static void fp_drop_pending (fp_home_t *e) {
  if (e->pending_ref != NULL) napi_delete_reference(e->env, e->pending_ref);
  e->pending_ref = NULL;
  e->pending = NULL;
}

static void fp_free_home (fp_home_t *e) {
  fp_return_credits(e);
  fp_drop_pending(e);
  close(e->fd);
  free(e->prefix);
  free(e);
}

// Under the write lock: unlink and free the entry for prefix (if token matches, or any with token < 0).
static int fp_remove_locked (const char *prefix, size_t n, double token) {
  uint32_t h = fp_hash(prefix, n);
  fp_home_t **pp = &fp_homes[h % FP_HOME_BUCKETS];
  for (fp_home_t *e = *pp; e != NULL; pp = &e->next, e = e->next) {
    if (e->hash == h && e->prefix_len == n && memcmp(e->prefix, prefix, n) == 0) {
      if (token >= 0 && e->token != token) return 0;
      *pp = e->next;
      fp_policy_moved_locked();
      fp_free_home(e);
      fp_home_count--;
      return 1;
    }
  }
  return 0;
}

// fastpath_set_home(prefix, fd, dev, uid, gid, ownerFromStat, maxName, types, masks: Uint32Array(32), token)
static napi_value fp_set_home (napi_env env, napi_callback_info info) {
  size_t argc = 10;
  napi_value argv[10];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 10) FP_THROW("fastpath_set_home: 10 arguments");
  size_t plen = 0;
  char *prefix = fp_string(env, argv[0], &plen);
  if (prefix == NULL || plen < 4 || prefix[0] != '/') { free(prefix); FP_THROW("fastpath_set_home: prefix is /<tenant>/<key>"); }
  int32_t fd = -1;
  uint64_t dev = 0;
  uint32_t uid = 0, gid = 0, max_name = 0, types = 0;
  bool from_stat = false;
  double token = 0;
  void *data = NULL;
  size_t len = 0;
  napi_typedarray_type tt;
  napi_value ab;
  size_t off = 0;
  if (napi_get_value_int32(env, argv[1], &fd) != napi_ok || fd < 0 ||
      !fp_u64(env, argv[2], &dev) ||
      napi_get_value_uint32(env, argv[3], &uid) != napi_ok ||
      napi_get_value_uint32(env, argv[4], &gid) != napi_ok ||
      napi_get_value_bool(env, argv[5], &from_stat) != napi_ok ||
      napi_get_value_uint32(env, argv[6], &max_name) != napi_ok ||
      napi_get_value_uint32(env, argv[7], &types) != napi_ok ||
      napi_get_typedarray_info(env, argv[8], &tt, &len, &data, &ab, &off) != napi_ok || tt != napi_uint32_array || len < 32 ||
      napi_get_value_double(env, argv[9], &token) != napi_ok || !(token >= 0)) {
    free(prefix);
    FP_THROW("fastpath_set_home: bad arguments");
  }
  fp_home_t *e = calloc(1, sizeof(*e));
  if (e == NULL) { free(prefix); napi_throw_error(env, "ENOMEM", "fastpath_set_home: out of memory"); return NULL; }
  // C's own descriptor: closed only here, under the write lock.
  e->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (e->fd < 0) {
    int err = errno;
    free(prefix); free(e);
    napi_throw_error(env, err == EBADF ? "EBADF" : "EMFILE", "fastpath_set_home: cannot dup the home descriptor");
    return NULL;
  }
  const uint32_t *m = (const uint32_t *) data;
  e->prefix = prefix;
  e->prefix_len = plen;
  e->hash = fp_hash(prefix, plen);
  e->dev = dev;
  e->uid = uid;
  e->gid = gid;
  e->owner_from_stat = from_stat ? 1 : 0;
  e->max_name = max_name > 255 ? 255 : max_name;
  e->types = types & 0xffff;
  for (int i = 0; i < 16; i++) { e->keep[i] = m[i] & 07777; e->or[i] = m[16 + i] & 07777; }
  e->token = token;
  pthread_rwlock_wrlock(&fp_lock);
  if (fp_remove_locked(prefix, plen, -1) == 0) { /* new */ }
  e->next = fp_homes[e->hash % FP_HOME_BUCKETS];
  fp_homes[e->hash % FP_HOME_BUCKETS] = e;
  fp_home_count++;
  pthread_rwlock_unlock(&fp_lock);
  return NULL;
}

// fastpath_remove_home(prefix, token) -> removed? (token < 0: whatever is published)
static napi_value fp_remove_home (napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2) FP_THROW("fastpath_remove_home: 2 arguments");
  size_t plen = 0;
  double token = -1;
  char *prefix = fp_string(env, argv[0], &plen);
  if (prefix == NULL || napi_get_value_double(env, argv[1], &token) != napi_ok) { free(prefix); FP_THROW("fastpath_remove_home: bad arguments"); }
  pthread_rwlock_wrlock(&fp_lock);
  int removed = fp_remove_locked(prefix, plen, token);
  pthread_rwlock_unlock(&fp_lock);
  free(prefix);
  napi_value out;
  napi_get_boolean(env, removed != 0, &out);
  return out;
}

// fastpath_set_mutable(prefix, token, pending: BigInt64Array(2) | null) -> set?
// pending: C may unlink in that home and adds what leaves it there; null: C
// may not (returns once no native unlink of that home is in flight: the write lock).
static napi_value fp_set_mutable (napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3) FP_THROW("fastpath_set_mutable: 3 arguments");
  size_t plen = 0;
  double token = -1;
  char *prefix = fp_string(env, argv[0], &plen);
  if (prefix == NULL || napi_get_value_double(env, argv[1], &token) != napi_ok) { free(prefix); FP_THROW("fastpath_set_mutable: bad arguments"); }
  napi_valuetype t = napi_undefined;
  napi_typeof(env, argv[2], &t);
  int64_t *data = NULL;
  size_t data_len = 0;
  if (t != napi_null) {
    napi_typedarray_type tt;
    size_t len = 0, off = 0;
    napi_value ab;
    void *d = NULL;
    if (napi_get_typedarray_info(env, argv[2], &tt, &len, &d, &ab, &off) != napi_ok || tt != napi_bigint64_array || len < 2) {
      free(prefix);
      FP_THROW("fastpath_set_mutable: pending is a BigInt64Array of 2, or null");
    }
    data = (int64_t *) d;
    data_len = len;
  }
  napi_ref ref = NULL;
  if (data != NULL && napi_create_reference(env, argv[2], 1, &ref) != napi_ok) { free(prefix); FP_THROW("fastpath_set_mutable: cannot keep the array"); }
  int set = 0;
  int64_t *was = NULL;
  size_t was_len = 0;
  uint32_t h = fp_hash(prefix, plen);
  pthread_rwlock_wrlock(&fp_lock);
  fp_home_t *e = fp_find_home(prefix, plen, h);
  if (e != NULL && e->token == token) {
    // Creates need a mutable home (a rescan walks a still tree): made immutable, its create slots go back.
    if (data == NULL) fp_return_create_credits(e);
    was = e->pending;
    was_len = e->pending_len;
    fp_drop_pending(e);
    e->pending = data;
    e->pending_len = data != NULL ? data_len : 0;
    e->pending_ref = ref;
    e->env = env;
    ref = NULL;
    set = 1;
  }
  pthread_rwlock_unlock(&fp_lock);
  // Made immutable: a create that passed its check before is finishing (it
  // needs the write lock to register): wait until it is queued for JS, so the
  // caller's next settle adopts every file made in the home before now.
  if (data == NULL) {
    pthread_mutex_lock(&fp_open_lock);
    while (fp_creates_inflight > 0) pthread_cond_wait(&fp_creates_done, &fp_open_lock);
    pthread_mutex_unlock(&fp_open_lock);
    // And writes decided here that took byte credit before JS took it back
    // (the caller did, ledger.ts reclaimBytes): once they have settled, every
    // byte they added is in the array for the ledger's next takePending.
    if (was != NULL && was_len >= HOMESFS_ACCT_LEN) fp_wl_wait_home(was);
  }
  if (ref != NULL) napi_delete_reference(env, ref);
  free(prefix);
  napi_value out;
  napi_get_boolean(env, set != 0, &out);
  return out;
}

// fastpath_inode_size(dev, ino, size): the size JS charges an inode it holds
// open (every change of its record). Nothing when the inode is not tracked.
static napi_value fp_inode_size (napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  uint64_t dev = 0, ino = 0;
  double size = -1;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3 ||
      !fp_u64(env, argv[0], &dev) || !fp_u64(env, argv[1], &ino) ||
      napi_get_value_double(env, argv[2], &size) != napi_ok || !(size >= 0) || size > 9007199254740991.0) {
    FP_THROW("fastpath_inode_size: (dev, ino, size >= 0)");
  }
  uint64_t bits;
  memcpy(&bits, &size, sizeof(bits));
  pthread_rwlock_rdlock(&fp_lock);
  fp_inode_t *e = fp_find_inode(dev, ino);
  if (e != NULL) {
    __atomic_store_n(&e->size_bits, bits, __ATOMIC_RELEASE);
    __atomic_store_n(&e->has_size, 1, __ATOMIC_RELEASE);
  }
  pthread_rwlock_unlock(&fp_lock);
  return NULL;
}

// fastpath_wl_delegate(dev, ino, size, acct: BigInt64Array(8)) -> kept?
// From now on C owns the inode's charged size (starting at size) and decides
// the growth of its writes from acct's credit. Only for an inode JS tracks
// and has taken back (or never handed over): JS calls it at the end of its
// own size change, so no write decided here is in flight on it.
static napi_value fp_wl_delegate (napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  uint64_t dev = 0, ino = 0;
  double size = -1;
  napi_typedarray_type tt;
  size_t len = 0, off = 0;
  napi_value ab;
  void *d = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 4 ||
      !fp_u64(env, argv[0], &dev) || !fp_u64(env, argv[1], &ino) ||
      napi_get_value_double(env, argv[2], &size) != napi_ok || !(size >= 0) || size > 9007199254740991.0 ||
      napi_get_typedarray_info(env, argv[3], &tt, &len, &d, &ab, &off) != napi_ok || tt != napi_bigint64_array || len < HOMESFS_ACCT_LEN) {
    FP_THROW("fastpath_wl_delegate: (dev, ino, size >= 0, BigInt64Array(8))");
  }
  int kept = 0;
  pthread_rwlock_rdlock(&fp_lock);
  fp_inode_t *e = fp_find_inode(dev, ino);
  if (e != NULL) {
    pthread_mutex_lock(&fp_wlock);
    if (!e->busy) {
      __atomic_store_n(&e->size_bits, fp_double_bits(size), __ATOMIC_RELEASE);
      __atomic_store_n(&e->has_size, 1, __ATOMIC_RELEASE);
      e->acct = (int64_t *) d;
      e->deleg = 1;
      kept = 1;
    }
    pthread_mutex_unlock(&fp_wlock);
  }
  pthread_rwlock_unlock(&fp_lock);
  napi_value out;
  napi_get_boolean(env, kept != 0, &out);
  return out;
}

// fastpath_wl_revoke(dev, ino) -> the charged size, now JS's again; -1: a
// write decided here is still in flight (no new one starts: ask again soon);
// -2: the inode is not tracked or was not handed over.
static napi_value fp_wl_revoke (napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  uint64_t dev = 0, ino = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 || !fp_u64(env, argv[0], &dev) || !fp_u64(env, argv[1], &ino)) {
    FP_THROW("fastpath_wl_revoke: (dev, ino)");
  }
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
  napi_value out;
  napi_create_double(env, out_size, &out);
  return out;
}

// fastpath_wl_size(dev, ino) -> the charged size while C owns it, else -1.
static napi_value fp_wl_size (napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  uint64_t dev = 0, ino = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 || !fp_u64(env, argv[0], &dev) || !fp_u64(env, argv[1], &ino)) {
    FP_THROW("fastpath_wl_size: (dev, ino)");
  }
  double out_size = -1;
  pthread_rwlock_rdlock(&fp_lock);
  fp_inode_t *e = fp_find_inode(dev, ino);
  if (e != NULL) {
    pthread_mutex_lock(&fp_wlock);
    if (e->deleg != 0) out_size = fp_bits_double(__atomic_load_n(&e->size_bits, __ATOMIC_ACQUIRE));
    pthread_mutex_unlock(&fp_wlock);
  }
  pthread_rwlock_unlock(&fp_lock);
  napi_value out;
  napi_create_double(env, out_size, &out);
  return out;
}

// fastpath_set_write_credit(prefix, token, on) -> set? Files made here in
// that home start handed over (their first writes decided here too).
static napi_value fp_set_write_credit (napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  size_t plen = 0;
  double token = -1;
  bool on = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3) FP_THROW("fastpath_set_write_credit: 3 arguments");
  char *prefix = fp_string(env, argv[0], &plen);
  if (prefix == NULL || napi_get_value_double(env, argv[1], &token) != napi_ok || napi_get_value_bool(env, argv[2], &on) != napi_ok) {
    free(prefix);
    FP_THROW("fastpath_set_write_credit: (prefix, token, on)");
  }
  int set = 0;
  pthread_rwlock_wrlock(&fp_lock);
  fp_home_t *e = fp_find_home(prefix, plen, fp_hash(prefix, plen));
  if (e != NULL && e->token == token) {
    e->wl_on = on ? 1 : 0;
    set = 1;
  }
  pthread_rwlock_unlock(&fp_lock);
  free(prefix);
  napi_value out;
  napi_get_boolean(env, set != 0, &out);
  return out;
}

// fastpath_inode(dev, ino, delta): delta +1 when JS starts tracking an open inode, -1 when it stops.
static napi_value fp_inode (napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  uint64_t dev = 0, ino = 0;
  int32_t delta = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3 ||
      !fp_u64(env, argv[0], &dev) || !fp_u64(env, argv[1], &ino) ||
      napi_get_value_int32(env, argv[2], &delta) != napi_ok || (delta != 1 && delta != -1)) {
    FP_THROW("fastpath_inode: (dev, ino, +1|-1)");
  }
  fp_inode_t *fresh = delta > 0 ? calloc(1, sizeof(*fresh)) : NULL;
  if (delta > 0 && fresh == NULL) { napi_throw_error(env, "ENOMEM", "fastpath_inode: out of memory"); return NULL; }
  fp_inode_t *gone = NULL;
  uint32_t b = fp_inode_bucket(dev, ino);
  pthread_rwlock_wrlock(&fp_lock);
  fp_inode_t **pp = &fp_inodes[b];
  fp_inode_t *e = *pp;
  for (; e != NULL; pp = &e->next, e = e->next) if (e->dev == dev && e->ino == ino) break;
  if (delta > 0) {
    if (e != NULL) {
      e->count++;
    } else {
      fresh->dev = dev; fresh->ino = ino; fresh->count = 1;
      fresh->next = fp_inodes[b];
      fp_inodes[b] = fresh;
      fp_inode_count++;
      fresh = NULL;
    }
  } else if (e != NULL && --e->count == 0) {
    *pp = e->next;
    gone = e;
    fp_inode_count--;
  }
  pthread_rwlock_unlock(&fp_lock);
  free(fresh);
  free(gone);
  return NULL;
}

static fp_handle_t * fp_unlink_handle_locked (uint64_t fh) {
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

// fastpath_set_handle(fh, fd, uid, gid, ownerFromStat, types, masks: Uint32Array(32)): publish or replace.
static napi_value fp_set_handle (napi_env env, napi_callback_info info) {
  size_t argc = 7;
  napi_value argv[7];
  uint32_t fh = 0, uid = 0, gid = 0, types = 0;
  int32_t fd = -1;
  bool from_stat = false;
  void *data = NULL;
  size_t len = 0, off = 0;
  napi_typedarray_type tt;
  napi_value ab;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 7 ||
      napi_get_value_uint32(env, argv[0], &fh) != napi_ok || fh == 0 ||
      napi_get_value_int32(env, argv[1], &fd) != napi_ok || fd < 0 ||
      napi_get_value_uint32(env, argv[2], &uid) != napi_ok ||
      napi_get_value_uint32(env, argv[3], &gid) != napi_ok ||
      napi_get_value_bool(env, argv[4], &from_stat) != napi_ok ||
      napi_get_value_uint32(env, argv[5], &types) != napi_ok ||
      napi_get_typedarray_info(env, argv[6], &tt, &len, &data, &ab, &off) != napi_ok || tt != napi_uint32_array || len < 32) {
    FP_THROW("fastpath_set_handle: bad arguments");
  }
  fp_handle_t *e = calloc(1, sizeof(*e));
  if (e == NULL) { napi_throw_error(env, "ENOMEM", "fastpath_set_handle: out of memory"); return NULL; }
  const uint32_t *m = (const uint32_t *) data;
  e->fh = fh;
  e->fd = fd;
  e->uid = uid;
  e->gid = gid;
  e->owner_from_stat = from_stat ? 1 : 0;
  e->types = types & 0xffff;
  for (int i = 0; i < 16; i++) { e->keep[i] = m[i] & 07777; e->or[i] = m[16 + i] & 07777; }
  pthread_rwlock_wrlock(&fp_lock);
  fp_handle_t *old = fp_unlink_handle_locked(fh);
  e->next = fp_handles[fh % FP_HANDLE_BUCKETS];
  fp_handles[fh % FP_HANDLE_BUCKETS] = e;
  fp_handle_count++;
  pthread_rwlock_unlock(&fp_lock);
  free(old);
  return NULL;
}

// fastpath_remove_handle(fh): before JS closes the handle's descriptor.
static napi_value fp_remove_handle (napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  uint32_t fh = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 || napi_get_value_uint32(env, argv[0], &fh) != napi_ok) {
    FP_THROW("fastpath_remove_handle: a handle number");
  }
  pthread_rwlock_wrlock(&fp_lock);
  fp_handle_t *old = fp_unlink_handle_locked(fh);
  pthread_rwlock_unlock(&fp_lock);
  free(old);
  return NULL;
}

// fastpath_set_reserved(names: string[]): components only JS answers; "x*" = every name beginning with x.
static napi_value fp_set_reserved (napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  bool is_array = false;
  uint32_t n = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_is_array(env, argv[0], &is_array) != napi_ok || !is_array ||
      napi_get_array_length(env, argv[0], &n) != napi_ok || n > FP_MAX_RESERVED) {
    FP_THROW("fastpath_set_reserved: an array of at most 32 names");
  }
  fp_reserved_t next[FP_MAX_RESERVED];
  for (uint32_t i = 0; i < n; i++) {
    napi_value v;
    size_t len = 0;
    napi_get_element(env, argv[0], i, &v);
    if (napi_get_value_string_utf8(env, v, next[i].name, FP_RESERVED_LEN, &len) != napi_ok || len == 0 || len >= FP_RESERVED_LEN - 1) {
      FP_THROW("fastpath_set_reserved: names are non-empty strings shorter than 62 bytes");
    }
    next[i].prefix = next[i].name[len - 1] == '*';
    if (next[i].prefix) next[i].name[--len] = 0;
    next[i].len = len;
  }
  pthread_rwlock_wrlock(&fp_lock);
  memcpy(fp_reserved, next, sizeof(fp_reserved_t) * n);
  fp_reserved_n = n;
  pthread_rwlock_unlock(&fp_lock);
  return NULL;
}

// fastpath_set_open(prefix, token, flags) -> set? Read-only opens of that
// home answered here (flags & 1; 2: publish them for native reads; 4:
// direct_io), or not (0: every slot granted so far goes back, queued for
// takeOpens). Returns once no native open of the home is past its checks
// with the old flags (the write lock).
static napi_value fp_set_open (napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3) FP_THROW("fastpath_set_open: 3 arguments");
  size_t plen = 0;
  double token = -1;
  uint32_t flags = 0;
  char *prefix = fp_string(env, argv[0], &plen);
  if (prefix == NULL || napi_get_value_double(env, argv[1], &token) != napi_ok ||
      napi_get_value_uint32(env, argv[2], &flags) != napi_ok || (flags & ~15u) != 0) {
    free(prefix);
    FP_THROW("fastpath_set_open: (prefix, token, flags 0..15)");
  }
  int set = 0;
  uint32_t h = fp_hash(prefix, plen);
  pthread_rwlock_wrlock(&fp_lock);
  fp_home_t *e = fp_find_home(prefix, plen, h);
  if (e != NULL && e->token == token) {
    if ((flags & HOMESFS_OPEN_ON) == 0) fp_return_credits(e);
    e->open_flags = (flags & HOMESFS_OPEN_ON) ? flags : 0;
    // Handles opened here under the flags before are served no more until JS has adopted them.
    fp_policy_moved_locked();
    set = 1;
  }
  pthread_rwlock_unlock(&fp_lock);
  free(prefix);
  napi_value out;
  napi_get_boolean(env, set != 0, &out);
  return out;
}

// fastpath_set_attr_ops(prefix, token, flags, chmodM, chmodK) -> set? UTIMENS
// (flags & 1), CHMOD (flags & 2: new mode = asked & chmodM, unchanged when
// equal to current & chmodK) and CHOWN (flags & 4: owner-only's no-op; 8:
// allow's lchown) by path answered here, or not (0). Returns once
// none of that home is past its checks with the old flags (the write lock).
static napi_value fp_set_attr_ops (napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 5) FP_THROW("fastpath_set_attr_ops: 5 arguments");
  size_t plen = 0;
  double token = -1;
  uint32_t flags = 0, m = 0, k = 0;
  char *prefix = fp_string(env, argv[0], &plen);
  if (prefix == NULL || napi_get_value_double(env, argv[1], &token) != napi_ok ||
      napi_get_value_uint32(env, argv[2], &flags) != napi_ok || (flags & ~15u) != 0 || (flags & 12u) == 12u ||
      napi_get_value_uint32(env, argv[3], &m) != napi_ok || (m & ~07777u) != 0 ||
      napi_get_value_uint32(env, argv[4], &k) != napi_ok || (k & ~07777u) != 0) {
    free(prefix);
    FP_THROW("fastpath_set_attr_ops: (prefix, token, flags 0..15 (not both chown kinds), chmodM, chmodK)");
  }
  int set = 0;
  uint32_t h = fp_hash(prefix, plen);
  pthread_rwlock_wrlock(&fp_lock);
  fp_home_t *e = fp_find_home(prefix, plen, h);
  if (e != NULL && e->token == token) {
    e->attr_flags = flags;
    e->chmod_m = m;
    e->chmod_k = k;
    set = 1;
  }
  pthread_rwlock_unlock(&fp_lock);
  free(prefix);
  napi_value out;
  napi_get_boolean(env, set != 0, &out);
  return out;
}

// fastpath_set_create(prefix, token, on, modeM, modeOr, maxDepth, ownerIsCaller) -> set?
// CREATE answered here (while the home is also open for native opens and
// mutable), the new file's mode (asked & modeM) | modeOr, at most maxDepth
// components deep (0: any). Off gives every create slot back.
static napi_value fp_set_create (napi_env env, napi_callback_info info) {
  size_t argc = 7;
  napi_value argv[7];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 7) FP_THROW("fastpath_set_create: 7 arguments");
  size_t plen = 0;
  double token = -1;
  bool on = false, caller_owns = false;
  uint32_t m = 0, or = 0, depth = 0;
  char *prefix = fp_string(env, argv[0], &plen);
  if (prefix == NULL || napi_get_value_double(env, argv[1], &token) != napi_ok ||
      napi_get_value_bool(env, argv[2], &on) != napi_ok ||
      napi_get_value_uint32(env, argv[3], &m) != napi_ok || (m & ~07777u) != 0 ||
      napi_get_value_uint32(env, argv[4], &or) != napi_ok || (or & ~0777u) != 0 ||
      napi_get_value_uint32(env, argv[5], &depth) != napi_ok ||
      napi_get_value_bool(env, argv[6], &caller_owns) != napi_ok) {
    free(prefix);
    FP_THROW("fastpath_set_create: (prefix, token, on, modeM, modeOr: permission bits, maxDepth, ownerIsCaller)");
  }
  int set = 0;
  uint32_t h = fp_hash(prefix, plen);
  pthread_rwlock_wrlock(&fp_lock);
  fp_home_t *e = fp_find_home(prefix, plen, h);
  if (e != NULL && e->token == token) {
    if (!on) fp_return_create_credits(e);
    e->create_on = on ? 1 : 0;
    e->create_owner = caller_owns ? 1 : 0;
    e->mode_m = m;
    e->mode_or = or;
    e->max_depth = depth;
    set = 1;
  }
  pthread_rwlock_unlock(&fp_lock);
  free(prefix);
  napi_value out;
  napi_get_boolean(env, set != 0, &out);
  return out;
}

// fastpath_grant_create(prefix, token, fh, uid) -> granted? One create slot:
// an open-file slot JS took for uid, an inode its ledger reserved, and a
// handle number. False (nothing kept) when the home is not open for creates.
static napi_value fp_grant_create (napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 4) FP_THROW("fastpath_grant_create: 4 arguments");
  size_t plen = 0;
  double token = -1;
  uint32_t fh = 0, uid = 0;
  char *prefix = fp_string(env, argv[0], &plen);
  if (prefix == NULL || napi_get_value_double(env, argv[1], &token) != napi_ok ||
      napi_get_value_uint32(env, argv[2], &fh) != napi_ok || fh == 0 ||
      napi_get_value_uint32(env, argv[3], &uid) != napi_ok) {
    free(prefix);
    FP_THROW("fastpath_grant_create: (prefix, token, fh > 0, uid)");
  }
  fp_open_rec_t *r = calloc(1, sizeof(*r));
  if (r == NULL) { free(prefix); napi_throw_error(env, "ENOMEM", "fastpath_grant_create: out of memory"); return NULL; }
  r->kind = HOMESFS_REC_UNUSED_CREATE;
  r->fh = fh;
  r->fd = -1;
  r->uid = uid;
  int granted = 0;
  uint32_t h = fp_hash(prefix, plen);
  pthread_rwlock_rdlock(&fp_lock);
  fp_home_t *e = fp_find_home(prefix, plen, h);
  if (e != NULL && e->token == token && e->create_on && e->pending != NULL && (e->open_flags & HOMESFS_OPEN_ON) != 0) {
    pthread_mutex_lock(&fp_open_lock);
    r->next = e->ccredits;
    e->ccredits = r;
    fp_credit_count++;
    pthread_mutex_unlock(&fp_open_lock);
    granted = 1;
  }
  pthread_rwlock_unlock(&fp_lock);
  if (!granted) free(r);
  free(prefix);
  napi_value out;
  napi_get_boolean(env, granted != 0, &out);
  return out;
}

// fastpath_grant(prefix, token, fh, uid) -> granted? One open-file slot JS
// took for caller uid, with the handle number JS reserved for it. False
// (nothing kept) when the home is not open for native opens.
static napi_value fp_grant (napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 4) FP_THROW("fastpath_grant: 4 arguments");
  size_t plen = 0;
  double token = -1;
  uint32_t fh = 0, uid = 0;
  char *prefix = fp_string(env, argv[0], &plen);
  if (prefix == NULL || napi_get_value_double(env, argv[1], &token) != napi_ok ||
      napi_get_value_uint32(env, argv[2], &fh) != napi_ok || fh == 0 ||
      napi_get_value_uint32(env, argv[3], &uid) != napi_ok) {
    free(prefix);
    FP_THROW("fastpath_grant: (prefix, token, fh > 0, uid)");
  }
  fp_open_rec_t *r = calloc(1, sizeof(*r));
  if (r == NULL) { free(prefix); napi_throw_error(env, "ENOMEM", "fastpath_grant: out of memory"); return NULL; }
  r->kind = HOMESFS_REC_UNUSED;
  r->fh = fh;
  r->fd = -1;
  r->uid = uid;
  int granted = 0;
  uint32_t h = fp_hash(prefix, plen);
  pthread_rwlock_rdlock(&fp_lock);
  fp_home_t *e = fp_find_home(prefix, plen, h);
  if (e != NULL && e->token == token && (e->open_flags & HOMESFS_OPEN_ON) != 0) {
    pthread_mutex_lock(&fp_open_lock);
    r->next = e->credits;
    e->credits = r;
    fp_credit_count++;
    pthread_mutex_unlock(&fp_open_lock);
    granted = 1;
  }
  pthread_rwlock_unlock(&fp_lock);
  if (!granted) free(r);
  free(prefix);
  napi_value out;
  napi_get_boolean(env, granted != 0, &out);
  return out;
}

// fastpath_reclaim() -> how many: every home's unused slots back to JS
// (queued for takeOpens), e.g. when a cap would refuse an open otherwise.
static napi_value fp_reclaim (napi_env env, napi_callback_info info) {
  uint32_t before = 0;
  pthread_rwlock_rdlock(&fp_lock);
  pthread_mutex_lock(&fp_open_lock);
  before = fp_credit_count;
  fp_credit_gen++;  // even with no list to empty: a slot on its way back to one goes to JS
  pthread_mutex_unlock(&fp_open_lock);
  for (size_t i = 0; i < FP_HOME_BUCKETS; i++) {
    for (fp_home_t *e = fp_homes[i]; e != NULL; e = e->next) if (e->credits != NULL || e->ccredits != NULL) fp_return_credits(e);
  }
  pthread_rwlock_unlock(&fp_lock);
  napi_value out;
  napi_create_uint32(env, before, &out);
  return out;
}

// fastpath_take_opens() -> BigUint64Array [kind, fh, fd, published, dev, ino, oflags, ...]
// (kind 1: opened here, adopt it; 2: a slot given back unused; 3: created here,
// adopt it and commit its inode; 4: a create slot given back), oldest first; null when none.
static napi_value fp_take_opens (napi_env env, napi_callback_info info) {
  pthread_mutex_lock(&fp_open_lock);
  fp_open_rec_t *list = fp_opens;
  fp_open_rec_t **tail = fp_opens_tail;
  uint32_t n = fp_open_queued;
  fp_opens = NULL;
  fp_opens_tail = &fp_opens;
  fp_open_queued = 0;
  pthread_mutex_unlock(&fp_open_lock);
  napi_value out;
  if (n == 0) {
    napi_get_null(env, &out);
    return out;
  }
  napi_value ab;
  void *data = NULL;
  if (napi_create_arraybuffer(env, (size_t) n * 7 * sizeof(uint64_t), &data, &ab) != napi_ok ||
      napi_create_typedarray(env, napi_biguint64_array, (size_t) n * 7, ab, 0, &out) != napi_ok) {
    // Never drop one (a handle or a slot would be lost): back in front, for the next call.
    pthread_mutex_lock(&fp_open_lock);
    *tail = fp_opens;
    if (fp_opens == NULL) fp_opens_tail = tail;
    fp_opens = list;
    fp_open_queued += n;
    pthread_mutex_unlock(&fp_open_lock);
    napi_get_null(env, &out);
    return out;
  }
  uint64_t *d = (uint64_t *) data;
  uint32_t i = 0;
  for (fp_open_rec_t *e = list; e != NULL; i++) {
    fp_open_rec_t *next = e->next;
    // JS counts it from here (it publishes its files before it answers anything else).
    fp_dh_give(e);
    d[7 * i] = e->kind;
    d[7 * i + 1] = e->fh;
    d[7 * i + 2] = (uint64_t) (e->fd < 0 ? 0 : e->fd);
    d[7 * i + 3] = e->published;
    d[7 * i + 4] = e->dev;
    d[7 * i + 5] = e->ino;
    d[7 * i + 6] = e->oflags;
    free(e);
    e = next;
  }
  return out;
}

// fastpath_set_free_inline_max(bytes): see fp_free_inline_max.
static napi_value fp_set_free_inline_max (napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  double v = -1;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 || napi_get_value_double(env, argv[0], &v) != napi_ok || !(v >= 0)) {
    FP_THROW("fastpath_set_free_inline_max: a byte count >= 0");
  }
  __atomic_store_n(&fp_free_inline_max, (uint64_t) v, __ATOMIC_RELAXED);
  return NULL;
}

// fastpath_enable(on): off, every getattr goes to JS (the table is kept).
static napi_value fp_enable (napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  bool on = false;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 || napi_get_value_bool(env, argv[0], &on) != napi_ok) {
    FP_THROW("fastpath_enable: a boolean");
  }
  __atomic_store_n(&fp_enabled, on ? 1 : 0, __ATOMIC_RELEASE);
  return NULL;
}

// fastpath_clear(): every home and open inode dropped (shutdown, tests).
static napi_value fp_clear (napi_env env, napi_callback_info info) {
  pthread_rwlock_wrlock(&fp_lock);
  for (size_t i = 0; i < FP_HOME_BUCKETS; i++) {
    fp_home_t *e = fp_homes[i];
    fp_homes[i] = NULL;
    while (e != NULL) { fp_home_t *n = e->next; fp_free_home(e); e = n; }
  }
  for (size_t i = 0; i < FP_INODE_BUCKETS; i++) {
    fp_inode_t *e = fp_inodes[i];
    fp_inodes[i] = NULL;
    while (e != NULL) { fp_inode_t *n = e->next; free(e); e = n; }
  }
  for (size_t i = 0; i < FP_HANDLE_BUCKETS; i++) {
    fp_handle_t *e = fp_handles[i];
    fp_handles[i] = NULL;
    while (e != NULL) { fp_handle_t *n = e->next; free(e); e = n; }
  }
  fp_home_count = 0;
  fp_inode_count = 0;
  fp_handle_count = 0;
  pthread_rwlock_unlock(&fp_lock);
  return NULL;
}

static void fp_set_number (napi_env env, napi_value obj, const char *name, double v) {
  napi_value n;
  napi_create_double(env, v, &n);
  napi_set_named_property(env, obj, name, n);
}

// fastpath_stats() -> { enabled, answered, fallbacks, negative, unlinkAnswered, unlinkFallbacks, unlinkSlowFrees, readdirAnswered, readdirFallbacks, fgetattrAnswered, fgetattrFallbacks, homes, inodes, handles }
static napi_value fp_stats (napi_env env, napi_callback_info info) {
  napi_value out, b;
  napi_create_object(env, &out);
  napi_get_boolean(env, __atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE) != 0, &b);
  napi_set_named_property(env, out, "enabled", b);
  fp_set_number(env, out, "answered", (double) __atomic_load_n(&fp_answered, __ATOMIC_RELAXED));
  fp_set_number(env, out, "fallbacks", (double) __atomic_load_n(&fp_fallbacks, __ATOMIC_RELAXED));
  fp_set_number(env, out, "negative", (double) __atomic_load_n(&fp_negative, __ATOMIC_RELAXED));
  fp_set_number(env, out, "unlinkAnswered", (double) __atomic_load_n(&fp_uanswered, __ATOMIC_RELAXED));
  fp_set_number(env, out, "unlinkFallbacks", (double) __atomic_load_n(&fp_ufallbacks, __ATOMIC_RELAXED));
  fp_set_number(env, out, "unlinkSlowFrees", (double) __atomic_load_n(&fp_ubig, __ATOMIC_RELAXED));
  fp_set_number(env, out, "readdirAnswered", (double) __atomic_load_n(&fp_ranswered, __ATOMIC_RELAXED));
  fp_set_number(env, out, "readdirFallbacks", (double) __atomic_load_n(&fp_rfallbacks, __ATOMIC_RELAXED));
  fp_set_number(env, out, "fgetattrAnswered", (double) __atomic_load_n(&fp_fanswered, __ATOMIC_RELAXED));
  fp_set_number(env, out, "fgetattrFallbacks", (double) __atomic_load_n(&fp_ffallbacks, __ATOMIC_RELAXED));
  fp_set_number(env, out, "utimensAnswered", (double) __atomic_load_n(&fp_tanswered, __ATOMIC_RELAXED));
  fp_set_number(env, out, "chmodAnswered", (double) __atomic_load_n(&fp_canswered, __ATOMIC_RELAXED));
  fp_set_number(env, out, "chownAnswered", (double) __atomic_load_n(&fp_oanswered_chown, __ATOMIC_RELAXED));
  fp_set_number(env, out, "setattrFallbacks", (double) __atomic_load_n(&fp_sfallbacks, __ATOMIC_RELAXED));
  fp_set_number(env, out, "createAnswered", (double) __atomic_load_n(&fp_canswered_create, __ATOMIC_RELAXED));
  fp_set_number(env, out, "createFallbacks", (double) __atomic_load_n(&fp_cfallbacks, __ATOMIC_RELAXED));
  fp_set_number(env, out, "openAnswered", (double) __atomic_load_n(&fp_oanswered, __ATOMIC_RELAXED));
  fp_set_number(env, out, "openClosedNatively", (double) __atomic_load_n(&fp_oclosed, __ATOMIC_RELAXED));
  fp_set_number(env, out, "openFallbacks", (double) __atomic_load_n(&fp_ofallbacks, __ATOMIC_RELAXED));
  fp_set_number(env, out, "writesDecided", (double) __atomic_load_n(&fp_wdecided, __ATOMIC_RELAXED));
  fp_set_number(env, out, "writeDecisionFallbacks", (double) __atomic_load_n(&fp_wfallbacks, __ATOMIC_RELAXED));
  pthread_mutex_lock(&fp_open_lock);
  fp_set_number(env, out, "credits", fp_credit_count);
  pthread_mutex_unlock(&fp_open_lock);
  pthread_rwlock_rdlock(&fp_lock);
  fp_set_number(env, out, "homes", fp_home_count);
  fp_set_number(env, out, "inodes", fp_inode_count);
  fp_set_number(env, out, "handles", fp_handle_count);
  pthread_rwlock_unlock(&fp_lock);
  return out;
}

static void fp_export (napi_env env, napi_value exports, const char *name, napi_callback fn) {
  napi_value f;
  napi_create_function(env, name, NAPI_AUTO_LENGTH, fn, NULL, &f);
  napi_set_named_property(env, exports, name, f);
}

void homesfs_fastpath_export (napi_env env, napi_value exports) {
  pthread_once(&fp_once, fp_init_lock);
  fp_export(env, exports, "fastpath_set_home", fp_set_home);
  fp_export(env, exports, "fastpath_remove_home", fp_remove_home);
  fp_export(env, exports, "fastpath_set_mutable", fp_set_mutable);
  fp_export(env, exports, "fastpath_inode", fp_inode);
  fp_export(env, exports, "fastpath_inode_size", fp_inode_size);
  fp_export(env, exports, "fastpath_wl_delegate", fp_wl_delegate);
  fp_export(env, exports, "fastpath_wl_revoke", fp_wl_revoke);
  fp_export(env, exports, "fastpath_wl_size", fp_wl_size);
  fp_export(env, exports, "fastpath_set_write_credit", fp_set_write_credit);
  fp_export(env, exports, "fastpath_set_handle", fp_set_handle);
  fp_export(env, exports, "fastpath_remove_handle", fp_remove_handle);
  fp_export(env, exports, "fastpath_set_reserved", fp_set_reserved);
  fp_export(env, exports, "fastpath_set_open", fp_set_open);
  fp_export(env, exports, "fastpath_set_attr_ops", fp_set_attr_ops);
  fp_export(env, exports, "fastpath_grant", fp_grant);
  fp_export(env, exports, "fastpath_set_create", fp_set_create);
  fp_export(env, exports, "fastpath_grant_create", fp_grant_create);
  fp_export(env, exports, "fastpath_reclaim", fp_reclaim);
  fp_export(env, exports, "fastpath_take_opens", fp_take_opens);
  fp_export(env, exports, "fastpath_set_free_inline_max", fp_set_free_inline_max);
  fp_export(env, exports, "fastpath_enable", fp_enable);
  fp_export(env, exports, "fastpath_clear", fp_clear);
  fp_export(env, exports, "fastpath_stats", fp_stats);
}
