// Read-only OPEN answered here, the RELEASE of a handle opened here before
// JS adopted it, the open-file slots JS grants (hs_fastpath_grant, _reclaim,
// _set_open) and the queue JS adopts handles and takes slots back from
// (hs_fastpath_take_opens). Invariants: every slot is JS's own accounting, lent
// here; it is in exactly one place (a home's list, a native open's hands, or
// the queue), and it never goes back to a list once fp_slot_gen moved
// after it was taken. The lists, the queue and the generation are under
// fp_open_lock, taken inside fp_lock (never the other way round). An open pins
// its home from its check to its record queued, with no lock held across its
// syscalls.

#include "fastpath/fastpath_internal.h"
#include "fastpath/dataplane.h"

uint64_t fp_oanswered = 0;   // open, atomic
uint64_t fp_ofallbacks = 0;  // open (only counted in homes JS opened for it), atomic

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
// counted open before its nlink is read (as attachInode does: under the write
// lock, then waiting out a native unlink of the inode past its open check, so
// that unlink either saw it open or removed the last name first: then JS
// repeats the open and answers ENOENT), the handle published for
// fgetattr and, if JS said so, for native reads. The handle is queued for JS
// (takeOpens), which adopts it before it serves anything else: until then
// nothing but READ, FLUSH, fgetattr and RELEASE can name it, and each of those
// is answered here or takes the queue first. A slot not used (a fallback, a
// home withdrawn or republished) goes back to JS through the same queue.
// The home's flags and the queue's record kinds: HOMESFS_OPEN_* and
// HOMESFS_REC_* of abi.h.

pthread_mutex_t fp_open_lock = PTHREAD_MUTEX_INITIALIZER;  // every home's slot lists, the queue, fp_closing
hq_t fp_opens = HQ_INIT(fp_opens);  // under fp_open_lock (release looks at its count without it)
// Records of files made here whose RELEASE is closing them here
// (hs_fastpath_release), from their REC_CREATED's leaving the queue to their
// REC_CREATED_CLOSED's entering it, oldest first, each numbered from
// fp_closing_seq (its closing): under fp_open_lock. JS's take of the queue
// waits for those on it when the take begins (fp_closing_gate), so JS counts
// such a file before it serves its removal. A file whose closing begins later
// was queued after that look, so after any request JS may be serving: its
// removal comes later, and is JS's while the record waits (fp_making_queued).
static hq_t fp_closing = HQ_INIT(fp_closing);
static uint64_t fp_closing_seq = 0;
uint32_t fp_slot_count = 0;  // under fp_open_lock
// Bumped (under fp_open_lock) whenever slots go back to JS: a home withdrawn,
// republished or freed, a reclaim. A slot taken out before the last bump may
// belong to a home that is gone, or be one JS counted in when it took slots
// back: it goes to JS through the queue, never back to a list.
uint64_t fp_slot_gen = 0;
uint64_t fp_oclosed = 0;  // opens closed here before JS adopted them, atomic
uint64_t fp_cclosed = 0;  // files made here closed before JS adopted them, atomic

// ---- the ask to settle: a thread-safe function, set once from the JS thread ----------
// Whoever takes a create slot (a worker) posts; the JS thread clears the flag
// before it calls the handler, so a take after that posts again.
static napi_threadsafe_function fp_settle_tsfn = NULL;  // atomic, set once
static int fp_settle_posted = 0;                         // atomic
uint64_t fp_settle_asks = 0;

void fp_ask_settle (void) {
#ifdef HOMESFS_TEST_HOOKS
  if (fp_test_settle_asked != NULL) fp_test_settle_asked();
#endif
  napi_threadsafe_function t = __atomic_load_n(&fp_settle_tsfn, __ATOMIC_ACQUIRE);
  if (t == NULL || __atomic_exchange_n(&fp_settle_posted, 1, __ATOMIC_ACQ_REL)) return;
  // Nonblocking: the queue is unbounded, and one entry at most is in it.
  if (napi_call_threadsafe_function(t, NULL, napi_tsfn_nonblocking) != napi_ok) __atomic_store_n(&fp_settle_posted, 0, __ATOMIC_RELEASE);
  else __atomic_add_fetch(&fp_settle_asks, 1, __ATOMIC_RELAXED);
}

