// Internal to the fast path (fastpath_*.c): the tables JS publishes, the
// locks that guard them, and what the files share. Nothing here is part of
// the addon's interface (fastpath.h is); every name below has hidden
// visibility, so it stays inside fuse.node.
//
// The native fast path (fastpath.h): getattr/lookup, readdir, open, create, unlink, setattr and write decisions.
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
// The files, one op family each:
//   fastpath_state.c    the tables, fp_lock, lookups, publication from JS
//                       (homes, inodes, handles, reserved names, enable, clear)
//   fastpath_attr.c     GETATTR (and so LOOKUP), fgetattr, READDIR
//   fastpath_unlink.c   UNLINK
//   fastpath_setattr.c  UTIMENS, CHMOD, CHOWN by path
//   fastpath_open.c     OPEN, RELEASE of unadopted handles, open slots, the queue JS takes
//   fastpath_create.c   CREATE and its slots
//   fastpath_write.c    WRITE decisions (begin/end, delegate, revoke, credit)
//   fastpath_napi.c     argument helpers, stats, the exports
//
// Locks (what guards what), in the only order they nest:
//   fp_lock (rwlock, writer-preferring, fp_init_lock once) before fp_open_lock
//   or fp_wlock; those two never nest with each other, and nothing takes
//   fp_lock while holding either. removals.c's claim lock is entered under the
//   read lock (unlink); the data plane (dataplane.c) is told with no fast-path
//   lock held.
//   - fp_lock: the tables (fp_homes, fp_inodes, fp_handles, fp_reserved) and
//     their counts, every fp_home_t field but the slot lists, and an entry's
//     lifetime: a change or a free under the write lock, a use under the read
//     lock. A home's descriptor is closed only under the write lock. Under the
//     read lock, fp_inode_t.size_bits/has_size are written atomically
//     (fastpath_inode_size) and the home's pending array is only added to
//     atomically (JS's BigInt64Array).
//   - fp_open_lock (mutex): every home's credits and ccredits lists,
//     fp_credit_count, fp_credit_gen, the queue for JS (fp_opens,
//     fp_opens_tail, fp_open_queued) and fp_creates_inflight (fp_creates_done
//     is its condition).
//   - fp_wlock (mutex): fp_inode_t.deleg, busy and acct (fp_wcond: a write
//     decided here settled).
//   - atomics, no lock: fp_enabled, fp_policy_gen (moved under the write
//     lock), fp_free_inline_max and every counter.

#ifndef HOMESFS_FASTPATH_INTERNAL_H
#define HOMESFS_FASTPATH_INTERNAL_H

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
#include <node_api.h>

#include "abi.h"
#include "fastpath.h"
#include "dirhandles.h"

#pragma GCC visibility push(hidden)

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

#define FP_HANDLE_BUCKETS 16384

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

// Gives a record's count beside the directory handles back (once).
static inline void fp_dh_give (fp_open_rec_t *r) {
  if (r == NULL || r->dh == NULL) return;
  homesfs_dh_file_give(r->uid, r->dh);
  r->dh = NULL;
}

static inline double fp_bits_double (uint64_t bits) { double d; memcpy(&d, &bits, sizeof(d)); return d; }
static inline uint64_t fp_double_bits (double d) { uint64_t b; memcpy(&b, &d, sizeof(b)); return b; }

#define FP_THROW(msg) do { napi_throw_type_error(env, "EINVAL", (msg)); return NULL; } while (0)

