// Internal to the fast path (fastpath_*.c): the tables JS publishes, the
// locks that guard them, and what the files share. Nothing here is part of
// the addon's interface (fastpath.h is); every name below has hidden
// visibility, so it stays inside homesfs.node.
//
// The native fast path (fastpath.h): getattr/lookup, readdir, open, create, unlink, setattr and write decisions.
//
// libfuse 2.9 answers LOOKUP with the getattr op, so answering getattr here,
// on the session's worker thread (session/loop.c), takes both off the JS thread. JS stays the control
// plane: it publishes, per home, everything the answer depends on, and C never
// re-derives policy. Whenever C is unsure it answers nothing and the request
// goes to JS as before (HOMESFS_FASTPATH_FALLBACK): a fallback costs time,
// never behaviour.
//
// Published per home (keyed by the mount path prefix "/<tenant>/<key>"):
//  - a dup of the home's verified O_PATH descriptor, which C owns and closes
//    at the home's last reference, so JS retiring its own cannot race;
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
//   fastpath_refs.c     references: pins and the wait for them, last references,
//                       a handle's users, the accounting arrays' holders
//   fastpath_attr.c     GETATTR (and so LOOKUP), fgetattr, READDIR
//   fastpath_unlink.c   UNLINK, and RENAME of a regular file (which removes a name as an unlink does)
//   fastpath_setattr.c  UTIMENS, CHMOD, CHOWN by path
//   fastpath_open.c     OPEN, RELEASE of unadopted handles, open slots, the queue JS takes
//   fastpath_create.c   CREATE and its slots
//   fastpath_write.c    WRITE decisions (begin/end, delegate, revoke, credit)
//   fastpath_napi.c     argument helpers, stats, the exports
//
// Locks (what guards what), in the only order they nest; no lock is held
// across a system call that can block on the backing filesystem (every walk,
// stat, unlink, create, chown, chmod, utimens, getdents and close runs with
// none), so one home's slow syscall holds up no other home:
//   fp_lock (rwlock, writer-preferring, fp_init_lock once) before fp_open_lock
//   or fp_wlock; those two never nest with each other, and nothing takes
//   fp_lock while holding either. fp_drain_lock, fp_grave_lock and
//   fp_unlinking_lock are leaves (nothing is taken under them); fp_flip_lock
//   (the JS thread's, held while it waits for a home's pins) is taken before
//   fp_lock and by nothing a pin holder does. claims.c's claim lock and the
//   data plane's dp_lock are taken with no fast-path lock held.
//   - fp_lock: the tables (fp_homes, fp_inodes, fp_handles, fp_reserved) and
//     their counts, every fp_home_t's pol and epoch, fp_inode_t.count, and who
//     is in a table. Held only for a lookup, a pin (below) or a change: never
//     across a syscall. Under the read lock, fp_inode_t.size_bits/has_size are
//     written atomically (hs_fastpath_inode_size).
//   - fp_open_lock (mutex): every home's open and create slot lists (slots, cslots),
//     fp_slot_count, fp_slot_gen and the queue for JS (fp_opens, whose
//     count release reads without the lock, atomically).
//   - fp_wlock (mutex): fp_inode_t.deleg, busy and acct (fp_wcond: a write
//     decided here settled).
//   - fp_drain_lock (mutex) + fp_drained: the wake of a thread waiting for a
//     home's pins (fp_home_t.ops) or a handle's users to reach 0.
//   - fp_grave_lock (mutex): the accounting arrays whose last holder was not
//     the JS thread, for it to let go (fp_reap).
//   - fp_unlinking_lock (mutex) + fp_unlinked (fastpath_unlink.c): the inodes
//     a native unlink is removing a name of.
//   - atomics, no lock: fp_enabled, fp_policy_gen (moved under the write
//     lock), fp_free_inline_max, every counter, and the reference counts below.
//
// Lifetimes: what C uses by pointer after fp_lock is dropped, and what keeps it.
//   - A home (fp_home_t): a reference per holder (refs): one while it is in
//     fp_homes, one per pin. A native op pins its home under the read lock
//     (fp_pin: refs and ops[epoch] up, its pol copied), drops the lock, does
//     its syscalls with the home's descriptor and immutable fields, and unpins.
//     Removal (a removal, a republication, fp_clear) takes it out of the table
//     under the write lock; its last reference closes its descriptor and frees
//     it, on whichever thread that is. Nothing pins a home out of the table.
//   - The barrier JS relies on (native-notes 6.2: when a call that changes or
//     withdraws a home returns, no native op of the old state is past its
//     checks): the call waits (fp_drain, no lock held) for the pins taken
//     before its change: a home taken out of the table for all of them, a home
//     changed in place for those of the epoch before (the change flips epoch
//     under the write lock). It waits on the JS thread, for that one home only,
//     and only for ops that never wait for JS. fp_clear (shutdown) waits for
//     no home: a lazily unmounted mount may still serve.
//   - An accounting array (fp_acct_t: a home's pending array, a delegated
//     inode's acct): JS's BigInt64Array, kept by a napi reference, counted
//     (refs): the home's pol and every inode delegated to it hold one, a write
//     ticket one. The last holder lets it go; napi_delete_reference needs the
//     JS thread, so off it the holder goes to a list the JS thread empties at
//     its next fast-path call (fp_reap). A pin's copy of pol.pending is kept by
//     the home: fp_home_set_pending lets the array it replaced go only after
//     draining the pins of the epoch before.
//   - An inode record (fp_inode_t): refs, one while in fp_inodes, one per
//     write ticket (hs_wl_ticket_t.inode), so wl_end never writes into a
//     freed record, whatever JS or fp_clear did meanwhile.
//   - A handle (fp_handle_t): its descriptor is JS's (or a native open's),
//     closed by its owner once the entry is out of the table. fgetattr counts
//     itself in (users) under the read lock and fstats unlocked; whoever takes
//     an entry out waits (fp_handle_retire) until no fgetattr uses it, then
//     frees it, before the owner may close the descriptor.
//   - An open record's home (fp_open_rec_t.home): a plain pointer, used only
//     under fp_open_lock while fp_slot_gen has not moved since the slot was
//     taken; a home's removal returns its slots, which moves the generation, so
//     a matching generation means the home is still in the table.
//   - A record's count beside the directory handles (fp_open_rec_t.dh,
//     dirhandles.c): alive while it counts the record, given back once.
//   - A data-plane entry (dataplane.c): counted in (dp_take) for each syscall.
//   Nothing else is used by pointer after fp_lock is dropped: the reserved
//   names and a home's pol are read under the lock (pol: copied into the pin).

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
#include "sys/napi_args.h"

