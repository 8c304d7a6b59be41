// session/inval.c and the node table's side of it (nodes.c): a virtual path
// resolved to the IDs the kernel knows (directory, node, name), every node
// below a home found by its names whatever the depth, and the queue: one
// thread sends in order, with no lock of the table held (the sender here
// takes it), and nobody who queues ever waits for a send (the sender here
// blocks until the test lets it go). Plain C, libfuse linked but its notify
// functions replaced; run under ASan/UBSan and TSan.
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"
#include "../src/session/inval.h"
#include "../src/session/nodes.h"

static hs_node_t *root (void) { return hs_node_get(HS_ROOT_ID); }

static uint64_t found (hs_node_t *parent, const char *name, uint64_t ino, uint32_t type) {
  uint64_t id = 0;
  CHECK_EQ(hs_node_found(parent, name, ino, type, 1, &id), 0);
  return id;
}

// A directory below parent: its ID, and the node (referenced) in *out.
static uint64_t dir (hs_node_t *parent, const char *name, uint64_t ino, hs_node_t **out) {
  uint64_t id = found(parent, name, ino, S_IFDIR);
  *out = hs_node_get(id);
  return id;
}

// ---- the sender ----------------------------------------------------------------

#define LOG_MAX 8192
typedef struct { uint64_t ino; char name[64]; int entry; } sent_t;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t log_cv = PTHREAD_COND_INITIALIZER;
static sent_t sent_log[LOG_MAX];
static int sent_n;
static int blocked;        // the sender waits while this is set
static int in_send;        // the sender is inside a send
static int answer = 0;     // what the sender returns

static int record (void *ch, uint64_t ino, const char *name, size_t len) {
  CHECK(ch == (void *) &sent_log);
  // The table's mutex is free while a send runs: this would deadlock (or TSan would say) otherwise.
  uint64_t nodes, known;
  hs_nodes_stats(&nodes, &known);
  pthread_mutex_lock(&log_mu);
  in_send = 1;
  pthread_cond_broadcast(&log_cv);
  while (blocked) pthread_cond_wait(&log_cv, &log_mu);
  if (sent_n < LOG_MAX) {
    sent_t *s = &sent_log[sent_n++];
    s->ino = ino;
    s->entry = name != NULL;
    s->name[0] = '\0';
    if (name != NULL) {
      CHECK(len < sizeof(s->name) && strlen(name) == len);
      memcpy(s->name, name, len < sizeof(s->name) ? len : sizeof(s->name) - 1);
      s->name[len < sizeof(s->name) ? len : sizeof(s->name) - 1] = '\0';
    }
  }
  in_send = 0;
  int res = answer;
  pthread_mutex_unlock(&log_mu);
  return res;
}

static void log_reset (void) {
  pthread_mutex_lock(&log_mu);
  sent_n = 0;
  pthread_mutex_unlock(&log_mu);
}

// Waits (up to 10 s) until nothing is pending.
static int drained (void) {
  for (int i = 0; i < 10000; i++) {
    hs_inval_stats_t s;
    hs_inval_stats(&s);
    if (s.pending == 0) return 1;
    usleep(1000);
  }
  return 0;
}

static int sent_is (int i, uint64_t ino, const char *name) {
  pthread_mutex_lock(&log_mu);
  int ok = i < sent_n && sent_log[i].ino == ino && (name == NULL ? !sent_log[i].entry : sent_log[i].entry && strcmp(sent_log[i].name, name) == 0);
  pthread_mutex_unlock(&log_mu);
  return ok;
}

static void show_sent (int i) {
  pthread_mutex_lock(&log_mu);
  if (i < sent_n) fprintf(stderr, "  sent[%d] = (%llu, %s)\n", i, (unsigned long long) sent_log[i].ino, sent_log[i].entry ? sent_log[i].name : "attrs");
  pthread_mutex_unlock(&log_mu);
}