static void fp_settle_call_js (napi_env env, napi_value js_cb, void *context, void *data) {
  __atomic_store_n(&fp_settle_posted, 0, __ATOMIC_RELEASE);
  if (env == NULL || js_cb == NULL) return;
  napi_value undef;
  napi_get_undefined(env, &undef);
  napi_call_function(env, undef, js_cb, 0, NULL, NULL);
}

// setSettleHandler(fn): fn() is called on the JS thread when the binding asks
// JS to take its queue and grant slots (a caller's create slots ran low). Once per process.
napi_value fp_set_settle_handler (napi_env env, napi_callback_info info) {
  NAPI_ARGV(1)
  hs_js_handler_tsfn(env, argv[0], "homesfs-settle", fp_settle_call_js, "setSettleHandler", &fp_settle_tsfn);
  return NULL;
}

// Under fp_open_lock.
static void fp_queue_locked (fp_open_rec_t *r) {
  hq_push(&fp_opens, &r->link);
}

void fp_queue (fp_open_rec_t *r) {
  pthread_mutex_lock(&fp_open_lock);
  fp_queue_locked(r);
  pthread_mutex_unlock(&fp_open_lock);
}

// Under fp_open_lock: a list of the home's slots queued back to JS as kind.
void fp_return_list_locked (hq_link_t **list, uint32_t kind) {
  while (*list != NULL) {
    fp_open_rec_t *r = fp_rec(*list);
    *list = r->link.next;
    fp_slot_count--;
    r->kind = kind;
    fp_queue_locked(r);
  }
}

// Whether a record of (dev, ino)'s making (a file, directory, symlink or hard
// link made here) still waits in the queue: its inode is not in the ledger
// yet, so a removal of it is JS's, which takes the queue before it serves
// anything (OpenSlots.settle) and counts the name before it takes it off.
// The record is queued before the make is answered, so before any request
// can name what it made. A file's record that a RELEASE is closing
// (fp_closing) counts too: it is out of the queue only while the RELEASE
// closes the file, and a removal served meanwhile on another worker must
// not take off an inode JS has not counted. Always under the lock: a record
// moves between the two lists inside one hold of it, never seen in neither.
static int fp_making_in (const hq_t *q, uint64_t dev, uint64_t ino) {
  for (hq_link_t *l = q->head; l != NULL; l = l->next) {
    const fp_open_rec_t *r = fp_rec(l);
    uint32_t k = r->kind;
    if ((k == HOMESFS_REC_CREATED || k == HOMESFS_REC_CREATED_CLOSED || k == HOMESFS_REC_MKDIR || k == HOMESFS_REC_SYMLINK || k == HOMESFS_REC_LINK) &&
        r->dev == dev && r->ino == ino) return 1;
  }
  return 0;
}

int fp_making_queued (uint64_t dev, uint64_t ino) {
  pthread_mutex_lock(&fp_open_lock);
  int found = fp_making_in(&fp_opens, dev, ino) || fp_making_in(&fp_closing, dev, ino);
  pthread_mutex_unlock(&fp_open_lock);
  return found;
}

// Under fp_open_lock: the newest closing under way (0: none) ...
static uint64_t fp_closing_midway (void) {
  return fp_closing.head == NULL ? 0 : fp_closing_seq;
}

// ... and whether every closing up to it is done: the list is oldest first.
static int fp_closing_done (uint64_t midway) {
  return fp_closing.head == NULL || fp_rec(fp_closing.head)->closing > midway;
}

const hq_gate_t fp_closing_gate = { fp_closing_midway, fp_closing_done };

// The home's create slots back to JS (each with its reserved inode).
void fp_return_create_slots (fp_home_t *e) {
  pthread_mutex_lock(&fp_open_lock);
  fp_return_list_locked(&e->cslots, HOMESFS_REC_UNUSED_CREATE);
  pthread_mutex_unlock(&fp_open_lock);
}

// Every slot of the home back to JS, fp_slot_gen moved (a slot taken from
// the home before now goes to JS too when it is given back). Under the write
// lock (a home changed or withdrawn).
void fp_return_slots (fp_home_t *e) {
  pthread_mutex_lock(&fp_open_lock);
  fp_slot_gen++;
  fp_return_list_locked(&e->slots, HOMESFS_REC_UNUSED);
  fp_return_list_locked(&e->cslots, HOMESFS_REC_UNUSED_CREATE);
  pthread_mutex_unlock(&fp_open_lock);
}

