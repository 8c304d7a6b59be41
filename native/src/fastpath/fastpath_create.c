// CREATE, MKDIR and LINK answered here (hs_fastpath_set_create, _set_mkdir,
// _set_link) from the create slots JS grants (hs_fastpath_grant_create: an
// open-file slot, an inode the ledger reserved, a handle number; a mkdir or a
// link uses only the inode). Threads: the session's workers make; JS
// publishes and grants on its main thread. Locks: the slot lists are under
// fp_open_lock, the pol a pin copied under none (fastpath_internal.h), the
// reserved names under fp_lock's read lock (fp_names_ok). Invariants: a
// create, mkdir or link pins its home from
// its check until its record is queued (no lock held across its syscalls), so
// making the home immutable (hs_fastpath_set_mutable) returns only after every
// one it raced is queued for JS; a node made but not as JS would make it is
// removed again.

#include "fastpath/fastpath_internal.h"
#include "fastpath/dataplane.h"

uint64_t fp_canswered_create = 0;  // create, atomic
uint64_t fp_cfallbacks = 0;  // create (only counted in homes JS opened for it), atomic
uint64_t fp_manswered = 0;   // mkdir, atomic
uint64_t fp_mfallbacks = 0;  // mkdir (only counted in homes JS opened for it), atomic
uint64_t fp_symanswered = 0;   // symlink, atomic
uint64_t fp_symfallbacks = 0;  // symlink (only counted in homes JS opened for it), atomic

// Whose file it is on disk (context.ts diskOwner/ownNew): the home's owner
// (as given), or the caller with a setgid parent's group. -1: the parent
// cannot be read (JS decides).
static int fp_create_owner (const fp_pin_t *pin, int pfd, uint32_t uid, uint32_t gid, uint32_t *own_uid, uint32_t *own_gid) {
  if (pin->pol.create_owner != 1) return 0;
  struct stat pst;
  *own_uid = uid;
  *own_gid = gid;
  if (fstat(pfd, &pst) != 0) return -1;
  if ((pst.st_mode & S_ISGID) != 0) *own_gid = (uint32_t) -1;
  return 0;
}

// The new file `name` in pfd, made as JS's createIn makes it, *st its fstat
// once owned (the CREATE's answer): its descriptor, or -1 with nothing left
// behind. The owner is set before the checks: O_CREAT|O_EXCL made this inode
// on this descriptor, so the fchown can only reach the new file, and the one
// fstat after it both checks it and answers with its owner and ctime.
static int fp_create_file (const fp_home_t *home, int pfd, const char *name, int flags, mode_t m, uint32_t own_uid, uint32_t own_gid, struct stat *st) {
  // As file.ts backingFlags: read-only stays read-only, anything else is read-write (the UTF-8 check reads around writes).
  int acc = (flags & O_ACCMODE) == O_RDONLY ? O_RDONLY : O_RDWR;
  int fd = openat(pfd, name, acc | (flags & O_APPEND) | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, m);
  if (fd < 0) return -1;
  int chowned = fchown(fd, own_uid, own_gid) == 0;
  int known = fstat(fd, st) == 0;
  if (!(chowned && known && S_ISREG(st->st_mode) && (uint64_t) st->st_dev == home->dev && ((uint64_t) st->st_ino >> 63) == 0)) {
    // Made but not as JS would have it: nothing is left. The name is
    // removed only while it is still the file made here (another may
    // have been renamed over it since); Linux has no unlink by
    // descriptor, so this narrows the window to the two calls. A file
    // whose identity is unknown (fstat failed) is left where it is.
    struct stat named;
    if (known && fstatat(pfd, name, &named, AT_SYMLINK_NOFOLLOW) == 0 && named.st_dev == st->st_dev && named.st_ino == st->st_ino) unlinkat(pfd, name, 0);
    close(fd);
    return -1;
  }
  return fd;
}

