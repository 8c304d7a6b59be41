// session/handles.c, the filter every request passes before libfuse decodes
// it, fed requests laid out as the kernel sends them: a handle of this
// daemon's epoch becomes its own number; a dead daemon's handle (another
// epoch) is reopened once, with the caller and the flags READ and WRITE
// carry (never O_APPEND, O_CREAT, O_TRUNC), and never taken for one of ours
// even when its number is; threads racing on one dead handle get one reopen;
// a RELEASE ends the mapping; a FLUSH of a never-reopened handle is answered
// here; GETATTR and SETATTR through a dead handle go by path; resent requests
// that cannot be done twice (RENAME2 and the xattr changes among them) are
// answered EIO, the others go on. The reopen
// steps and the channel's send are this file's (they record what they get).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include "harness.h"
#include "../src/session/handles.h"

#define RESEND (1ULL << 63)

// ---- what the filter calls -------------------------------------------------------------

static int reopens, dir_reopens, last_flags, reopen_err;
static int denied_mode = -1;  // an access mode the caller may not open with (EACCES)
static uint32_t last_uid;
static uint64_t next_inner = 100;
static pthread_mutex_t rec_mu = PTHREAD_MUTEX_INITIALIZER;

int hs_reopen_file (uint64_t nodeid, int flags, uint32_t uid, uint32_t gid, uint32_t pid, uint64_t *inner) {
  (void) nodeid; (void) gid; (void) pid;
  usleep(20000);  // long enough for racing threads to find the reopen in progress
  pthread_mutex_lock(&rec_mu);
  reopens++;
  last_flags = flags;
  last_uid = uid;
  int err = (flags & O_ACCMODE) == denied_mode ? -EACCES : reopen_err;
  if (err == 0) *inner = next_inner++;
  pthread_mutex_unlock(&rec_mu);
  return err;
}

int hs_reopen_dir (uint64_t nodeid, uint32_t uid, uint64_t *inner) {
  (void) nodeid;
  pthread_mutex_lock(&rec_mu);
  dir_reopens++;
  last_uid = uid;
  *inner = next_inner++;
  pthread_mutex_unlock(&rec_mu);
  return 0;
}

// The node table's part (nodes_requests.c): what a refused resend takes back.
static int refusals;
static uint64_t last_refused;
void hs_node_refused (uint64_t unique) {
  pthread_mutex_lock(&rec_mu);
  refusals++;
  last_refused = unique;
  pthread_mutex_unlock(&rec_mu);
}

static int answers, last_error;
static uint64_t last_unique;
int fuse_chan_send (struct fuse_chan *ch, const struct iovec iov[], size_t count) {
  (void) ch; (void) count;
  struct fuse_out_header out;
  memcpy(&out, iov[0].iov_base, sizeof(out));
  pthread_mutex_lock(&rec_mu);
  answers++;
  last_error = out.error;
  last_unique = out.unique;
  pthread_mutex_unlock(&rec_mu);
  return 0;
}

static void reset (void) {
  hs_handles_clear();
  reopens = dir_reopens = answers = last_flags = reopen_err = 0;
  denied_mode = -1;
  last_error = 0;
  hs_fh_set_epoch(2);
}

// ---- requests as the kernel lays them out ----------------------------------------------

typedef struct { struct fuse_in_header h; union { struct fuse_read_in r; struct fuse_write_in w; struct fuse_release_in rel; struct fuse_flush_in fl; struct fuse_getattr_in ga; struct fuse_setattr_in sa; struct fuse_create_in cr; struct fuse_fsync_in fs; char name[64]; } a; } req_t;