// The inode counted open and the handle published, under the write lock (as
// hs_fastpath_inode(+1) and hs_fastpath_set_handle do for JS); then, as for JS, a
// native unlink of the inode past its open check is waited out, so the
// caller's nlink read comes after it. fresh (calloc'ed) is the inode's record
// if it has none; freed (with the array it holds) otherwise.
void fp_open_register (uint64_t dev, uint64_t ino, fp_handle_t *he, fp_inode_t *fresh) {
  pthread_rwlock_wrlock(&fp_lock);
  fp_inode_add_locked(dev, ino, &fresh);
  fp_handle_t *old = fp_unlink_handle_locked(he->fh);
  he->next = fp_handles[he->fh % FP_HANDLE_BUCKETS];
  fp_handles[he->fh % FP_HANDLE_BUCKETS] = he;
  fp_handle_count++;
  pthread_rwlock_unlock(&fp_lock);
  fp_handle_retire(old);
  if (fresh != NULL) {
    fp_acct_put(fresh->acct);
    free(fresh);
  }
  fp_unlinking_wait(dev, ino);
}

// Both undone: on return no fgetattr uses the handle's descriptor.
static void fp_open_unregister (uint64_t dev, uint64_t ino, uint32_t fh) {
  pthread_rwlock_wrlock(&fp_lock);
  fp_inode_t *gone = fp_inode_drop_locked(dev, ino);
  fp_handle_t *he = fp_unlink_handle_locked(fh);
  pthread_rwlock_unlock(&fp_lock);
  fp_inode_put(gone);
  fp_handle_retire(he);
}

// A handle of the home for fgetattr: its number, descriptor and presentation.
void fp_handle_fill (fp_handle_t *he, uint32_t fh, int fd, const fp_home_t *home) {
  he->fh = fh;
  he->fd = fd;
  he->uid = home->uid;
  he->gid = home->gid;
  he->owner_from_stat = home->owner_from_stat;
  he->types = home->types;
  memcpy(he->keep, home->keep, sizeof(he->keep));
  memcpy(he->or, home->or, sizeof(he->or));
}

// The first slot of the home granted for uid, taken out (NULL if none). Under fp_open_lock.
static fp_open_rec_t * fp_pop_slot_locked (fp_home_t *home, uint32_t uid) {
  for (hq_link_t **pp = &home->slots; *pp != NULL; pp = &(*pp)->next) {
    if (fp_rec(*pp)->uid == uid) {
      fp_open_rec_t *r = fp_rec(*pp);
      *pp = r->link.next;
      fp_slot_count--;
      r->home = home;
      r->gen = fp_slot_gen;
      return r;
    }
  }
  return NULL;
}

// The file of an open pinned in an open home: its descriptor (read-only, by
// the confined walk) and fstat, with the slot granted for uid taken for it,
// or -1 (nothing taken).
static int fp_open_file (const fp_pin_t *pin, const char *path, size_t plen, const char *rel, uint32_t uid,
                         struct stat *st, fp_open_rec_t **slot) {
  const fp_home_t *home = pin->home;
  int fd = pin->names_ok ? fp_openat2(home->fd, rel, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) : -1;
  if (fd < 0) return -1;
  // A slot JS granted is room under its open-file caps, but directory handles (dirhandles.c) may have
  // taken that room since: then JS decides (and refuses, taking its slots back). Counted there until
  // JS takes the record in.
  void *dh = NULL;
  if (fstat(fd, st) == 0 && S_ISREG(st->st_mode) && (uint64_t) st->st_dev == home->dev && ((uint64_t) st->st_ino >> 63) == 0 &&
      (dh = hs_dh_file_take(uid, path, plen)) != NULL) {
    pthread_mutex_lock(&fp_open_lock);
    *slot = fp_pop_slot_locked(pin->home, uid);
    pthread_mutex_unlock(&fp_open_lock);
    if (*slot == NULL) hs_dh_file_give(uid, dh);
    else (*slot)->dh = dh;
  }
  if (*slot == NULL) {
    close(fd);
    return -1;
  }
  return fd;
}