// Under nothing: the create slot of the home granted for uid, out of its list, or NULL.
// The take that leaves FP_CSLOTS_LOW of uid's slots asks JS to grant more
// (fp_ask_settle): JS tops up what it adopts, and without the ask it learns of
// the creates only at the next request or release poll, by which time a burst
// (an `npm install`, a `tar -x`) has used every slot and each further create
// falls back to a whole JavaScript CREATE.
static fp_open_rec_t * fp_take_cslot (fp_home_t *home, uint32_t uid) {
  fp_open_rec_t *slot = NULL;
  uint32_t left = 0;
  pthread_mutex_lock(&fp_open_lock);
  hq_link_t **pp = &home->cslots;
  while (*pp != NULL && fp_rec(*pp)->uid != uid) pp = &(*pp)->next;
  if (*pp != NULL) {
    slot = fp_rec(*pp);
    *pp = slot->link.next;
    fp_slot_count--;
    // uid's slots all come after the first of them
    for (hq_link_t *l = *pp; l != NULL; l = l->next) left += fp_rec(l)->uid == uid;
  }
  pthread_mutex_unlock(&fp_open_lock);
  // Counted under the lock, each count is seen once on the way down: one ask per descent.
  if (slot != NULL && left == FP_CSLOTS_LOW) fp_ask_settle();
  return slot;
}

// The create slot of the pinned home granted for uid, taken (with its count
// beside the directory handles), or NULL.
static fp_open_rec_t * fp_take_create_slot (fp_home_t *home, uint32_t uid, const char *path, size_t plen) {
  void *dh = hs_dh_file_take(uid, path, plen);  // as for opens: directory handles may hold the room
  if (dh == NULL) return NULL;
  fp_open_rec_t *slot = fp_take_cslot(home, uid);
  if (slot == NULL) hs_dh_file_give(uid, dh);
  else slot->dh = dh;
  return slot;
}

// The new file made in the pinned home for a create slot taken for it
// (*slot): its descriptor and *st, or -1 with nothing made (the slot, if
// one was taken, still in *slot).
static int fp_create_in (const fp_pin_t *pin, const char *path, size_t plen, const char *rel, uint32_t mode, int flags,
                         uint32_t uid, uint32_t gid, struct stat *st, fp_open_rec_t **slot) {
  const fp_home_t *home = pin->home;
  const char *last_slash = strrchr(rel, '/');
  const char *name = last_slash ? last_slash + 1 : rel;
  uint32_t depth = 1;
  for (const char *c = rel; *c; c++) if (*c == '/') depth++;
  if ((pin->pol.max_depth != 0 && depth > pin->pol.max_depth) || !pin->names_ok) return -1;
  mode_t m = (mode_t) ((mode & pin->pol.mode_m) | pin->pol.mode_or);
  // setuid/setgid asked: JS sets them again after the chown (which clears them), by descriptor.
  if ((m & 06000) != 0) return -1;
  int pfd = fp_open_parent(home->fd, rel, last_slash);
  if (pfd < 0) return -1;
  int fd = -1;
  uint32_t own_uid = home->uid, own_gid = home->gid;
  if ((*slot = fp_take_create_slot(pin->home, uid, path, plen)) != NULL && fp_create_owner(pin, pfd, uid, gid, &own_uid, &own_gid) == 0) {
    fd = fp_create_file(home, pfd, name, flags, m, own_uid, own_gid, st);
  }
  if (pfd != home->fd) close(pfd);
  return fd;
}

