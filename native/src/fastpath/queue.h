// A FIFO of records that C fills on the session's workers and JavaScript takes
// whole (the native opens' records, fastpath_open.c; the deferred RELEASEs,
// dataplane.c; whole writes' reports, dataplane_write.c). A record's first
// member is its hq_link_t (so a pointer to one is a pointer to the other).
// The caller holds the lock that guards the queue for every call; n is also
// changed atomically, for a look without the lock (hq_count).
// Taking a queue whole and giving it back when JavaScript could not be handed
// it (no memory for its array) puts the records back in front of whatever was
// queued meanwhile: none is dropped (a handle, a slot, a file's lock in
// JavaScript would be lost with it), and their order stays.
#ifndef HOMESFS_QUEUE_H
#define HOMESFS_QUEUE_H

#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <node_api.h>

typedef struct hq_link {
  struct hq_link *next;
} hq_link_t;

typedef struct {
  hq_link_t *head;
  hq_link_t **tail;   // the last record's next, or &head
  uint32_t n;
} hq_t;

#define HQ_INIT(q) { NULL, &(q).head, 0 }

static inline uint32_t hq_count (const hq_t *q) {
  return __atomic_load_n(&q->n, __ATOMIC_RELAXED);
}

static inline void hq_push (hq_t *q, hq_link_t *r) {
  r->next = NULL;
  *q->tail = r;
  q->tail = &r->next;
  __atomic_add_fetch(&q->n, 1, __ATOMIC_RELAXED);
}

// The record at *at (a link of q: &q->head or a record's next) taken out.
static inline hq_link_t * hq_unlink (hq_t *q, hq_link_t **at) {
  hq_link_t *r = *at;
  *at = r->next;
  if (q->tail == &r->next) q->tail = at;
  __atomic_sub_fetch(&q->n, 1, __ATOMIC_RELAXED);
  return r;
}

// Every record, oldest first, q left empty.
static inline hq_t hq_take (hq_t *q) {
  hq_t all = { q->head, q->head != NULL ? q->tail : NULL, hq_count(q) };
  q->head = NULL;
  q->tail = &q->head;
  __atomic_store_n(&q->n, 0, __ATOMIC_RELAXED);
  return all;
}

// What hq_take took, back in front of whatever was queued since.
static inline void hq_put_back (hq_t *q, hq_t taken) {
  if (taken.head == NULL) return;
  *taken.tail = q->head;
  if (q->head == NULL) q->tail = taken.tail;
  q->head = taken.head;
  __atomic_add_fetch(&q->n, taken.n, __ATOMIC_RELAXED);
}

// What follows more: q's records after taken's.
static inline void hq_append (hq_t *taken, hq_t more) {
  if (more.head == NULL) return;
  if (taken->head == NULL) {
    *taken = more;
    return;
  }
  *taken->tail = more.head;
  taken->tail = more.tail;
  taken->n += more.n;
}

// Every record of q (guarded by lock). With a gate (NULL: none), what a
// worker is midway through when the take begins is waited for: under the
// lock, the records queued so far are taken and gate->midway() names the
// work under way (0: none, taken at once); the take then yields until
// gate->done(that) and takes what was queued meanwhile too. Work begun after
// the first look is not waited for, so workers that keep beginning more
// never hold the taker: it waits for a few system calls at most, holding no
// lock of the workers'.
typedef struct {
  uint64_t (*midway) (void);
  int (*done) (uint64_t midway);
} hq_gate_t;

static inline hq_t hq_take_when (hq_t *q, pthread_mutex_t *lock, const hq_gate_t *gate) {
  pthread_mutex_lock(lock);
  hq_t taken = hq_take(q);
  uint64_t midway = gate != NULL ? gate->midway() : 0;
  pthread_mutex_unlock(lock);
  while (midway != 0) {
    sched_yield();
    pthread_mutex_lock(lock);
    if (gate->done(midway)) {
      hq_append(&taken, hq_take(q));
      midway = 0;
    }
    pthread_mutex_unlock(lock);
  }
  return taken;
}

// JavaScript's take of q (guarded by lock, past gate, as hq_take_when):
// every record, oldest first, as a typed array of `per` elements of
// elem_size bytes each, which fill(record, data, i) writes for record i
// before it is freed; null when there is none. When the array cannot be
// made, the records go back for the next call.
static inline napi_value hq_take_to_js (napi_env env, hq_t *q, pthread_mutex_t *lock, const hq_gate_t *gate, napi_typedarray_type type, size_t elem_size,
                                        size_t per, void (*fill) (hq_link_t *r, void *data, uint32_t i)) {
  hq_t taken = hq_take_when(q, lock, gate);
  napi_value out, ab;
  void *data = NULL;
  if (taken.n == 0) {
    napi_get_null(env, &out);
    return out;
  }
  if (napi_create_arraybuffer(env, (size_t) taken.n * per * elem_size, &data, &ab) != napi_ok ||
      napi_create_typedarray(env, type, (size_t) taken.n * per, ab, 0, &out) != napi_ok) {
    pthread_mutex_lock(lock);
    hq_put_back(q, taken);
    pthread_mutex_unlock(lock);
    napi_get_null(env, &out);
    return out;
  }
  uint32_t i = 0;
  for (hq_link_t *r = taken.head; r != NULL; i++) {
    hq_link_t *next = r->next;
    fill(r, data, i);
    free(r);  // the record's first member: the pointer it was allocated at
    r = next;
  }
  return out;
}

#endif
