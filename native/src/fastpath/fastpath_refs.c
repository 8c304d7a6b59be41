// References (fastpath_internal.h, "Lifetimes"): a home's pins and the wait
// for them (fp_drain), the last reference of a home and of an inode record,
// a handle's users and its retirement, and the accounting arrays' holders,
// let go on the JS thread (fp_reap).
// Invariants: a reference is only ever taken under fp_lock from an entry in
// its table (a pin, a write ticket, an fgetattr), or by the JS thread on
// something it holds; so once an entry is out of its table its count only
// falls, and whoever brings it to 0 frees it (a handle: its retirer, which
// waits for that). Whoever waits here holds no other lock, and what it waits
// for (a native op's syscalls) never waits for it.

#include "fastpath/fastpath_internal.h"

static pthread_mutex_t fp_drain_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fp_drained = PTHREAD_COND_INITIALIZER;   // a home's pins or a handle's users reached 0
static pthread_mutex_t fp_grave_lock = PTHREAD_MUTEX_INITIALIZER;
static fp_acct_t *fp_grave = NULL;   // under fp_grave_lock: arrays no one holds, for the JS thread to let go
static int fp_grave_full = 0;        // atomic: fp_grave is not empty (fp_reap's look without the lock)
uint32_t fp_homes_alive = 0;         // atomic: homes not freed yet (in the table or pinned after it)

// ---- homes ---------------------------------------------------------------------

static void fp_home_free (fp_home_t *e) {
  // Its slots went back to JS when it left the table (and nothing gives it one since); any left would go to JS too.
  if (e->slots != NULL || e->cslots != NULL) fp_return_slots(e);
  fp_acct_put(e->pol.pending);
  close(e->fd);
  free(e->prefix);
  free(e);
  __atomic_sub_fetch(&fp_homes_alive, 1, __ATOMIC_RELAXED);
}

void fp_home_get (fp_home_t *e) {
  __atomic_add_fetch(&e->refs, 1, __ATOMIC_RELAXED);
}

void fp_home_put (fp_home_t *e) {
  if (e != NULL && __atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL) == 0) fp_home_free(e);
}

// The home of path[0..plen) pinned (1; 0: none is published), with its
// policy as it is now, and whether every component of rel (NULL: none to
// check) is one C may walk: under the read lock, which is dropped before
// this returns.
int fp_pin (const char *path, size_t plen, const char *rel, fp_pin_t *p) {
  uint32_t h = fp_hash(path, plen);
  pthread_rwlock_rdlock(&fp_lock);
  fp_home_t *e = fp_find_home(path, plen, h);
  if (e != NULL) {
    p->home = e;
    p->epoch = e->epoch & 1;
    p->pol = e->pol;
    p->gen = __atomic_load_n(&fp_policy_gen, __ATOMIC_ACQUIRE);
    p->names_ok = rel == NULL || fp_components_ok(rel, e->max_name);
    __atomic_add_fetch(&e->refs, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&e->ops[p->epoch], 1, __ATOMIC_SEQ_CST);
  }
  pthread_rwlock_unlock(&fp_lock);
  return e != NULL;
}

// The op is done with its home: a change waiting for it is woken, and the
// home freed if it left the table meanwhile and this was its last reference.
void fp_unpin (fp_pin_t *p) {
  fp_home_t *e = p->home;
  // Sequentially consistent with fp_drain's drainers and load: either it sees
  // this count fall, or this sees it waiting and wakes it (under the lock it waits with).
  if (__atomic_sub_fetch(&e->ops[p->epoch], 1, __ATOMIC_SEQ_CST) == 0 && __atomic_load_n(&e->drainers, __ATOMIC_SEQ_CST) > 0) {
    pthread_mutex_lock(&fp_drain_lock);
    pthread_cond_broadcast(&fp_drained);
    pthread_mutex_unlock(&fp_drain_lock);
  }
  fp_home_put(e);
}