// The home of `path` pinned, with plen and rel set (fp_split_path), when the fast path is on and the
// home is open for native creates (mutable, open for native opens): 1; else
// 0 with nothing pinned. Where a create, mkdir or symlink begins.
static int fp_pin_creatable (const char *path, size_t *plen, const char **rel, fp_pin_t *pin) {
  if (!__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE)) return 0;
  if (fp_split_path(path, plen, rel) != 0 || !fp_pin(path, *plen, *rel, pin)) return 0;
  const fp_home_pol_t *pol = &pin->pol;
  if (pol->create_on && pol->pending != NULL && (pol->open_flags & HOMESFS_OPEN_ON) != 0) return 1;
  fp_unpin(pin);
  return 0;
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
// after the file was made removes it again before JS is asked. The home stays
// pinned until the record is queued, and every exit gives the slot it took back.
int hs_fastpath_create (const char *path, uint32_t mode, int flags, uint32_t uid, uint32_t gid, uint64_t *fh, int *direct_io, struct stat *attr, int *presented) {
  size_t plen;
  const char *rel;
  fp_pin_t pin;
  if (!fp_pin_creatable(path, &plen, &rel, &pin)) return HOMESFS_FASTPATH_FALLBACK;
  const fp_home_pol_t *pol = &pin.pol;

  fp_handle_t *he = calloc(1, sizeof(*he));
  fp_inode_t *fresh = calloc(1, sizeof(*fresh));
  fp_open_rec_t *slot = NULL;
  struct stat st;
  // Busy from before the file can exist until JS counted it (open-slots.ts
  // settleOpens): a crash in between leaves the home's checkpoint marked
  // (src/fs/ledger-area.ts), never short of the inode.
  int64_t *busy = pol->pending->len >= HOMESFS_ACCT_LEN ? &pol->pending->data[HOMESFS_ACCT_BUSY] : NULL;
  if (busy != NULL) __atomic_add_fetch(busy, 1, __ATOMIC_SEQ_CST);
  int fd = he != NULL && fresh != NULL ? fp_create_in(&pin, path, plen, rel, mode, flags, uid, gid, &st, &slot) : -1;
  if (fd < 0) {
    if (busy != NULL) __atomic_sub_fetch(busy, 1, __ATOMIC_SEQ_CST);
    free(he);
    free(fresh);
    if (slot != NULL) { fp_dh_give(slot); fp_queue(slot); } // kind is still UNUSED_CREATE: slot and inode go back
    fp_unpin(&pin);
    __atomic_add_fetch(&fp_cfallbacks, 1, __ATOMIC_RELAXED);
    return HOMESFS_FASTPATH_FALLBACK;
  }
  uint32_t oflags = (uint32_t) ((flags & O_ACCMODE) | (flags & O_APPEND));
  // Before the inode is registered open here: a new file's charged size is its size, 0.
  *presented = fp_present_node(pin.home, &st, attr) == 0;
  fp_handle_fill(he, slot->fh, fd, pin.home);
  uint64_t dev = (uint64_t) st.st_dev, ino = (uint64_t) st.st_ino;
  uint32_t handle = slot->fh;
  // A new file: its charged size is 0, and where JS let it, C owns it from
  // the start, so its first writes need no decision from JS either.
  fresh->size_bits = 0;  // the bits of 0.0
  fresh->has_size = 1;
  if (pol->wl_on && pol->pending->len >= HOMESFS_ACCT_LEN) {
    fresh->deleg = 1;
    fresh->acct = pol->pending;
    fp_acct_get(fresh->acct);
  }
  fp_open_register(dev, ino, he, fresh);
  // What a handle of a binary home publishes (context.ts publishData): reads, and, writable, writes decided without their data.
  uint32_t dp = ((pol->open_flags & HOMESFS_OPEN_DP_READ) != 0 ? 1u : 0u) | ((oflags & O_ACCMODE) != O_RDONLY && (pol->open_flags & HOMESFS_OPEN_DP_WRITE) != 0 ? 2u : 0u);
  slot->published = dp != 0 && hs_dp_publish_fd(handle, fd, dp, dev, ino, (oflags & O_APPEND) != 0, pin.gen) ? dp : 0;
  slot->kind = HOMESFS_REC_CREATED;
  slot->fd = fd;
  slot->dev = dev;
  slot->ino = ino;
  slot->oflags = oflags;
  fp_queue(slot);
  *direct_io = (pol->open_flags & HOMESFS_OPEN_DIRECT_IO) != 0;
  fp_unpin(&pin);
  *fh = handle;
  __atomic_add_fetch(&fp_canswered_create, 1, __ATOMIC_RELAXED);
  return 0;
}

