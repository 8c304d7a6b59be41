// session/nodes.c's handover: the node table as bytes (hs_nodes_export) and
// read back by a successor (hs_nodes_import). The kernel keeps using the node
// IDs it was given, so they, their lookup counts, every name of a hard-linked
// file and hidden (unlinked while open) names must come back as they were;
// and a buffer that is cut short or inconsistent must be refused with nothing
// of it imported (a successor serves from a fresh table or not at all).
// Plain C, no libfuse, no Node; run under ASan/UBSan and TSan.
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "harness.h"
#include "nodes_helpers.h"


static void fresh (void) {
  hs_nodes_clear();
  hs_nodes_init();
}

// The table the tests hand over: /d (dir), /d/f (two lookups), a file with
// two names /d/x and /y, and /d/<hidden> (open, unlinked).
typedef struct { uint64_t d, f, x, h; char hidden[64]; } table_t;

static void build (table_t *t) {
  fresh();
  hs_node_t *r = root();
  t->d = found_n(r, "d", 100, S_IFDIR, 2);
  hs_node_t *d = hs_node_get(t->d);
  t->f = found_n(d, "f", 101, S_IFREG, 1);
  CHECK_EQ(found_n(d, "f", 101, S_IFREG, 1), t->f);
  t->x = found_n(d, "x", 102, S_IFREG, 2);
  CHECK_EQ(found_n(r, "y", 102, S_IFREG, 2), t->x);
  t->h = found_n(d, "gone", 103, S_IFREG, 1);
  hs_node_t *hn = hs_node_get(t->h);
  hs_node_opened(hn);
  CHECK_EQ(hs_node_hidden_name(d, "gone", d, t->hidden, sizeof(t->hidden)), 0);
  CHECK_EQ(hs_node_renamed(d, "gone", d, t->hidden), 0);
  hs_node_mark_hidden(hn);
  hs_node_put(hn);
  hs_node_put(d);
  hs_node_put(r);
}

static char *export (size_t *len) {
  char *buf = NULL;
  CHECK_EQ(hs_nodes_export(&buf, len), 0);
  return buf;
}

TEST(round_trip_keeps_ids_counts_links_and_hidden_names) {
  table_t t;
  build(&t);
  uint64_t before = count();
  size_t len = 0;
  char *buf = export(&len);
  REQUIRE(buf != NULL);
  fresh();
  CHECK_EQ(count(), 1);
  CHECK_EQ(hs_nodes_import(buf, len), 0);
  CHECK_EQ(count(), before);
  // The same IDs name the same files.
  CHECK_PATH(t.d, "/d");
  CHECK_PATH(t.f, "/d/f");
  char want[128];
  snprintf(want, sizeof(want), "/d/%s", t.hidden);
  CHECK_PATH(t.h, want);
  // Both names of the hard-linked file are the one node's: a lookup by
  // either finds it, and removing one leaves the other as its path.
  hs_node_t *r = root(), *d = hs_node_get(t.d);
  REQUIRE(r != NULL && d != NULL);
  CHECK_EQ(found_n(r, "y", 102, S_IFREG, 2), t.x);
  CHECK_EQ(found_n(d, "x", 102, S_IFREG, 2), t.x);
  CHECK_PATH(t.x, "/d/x");
  hs_node_removed(d, "x");
  CHECK_PATH(t.x, "/y");
  // The inode index came back: the number looked up under a new name with
  // two links is the same node.
  CHECK_EQ(found_n(d, "z", 102, S_IFREG, 2), t.x);
  // The hidden name: still open and hidden; its last release names it.
  hs_node_t *hn = hs_node_get(t.h);
  REQUIRE(hn != NULL);
  CHECK(hs_node_is_hidden(hn));
  char *path = NULL;
  CHECK_EQ(hs_node_released(hn, &path), 1);
  CHECK(path != NULL && strcmp(path, want) == 0);
  free(path);
  hs_node_put(hn);
  // Lookup counts: f had two; one forget keeps it, the second frees it.
  uint64_t n = count();
  hs_node_forget(t.f, 1);
  CHECK_EQ(count(), n);
  hs_node_forget(t.f, 1);
  CHECK_EQ(count(), n - 1);
  CHECK(hs_node_get(t.f) == NULL);
  // New nodes get IDs the predecessor never gave out.
  uint64_t fresh_id = found_n(r, "new", 200, S_IFREG, 1);
  CHECK(fresh_id > t.d && fresh_id > t.f && fresh_id > t.x && fresh_id > t.h);
  hs_node_put(d);
  hs_node_put(r);
  free(buf);
}

// Refused, and the table is still the fresh one: root alone, IDs from the start.
static void check_refused (const char *buf, size_t len, const char *what) {
  fresh();
  int err = hs_nodes_import(buf, len);
  CHECK_EQ(err, -EINVAL);
  if (err != -EINVAL || count() != 1) fprintf(stderr, "  %s (%zu bytes): import %d, %llu nodes\n", what, len, err, (unsigned long long) count());
  CHECK_EQ(count(), 1);
  hs_node_t *r = root();
  CHECK_EQ(found_n(r, "first", 300, S_IFREG, 1), HS_ROOT_ID + 1);
  hs_node_put(r);
}