#define CHECK_SENT(I_, INO_, NAME_) do { \
    CHECK(sent_is(I_, INO_, NAME_)); \
    if (!sent_is(I_, INO_, NAME_)) show_sent(I_); \
  } while (0)

static int sent_count (void) {
  pthread_mutex_lock(&log_mu);
  int n = sent_n;
  pthread_mutex_unlock(&log_mu);
  return n;
}

// ---- resolution ----------------------------------------------------------------

TEST(paths_resolve_to_the_ids_the_kernel_knows) {
  hs_nodes_clear();
  hs_nodes_init();
  hs_node_t *r = root(), *t, *k, *a;
  uint64_t ti = dir(r, "t", 100, &t);
  uint64_t ki = dir(t, "k", 101, &k);
  uint64_t ai = dir(k, "a", 102, &a);
  uint64_t bi = found(a, "b", 103, S_IFREG);
  uint64_t d = 9, id = 9;
  const char *name = NULL;
  size_t len = 0;
  CHECK_EQ(hs_nodes_resolve("/t/k/a/b", &d, &id, &name, &len), 0);
  CHECK_EQ(d, ai);
  CHECK_EQ(id, bi);
  CHECK(len == 1 && strncmp(name, "b", len) == 0);
  // A name the kernel never looked up: its directory is known, it is not.
  CHECK_EQ(hs_nodes_resolve("/t/k/a/new", &d, &id, &name, &len), 0);
  CHECK_EQ(d, ai);
  CHECK_EQ(id, 0);
  CHECK(len == 3 && strncmp(name, "new", len) == 0);
  // Below an unknown directory nothing is known.
  CHECK_EQ(hs_nodes_resolve("/t/x/a", &d, &id, &name, &len), 0);
  CHECK_EQ(d, 0);
  CHECK_EQ(id, 0);
  // The root has no directory; a home is a name in its tenant's.
  CHECK_EQ(hs_nodes_resolve("/", &d, &id, &name, &len), 0);
  CHECK_EQ(d, 0);
  CHECK_EQ(id, HS_ROOT_ID);
  CHECK_EQ(hs_nodes_resolve("/t/k", &d, &id, &name, &len), 0);
  CHECK_EQ(d, ti);
  CHECK_EQ(id, ki);
  // A prefix of a name is not the name.
  CHECK_EQ(hs_nodes_resolve("/t/k/a/", &d, &id, &name, &len), 0);
  CHECK_EQ(id, ai);
  CHECK_EQ(hs_nodes_resolve("/t/kk", &d, &id, &name, &len), 0);
  CHECK_EQ(id, 0);
  // A rename moves the name: the old path names nothing, the new one the node.
  CHECK_EQ(hs_node_renamed(a, "b", k, "c"), 0);
  CHECK_EQ(hs_nodes_resolve("/t/k/a/b", &d, &id, &name, &len), 0);
  CHECK_EQ(id, 0);
  CHECK_EQ(hs_nodes_resolve("/t/k/c", &d, &id, &name, &len), 0);
  CHECK_EQ(d, ki);
  CHECK_EQ(id, bi);
  hs_node_put(a);
  hs_node_put(k);
  hs_node_put(t);
  hs_node_put(r);
}

static int has (const uint64_t *ids, size_t n, uint64_t id) {
  for (size_t i = 0; i < n; i++) if (ids[i] == id) return 1;
  return 0;
}