struct fp_create_change { int on, caller_owns; uint32_t m, or, depth; };

static void fp_change_create (fp_home_t *e, void *arg) {
  const struct fp_create_change *c = arg;
  if (!c->on) fp_return_create_slots(e);
  e->pol.create_on = c->on ? 1 : 0;
  e->pol.create_owner = c->caller_owns ? 1 : 0;
  e->pol.mode_m = c->m;
  e->pol.mode_or = c->or;
  e->pol.max_depth = c->depth;
}

int fp_home_set_create (const char *prefix, size_t n, double token, int on, uint32_t m, uint32_t or, uint32_t depth, int caller_owns) {
  struct fp_create_change c = { on, caller_owns, m, or, depth };
  return fp_home_change(prefix, n, token, fp_change_create, &c);
}

// ---- MKDIR ----------------------------------------------------------------------
// Answered on the session's worker thread that took the request, under no
// lock across its syscalls (the home pinned from its check until its record
// is queued, as a create). JS's mkdir (src/fs/dir.ts) charges one inode and
// no bytes (directories count 0, policy/ledger.ts), so a create slot's
// reserved inode is all it needs: its open-file slot and handle number go
// back to JS unused with the record (REC_MKDIR), and no count beside the
// directory handles is taken for it (nothing is opened).