TEST(truncated_buffers_are_refused_with_nothing_imported) {
  table_t t;
  build(&t);
  size_t len = 0;
  char *buf = export(&len);
  REQUIRE(buf != NULL);
  // Every cut: before the header ends, between records, inside a name.
  int bad = 0;
  for (size_t cut = 0; cut < len; cut++) {
    int before = ht_failed_checks;
    check_refused(buf, cut, "cut");
    if (ht_failed_checks != before && ++bad > 3) break;
  }
  // A byte too many is not this table either.
  char *longer = malloc(len + 1);
  REQUIRE(longer != NULL);
  memcpy(longer, buf, len);
  longer[len] = 0;
  check_refused(longer, len + 1, "trailing byte");
  // And the whole buffer still imports into the fresh table.
  fresh();
  CHECK_EQ(hs_nodes_import(buf, len), 0);
  CHECK_PATH(t.f, "/d/f");
  free(longer);
  free(buf);
}

// A copy of buf with the n bytes at `at` replaced.
static char *patched (const char *buf, size_t len, size_t at, const void *v, size_t n) {
  char *p = malloc(len);
  if (p == NULL) abort();
  memcpy(p, buf, len);
  memcpy(p + at, v, n);
  return p;
}

TEST(inconsistent_tables_are_refused_with_nothing_imported) {
  table_t t;
  build(&t);
  size_t len = 0;
  char *buf = export(&len);
  REQUIRE(buf != NULL && len > 32);
  // Header: u32 magic, u32 version, u64 next_id, u64 hide_ctr, u64 count.
  char *p = patched(buf, len, 0, "XXXX", 4);
  check_refused(p, len, "magic");
  free(p);
  uint32_t v3 = 3;
  p = patched(buf, len, 4, &v3, 4);
  check_refused(p, len, "version");
  free(p);
  // A next ID the successor would give out again.
  uint64_t low = t.d;
  p = patched(buf, len, 8, &low, 8);
  check_refused(p, len, "next_id not above every node");
  free(p);
  // One node's ID twice: the second record's ID made the first's (IDs sit at
  // offset 32, and records follow one another; find the second by its ID).
  uint64_t first;
  memcpy(&first, buf + 32, 8);
  size_t second = 0;
  for (size_t at = 40; at + 8 <= len && second == 0; at++) {
    uint64_t v;
    memcpy(&v, buf + at, 8);
    if (v != first && (v == t.d || v == t.f || v == t.x || v == t.h)) {
      // The record layout: id, ino, type, open, hidden, aliases, nlookup (40 bytes) then names.
      uint64_t ino;
      memcpy(&ino, buf + at + 8, 8);
      if (ino >= 100 && ino <= 103) second = at;
    }
  }
  REQUIRE(second != 0);
  p = patched(buf, len, second, &first, 8);
  check_refused(p, len, "an ID twice");
  free(p);
  // A name that is a path: "f" becomes "/" (the only one-byte name "f" is
  // preceded by its u32 length 1).
  size_t fat = 0;
  for (size_t at = 40; at + 5 <= len; at++) {
    uint32_t l;
    memcpy(&l, buf + at, 4);
    if (l == 1 && buf[at + 4] == 'f') fat = at + 4;
  }
  REQUIRE(fat != 0);
  p = patched(buf, len, fat, "/", 1);
  check_refused(p, len, "a name with a slash");
  free(p);
  p = patched(buf, len, fat, "\0", 1);
  check_refused(p, len, "a name with a NUL");
  free(p);
  // A table that served already takes nothing.
  fresh();
  hs_node_t *r = root();
  found_n(r, "served", 400, S_IFREG, 1);
  hs_node_put(r);
  CHECK_EQ(hs_nodes_import(buf, len), -EINVAL);
  CHECK_EQ(count(), 2);
  free(buf);
}

// The import started early, on a thread of its own (hs_nodes_import_start),
// and finished by the adopt (hs_nodes_import_finish): the table is the one
// the finish is given, whatever the early import was given or answered.
TEST(an_import_started_early_is_finished_with_the_bytes_the_adopt_has) {
  table_t t;
  build(&t);
  uint64_t before = count();
  size_t len = 0;
  char *a = export(&len);
  REQUIRE(a != NULL);
  // Another table: the root and one file.
  fresh();
  hs_node_t *r = root();
  uint64_t only = found_n(r, "only", 500, S_IFREG, 1);
  hs_node_put(r);
  size_t blen = 0;
  char *b = export(&blen);
  REQUIRE(b != NULL);

  // Started with these bytes, finished with them: the early import's table.
  fresh();
  CHECK_EQ(hs_nodes_import_start(a, len), 0);
  CHECK_EQ(hs_nodes_import_start(a, len), -EEXIST);
  CHECK_EQ(hs_nodes_import_finish(a, len), 0);
  CHECK_EQ(count(), before);
  CHECK_PATH(t.f, "/d/f");

  // Started with other bytes: the finish's table, nothing of the early one.
  fresh();
  CHECK_EQ(hs_nodes_import_start(a, len), 0);
  CHECK_EQ(hs_nodes_import_finish(b, blen), 0);
  CHECK_EQ(count(), 2);
  CHECK_PATH(only, "/only");
  CHECK(path_of(t.f) == NULL);

  // Refused early, refused at the finish: the fresh table, untouched.
  fresh();
  CHECK_EQ(hs_nodes_import_start(a, len - 1), 0);
  CHECK_EQ(hs_nodes_import_finish(a, len - 1), -EINVAL);
  CHECK_EQ(count(), 1);

  // Refused early, other bytes at the finish: they import.
  fresh();
  CHECK_EQ(hs_nodes_import_start(a, len - 1), 0);
  CHECK_EQ(hs_nodes_import_finish(a, len), 0);
  CHECK_EQ(count(), before);

  // None started: the finish imports.
  fresh();
  CHECK_EQ(hs_nodes_import_finish(b, blen), 0);
  CHECK_PATH(only, "/only");
  free(a);
  free(b);
}
