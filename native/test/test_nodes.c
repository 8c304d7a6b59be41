// session/nodes.c: the node table the session answers the kernel from. One
// node per inode (hard links share it), a node freed once the kernel forgot
// it and no thread holds it, names moved by renames, an inode number reused
// by a new file after the last name went, and the tree locks: a rename waits
// for the requests whose paths pass through what it moves, and they wait for
// it. Plain C, no libfuse, no Node; run under ASan/UBSan and TSan.
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"
#include "session/hidden_name.h"
#include "nodes_helpers.h"

// A file or directory of one link; hard links say how many they are (found_n).
static uint64_t found (hs_node_t *parent, const char *name, uint64_t ino, uint32_t type) {
  return found_n(parent, name, ino, type, 1);
}

TEST(names_paths_and_forgets) {
  hs_nodes_clear();
  hs_nodes_init();
  hs_node_t *r = root();
  uint64_t t = found(r, "t", 100, S_IFDIR);
  hs_node_t *tn = hs_node_get(t);
  uint64_t k = found(tn, "k", 101, S_IFDIR);
  hs_node_t *kn = hs_node_get(k);
  uint64_t f = found(kn, "f", 102, S_IFREG);
  CHECK_PATH(t, "/t");
  CHECK_PATH(f, "/t/k/f");
  CHECK_PATH(HS_ROOT_ID, "/");
  // A second lookup of the same name is the same node.
  CHECK_EQ(found(kn, "f", 102, S_IFREG), f);
  CHECK_EQ(count(), 4);
  hs_node_put(kn);
  hs_node_put(tn);
  // The directory is forgotten before its child: it stays while the child's name holds it.
  hs_node_forget(k, 1);
  CHECK_EQ(count(), 4);
  hs_node_forget(f, 1);
  CHECK_EQ(count(), 4);   // f had two lookups
  hs_node_forget(f, 1);
  CHECK_EQ(count(), 2);   // f gone, then k with it
  CHECK(hs_node_get(f) == NULL);
  hs_node_forget(t, 1);
  CHECK_EQ(count(), 1);
  hs_node_put(r);
}

TEST(hard_links_are_one_node) {
  hs_nodes_clear();
  hs_nodes_init();
  hs_node_t *r = root();
  hs_node_t *a = hs_node_get(found(r, "a", 10, S_IFDIR));
  hs_node_t *b = hs_node_get(found(r, "b", 11, S_IFDIR));
  uint64_t x = found_n(a, "x", 50, S_IFREG, 2);
  uint64_t y = found_n(b, "y", 50, S_IFREG, 2);
  CHECK_EQ(x, y);
  // Paths come from the name found last.
  CHECK_PATH(x, "/b/y");
  CHECK_EQ(found_n(a, "x", 50, S_IFREG, 2), x);
  CHECK_PATH(x, "/a/x");
  // A name goes: paths come from the other.
  hs_node_removed(a, "x");
  CHECK_PATH(x, "/b/y");
  // Found under a new name with one link: the old name was removed behind the
  // daemon's back (and the number reused): it is no path of the node any more.
  uint64_t w = found_n(a, "w", 50, S_IFREG, 1);
  CHECK_EQ(w, x);
  CHECK_PATH(w, "/a/w");
  found_n(b, "y", 60, S_IFREG, 1);
  hs_node_removed(a, "w");
  // The last name goes: a new file reusing the number is a new node.
  hs_node_removed(b, "y");
  uint64_t z = found(a, "z", 50, S_IFREG);
  CHECK(z != x);
  CHECK_PATH(z, "/a/z");
  // A name looked up again as another inode moves to a node of that inode.
  uint64_t z2 = found(a, "z", 51, S_IFREG);
  CHECK(z2 != z);
  // A number reused with another type never reaches the old node.
  uint64_t d = found(a, "d", 52, S_IFDIR);
  hs_node_removed(a, "d");
  uint64_t e = found(a, "e", 52, S_IFREG);
  CHECK(e != d);
  hs_node_put(a);
  hs_node_put(b);
  hs_node_put(r);
}