// The directory `name` in pfd, made as JS's mkdir and ownNew make it (mkdir
// with the mode, then the owner by name without following): 0 with *st its
// fstat once owned (the MKDIR's answer), or -1 with nothing left behind. The
// owner is set before the checks: while the MKDIR request is served the
// caller's kernel holds the parent's lock, so no rename or removal through
// the mount reaches `name` between the mkdirat and the open, and without
// allowOpenBacking only root reaches the backing tree (docs/security.md,
// Backing safety). With it, O_DIRECTORY|O_NOFOLLOW still opens nothing but a
// directory, and the checks (type, device, inode range) could not tell
// another directory put there from this one either.
static int fp_mkdir_dir (const fp_home_t *home, int pfd, const char *name, mode_t m, uint32_t own_uid, uint32_t own_gid, struct stat *st) {
  if (mkdirat(pfd, name, m) != 0) return -1;
  // O_PATH: the owner is changed by descriptor whatever the new mode lets root's own reads do.
  int fd = openat(pfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int chowned = fd >= 0 && fchownat(fd, "", own_uid, own_gid, AT_EMPTY_PATH) == 0;
  int known = fd >= 0 && fstat(fd, st) == 0;
  int ok = chowned && known && S_ISDIR(st->st_mode) && (uint64_t) st->st_dev == home->dev && ((uint64_t) st->st_ino >> 63) == 0;
  if (!ok) {
    // As for a file (fp_create_file): removed only while the name is still
    // the directory made here; an empty one only, which rmdir checks itself.
    struct stat named;
    if (known && fstatat(pfd, name, &named, AT_SYMLINK_NOFOLLOW) == 0 && named.st_dev == st->st_dev && named.st_ino == st->st_ino) unlinkat(pfd, name, AT_REMOVEDIR);
  }
  if (fd >= 0) close(fd);
  return ok ? 0 : -1;
}

// The end of a name made with a create slot (fp_make_entry, hs_fastpath_link),
// `busy` the home's busy count it raised: made (0), a record of `kind` with
// the node's identity queued for JS, which lowers the count when it commits
// the slot's inode, and *attr the node as a getattr of its path presents it
// (*presented 1; 0: the caller asks for that getattr); not made, the slot
// queued back unused (its inode too) and the count lowered here. Unpins the home.
static int fp_entry_done (fp_pin_t *pin, int64_t *busy, fp_open_rec_t *slot, int made, const struct stat *st, uint32_t kind, uint64_t *answered, uint64_t *fallbacks,
                          struct stat *attr, int *presented) {
  if (made != 0) {
    if (busy != NULL) __atomic_sub_fetch(busy, 1, __ATOMIC_SEQ_CST);
    if (slot != NULL) fp_queue(slot);  // kind is still UNUSED_CREATE: slot and inode go back
    fp_unpin(pin);
    __atomic_add_fetch(fallbacks, 1, __ATOMIC_RELAXED);
    return HOMESFS_FASTPATH_FALLBACK;
  }
  *presented = fp_present_node(pin->home, st, attr) == 0;
  slot->kind = kind;
  slot->fd = -1;
  slot->published = 0;
  slot->dev = (uint64_t) st->st_dev;
  slot->ino = (uint64_t) st->st_ino;
  slot->oflags = 0;
  fp_queue(slot);
  fp_unpin(pin);
  __atomic_add_fetch(answered, 1, __ATOMIC_RELAXED);
  return 0;
}

// What a mkdir or a symlink makes at `name` in pfd: 0 with *st, or -1 with nothing left.
typedef int (*fp_make_fn) (const fp_home_t *home, int pfd, const char *name, uint32_t own_uid, uint32_t own_gid, const void *arg, struct stat *st);

// The steps a MKDIR and a SYMLINK share, on a pinned home published for them
// (`wanted`: the op's own conditions held): the depth limit and names as for
// a create, the confined walk to the parent, a create slot for the caller's
// uid, the node made, a record of `kind` queued for JS, which commits the
// slot's inode before it serves anything else. The home is busy from before
// the node can exist until JS counted it, as for a create. 0 made, or
// HOMESFS_FASTPATH_FALLBACK with nothing made and any slot taken queued back.
// Unpins the home.
static int fp_make_entry (fp_pin_t *pin, const char *rel, uint32_t uid, uint32_t gid, int wanted, fp_make_fn make, const void *arg, uint32_t kind, uint64_t *answered, uint64_t *fallbacks,
                          struct stat *attr, int *presented) {
  const fp_home_pol_t *pol = &pin->pol;
  fp_home_t *home = pin->home;
  const char *last_slash = strrchr(rel, '/');
  const char *name = last_slash ? last_slash + 1 : rel;
  uint32_t depth = 1;
  for (const char *c = rel; *c; c++) if (*c == '/') depth++;
  int made = -1;
  fp_open_rec_t *slot = NULL;
  struct stat st;
  int64_t *busy = pol->pending->len >= HOMESFS_ACCT_LEN ? &pol->pending->data[HOMESFS_ACCT_BUSY] : NULL;
  if (busy != NULL) __atomic_add_fetch(busy, 1, __ATOMIC_SEQ_CST);
  if (wanted && *name != 0 && (pol->max_depth == 0 || depth <= pol->max_depth) && pin->names_ok) {
    int pfd = fp_open_parent(home->fd, rel, last_slash);
    if (pfd >= 0) {
      uint32_t own_uid = home->uid, own_gid = home->gid;
      if ((slot = fp_take_cslot(home, uid)) != NULL && fp_create_owner(pin, pfd, uid, gid, &own_uid, &own_gid) == 0) {
        made = make(home, pfd, name, own_uid, own_gid, arg, &st);
      }
      if (pfd != home->fd) close(pfd);
    }
  }
  return fp_entry_done(pin, busy, slot, made, &st, kind, answered, fallbacks, attr, presented);
}

static int fp_make_dir (const fp_home_t *home, int pfd, const char *name, uint32_t own_uid, uint32_t own_gid, const void *arg, struct stat *st) {
  return fp_mkdir_dir(home, pfd, name, *(const mode_t *) arg, own_uid, own_gid, st);
}

// JS's mkdir for a new name, step for step, in a home open for creates and
// mkdirs (the conditions of a create, and the new directory's mode of the
// form published): the depth limit and names as for a create, the confined
// walk to the parent, a create slot for the caller's uid, mkdirat with
// (asked & dmode_m) | dmode_or, a directory on the home's device, owned as a
// new file is (fp_create_owner), the record queued for JS, which commits the
// slot's inode and takes the open-file slot back before it serves anything
// else. Setuid or setgid asked (JS chmods after the chown), a name that
// exists and every doubt go to JS with nothing made.
int hs_fastpath_mkdir (const char *path, uint32_t mode, uint32_t uid, uint32_t gid, struct stat *attr, int *presented) {
  size_t plen;
  const char *rel;
  fp_pin_t pin;
  if (!fp_pin_creatable(path, &plen, &rel, &pin)) return HOMESFS_FASTPATH_FALLBACK;
  const fp_home_pol_t *pol = &pin.pol;
  if (!pol->mkdir_on) { fp_unpin(&pin); return HOMESFS_FASTPATH_FALLBACK; }
  mode_t m = (mode_t) ((mode & pol->dmode_m) | pol->dmode_or);
  return fp_make_entry(&pin, rel, uid, gid, (m & 06000) == 0, fp_make_dir, &m, HOMESFS_REC_MKDIR, &fp_manswered, &fp_mfallbacks, attr, presented);
}

struct fp_mkdir_change { int on; uint32_t m, or; };

static void fp_change_mkdir (fp_home_t *e, void *arg) {
  const struct fp_mkdir_change *c = arg;
  e->pol.mkdir_on = c->on ? 1 : 0;
  e->pol.dmode_m = c->m;
  e->pol.dmode_or = c->or;
}

int fp_home_set_mkdir (const char *prefix, size_t n, double token, int on, uint32_t m, uint32_t or) {
  struct fp_mkdir_change c = { on, m, or };
  return fp_home_change(prefix, n, token, fp_change_mkdir, &c);
}

// ---- SYMLINK --------------------------------------------------------------------
// As MKDIR (above): the worker thread that took the request, no lock across
// its syscalls, the home pinned until the record is queued. JS's symlink
// (src/fs/dir.ts) charges one inode and no bytes (only regular files count
// bytes), so a create slot's reserved inode is all it needs.

// The symlink `name` -> target in pfd, owned as JS's ownNew owns it (lchown,
// no chmod: a symlink's mode is not its own): 0 with *st its lstat once owned
// (the SYMLINK's answer), or -1 with nothing left behind. Checked before it
// is owned, unlike a directory (fp_mkdir_dir): O_PATH|O_NOFOLLOW opens
// whatever is at the name, and where other uids can reach the backing tree
// (allowOpenBacking) one of them could put a file there between the
// symlinkat and the open; only a symlink is ever given away.
static int fp_symlink_node (const fp_home_t *home, int pfd, const char *name, const char *target, uint32_t own_uid, uint32_t own_gid, struct stat *st) {
  if (symlinkat(target, pfd, name) != 0) return -1;
#ifdef HOMESFS_TEST_HOOKS
  if (fp_test_symlink_made != NULL) fp_test_symlink_made(pfd, name);
#endif
  // O_PATH|O_NOFOLLOW names the link itself: the owner is changed on the node
  // made here, even if the name is renamed over meanwhile.
  int fd = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  int known = fd >= 0 && fstat(fd, st) == 0;
  int ok = known && S_ISLNK(st->st_mode) && (uint64_t) st->st_dev == home->dev && ((uint64_t) st->st_ino >> 63) == 0 &&
           fchownat(fd, "", own_uid, own_gid, AT_EMPTY_PATH) == 0 && fstat(fd, st) == 0;  // the answer: as owned
  if (!ok) {
    // Removed only while the name is still a symlink, the one opened: a file put there is not ours to remove.
    struct stat named;
    if (known && S_ISLNK(st->st_mode) && fstatat(pfd, name, &named, AT_SYMLINK_NOFOLLOW) == 0 && named.st_dev == st->st_dev && named.st_ino == st->st_ino) unlinkat(pfd, name, 0);
  }
  if (fd >= 0) close(fd);
  return ok ? 0 : -1;
}

// JS's symlink for a new name, step for step, in a home open for creates and
// symlinks: the target judged as linkStaysInside judges it (rule 1: a
// relative target that stays in the home; an absolute one is JS's), the depth
// limit and names as for a create, the confined walk to the parent, a create
// slot for the caller's uid, symlinkat, a symlink on the home's device owned
// as a new file is, the record queued for JS, which commits the slot's inode
// before it serves anything else. A target JS would refuse, a name that
// exists and every doubt go to JS with nothing made: it answers and logs.
static int fp_make_link (const fp_home_t *home, int pfd, const char *name, uint32_t own_uid, uint32_t own_gid, const void *arg, struct stat *st) {
  return fp_symlink_node(home, pfd, name, (const char *) arg, own_uid, own_gid, st);
}

int hs_fastpath_symlink (const char *path, const char *target, uint32_t uid, uint32_t gid, struct stat *attr, int *presented) {
  const char *rel;
  fp_pin_t pin;
  size_t plen;
  if (target == NULL || !fp_pin_creatable(path, &plen, &rel, &pin)) return HOMESFS_FASTPATH_FALLBACK;
  const fp_home_pol_t *pol = &pin.pol;
  if (pol->symlink_rule == 0) { fp_unpin(&pin); return HOMESFS_FASTPATH_FALLBACK; }
  uint32_t depth = 0;
  for (const char *c = rel; *c; c++) if (*c == '/') depth++;
  // The link stands `depth` directories below the home's root.
  int target_ok = pol->symlink_rule == 2 ? target[0] != 0 : fp_link_inside(depth, target);
  return fp_make_entry(&pin, rel, uid, gid, target_ok, fp_make_link, target, HOMESFS_REC_SYMLINK, &fp_symanswered, &fp_symfallbacks, attr, presented);
}

static void fp_change_symlink (fp_home_t *e, void *arg) {
  e->pol.symlink_rule = *(const uint32_t *) arg;
}

int fp_home_set_symlink (const char *prefix, size_t n, double token, uint32_t rule) {
  return fp_home_change(prefix, n, token, fp_change_symlink, &rule);
}

// ---- LINK -----------------------------------------------------------------------
// Answered on the session's worker thread that took the request, under no
// lock across its syscalls (the home pinned from its check until its record
// is queued, as a mkdir). JS's link (src/fs/dir.ts) charges one inode for the
// new name and no bytes (every name counts as an inode, the bytes are the
// file's once), so a create slot's reserved inode is all it needs, as a
// mkdir's: REC_LINK gives its open-file slot and handle number back.
uint64_t fp_lanswered = 0;   // link, atomic
uint64_t fp_lfallbacks = 0;  // link (only counted in homes JS opened for it), atomic

// The new name (dpfd, name2) of the regular file (spfd, name), made as JS's
// link makes it (linkat without AT_SYMLINK_FOLLOW): 0 with *st the new name's
// lstat, or -1 with nothing left behind. JS's checks of the source come
// first: a regular file on the home's device; a directory, a symlink or a
// special file is JS's to refuse or allow by the profile.
static int fp_link_name (const fp_home_t *home, int spfd, const char *name, int dpfd, const char *name2, struct stat *st) {
  struct stat sst;
  if (fstatat(spfd, name, &sst, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sst.st_mode) || (uint64_t) sst.st_dev != home->dev) return -1;
  if (linkat(spfd, name, dpfd, name2, 0) != 0) return -1;
  // The source name may have been replaced between the look and the link
  // (JS's lstat and link race the same way): what was linked is checked as
  // the source was, and a new name that is not a regular file of the home is
  // removed again (the name did not exist before: linkat makes no name over
  // another; Linux cannot unlink by inode, so this narrows the window).
  if (fstatat(dpfd, name2, st, AT_SYMLINK_NOFOLLOW) != 0) return -1;
  if (S_ISREG(st->st_mode) && (uint64_t) st->st_dev == home->dev && ((uint64_t) st->st_ino >> 63) == 0) return 0;
  if (!S_ISDIR(st->st_mode)) unlinkat(dpfd, name2, 0);
  return -1;
}

// JS's link for a new name, step for step, in a home open for creates and
// links (the conditions of a create; hard links not denied by the profile):
// both names in the home (another home's: JS answers EXDEV), neither
// reserved nor hidden (an O_TMPFILE's hidden name is JS's to name) nor too
// long, the new name's depth within the limit, both parents by the confined
// walk, a create slot for the caller's uid, the source a regular file on the
// home's device, linkat without following, the record queued for JS, which
// commits the slot's inode and takes the open-file slot back before it
// serves anything else. A name that exists and every doubt go to JS with
// nothing made.
int hs_fastpath_link (const char *path, const char *path2, uint32_t uid, uint32_t gid, struct stat *attr, int *presented) {
  (void) gid;  // a link makes no inode: its owner is the file's
  size_t plen, plen2;
  const char *rel, *rel2;
  if (fp_split_path(path, &plen, &rel) != 0) return HOMESFS_FASTPATH_FALLBACK;
  fp_pin_t pin;
  if (!fp_pin_creatable(path2, &plen2, &rel2, &pin)) return HOMESFS_FASTPATH_FALLBACK;
  const fp_home_pol_t *pol = &pin.pol;
  // Both names in the pinned home: another home's source is JS's (EXDEV).
  if (!pol->link_on || plen != plen2 || memcmp(path, path2, plen) != 0) { fp_unpin(&pin); return HOMESFS_FASTPATH_FALLBACK; }
  fp_home_t *home = pin.home;
  const char *ls = strrchr(rel, '/'), *ls2 = strrchr(rel2, '/');
  const char *name = ls ? ls + 1 : rel, *name2 = ls2 ? ls2 + 1 : rel2;
  uint32_t depth = 1;
  for (const char *c = rel2; *c; c++) if (*c == '/') depth++;
  int made = -1;
  fp_open_rec_t *slot = NULL;
  struct stat st;
  // Busy from before the name can exist until JS counted it, as for a create.
  int64_t *busy = pol->pending->len >= HOMESFS_ACCT_LEN ? &pol->pending->data[HOMESFS_ACCT_BUSY] : NULL;
  if (busy != NULL) __atomic_add_fetch(busy, 1, __ATOMIC_SEQ_CST);
  if (*name != 0 && *name2 != 0 && (pol->max_depth == 0 || depth <= pol->max_depth) && pin.names_ok && fp_names_ok(rel, home->max_name)) {
    int spfd = fp_open_parent(home->fd, rel, ls);
    int dpfd = spfd >= 0 ? fp_open_parent(home->fd, rel2, ls2) : -1;
    if (dpfd >= 0 && (slot = fp_take_cslot(home, uid)) != NULL) made = fp_link_name(home, spfd, name, dpfd, name2, &st);
    if (dpfd >= 0 && dpfd != home->fd) close(dpfd);
    if (spfd >= 0 && spfd != home->fd) close(spfd);
  }
  return fp_entry_done(&pin, busy, slot, made, &st, HOMESFS_REC_LINK, &fp_lanswered, &fp_lfallbacks, attr, presented);
}

static void fp_change_link (fp_home_t *e, void *arg) {
  e->pol.link_on = *(const int *) arg ? 1 : 0;
}

int fp_home_set_link (const char *prefix, size_t n, double token, int on) {
  return fp_home_change(prefix, n, token, fp_change_link, &on);
}