static size_t make (req_t *q, uint32_t opcode, uint64_t unique, uint64_t fh, uint32_t flags) {
  memset(q, 0, sizeof(*q));
  q->h.opcode = opcode;
  q->h.unique = unique;
  q->h.nodeid = 42;
  q->h.uid = 1234;
  switch (opcode) {
    case FUSE_READ: case FUSE_READDIR: q->a.r.fh = fh; q->a.r.flags = flags; return sizeof(q->h) + sizeof(q->a.r);
    case FUSE_WRITE: q->a.w.fh = fh; q->a.w.flags = flags; return sizeof(q->h) + sizeof(q->a.w);
    case FUSE_RELEASE: case FUSE_RELEASEDIR: q->a.rel.fh = fh; return sizeof(q->h) + sizeof(q->a.rel);
    case FUSE_FLUSH: q->a.fl.fh = fh; return sizeof(q->h) + sizeof(q->a.fl);
    case FUSE_FSYNC: q->a.fs.fh = fh; return sizeof(q->h) + sizeof(q->a.fs);
    case FUSE_GETATTR: q->a.ga.getattr_flags = FUSE_GETATTR_FH; q->a.ga.fh = fh; return sizeof(q->h) + sizeof(q->a.ga);
    case FUSE_SETATTR: q->a.sa.valid = FATTR_FH | FATTR_SIZE; q->a.sa.fh = fh; return sizeof(q->h) + sizeof(q->a.sa);
    case FUSE_CREATE: q->a.cr.flags = flags; strcpy(q->a.name + sizeof(q->a.cr), "f"); return sizeof(q->h) + sizeof(q->a.cr) + 2;
    default: strcpy(q->a.name, "f"); return sizeof(q->h) + 2;
  }
}

static uint64_t fh_of (req_t *q) { return q->a.r.fh; }  // every handle above is the argument's first word but getattr's and setattr's

static uint64_t fh_at (uint32_t epoch, uint64_t inner) { return ((uint64_t) epoch << HS_FH_EPOCH_SHIFT) | inner; }

// ---- tests -----------------------------------------------------------------------------

TEST(own_epoch_handles_become_our_numbers) {
  reset();
  CHECK_EQ(hs_fh_out(7), fh_at(2, 7));
  CHECK_EQ(hs_fh_out(0), 0);
  req_t q;
  size_t len = make(&q, FUSE_READ, 1, fh_at(2, 7), O_RDONLY);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(fh_of(&q), 7);
  len = make(&q, FUSE_READ, 2, 0, O_RDONLY);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(fh_of(&q), 0);
  CHECK_EQ(reopens, 0);
}

TEST(a_dead_handle_is_reopened_once_never_taken_for_ours) {
  reset();
  req_t q;
  // The dead daemon's 7 (epoch 1) is not our 7.
  size_t len = make(&q, FUSE_WRITE, 1, fh_at(1, 7), O_WRONLY | O_APPEND | O_CREAT | O_TRUNC);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(reopens, 1);
  CHECK_EQ(last_flags, O_WRONLY);
  CHECK_EQ(last_uid, 1234);
  uint64_t mapped = fh_of(&q);
  CHECK(mapped >= 100);
  CHECK(mapped != 7);
  len = make(&q, FUSE_READ, 2, fh_at(1, 7), O_RDWR);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(fh_of(&q), mapped);
  CHECK_EQ(reopens, 1);
  // A FLUSH keeps it; the RELEASE ends it, and hands our handle to the release.
  len = make(&q, FUSE_FLUSH, 3, fh_at(1, 7), 0);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(fh_of(&q), mapped);
  len = make(&q, FUSE_RELEASE, 4, fh_at(1, 7), 0);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(fh_of(&q), mapped);
  len = make(&q, FUSE_READ, 5, fh_at(1, 7), O_RDONLY);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(reopens, 2);
  uint64_t a, b, c;
  hs_handles_stats(&a, &b, &c);
  CHECK(c >= 2);
}

TEST(a_failed_reopen_answers_its_error_and_keeps_nothing) {
  reset();
  reopen_err = -EACCES;
  req_t q;
  size_t len = make(&q, FUSE_READ, 9, fh_at(1, 3), O_RDONLY);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 1);
  CHECK_EQ(answers, 1);
  CHECK_EQ(last_error, -EACCES);
  CHECK_EQ(last_unique, 9);
  reopen_err = 0;
  len = make(&q, FUSE_READ, 10, fh_at(1, 3), O_RDONLY);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(reopens, 2);
}

TEST(handles_never_reopened_release_and_flush_without_a_reopen) {
  reset();
  req_t q;
  size_t len = make(&q, FUSE_FLUSH, 11, fh_at(1, 5), 0);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 1);
  CHECK_EQ(answers, 1);
  CHECK_EQ(last_error, 0);
  len = make(&q, FUSE_RELEASE, 12, fh_at(1, 5), 0);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(fh_of(&q), 0);
  len = make(&q, FUSE_RELEASEDIR, 13, fh_at(1, 6), 0);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(fh_of(&q), 0);
  CHECK_EQ(reopens + dir_reopens, 0);
}

