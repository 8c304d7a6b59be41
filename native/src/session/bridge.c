// Requests handed to JavaScript: the queue the session's workers post to
// (see bridge.h; the JavaScript side is bridge_napi.c).
//
// Invariants: the queue (q_head/q_tail) is guarded by q_mu, held only to link
// or take calls; the counts are atomics.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>

#include "session/bridge.h"

static pthread_mutex_t q_mu = PTHREAD_MUTEX_INITIALIZER;  // a leaf: the queue only
static hs_call_t *q_head, *q_tail;
static uint64_t q_posted, q_answered;   // atomics

void hs_bridge_post (hs_call_t *c) {
  c->qnext = NULL;
  __atomic_add_fetch(&q_posted, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&q_mu);
  if (q_tail != NULL) q_tail->qnext = c;
  else q_head = c;
  q_tail = c;
  pthread_mutex_unlock(&q_mu);
  hs_bridge_wake();
}

uint64_t hs_bridge_pending (void) {
  return __atomic_load_n(&q_posted, __ATOMIC_RELAXED) - __atomic_load_n(&q_answered, __ATOMIC_RELAXED);
}

hs_call_t *hs_bridge_take (void) {
  pthread_mutex_lock(&q_mu);
  hs_call_t *c = q_head;
  q_head = q_tail = NULL;
  pthread_mutex_unlock(&q_mu);
  return c;
}

void hs_bridge_answered (void) {
  __atomic_add_fetch(&q_answered, 1, __ATOMIC_RELAXED);
}