int hs_fastpath_open (const char *path, int flags, uint32_t uid, uint64_t *fh, int *direct_io) {
  if (!__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE)) return HOMESFS_FASTPATH_FALLBACK;
  // Read-only and nothing that changes the file (O_TRUNC truncates even then): the rest is JS's.
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC) != 0) return HOMESFS_FASTPATH_FALLBACK;
  size_t plen;
  const char *rel;
  if (fp_split_path(path, &plen, &rel) != 0) return HOMESFS_FASTPATH_FALLBACK;

  fp_pin_t pin;
  if (!fp_pin(path, plen, rel, &pin)) return HOMESFS_FASTPATH_FALLBACK;
  // The flags and generation read together when pinned: a change of either waits for this open.
  uint32_t oflags = pin.pol.open_flags;
  if ((oflags & HOMESFS_OPEN_ON) == 0) { fp_unpin(&pin); return HOMESFS_FASTPATH_FALLBACK; }
  fp_handle_t *he = calloc(1, sizeof(*he));
  fp_inode_t *fresh = calloc(1, sizeof(*fresh));
  fp_open_rec_t *slot = NULL;
  struct stat st;
  int fd = he != NULL && fresh != NULL ? fp_open_file(&pin, path, plen, rel, uid, &st, &slot) : -1;
  if (fd < 0) {
    fp_unpin(&pin);
    free(he);
    free(fresh);
    __atomic_add_fetch(&fp_ofallbacks, 1, __ATOMIC_RELAXED);
    return HOMESFS_FASTPATH_FALLBACK;
  }
  fp_handle_fill(he, slot->fh, fd, pin.home);
  uint64_t dev = (uint64_t) st.st_dev, ino = (uint64_t) st.st_ino;
  uint32_t handle = slot->fh;
  fp_open_register(dev, ino, he, fresh);
  // nlink after the inode counts as open: 0 means an unlink removed the last
  // name first (JS's attachInode answers ENOENT there; JS repeats the open).
  struct stat now;
  if (fstat(fd, &now) != 0 || now.st_nlink == 0) {
    fp_open_unregister(dev, ino, handle);
    close(fd);
    fp_dh_give(slot);
    fp_queue(slot);  // kind is still UNUSED: the slot goes back
    fp_unpin(&pin);
    __atomic_add_fetch(&fp_ofallbacks, 1, __ATOMIC_RELAXED);
    return HOMESFS_FASTPATH_FALLBACK;
  }
  slot->kind = HOMESFS_REC_OPENED;
  slot->fd = fd;
  slot->dev = dev;
  slot->ino = ino;
  slot->published = (oflags & HOMESFS_OPEN_DP_READ) != 0 && hs_dp_publish_fd(handle, fd, 1, dev, ino, 0, pin.gen) ? 1 : 0;
  fp_queue(slot);
  fp_unpin(&pin);
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
// this one was taken (fp_slot_gen: a reclaim before a cap, a home withdrawn,
// republished or freed), the slot goes to JS through the queue instead, as an
// unused one. A file made here (REC_CREATED) is closed the same way while
// RELEASEs are deferred (fuse.nativeRelease), but its record goes to JS as
// REC_CREATED_CLOSED: the inode its create slot reserved is the file's now,
// and JS counts it and takes the slot back as for a mkdir. Its bytes are the
// ledger's already (C charged each write of it), and an unlinked-while-open
// name is the session's hidden name, whose removal JS settles after this.
// Returns 1 when the RELEASE was answered here; 0: the handle is JS's
// (adopted, or not opened here), and the RELEASE goes on as before.
int hs_fastpath_release (uint64_t fh) {
  if (!__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE)) return 0;
  if (hq_count(&fp_opens) == 0) return 0;
  int created_too = hs_dp_release_deferred();
  fp_open_rec_t *r = NULL;
  pthread_mutex_lock(&fp_open_lock);
  for (hq_link_t **pp = &fp_opens.head; *pp != NULL; pp = &(*pp)->next) {
    uint32_t kind = fp_rec(*pp)->kind;
    if ((kind == HOMESFS_REC_OPENED || (created_too && kind == HOMESFS_REC_CREATED)) && fp_rec(*pp)->fh == fh) {
      r = fp_rec(hq_unlink(&fp_opens, pp));
      // Its making stays visible to removals while it is closed (fp_making_queued).
      if (r->kind == HOMESFS_REC_CREATED) {
        r->closing = ++fp_closing_seq;
        hq_push(&fp_closing, &r->link);
      }
      break;
    }
  }
  pthread_mutex_unlock(&fp_open_lock);
  if (r == NULL) return 0;
  // The kernel sends RELEASE after the handle's last READ and WRITE were answered: nothing is in flight.
  if (r->published) hs_dp_unpublish_fd(fh);
  fp_open_unregister(r->dev, r->ino, (uint32_t) fh);
  close(r->fd);
  fp_dh_give(r);
  if (r->kind == HOMESFS_REC_CREATED) {
#ifdef HOMESFS_TEST_HOOKS
    if (fp_test_release_closing != NULL) fp_test_release_closing(r->dev, r->ino);
#endif
    pthread_mutex_lock(&fp_open_lock);
    for (hq_link_t **pp = &fp_closing.head; *pp != NULL; pp = &(*pp)->next) {
      if (*pp == &r->link) {
        hq_unlink(&fp_closing, pp);
        break;
      }
    }
    r->kind = HOMESFS_REC_CREATED_CLOSED;
    r->fd = -1;
    r->published = 0;
    fp_queue_locked(r);
    pthread_mutex_unlock(&fp_open_lock);
    __atomic_add_fetch(&fp_cclosed, 1, __ATOMIC_RELAXED);
    return 1;
  }
  r->kind = HOMESFS_REC_UNUSED;
  r->fd = -1;
  r->published = 0;
  r->dev = 0;
  r->ino = 0;
  pthread_mutex_lock(&fp_open_lock);
  if (r->gen == fp_slot_gen && r->home != NULL) {
    r->link.next = r->home->slots;
    r->home->slots = &r->link;
    fp_slot_count++;
  } else {
    fp_queue_locked(r);
  }
  pthread_mutex_unlock(&fp_open_lock);
  __atomic_add_fetch(&fp_oclosed, 1, __ATOMIC_RELAXED);
  return 1;
}

