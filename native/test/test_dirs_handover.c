// handover/dirs_handover.c: the table of open directories as bytes
// (hs_dirs_export) and read back by a successor (hs_dirs_import). The kernel
// keeps the fh numbers it was given and reads listings from an offset into
// them, so each record must come back under its number, with its caller, path
// and listing, and be counted again against the caller's caps (dirhandles.c,
// linked in); a malformed buffer, or one naming an fh already taken, is
// refused with nothing of it imported. ops_dirs.c's libfuse, Node and other
// session calls are stubs that abort: the table's functions call none.
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "../src/fastpath/dirhandles.h"

int hs_dirs_export (char **out, size_t *len);
int hs_dirs_import (const char *buf, size_t len);
void hs_dirs_clear (void);

typedef struct { char *p; size_t len; } buf_t;

static void put (buf_t *b, const void *v, size_t n) {
  b->p = realloc(b->p, b->len + n);
  if (b->p == NULL) abort();
  memcpy(b->p + b->len, v, n);
  b->len += n;
}

// One record: u64 fh, u32 uid, u32 filled, u32 path length, u64 listing
// length, the path, the listing.
static void rec (buf_t *b, uint64_t fh, uint32_t uid, uint32_t filled, const char *path, const char *listing, uint64_t llen) {
  uint32_t plen = (uint32_t) strlen(path);
  put(b, &fh, 8);
  put(b, &uid, 4);
  put(b, &filled, 4);
  put(b, &plen, 4);
  put(b, &llen, 8);
  put(b, path, plen);
  if (llen > 0) put(b, listing, llen);
}

// Three records, in fh order (the order the export writes): a filled
// listing with a NUL inside (direntries are binary), an unfilled one, and
// one far up the table.
static buf_t three (void) {
  buf_t b = { NULL, 0 };
  uint64_t n = 3;
  put(&b, &n, 8);
  rec(&b, 1, 1000, 1, "/alice/src", "a\0b\0listing", 11);
  rec(&b, 7, 1000, 0, "/alice", NULL, 0);
  rec(&b, 4000, 1001, 1, "/bob/x", "entries", 7);
  return b;
}

static buf_t exported (void) {
  buf_t b = { NULL, 0 };
  CHECK_EQ(hs_dirs_export(&b.p, &b.len), 0);
  return b;
}

static uint64_t handles (uint32_t uid) {
  uint64_t c[3];
  hs_dh_counts(uid, "/", c);
  return c[0];
}

static uint64_t records (void) {
  buf_t b = exported();
  uint64_t n = 0;
  if (b.len >= 8) memcpy(&n, b.p, 8);
  free(b.p);
  return n;
}

TEST(round_trip_keeps_numbers_callers_paths_and_listings) {
  hs_dirs_clear();
  CHECK_EQ(records(), 0);
  buf_t in = three();
  CHECK_EQ(hs_dirs_import(in.p, in.len), 0);
  // Exported again byte for byte: same numbers, callers, paths, listings.
  buf_t out = exported();
  CHECK_EQ(out.len, in.len);
  CHECK(out.len == in.len && memcmp(out.p, in.p, in.len) == 0);
  // Counted again under their callers.
  CHECK_EQ(handles(1000), 2);
  CHECK_EQ(handles(1001), 1);
  // The numbers are taken: importing them again is refused, and adds nothing.
  CHECK_EQ(hs_dirs_import(in.p, in.len), -EINVAL);
  CHECK_EQ(records(), 3);
  CHECK_EQ(handles(1000), 2);
  hs_dirs_clear();
  CHECK_EQ(records(), 0);
  CHECK_EQ(handles(1000), 0);
  CHECK_EQ(handles(1001), 0);
  free(in.p);
  free(out.p);
}

TEST(a_partly_taken_import_is_undone) {
  hs_dirs_clear();
  // fh 4000 is taken; the import of 1, 7 and 4000 fails at the last and
  // leaves 1 and 7 unimported.
  buf_t one = { NULL, 0 };
  uint64_t n = 1;
  put(&one, &n, 8);
  rec(&one, 4000, 5, 0, "/other", NULL, 0);
  CHECK_EQ(hs_dirs_import(one.p, one.len), 0);
  buf_t in = three();
  CHECK_EQ(hs_dirs_import(in.p, in.len), -EINVAL);
  CHECK_EQ(records(), 1);
  CHECK_EQ(handles(1000), 0);
  CHECK_EQ(handles(5), 1);
  hs_dirs_clear();
  free(one.p);
  free(in.p);
}

TEST(malformed_buffers_are_refused_with_nothing_imported) {
  hs_dirs_clear();
  buf_t in = three();
  for (size_t cut = 0; cut < in.len; cut++) {
    int before = ht_failed_checks;
    CHECK_EQ(hs_dirs_import(in.p, cut), -EINVAL);
    CHECK_EQ(records(), 0);
    CHECK_EQ(handles(1000), 0);
    if (ht_failed_checks != before) {
      fprintf(stderr, "  cut at %zu of %zu\n", cut, in.len);
      hs_dirs_clear();
      break;
    }
  }
  // A byte too many.
  buf_t longer = { NULL, 0 };
  put(&longer, in.p, in.len);
  put(&longer, "", 1);
  CHECK_EQ(hs_dirs_import(longer.p, longer.len), -EINVAL);
  // fh 0 (the kernel's "none"), a relative path, a path with a NUL.
  struct { uint64_t fh; const char *path; size_t plen; } bad[] = {
    { 0, "/a", 2 }, { 2, "a/b", 3 }, { 2, "/a\0b", 4 },
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    buf_t b = { NULL, 0 };
    uint64_t one = 1, llen = 0;
    uint32_t uid = 1000, filled = 0, plen = (uint32_t) bad[i].plen;
    put(&b, &one, 8);
    put(&b, &bad[i].fh, 8);
    put(&b, &uid, 4);
    put(&b, &filled, 4);
    put(&b, &plen, 4);
    put(&b, &llen, 8);
    put(&b, bad[i].path, plen);
    CHECK_EQ(hs_dirs_import(b.p, b.len), -EINVAL);
    free(b.p);
  }
  CHECK_EQ(records(), 0);
  CHECK_EQ(handles(1000), 0);
  // The whole buffer still imports.
  CHECK_EQ(hs_dirs_import(in.p, in.len), 0);
  CHECK_EQ(records(), 3);
  hs_dirs_clear();
  free(longer.p);
  free(in.p);
}