#include "abi.h"
#include "fastpath/fastpath.h"
#include "fastpath/dirhandles.h"
#include "fastpath/queue.h"

#pragma GCC visibility push(hidden)

#ifdef HOMESFS_TEST_HOOKS
// The unit tests' build only (native/test: fp_hooks.c defines them): what a
// test cannot make the system do on cue. A failing allocation (every calloc
// and malloc of the fast path goes through the test's), an openat2 that
// answers an errno (ENOSYS: a kernel before 5.6), a call between a native
// unlink's open check and its unlinkat, and the calls the hooks below name.
void * fp_test_calloc (size_t n, size_t size);
void * fp_test_malloc (size_t size);
#define calloc fp_test_calloc
#define malloc fp_test_malloc
extern int fp_test_openat2_errno;
extern void (*fp_test_unlink_checked) (uint64_t dev, uint64_t ino);
extern void (*fp_test_settle_asked) (void);  // each fp_ask_settle, before it looks for JS's handler
extern void (*fp_test_dir_walked) (void);    // fp_dc_stat, between a directory's walk and keeping it
extern void (*fp_test_symlink_made) (int pfd, const char *name);  // fp_symlink_node, right after the symlinkat
extern void (*fp_test_release_closing) (uint64_t dev, uint64_t ino);  // hs_fastpath_release: a made file closed, its record not queued again yet
#endif