TEST(getattr_and_setattr_through_a_dead_handle_go_by_path) {
  reset();
  req_t q;
  size_t len = make(&q, FUSE_GETATTR, 14, fh_at(1, 5), 0);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(q.a.ga.getattr_flags & FUSE_GETATTR_FH, 0);
  len = make(&q, FUSE_SETATTR, 15, fh_at(1, 5), 0);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(q.a.sa.valid & FATTR_FH, 0);
  CHECK_EQ(q.a.sa.valid & FATTR_SIZE, FATTR_SIZE);
  // Ours keep their handle.
  len = make(&q, FUSE_SETATTR, 16, fh_at(2, 5), 0);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(q.a.sa.fh, 5);
  CHECK_EQ(reopens, 0);
}

TEST(directories_reopen_as_directories) {
  reset();
  req_t q;
  size_t len = make(&q, FUSE_READDIR, 17, fh_at(1, 3), 0);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(dir_reopens, 1);
  CHECK_EQ(reopens, 0);
  CHECK(fh_of(&q) >= 100);
}

TEST(resent_requests_that_cannot_run_twice_answer_eio) {
  reset();
  req_t q;
  uint32_t refused[] = { FUSE_MKDIR, FUSE_UNLINK, FUSE_RMDIR, FUSE_RENAME, FUSE_LINK, FUSE_SYMLINK, FUSE_MKNOD };
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
    size_t len = make(&q, refused[i], RESEND | (20 + i), 0, 0);
    CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 1);
    CHECK_EQ(last_error, -EIO);
    CHECK_EQ(last_unique, RESEND | (20 + i));  // echoed unchanged
  }
  size_t len = make(&q, FUSE_CREATE, RESEND | 40, 0, O_CREAT | O_EXCL | O_WRONLY);
  int took = refusals;
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 1);
  // The open its first run may have counted is taken back (the kernel gets no handle).
  CHECK_EQ(refusals, took + 1);
  CHECK_EQ(last_refused, RESEND | 40);
  CHECK_EQ(hs_req_unique, RESEND | 40);
  int before = answers;
  // A create without O_EXCL opens what the first run made: it goes on; so do lookups, reads, writes.
  len = make(&q, FUSE_CREATE, RESEND | 41, 0, O_CREAT | O_WRONLY);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  len = make(&q, FUSE_LOOKUP, RESEND | 42, 0, 0);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  len = make(&q, FUSE_WRITE, RESEND | 43, fh_at(1, 9), O_WRONLY | O_APPEND);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(last_flags, O_WRONLY);
  CHECK_EQ(answers, before);
  // Only refused ones take anything back.
  CHECK_EQ(refusals, took + 1);
  // The same opcodes not resent go on, their unique recorded for the op that decodes them.
  len = make(&q, FUSE_MKDIR, 44, 0, 0);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(hs_req_unique, 44);
}

typedef struct { uint64_t got; } racer_t;
// RENAME2 (a RENAME_EXCHANGE run twice swaps back: the caller's success
// undone), SETXATTR and REMOVEXATTR (a replace-only set or a remove run twice
// fails with ENODATA where once it succeeded), laid out as the kernel sends
// them: the fixed argument, then the names (and the value). Resent: EIO,
// answered here; not resent: on to be run.
TEST(resent_rename2_and_xattr_changes_answer_eio) {
  reset();
  struct { struct fuse_in_header h; char a[128]; } q;
  for (int k = 0; k < 3; k++) {
    memset(&q, 0, sizeof(q));
    size_t alen;
    if (k == 0) {
      struct fuse_rename2_in rn = { .newdir = 7, .flags = 2 /* RENAME_EXCHANGE */ };
      q.h.opcode = FUSE_RENAME2;
      memcpy(q.a, &rn, sizeof(rn));
      memcpy(q.a + sizeof(rn), "a\0b", 4);
      alen = sizeof(rn) + 4;
    } else if (k == 1) {
      struct fuse_setxattr_in sx = { .size = 1, .flags = 2 /* XATTR_REPLACE */ };
      q.h.opcode = FUSE_SETXATTR;
      memcpy(q.a, &sx, sizeof(sx));
      memcpy(q.a + sizeof(sx), "user.k\0v", 8);
      alen = sizeof(sx) + 8;
    } else {
      q.h.opcode = FUSE_REMOVEXATTR;
      memcpy(q.a, "user.k", 7);
      alen = 7;
    }
    q.h.nodeid = 42;
    q.h.uid = 1234;
    q.h.len = (uint32_t) (sizeof(q.h) + alen);
    int before = answers;
    q.h.unique = RESEND | (60 + k);
    CHECK_EQ(hs_handles_filter((char *) &q, sizeof(q.h) + alen, NULL), 1);
    CHECK_EQ(answers, before + 1);
    CHECK_EQ(last_error, -EIO);
    CHECK_EQ(last_unique, RESEND | (60 + k));  // echoed unchanged
    q.h.unique = 70 + k;
    CHECK_EQ(hs_handles_filter((char *) &q, sizeof(q.h) + alen, NULL), 0);
    CHECK_EQ(answers, before + 1);
  }
}