// ---- fastpath_state.c: the tables and their lock ----
extern pthread_rwlock_t fp_lock;
extern pthread_once_t fp_once;
extern fp_home_t *fp_homes[FP_HOME_BUCKETS];
extern fp_inode_t *fp_inodes[FP_INODE_BUCKETS];
extern fp_handle_t *fp_handles[FP_HANDLE_BUCKETS];
extern uint32_t fp_handle_count;
extern uint32_t fp_home_count;
extern uint32_t fp_inode_count;
extern int fp_enabled;
extern uint64_t fp_policy_gen;
void fp_init_lock (void);
void fp_policy_moved_locked (void);
uint32_t fp_hash (const char *s, size_t n);
uint32_t fp_inode_bucket (uint64_t dev, uint64_t ino);
fp_home_t * fp_find_home (const char *prefix, size_t n, uint32_t h);
fp_inode_t * fp_find_inode (uint64_t dev, uint64_t ino);
int fp_inode_open (uint64_t dev, uint64_t ino);
int fp_components_ok (const char *rel, uint32_t max_name);
fp_handle_t * fp_unlink_handle_locked (uint64_t fh);
int fp_split_path (const char *path, size_t *plen, const char **rel);
int fp_openat2 (int dirfd, const char *rel, uint64_t flags);
int fp_open_parent (int home_fd, const char *rel, const char *last_slash);
napi_value fp_set_home (napi_env env, napi_callback_info info);
napi_value fp_remove_home (napi_env env, napi_callback_info info);
napi_value fp_set_mutable (napi_env env, napi_callback_info info);
napi_value fp_inode_size (napi_env env, napi_callback_info info);
napi_value fp_inode (napi_env env, napi_callback_info info);
napi_value fp_set_handle (napi_env env, napi_callback_info info);
napi_value fp_remove_handle (napi_env env, napi_callback_info info);
napi_value fp_set_reserved (napi_env env, napi_callback_info info);
napi_value fp_enable (napi_env env, napi_callback_info info);
napi_value fp_clear (napi_env env, napi_callback_info info);

// ---- fastpath_attr.c ----
extern uint64_t fp_answered, fp_fallbacks, fp_fanswered, fp_ffallbacks, fp_negative, fp_ranswered, fp_rfallbacks;

// ---- fastpath_unlink.c ----
extern uint64_t fp_uanswered, fp_ubig, fp_ufallbacks;
napi_value fp_set_free_inline_max (napi_env env, napi_callback_info info);

// ---- fastpath_setattr.c ----
extern uint64_t fp_tanswered, fp_canswered, fp_oanswered_chown, fp_sfallbacks;
napi_value fp_set_attr_ops (napi_env env, napi_callback_info info);

// ---- fastpath_open.c: the slots, the queue, and what open and create share ----
extern pthread_mutex_t fp_open_lock;
extern uint32_t fp_creates_inflight;
extern pthread_cond_t fp_creates_done;
extern uint32_t fp_credit_count;
extern uint64_t fp_oanswered, fp_ofallbacks, fp_oclosed;
void fp_queue_create_done (fp_open_rec_t *r);
void fp_return_create_credits (fp_home_t *e);
void fp_return_credits (fp_home_t *e);
int fp_open_register (uint64_t dev, uint64_t ino, fp_handle_t *he, fp_inode_t *fresh);
void fp_handle_fill (fp_handle_t *he, uint32_t fh, int fd, const fp_home_t *home);
napi_value fp_set_open (napi_env env, napi_callback_info info);
napi_value fp_grant (napi_env env, napi_callback_info info);
napi_value fp_grant_slot (napi_env env, napi_callback_info info, int create);
napi_value fp_reclaim (napi_env env, napi_callback_info info);
napi_value fp_take_opens (napi_env env, napi_callback_info info);

// ---- fastpath_create.c ----
extern uint64_t fp_canswered_create, fp_cfallbacks;
napi_value fp_set_create (napi_env env, napi_callback_info info);
napi_value fp_grant_create (napi_env env, napi_callback_info info);

// ---- fastpath_write.c ----
extern uint64_t fp_wdecided, fp_wfallbacks;
void fp_wl_wait_home (int64_t *acct);
napi_value fp_wl_delegate (napi_env env, napi_callback_info info);
napi_value fp_wl_revoke (napi_env env, napi_callback_info info);
napi_value fp_wl_size (napi_env env, napi_callback_info info);
napi_value fp_set_write_credit (napi_env env, napi_callback_info info);

// ---- fastpath_napi.c ----
char * fp_string (napi_env env, napi_value v, size_t *len);
int fp_u64 (napi_env env, napi_value v, uint64_t *out);
napi_value fp_bool (napi_env env, int v);

#pragma GCC visibility pop

#endif