#define FP_HOME_BUCKETS 4096
#define FP_INODE_BUCKETS 16384
#define FP_MAX_RESERVED 32
#define FP_RESERVED_LEN 64

// A JS typed array C adds to (a home's accounting array, abi.h ACCT_*),
// kept alive by a napi reference while any holder has it (see Lifetimes).
typedef struct fp_acct {
  struct fp_acct *next;   // in the list fp_reap empties (under fp_grave_lock)
  int64_t *data;
  size_t len;
  uint32_t refs;          // atomic
  napi_ref ref;           // NULL: not JS's (unit tests)
  napi_env env;
} fp_acct_t;

// What JS changes in place in a published home (under the write lock, epoch
// flipped: fp_home_change); a native op decides from the copy its pin took.
typedef struct fp_home_pol {
  // Set while JS lets C unlink in this home (hs_fastpath_set_mutable): JS's
  // BigInt64Array [bytes, inodes, ...] the ledger takes releases from.
  fp_acct_t *pending;
  // Read-only opens answered here (hs_fastpath_set_open): HOMESFS_OPEN_* flags.
  uint32_t open_flags;
  // SETATTRs by path answered here (hs_fastpath_set_attr_ops): HOMESFS_ATTR_* flags,
  // and chmod's form: new = asked & chmod_m, nothing changed when that equals
  // current & chmod_k (JS publishes it only for a profile whose chmodDecision
  // has that form).
  uint32_t attr_flags;
  uint32_t chmod_m;
  uint32_t chmod_k;
  // CREATE answered here (hs_fastpath_set_create), only while the home is
  // mutable too (pending set): the new file's mode is (asked & mode_m) |
  // mode_or, its owner the published one, its depth at most max_depth (0: no
  // limit).
  uint32_t create_on;
  uint32_t create_owner;   // 0: the published owner (owner-only); 1: the caller, a setgid parent's group kept (chown allow)
  uint32_t mode_m;
  uint32_t mode_or;
  uint32_t max_depth;
  // MKDIR answered here too (hs_fastpath_set_mkdir), only while creates are:
  // the new directory's mode is (asked & dmode_m) | dmode_or, its owner and
  // depth limit as a new file's, its inode a create slot's.
  uint32_t mkdir_on;
  uint32_t dmode_m;
  uint32_t dmode_or;
  // SYMLINK answered here too (hs_fastpath_set_symlink), only while creates
  // are: 0 never (the profile denies links: JS refuses), 1 relative targets
  // that stay in the home (fp_link_inside; an absolute one needs the home's
  // paths and the system prefixes, JS's), 2 any target. Owner and depth as a
  // new file's, its inode a create slot's.
  uint32_t symlink_rule;
  // RENAME of a regular file within the home answered here
  // (hs_fastpath_set_rename), only while the home is mutable too (pending
  // set): the target's depth at most rename_depth (0: no limit).
  uint32_t rename_on;
  uint32_t rename_depth;
  // LINK within the home answered here too (hs_fastpath_set_link), only
  // while creates are: the new name's inode a create slot's, its depth limit
  // and names a new file's. Off wherever the profile denies hard links.
  uint32_t link_on;
  // Files made here start with their size owned by C, charged from
  // the byte credit in pending, when JS set it (hs_fastpath_set_write_credit).
  uint32_t wl_on;
} fp_home_pol_t;