// Until no pin of e taken under an epoch in mask (bit i: ops[i]) is held. The
// caller holds a reference of e and no lock; pins taken meanwhile under
// another epoch are not waited for (they see the change).
void fp_drain (fp_home_t *e, unsigned mask) {
  pthread_mutex_lock(&fp_drain_lock);
  __atomic_add_fetch(&e->drainers, 1, __ATOMIC_SEQ_CST);
  while (((mask & 1) != 0 && __atomic_load_n(&e->ops[0], __ATOMIC_SEQ_CST) > 0) ||
         ((mask & 2) != 0 && __atomic_load_n(&e->ops[1], __ATOMIC_SEQ_CST) > 0)) {
    pthread_cond_wait(&fp_drained, &fp_drain_lock);
  }
  __atomic_sub_fetch(&e->drainers, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&fp_drain_lock);
}

// Pins held now on published homes (hs_fastpath_stats' inFlight): native ops between their home's lookup and their end.
uint32_t fp_pins_held (void) {
  uint32_t n = 0;
  pthread_rwlock_rdlock(&fp_lock);
  for (size_t i = 0; i < FP_HOME_BUCKETS; i++) {
    for (fp_home_t *e = fp_homes[i]; e != NULL; e = e->next) {
      n += __atomic_load_n(&e->ops[0], __ATOMIC_RELAXED) + __atomic_load_n(&e->ops[1], __ATOMIC_RELAXED);
    }
  }
  pthread_rwlock_unlock(&fp_lock);
  return n;
}

// ---- inode records ---------------------------------------------------------------

void fp_inode_put (fp_inode_t *e) {
  if (e == NULL || __atomic_sub_fetch(&e->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  fp_acct_put(e->acct);
  free(e);
}

// ---- handles ------------------------------------------------------------------------

// An fgetattr is done with e's descriptor. Only the last user's decrement is
// made under fp_drain_lock: its retirer frees e as soon as it sees 0, so
// nothing may touch e after that decrement but under the lock it waits with.
void fp_handle_done (fp_handle_t *e) {
  uint32_t n = __atomic_load_n(&e->users, __ATOMIC_RELAXED);
  while (n > 1) {
    if (__atomic_compare_exchange_n(&e->users, &n, n - 1, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) return;
  }
  pthread_mutex_lock(&fp_drain_lock);
  if (__atomic_sub_fetch(&e->users, 1, __ATOMIC_ACQ_REL) == 0 && e->retiring) pthread_cond_broadcast(&fp_drained);
  pthread_mutex_unlock(&fp_drain_lock);
}

// A handle taken out of the table: once no fgetattr uses its descriptor,
// freed; the caller may then close the descriptor (JS, or a native open's undo).
void fp_handle_retire (fp_handle_t *e) {
  if (e == NULL) return;
  pthread_mutex_lock(&fp_drain_lock);
  e->retiring = 1;
  while (__atomic_load_n(&e->users, __ATOMIC_ACQUIRE) > 0) pthread_cond_wait(&fp_drained, &fp_drain_lock);
  pthread_mutex_unlock(&fp_drain_lock);
  free(e);
}

// ---- accounting arrays ------------------------------------------------------------

void fp_acct_get (fp_acct_t *a) {
  if (a != NULL) __atomic_add_fetch(&a->refs, 1, __ATOMIC_RELAXED);
}

// The last holder, on any thread, leaves the array to the JS thread's next fp_reap.
void fp_acct_put (fp_acct_t *a) {
  if (a == NULL || __atomic_sub_fetch(&a->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  pthread_mutex_lock(&fp_grave_lock);
  a->next = fp_grave;
  fp_grave = a;
  __atomic_store_n(&fp_grave_full, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&fp_grave_lock);
}

// On the JS thread (every call that publishes, and takeOpens): the arrays no one holds any more are let go.
void fp_reap (void) {
  if (!__atomic_load_n(&fp_grave_full, __ATOMIC_ACQUIRE)) return;
  pthread_mutex_lock(&fp_grave_lock);
  fp_acct_t *list = fp_grave;
  fp_grave = NULL;
  __atomic_store_n(&fp_grave_full, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&fp_grave_lock);
  while (list != NULL) {
    fp_acct_t *next = list->next;
    if (list->ref != NULL) napi_delete_reference(list->env, list->ref);
    free(list);
    list = next;
  }
}