TEST(a_home_is_every_node_below_it) {
  hs_nodes_clear();
  hs_nodes_init();
  hs_node_t *r = root(), *t, *k, *k2, *a;
  uint64_t ti = dir(r, "t", 100, &t);
  uint64_t ki = dir(t, "k", 101, &k);
  uint64_t k2i = dir(t, "k2", 201, &k2);
  uint64_t ai = dir(k, "a", 102, &a);
  uint64_t fi = found(a, "f", 103, S_IFREG);
  uint64_t gi = found(k, "g", 104, S_IFREG);
  uint64_t oi = found(k2, "o", 202, S_IFREG);
  // A chain deeper than any walk should repeat: each node is decided once per walk.
  hs_node_t *d = a;
  hs_node_ref(d);
  uint64_t deepest = 0;
  for (int i = 0; i < 3000; i++) {
    char nm[16];
    snprintf(nm, sizeof(nm), "d%d", i);
    hs_node_t *next;
    deepest = dir(d, nm, 1000 + (uint64_t) i, &next);
    hs_node_put(d);
    d = next;
  }
  hs_node_put(d);
  uint64_t *ids = NULL;
  size_t n = 0;
  CHECK_EQ(hs_nodes_below("/t/k", &ids, &n), 0);
  CHECK_EQ(n, 4 + 3000);
  CHECK(has(ids, n, ki) && has(ids, n, ai) && has(ids, n, fi) && has(ids, n, gi) && has(ids, n, deepest));
  CHECK(!has(ids, n, ti) && !has(ids, n, k2i) && !has(ids, n, oi) && !has(ids, n, HS_ROOT_ID));
  free(ids);
  // A second walk decides afresh (the marks of the first are another generation's).
  CHECK_EQ(hs_nodes_below("/t/k2", &ids, &n), 0);
  CHECK_EQ(n, 2);
  CHECK(has(ids, n, k2i) && has(ids, n, oi));
  free(ids);
  // A file whose name went is below nothing (the kernel reaches it by no path).
  hs_node_t *f = hs_node_get(fi);
  hs_node_removed(a, "f");
  CHECK_EQ(hs_nodes_below("/t/k", &ids, &n), 0);
  CHECK_EQ(n, 3 + 3000);
  CHECK(!has(ids, n, fi));
  free(ids);
  hs_node_put(f);
  // An unknown path is no node at all.
  CHECK_EQ(hs_nodes_below("/t/none", &ids, &n), 0);
  CHECK_EQ(n, 0);
  free(ids);
  hs_node_put(a);
  hs_node_put(k2);
  hs_node_put(k);
  hs_node_put(t);
  hs_node_put(r);
}

// ---- the queue -----------------------------------------------------------------

TEST(queued_in_order_sent_by_one_thread_outside_the_table_lock) {
  hs_nodes_clear();
  hs_nodes_init();
  hs_node_t *r = root(), *t, *k, *a;
  dir(r, "t", 100, &t);
  uint64_t ki = dir(t, "k", 101, &k);
  uint64_t ai = dir(k, "a", 102, &a);
  uint64_t bi = found(a, "b", 103, S_IFREG);
  hs_inval_set_sender(record);
  // Before the mount nothing is cached: nothing is queued.
  CHECK_EQ(hs_inval_path("/t/k/a/b"), 0);
  CHECK_EQ(hs_inval_start((void *) &sent_log), 0);
  log_reset();
  // The name, its node, its directory.
  CHECK_EQ(hs_inval_path("/t/k/a/b"), 3);
  // A name that came: only its directory's entry and attributes.
  CHECK_EQ(hs_inval_entry("/t/k/a/new"), 2);
  // Nothing known: nothing to send.
  CHECK_EQ(hs_inval_path("/t/x/y"), 0);
  CHECK_EQ(hs_inval_tree("/t/x"), 0);
  REQUIRE(drained());
  CHECK_EQ(sent_count(), 5);
  CHECK_SENT(0, ai, "b");
  CHECK_SENT(1, bi, NULL);
  CHECK_SENT(2, ai, NULL);
  CHECK_SENT(3, ai, "new");
  CHECK_SENT(4, ai, NULL);
  // A home: the attributes of each of its nodes, once.
  log_reset();
  CHECK_EQ(hs_inval_tree("/t/k"), 3);
  REQUIRE(drained());
  CHECK_EQ(sent_count(), 3);
  int seen_k = 0, seen_a = 0, seen_b = 0;
  for (int i = 0; i < 3; i++) {
    seen_k += sent_is(i, ki, NULL);
    seen_a += sent_is(i, ai, NULL);
    seen_b += sent_is(i, bi, NULL);
  }
  CHECK(seen_k == 1 && seen_a == 1 && seen_b == 1);
  hs_inval_stats_t s;
  hs_inval_stats(&s);
  CHECK_EQ(s.queued, 8);
  CHECK_EQ(s.sent, 8);
  CHECK_EQ(s.pending, 0);
  // The kernel had nothing: counted apart.
  answer = -ENOENT;
  CHECK_EQ(hs_inval_path("/t/k"), 3);
  REQUIRE(drained());
  hs_inval_stats(&s);
  CHECK_EQ(s.not_cached, 3);
  answer = -ENODEV;
  CHECK_EQ(hs_inval_entry("/t/k"), 2);
  REQUIRE(drained());
  hs_inval_stats(&s);
  CHECK_EQ(s.failed, 2);
  answer = 0;
  hs_node_put(a);
  hs_node_put(k);
  hs_node_put(t);
  hs_node_put(r);
}