typedef struct fp_home {
  struct fp_home *next;
  // Fixed once published (read by pin holders without a lock).
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
  uint32_t keep[HOMESFS_MODE_TYPES];
  uint32_t or[HOMESFS_MODE_TYPES];
  double token;
  fp_home_pol_t pol;    // under fp_lock
  uint32_t epoch;       // under fp_lock: which of ops a new pin counts in
  // The open-file slots JS took, each for one caller uid and with a handle
  // number JS reserved, and the create slots (an open-file slot, an inode the
  // ledger reserved and a handle number), under fp_open_lock.
  hq_link_t *slots;   // of fp_open_rec_t
  hq_link_t *cslots;
  uint32_t refs;        // atomic: 1 while in fp_homes, + 1 per pin
  uint32_t ops[2];      // atomic: pins taken under epoch 0 / 1
  uint32_t drainers;    // atomic: threads in fp_drain for it
  // Atomic: CLOCK_MONOTONIC ns until which JS's last check that the home's
  // backing directory is still in place stands (REVALIDATE_MS after it); a
  // GETATTR of the home itself is answered here until then. 0: never.
  int64_t root_until;
} fp_home_t;

// A native op's hold on its home (fp_pin .. fp_unpin): the home cannot be
// freed nor its descriptor closed, and a change of it waits for the op.
typedef struct fp_pin {
  fp_home_t *home;
  uint32_t epoch;
  int names_ok;         // every component of the rel given to fp_pin passed fp_components_ok
  fp_home_pol_t pol;    // the home's pol when pinned
  uint64_t gen;         // fp_policy_gen when pinned
} fp_pin_t;

typedef struct fp_inode {
  struct fp_inode *next;
  uint64_t dev;
  uint64_t ino;
  uint32_t count;       // under fp_lock: opens JS (and native opens) hold
  uint32_t refs;        // atomic: 1 while in fp_inodes, + 1 per write ticket
  // The size JS charges the open file (its ledger's record), once JS published
  // it (hs_fastpath_inode_size): a getattr then answers max(charged, on disk), as
  // JS does; before that, JS answers. Written under the read lock, read
  // atomically: a double's bits.
  uint64_t size_bits;
  int has_size;
  // Write decisions (see "WRITE decided here" in fastpath_write.c), under
  // fp_wlock: deleg set while C owns the charged size (size_bits) and may
  // grow it from the home's byte credit in acct (a held reference); busy while
  // a write decided here is between its decision and its settling.
  int deleg;
  int busy;
  fp_acct_t *acct;
} fp_inode_t;

// An open file JS handed to the kernel: fgetattr(fh) is fstat(fd) presented
// like any node of its home. fd is JS's own (or a native open's): whoever
// takes the entry out of the table waits until no fgetattr uses it
// (fp_handle_retire) before the descriptor may be closed.
typedef struct fp_handle {
  struct fp_handle *next;
  uint64_t fh;
  int fd;
  uint32_t uid;
  uint32_t gid;
  int owner_from_stat;
  uint32_t types;
  uint32_t keep[HOMESFS_MODE_TYPES];
  uint32_t or[HOMESFS_MODE_TYPES];
  uint32_t users;       // atomic: fgetattrs using fd now (the last one's decrement under fp_drain_lock)
  int retiring;         // under fp_drain_lock: out of the table, its retirer waiting for users to reach 0
} fp_handle_t;

typedef struct {
  char name[FP_RESERVED_LEN];
  size_t len;
  int prefix;           // "name*": every name that begins with name
} fp_reserved_t;

#define FP_HANDLE_BUCKETS 16384

typedef struct fp_open_rec {
  hq_link_t link;       // first: in a home's slot list, or in the queue for JS
  uint32_t kind;
  uint32_t fh;
  int32_t fd;
  uint32_t published;   // DP_READ when the data plane has it
  uint32_t uid;         // the caller this slot was taken for
  uint32_t oflags;      // a created handle's open flags (access mode, O_APPEND)
  uint64_t dev;
  uint64_t ino;
  // An open slot: its home, and fp_slot_gen when the slot was taken from
  // the home's list (a handle closed before JS adopted it gives its
  // slot back to that list while no slot went back to JS since).
  struct fp_home *home;
  uint64_t gen;
  // While taken for a native open or create: its count beside the directory
  // handles (dirhandles.c), given back once JS takes the record in or the
  // file is gone.
  void *dh;
  uint64_t closing;     // on fp_closing (fastpath_open.c): its number there
} fp_open_rec_t;