static void *racer (void *arg) {
  racer_t *r = arg;
  req_t q;
  size_t len = make(&q, FUSE_READ, 50, fh_at(1, 77), O_RDONLY);
  if (hs_handles_filter((char *) &q, len, NULL) == 0) r->got = fh_of(&q);
  return NULL;
}

TEST(threads_racing_on_one_dead_handle_get_one_reopen) {
  reset();
  pthread_t t[8];
  racer_t r[8];
  memset(r, 0, sizeof(r));
  for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, racer, &r[i]);
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  CHECK_EQ(reopens, 1);
  for (int i = 1; i < 8; i++) CHECK_EQ(r[i].got, r[0].got);
  CHECK(r[0].got >= 100);
}

TEST(a_handle_first_used_by_fsync_is_reopened_for_as_much_as_the_caller_may) {
  reset();
  req_t q;
  // FSYNC says nothing of the open: read-write first, so a WRITE after it is not refused.
  size_t len = make(&q, FUSE_FSYNC, 60, fh_at(1, 8), 0);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(last_flags, O_RDWR);
  uint64_t mapped = fh_of(&q);
  len = make(&q, FUSE_WRITE, 61, fh_at(1, 8), O_WRONLY | O_APPEND);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(fh_of(&q), mapped);
  CHECK_EQ(reopens, 1);
  // A caller who may not read: write-only after read-write was refused.
  reset();
  denied_mode = O_RDWR;
  len = make(&q, FUSE_FSYNC, 62, fh_at(1, 9), 0);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(last_flags, O_WRONLY);
  CHECK_EQ(reopens, 2);
}

// A live upgrade after a crash: the predecessor's mappings go to the
// successor (same epoch), which then neither reopens a dead handle again nor
// loses the handle it maps to; the RELEASE still ends the mapping there.
TEST(dead_handle_mappings_go_with_a_live_handover) {
  reset();
  req_t q;
  size_t len = make(&q, FUSE_READ, 1, fh_at(1, 7), O_RDONLY);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  uint64_t mapped = fh_of(&q);
  len = make(&q, FUSE_WRITE, 2, fh_at(1, 8), O_WRONLY);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(reopens, 2);
  uint64_t *pairs = NULL;
  size_t n = 0;
  CHECK_EQ(hs_handles_export(&pairs, &n), 0);
  CHECK_EQ(n, 2);
  // The successor: nothing mapped yet, the same epoch.
  hs_handles_clear();
  reopens = 0;
  CHECK_EQ(hs_handles_import(pairs, n), 0);
  len = make(&q, FUSE_READ, 3, fh_at(1, 7), O_RDONLY);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(fh_of(&q), mapped);
  CHECK_EQ(reopens, 0);
  len = make(&q, FUSE_RELEASE, 4, fh_at(1, 7), 0);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(fh_of(&q), mapped);
  // Importing over a mapping that is there refuses all of it.
  CHECK_EQ(hs_handles_import(pairs, n), -EEXIST);
  len = make(&q, FUSE_READ, 5, fh_at(1, 7), O_RDONLY);
  CHECK_EQ(hs_handles_filter((char *) &q, len, NULL), 0);
  CHECK_EQ(reopens, 1);
  free(pairs);
}