static void fp_change_open (fp_home_t *e, void *arg) {
  uint32_t flags = *(const uint32_t *) arg;
  if ((flags & HOMESFS_OPEN_ON) == 0) fp_return_slots(e);
  e->pol.open_flags = (flags & HOMESFS_OPEN_ON) ? flags : 0;
  // Handles opened here under the flags before are served no more until JS has adopted them.
  fp_policy_moved_locked();
}

int fp_home_set_open (const char *prefix, size_t n, double token, uint32_t flags) {
  return fp_home_change(prefix, n, token, fp_change_open, &flags);
}

// A slot for (prefix, token, fh, uid) kept in the home's list: 1; 0 (nothing
// kept) unless the home is open for native opens and, for a create slot,
// mutable and open for creates too; -1 without memory.
int fp_slot_grant (const char *prefix, size_t n, double token, uint32_t fh, uint32_t uid, int create) {
  fp_open_rec_t *r = calloc(1, sizeof(*r));
  if (r == NULL) return -1;
  r->kind = create ? HOMESFS_REC_UNUSED_CREATE : HOMESFS_REC_UNUSED;
  r->fh = fh;
  r->fd = -1;
  r->uid = uid;
  int granted = 0;
  uint32_t h = fp_hash(prefix, n);
  pthread_rwlock_rdlock(&fp_lock);
  fp_home_t *e = fp_find_home(prefix, n, h);
  if (e != NULL && e->token == token && (!create || (e->pol.create_on && e->pol.pending != NULL)) && (e->pol.open_flags & HOMESFS_OPEN_ON) != 0) {
    hq_link_t **list = create ? &e->cslots : &e->slots;
    pthread_mutex_lock(&fp_open_lock);
    r->link.next = *list;
    *list = &r->link;
    fp_slot_count++;
    pthread_mutex_unlock(&fp_open_lock);
    granted = 1;
  }
  pthread_rwlock_unlock(&fp_lock);
  if (!granted) free(r);
  return granted;
}

// The queue for JS taken whole (oldest first), and given back in front of
// what was queued since: what hs_fastpath_take_opens does (hq_take_to_js), for
// the unit tests, which take it without N-API.
hq_t fp_opens_take (void) {
  return hq_take_when(&fp_opens, &fp_open_lock, &fp_closing_gate);
}

void fp_opens_put_back (hq_t taken) {
  pthread_mutex_lock(&fp_open_lock);
  hq_put_back(&fp_opens, taken);
  pthread_mutex_unlock(&fp_open_lock);
}

void fp_open_fill (hq_link_t *l, void *data, uint32_t i) {
  fp_open_rec_t *e = fp_rec(l);
  uint64_t *d = (uint64_t *) data + 7 * (size_t) i;
  // JS counts it from here (it publishes its files before it answers anything else).
  fp_dh_give(e);
  d[0] = e->kind;
  d[1] = e->fh;
  d[2] = (uint64_t) (e->fd < 0 ? 0 : e->fd);
  d[3] = e->published;
  d[4] = e->dev;
  d[5] = e->ino;
  d[6] = e->oflags;
}