static inline struct fp_open_rec * fp_rec (hq_link_t *l) { return (struct fp_open_rec *) l; }

// Gives a record's count beside the directory handles back (once).
static inline void fp_dh_give (fp_open_rec_t *r) {
  if (r == NULL || r->dh == NULL) return;
  hs_dh_file_give(r->uid, r->dh);
  r->dh = NULL;
}

static inline double fp_bits_double (uint64_t bits) { double d; memcpy(&d, &bits, sizeof(d)); return d; }
static inline uint64_t fp_double_bits (double d) { uint64_t b; memcpy(&b, &d, sizeof(b)); return b; }

#define FP_THROW(msg) do { napi_throw_type_error(env, "EINVAL", (msg)); return NULL; } while (0)

// ---- fastpath_state.c: the tables, their lock, references and publication ----
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
// Under nothing: the home (prefix, token) published and its directory checked
// in place by JS, which stands for ms more (hs_fastpath_home_checked). 1 found.
int fp_home_checked (const char *prefix, size_t n, double token, double ms);
napi_value fp_home_checked_js (napi_env env, napi_callback_info info);
fp_inode_t * fp_find_inode (uint64_t dev, uint64_t ino);
int fp_inode_open (uint64_t dev, uint64_t ino);
// fastpath_open.c: a record of the inode's making not yet taken by JS (its removal is then JS's).
int fp_making_queued (uint64_t dev, uint64_t ino);
// What JS's take of the queue waits for: the made files being closed by their RELEASE when it begins.
extern const hq_gate_t fp_closing_gate;
int fp_components_ok (const char *rel, uint32_t max_name);
int fp_split_path (const char *path, size_t *plen, const char **rel);
int fp_openat2 (int dirfd, const char *rel, uint64_t flags);
int fp_open_parent (int home_fd, const char *rel, const char *last_slash);
fp_handle_t * fp_unlink_handle_locked (uint64_t fh);
void fp_inode_add_locked (uint64_t dev, uint64_t ino, fp_inode_t **fresh);
fp_inode_t * fp_inode_drop_locked (uint64_t dev, uint64_t ino);
// Publication, without N-API (the exports below parse their arguments and
// call these; so do the unit tests). Each change of a home returns once no
// native op of the state it replaced is past its checks.
fp_home_t * fp_home_new (const char *prefix, size_t plen, int fd);
void fp_home_publish (fp_home_t *e);
int fp_home_remove (const char *prefix, size_t n, double token);
int fp_home_change (const char *prefix, size_t n, double token, void (*change) (fp_home_t *e, void *arg), void *arg);
int fp_home_set_pending (const char *prefix, size_t n, double token, fp_acct_t *a);
void fp_clear_all (void);
int fp_inode_delta (uint64_t dev, uint64_t ino, int delta);
void fp_handle_publish (fp_handle_t *e);
void fp_handle_remove (uint64_t fh);
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

// ---- fastpath_walk.c: the reserved names, under fp_lock (written by JS's setReserved) ----
extern fp_reserved_t fp_reserved[];
extern size_t fp_reserved_n;

// ---- fastpath_refs.c: references (see Lifetimes above) ----
extern uint32_t fp_homes_alive;
void fp_home_get (fp_home_t *e);
void fp_home_put (fp_home_t *e);
int fp_pin (const char *path, size_t plen, const char *rel, fp_pin_t *p);
void fp_unpin (fp_pin_t *p);
void fp_drain (fp_home_t *e, unsigned mask);
uint32_t fp_pins_held (void);
void fp_inode_put (fp_inode_t *e);
void fp_handle_done (fp_handle_t *e);
void fp_handle_retire (fp_handle_t *e);
fp_acct_t * fp_acct_wrap (int64_t *data, size_t len, napi_env env, napi_ref ref);
void fp_acct_get (fp_acct_t *a);
void fp_acct_put (fp_acct_t *a);
void fp_reap (void);