TEST(renames_move_names) {
  hs_nodes_clear();
  hs_nodes_init();
  hs_node_t *r = root();
  hs_node_t *d1 = hs_node_get(found(r, "d1", 10, S_IFDIR));
  hs_node_t *d2 = hs_node_get(found(r, "d2", 11, S_IFDIR));
  uint64_t sub = found(d1, "sub", 12, S_IFDIR);
  hs_node_t *subn = hs_node_get(sub);
  uint64_t f = found(subn, "f", 13, S_IFREG);
  uint64_t victim = found(d2, "target", 14, S_IFREG);
  CHECK_EQ(hs_node_renamed(d1, "sub", d2, "moved"), 0);
  CHECK_PATH(f, "/d2/moved/f");
  CHECK_EQ(hs_node_renamed(subn, "f", d2, "target"), 0);
  CHECK_PATH(f, "/d2/target");
  // The node renamed over has no name left.
  CHECK(path_of(victim) == NULL);
  hs_node_put(subn);
  hs_node_put(d1);
  hs_node_put(d2);
  hs_node_put(r);
}

TEST(exchanges_swap_names) {
  hs_nodes_clear();
  hs_nodes_init();
  hs_node_t *r = root();
  hs_node_t *d1 = hs_node_get(found(r, "d1", 10, S_IFDIR));
  hs_node_t *d2 = hs_node_get(found(r, "d2", 11, S_IFDIR));
  // A directory with a child in d1, a hard-linked file in d2 (its other name in d1).
  uint64_t sub = found(d1, "sub", 12, S_IFDIR);
  hs_node_t *subn = hs_node_get(sub);
  uint64_t c = found(subn, "c", 13, S_IFREG);
  uint64_t f = found_n(d1, "other", 14, S_IFREG, 2);
  CHECK_EQ(found_n(d2, "f", 14, S_IFREG, 2), f);
  CHECK_EQ(hs_node_exchanged(d1, "sub", d2, "f"), 0);
  // Each name names the other node; the child follows its directory.
  CHECK_PATH(sub, "/d2/f");
  CHECK_PATH(c, "/d2/f/c");
  hs_node_removed(d1, "other");
  CHECK_PATH(f, "/d1/sub");
  // Lookups of the two names find the swapped nodes again (no new node).
  CHECK_EQ(found(d2, "f", 12, S_IFDIR), sub);
  CHECK_EQ(found_n(d1, "sub", 14, S_IFREG, 1), f);
  // And back: the table is as before.
  CHECK_EQ(hs_node_exchanged(d2, "f", d1, "sub"), 0);
  CHECK_PATH(sub, "/d1/sub");
  CHECK_PATH(c, "/d1/sub/c");
  CHECK_PATH(f, "/d2/f");
  // One side unknown to the table: the known node moves, the other name is left for its lookup.
  CHECK_EQ(hs_node_exchanged(d2, "f", d2, "unknown"), 0);
  CHECK_PATH(f, "/d2/unknown");
  hs_node_put(subn);
  hs_node_put(d1);
  hs_node_put(d2);
  hs_node_put(r);
}

TEST(hidden_names_and_opens) {
  hs_nodes_clear();
  hs_nodes_init();
  hs_node_t *r = root();
  hs_node_t *d = hs_node_get(found(r, "d", 10, S_IFDIR));
  uint64_t f = found(d, "f", 11, S_IFREG);
  hs_node_t *fn = hs_node_get(f);
  CHECK(!hs_node_must_hide(d, "f"));
  hs_node_opened(fn);
  CHECK(hs_node_must_hide(d, "f"));
  // A second name: removing one of two needs no hiding.
  found_n(d, "g", 11, S_IFREG, 2);
  CHECK(!hs_node_must_hide(d, "f"));
  hs_node_removed(d, "g");
  char hidden[64];
  CHECK_EQ(hs_node_hidden_name(d, "f", d, hidden, sizeof(hidden)), 0);
  CHECK(strncmp(hidden, ".fuse_hidden", 12) == 0 && strlen(hidden) == 28);
  // Made from abi.h's prefix and digit count, as the recogniser reads them.
  CHECK(hs_is_hidden_name(hidden, strlen(hidden)));
  CHECK_EQ(hs_node_renamed(d, "f", d, hidden), 0);
  hs_node_mark_hidden(fn);
  char *path = NULL;
  CHECK_EQ(hs_node_released(fn, &path), 1);
  CHECK(path != NULL && strncmp(path, "/d/.fuse_hidden", 15) == 0);
  free(path);
  CHECK(!hs_node_is_hidden(fn));
  hs_node_put(fn);
  hs_node_put(d);
  hs_node_put(r);
}