// Queues and changes the table while the sender is stuck in the kernel (as
// behind a directory lock a request holds): neither waits for it.
static void *busy_table (void *arg) {
  hs_node_t *k = arg;
  for (uint64_t i = 0; i < 200; i++) {
    char nm[16];
    snprintf(nm, sizeof(nm), "x%llu", (unsigned long long) i);
    uint64_t id = found(k, nm, 5000 + i, S_IFREG);
    CHECK(hs_inval_tree("/t/k") > 0);
    CHECK_EQ(hs_inval_entry("/t/k/gone"), 2);
    hs_node_forget(id, 1);
  }
  return NULL;
}

TEST(nobody_waits_for_a_send) {
  // A queue that made anyone wait for the stuck send would hang here: fail instead.
  alarm(60);
  hs_nodes_clear();
  hs_nodes_init();
  hs_node_t *r = root(), *t, *k;
  uint64_t ti = dir(r, "t", 100, &t);
  dir(t, "k", 101, &k);
  hs_inval_set_sender(record);
  REQUIRE(hs_inval_start((void *) &sent_log) == 0);
  log_reset();
  pthread_mutex_lock(&log_mu);
  blocked = 1;
  pthread_mutex_unlock(&log_mu);
  uint64_t before, before_done, ticket, done;
  hs_inval_progress(&before, &before_done);
  CHECK_EQ(hs_inval_entry("/t/k"), 2);
  // What an admin command waits for: everything queued up to here.
  hs_inval_progress(&ticket, &done);
  CHECK_EQ(ticket, before + 2);
  // The sender is inside its first send, and stays there.
  pthread_mutex_lock(&log_mu);
  while (!in_send) pthread_cond_wait(&log_cv, &log_mu);
  pthread_mutex_unlock(&log_mu);
  pthread_t th[2];
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, busy_table, k);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  hs_inval_stats_t s;
  hs_inval_stats(&s);
  CHECK(s.pending >= 2 * 200 * 4);
  CHECK_EQ(sent_count(), 0);
  // Not settled while the first of its entries is stuck in the kernel.
  hs_inval_progress(&before, &done);
  CHECK(done < ticket);
  pthread_mutex_lock(&log_mu);
  blocked = 0;
  pthread_cond_broadcast(&log_cv);
  pthread_mutex_unlock(&log_mu);
  REQUIRE(drained());
  // First in, first out: the entry queued before the others went first.
  CHECK_SENT(0, ti, "k");
  CHECK_SENT(1, ti, NULL);
  hs_inval_progress(&before, &done);
  CHECK(done >= ticket);
  CHECK_EQ(done, before);
  alarm(0);
  hs_node_put(k);
  hs_node_put(t);
  hs_node_put(r);
}