// ---- fastpath_attr.c ----
extern uint64_t fp_answered, fp_fallbacks, fp_fanswered, fp_ffallbacks, fp_negative, fp_ranswered, fp_rfallbacks, fp_home_answered;

// ---- fastpath_dircache.c: kept descriptors of directories for GETATTR ----
// A node of the pinned home lstat'ed or fstat'ed (the home pinned), as a
// GETATTR of its path answers it: 0 with *out, or -1 where JS answers (another
// device, an inode JS holds open and has not sized yet, a synthetic inode
// number, a file type without masks). The reply to a name made here comes
// from it too, so it is the same answer a getattr of the new path gives.
int fp_present_node (const fp_home_t *home, const struct stat *node, struct stat *out);

// fp_dc_stat: lstat of rel's last component below the kept (or newly walked)
// descriptor of rel[0..dlen), the directory it is in: 0 with *st, -ENOENT
// (answer it), or FP_DC_WALK (the whole path's walk decides). fp_dc_forget:
// the entries of a home's publication (all: every entry) closed.
#define FP_DC_WALK 1
int fp_dc_stat (const fp_home_t *home, const char *rel, size_t dlen, struct stat *st);
void fp_dc_forget (double token, int all);
extern uint64_t fp_dc_hits, fp_dc_walks, fp_dc_held, fp_dc_on;
napi_value fp_set_dircache (napi_env env, napi_callback_info info);

// ---- fastpath_unlink.c ----
extern uint64_t fp_uanswered, fp_ubig, fp_ufallbacks;
extern uint64_t fp_rmdir_on, fp_rdanswered, fp_rdfallbacks;
napi_value fp_set_rmdir (napi_env env, napi_callback_info info);
void fp_unlinking_wait (uint64_t dev, uint64_t ino);
napi_value fp_set_free_inline_max (napi_env env, napi_callback_info info);
extern uint64_t fp_rnanswered, fp_rnfallbacks;
int fp_home_set_rename (const char *prefix, size_t n, double token, int on, uint32_t depth);
napi_value fp_set_rename (napi_env env, napi_callback_info info);
// Under nothing: whether every component of rel passes fp_components_ok (under the read lock).
int fp_names_ok (const char *rel, uint32_t max_name);
extern uint64_t fp_free_inline_max;  // atomic; set by JS (fastpath_napi.c)

// ---- fastpath_setattr.c ----
extern uint64_t fp_utimens_answered, fp_chmod_answered, fp_chown_answered, fp_sfallbacks;
int fp_home_set_attr_ops (const char *prefix, size_t n, double token, uint32_t flags, uint32_t m, uint32_t k);
napi_value fp_set_attr_ops (napi_env env, napi_callback_info info);