// A file unlinked while open (hidden) in one home; its inode dies (after a
// crash, with the dead daemon's descriptors) and the backing filesystem gives
// its number to a new file in another home. That file is a new node: never
// the hidden one, whose dead handle would be reopened by the new file's path,
// and whose last release would unlink it.
TEST(a_hidden_node_never_becomes_another_file_with_its_number) {
  hs_nodes_clear();
  hs_nodes_init();
  hs_node_t *r = root();
  hs_node_t *a = hs_node_get(found(r, "a", 10, S_IFDIR));
  hs_node_t *b = hs_node_get(found(r, "b", 20, S_IFDIR));
  uint64_t f = found(a, "f", 77, S_IFREG);
  hs_node_t *fn = hs_node_get(f);
  hs_node_opened(fn);
  char hidden[64];
  CHECK_EQ(hs_node_hidden_name(a, "f", a, hidden, sizeof(hidden)), 0);
  CHECK_EQ(hs_node_renamed(a, "f", a, hidden), 0);
  hs_node_mark_hidden(fn);
  uint64_t v = found(b, "victim", 77, S_IFREG);
  CHECK(v != f);
  CHECK_PATH(v, "/b/victim");
  char *p = path_of(f);
  CHECK(p != NULL && strncmp(p, "/a/.fuse_hidden", 15) == 0);
  free(p);
  // Its last release unlinks its own hidden name, nothing else.
  char *path = NULL;
  CHECK_EQ(hs_node_released(fn, &path), 1);
  CHECK(path != NULL && strncmp(path, "/a/.fuse_hidden", 15) == 0);
  free(path);
  hs_node_put(fn);
  hs_node_put(b);
  hs_node_put(a);
  hs_node_put(r);
}

// A hidden node whose name is not a hidden name any more (a table an older
// build left, which joined it to another file): its release unlinks nothing.
TEST(a_release_unlinks_only_a_hidden_name) {
  hs_nodes_clear();
  hs_nodes_init();
  hs_node_t *r = root();
  hs_node_t *a = hs_node_get(found(r, "a", 10, S_IFDIR));
  uint64_t f = found(a, "f", 78, S_IFREG);
  hs_node_t *fn = hs_node_get(f);
  hs_node_opened(fn);
  hs_node_mark_hidden(fn);
  char *path = NULL;
  CHECK_EQ(hs_node_released(fn, &path), 0);
  CHECK(path == NULL);
  CHECK(!hs_node_is_hidden(fn));
  hs_node_put(fn);
  hs_node_put(a);
  hs_node_put(r);
}

// ---- tree locks --------------------------------------------------------------------

static hs_node_t *lock_dir;
static int renamed;

static void *renamer (void *arg) {
  (void) arg;
  hs_node_t *r = root();
  char *p = NULL;
  hs_plock_t pl;
  // An exclusive lock of the node (/, "dir") the other thread's path passes through.
  CHECK_EQ(hs_path_lock(r, "dir", 1, &p, &pl), 0);
  __atomic_store_n(&renamed, 1, __ATOMIC_SEQ_CST);
  hs_path_unlock(&pl);
  free(p);
  hs_node_put(r);
  return NULL;
}

TEST(a_rename_waits_for_paths_through_it) {
  hs_nodes_clear();
  hs_nodes_init();
  hs_node_t *r = root();
  lock_dir = hs_node_get(found(r, "dir", 10, S_IFDIR));
  hs_node_t *f = hs_node_get(found(lock_dir, "f", 11, S_IFREG));
  char *p = NULL;
  hs_plock_t pl;
  CHECK_EQ(hs_path_lock(f, NULL, 0, &p, &pl), 0);
  CHECK(strcmp(p, "/dir/f") == 0);
  renamed = 0;
  pthread_t t;
  pthread_create(&t, NULL, renamer, NULL);
  usleep(100000);
  // Still held: the rename waits (whatever the machine's speed, it cannot have gone through).
  CHECK_EQ(__atomic_load_n(&renamed, __ATOMIC_SEQ_CST), 0);
  hs_path_unlock(&pl);
  free(p);
  pthread_join(t, NULL);
  CHECK_EQ(renamed, 1);
  hs_node_put(f);
  hs_node_put(lock_dir);
  hs_node_put(r);
}