// ---- fastpath_open.c: the slots, the queue, and what open and create share ----
extern pthread_mutex_t fp_open_lock;
extern uint32_t fp_slot_count;
extern uint64_t fp_oanswered, fp_ofallbacks, fp_oclosed, fp_cclosed;
// A caller's create slots in a home down to this many: JS is asked to grant more.
#define FP_CSLOTS_LOW 8
extern uint64_t fp_settle_asks;  // atomic: asks posted to JS
// Any thread, no lock held: JS is asked to take the queue (and top its slots
// up) soon; at most one ask is on its way at a time. No-op until JS set the handler.
void fp_ask_settle (void);
napi_value fp_set_settle_handler (napi_env env, napi_callback_info info);
void fp_queue (fp_open_rec_t *r);
void fp_return_create_slots (fp_home_t *e);
void fp_return_slots (fp_home_t *e);
void fp_open_register (uint64_t dev, uint64_t ino, fp_handle_t *he, fp_inode_t *fresh);
void fp_handle_fill (fp_handle_t *he, uint32_t fh, int fd, const fp_home_t *home);
int fp_home_set_open (const char *prefix, size_t n, double token, uint32_t flags);
int fp_slot_grant (const char *prefix, size_t n, double token, uint32_t fh, uint32_t uid, int create);
hq_t fp_opens_take (void);
void fp_opens_put_back (hq_t taken);
napi_value fp_set_open (napi_env env, napi_callback_info info);
napi_value fp_grant (napi_env env, napi_callback_info info);
napi_value fp_grant_slot (napi_env env, napi_callback_info info, int create);
napi_value fp_reclaim (napi_env env, napi_callback_info info);
napi_value fp_take_opens (napi_env env, napi_callback_info info);
// Shared with fastpath_napi.c (takeOpens, grants, reclaim): under fp_open_lock.
extern hq_t fp_opens;
extern uint64_t fp_slot_gen;
void fp_return_list_locked (hq_link_t **list, uint32_t kind);
void fp_open_fill (hq_link_t *l, void *data, uint32_t i);

// ---- fastpath_create.c ----
extern uint64_t fp_canswered_create, fp_cfallbacks;
int fp_home_set_create (const char *prefix, size_t n, double token, int on, uint32_t m, uint32_t or, uint32_t depth, int caller_owns);
napi_value fp_set_create (napi_env env, napi_callback_info info);
napi_value fp_grant_create (napi_env env, napi_callback_info info);
extern uint64_t fp_manswered, fp_mfallbacks;
extern uint64_t fp_symanswered, fp_symfallbacks;  // symlink
int fp_home_set_symlink (const char *prefix, size_t n, double token, uint32_t rule);
napi_value fp_set_symlink (napi_env env, napi_callback_info info);
napi_value fp_symlink_inside (napi_env env, napi_callback_info info);
// policy/profiles.ts symlinkTargetInsideHome for a relative target, the link
// standing `depth` directories below the home root: 1 inside, 0 not (an
// absolute or empty target too). Pure.
int fp_link_inside (uint32_t depth, const char *target);
int fp_home_set_mkdir (const char *prefix, size_t n, double token, int on, uint32_t m, uint32_t or);
napi_value fp_set_mkdir (napi_env env, napi_callback_info info);
extern uint64_t fp_lanswered, fp_lfallbacks;  // link
int fp_home_set_link (const char *prefix, size_t n, double token, int on);
napi_value fp_set_link (napi_env env, napi_callback_info info);

// ---- fastpath_write.c ----
extern uint64_t fp_wdecided, fp_wfallbacks;
extern uint64_t fp_truncate_on, fp_tdecided, fp_tfallbacks;  // ftruncate
napi_value fp_set_truncate (napi_env env, napi_callback_info info);
void fp_wl_wait_home (int64_t *acct);
int fp_wl_delegate_to (uint64_t dev, uint64_t ino, double size, fp_acct_t *a);
double fp_wl_take_back (uint64_t dev, uint64_t ino);
int fp_home_set_write_credit (const char *prefix, size_t n, double token, int on);
napi_value fp_wl_delegate (napi_env env, napi_callback_info info);
napi_value fp_wl_revoke (napi_env env, napi_callback_info info);
napi_value fp_wl_size (napi_env env, napi_callback_info info);
napi_value fp_set_write_credit (napi_env env, napi_callback_info info);
extern pthread_mutex_t fp_wlock;     // see the lock map above
fp_acct_t * fp_acct_of_inode (uint64_t dev, uint64_t ino, const int64_t *data);

// ---- fastpath_napi.c ----
char * fp_prefix_token (napi_env env, napi_callback_info info, size_t want, napi_value *argv, size_t *plen, double *token, const char *usage);
fp_acct_t * fp_acct_of_js (napi_env env, napi_value array, int64_t *data, size_t len);

#pragma GCC visibility pop

#endif