// Many threads look up, forget, rename and lock paths at once: no node is
// freed under a holder (ASan), no race on the table (TSan), no deadlock.
#define THREADS 4
#define ROUNDS 3000
static void *storm (void *arg) {
  unsigned seed = (unsigned) (uintptr_t) arg;
  hs_node_t *r = root();
  for (int i = 0; i < ROUNDS; i++) {
    char a[8], b[8];
    snprintf(a, sizeof(a), "d%u", rand_r(&seed) % 4);
    snprintf(b, sizeof(b), "f%u", rand_r(&seed) % 6);
    uint64_t id = 0;
    hs_node_found(r, a, 1000 + (a[1] - '0'), S_IFDIR, 1, &id);
    hs_node_t *d = hs_node_get(id);
    if (d == NULL) continue;
    uint64_t fid = 0;
    hs_node_found(d, b, 2000 + (uint64_t) (rand_r(&seed) % 8), S_IFREG, 1 + rand_r(&seed) % 2, &fid);
    char *p = NULL, *p2 = NULL;
    hs_plock_t pl, pl2;
    switch (rand_r(&seed) % 4) {
      case 0:
        if (hs_path_lock(d, b, 1, &p, &pl) == 0) { hs_node_removed(d, b); hs_path_unlock(&pl); }
        break;
      case 1: {
        char c[8];
        snprintf(c, sizeof(c), "f%u", rand_r(&seed) % 6);
        if (hs_path_lock2(d, b, d, c, 1, &p, &p2, &pl, &pl2) == 0) {
          hs_node_renamed(d, b, d, c);
          hs_path_unlock(&pl);
          hs_path_unlock(&pl2);
        }
        break;
      }
      default: {
        hs_node_t *f = hs_node_get(fid);
        if (f != NULL && hs_path_lock(f, NULL, 0, &p, &pl) == 0) hs_path_unlock(&pl);
        hs_node_put(f);
      }
    }
    free(p);
    free(p2);
    hs_node_forget(fid, 1);
    hs_node_put(d);
    hs_node_forget(id, 1);
  }
  hs_node_put(r);
  return NULL;
}

TEST(storm_of_lookups_forgets_renames_and_locks) {
  hs_nodes_clear();
  hs_nodes_init();
  pthread_t t[THREADS];
  for (uintptr_t i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, storm, (void *) (i + 1));
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  // Every lookup was forgotten: only the root is left.
  CHECK_EQ(count(), 1);
}

// The last release came while the hiding was under way (it found no hidden
// name to unlink): the hiding's end says the hidden name goes now, and marks
// nothing hidden.
TEST(a_release_during_the_hiding_leaves_the_unlink_to_its_end) {
  hs_nodes_clear();
  hs_nodes_init();
  hs_node_t *r = root();
  hs_node_t *a = hs_node_get(found(r, "a", 10, S_IFDIR));
  uint64_t f = found(a, "f", 79, S_IFREG);
  hs_node_t *fn = hs_node_get(f);
  hs_node_opened(fn);
  char hidden[64];
  CHECK_EQ(hs_node_hidden_name(a, "f", a, hidden, sizeof(hidden)), 0);
  char *path = NULL;
  CHECK_EQ(hs_node_released(fn, &path), 0);  // before the hiding's end: nothing hidden yet
  CHECK_EQ(hs_node_renamed(a, "f", a, hidden), 0);
  CHECK_EQ(hs_node_hide_done(fn, &path), 1);
  CHECK(path != NULL && strncmp(path, "/a/.fuse_hidden", 15) == 0);
  free(path);
  CHECK(!hs_node_is_hidden(fn));
  // Still open: marked, and left to the last release.
  uint64_t g = found(a, "g", 80, S_IFREG);
  hs_node_t *gn = hs_node_get(g);
  hs_node_opened(gn);
  CHECK_EQ(hs_node_hidden_name(a, "g", a, hidden, sizeof(hidden)), 0);
  CHECK_EQ(hs_node_renamed(a, "g", a, hidden), 0);
  path = NULL;
  CHECK_EQ(hs_node_hide_done(gn, &path), 0);
  CHECK(path == NULL && hs_node_is_hidden(gn));
  hs_node_put(gn);
  hs_node_put(fn);
  hs_node_put(a);
  hs_node_put(r);
}
