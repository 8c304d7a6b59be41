// session/proto.c, the protocol layer in front of libfuse 2.9, fed requests
// laid out as the kernel sends them: INIT is answered by libfuse's answer
// raised to 7.40 (never above the kernel's minor) and to 1 MiB requests when
// the kernel offers FUSE_MAX_PAGES, with FUSE_INIT_EXT and flags2 only for
// passthrough (libfuse knows no flags2), and kept with the request; a kept INIT gives a successor the
// negotiated state, and one kept without an answer (a predecessor that let
// libfuse answer) gives libfuse 2.9's; RENAME2 becomes RENAME with its
// flags on the thread; READ and WRITE sizes are counted. A real libfuse 2.9
// session computes the answer; the channel's send is this file's.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <linux/fuse.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include "harness.h"
#include "../src/session/proto.h"

// ---- what proto.c calls ----------------------------------------------------------------

static char kept[4096];
static size_t kept_len;

void hs_loop_keep_init (const char *buf, size_t len) {
  if (len <= sizeof(kept)) {
    memcpy(kept, buf, len);
    kept_len = len;
  }
}

static char sent[4096];
static size_t sent_len;

static int test_send (struct fuse_chan *ch, const struct iovec iov[], size_t count) {
  (void) ch;
  sent_len = 0;
  for (size_t i = 0; i < count; i++) {
    memcpy(sent + sent_len, iov[i].iov_base, iov[i].iov_len);
    sent_len += iov[i].iov_len;
  }
  return 0;
}

static int inited;
static void ll_init (void *u, struct fuse_conn_info *c) {
  (void) u; (void) c;
  inited++;
}

// A libfuse 2.9 session as the daemon makes one (big_writes, max_write), and a channel of HS_PROTO_BUFSIZE.
static struct fuse_session *session (const char *max_write, struct fuse_chan **ch) {
  static const struct fuse_lowlevel_ops ops = { .init = ll_init };
  struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
  fuse_opt_add_arg(&args, "test");
  fuse_opt_add_arg(&args, "-o");
  fuse_opt_add_arg(&args, max_write);
  struct fuse_session *se = fuse_lowlevel_new(&args, &ops, sizeof(ops), NULL);
  fuse_opt_free_args(&args);
  static struct fuse_chan_ops cops = { .send = test_send };
  *ch = fuse_chan_new(&cops, -1, HS_PROTO_BUFSIZE, NULL);
  fuse_session_add_chan(se, *ch);
  return se;
}

// An INIT as a kernel of minor `minor` sends it, offering `flags` (and flags2 `flags2`).
static size_t init_request2 (char *buf, uint32_t minor, uint32_t flags, uint32_t flags2) {
  struct fuse_in_header h = { .len = sizeof(h) + sizeof(struct fuse_init_in), .opcode = FUSE_INIT, .unique = 2 };
  struct fuse_init_in in = { .major = 7, .minor = minor, .max_readahead = 131072, .flags = flags, .flags2 = flags2 };
  memcpy(buf, &h, sizeof(h));
  memcpy(buf + sizeof(h), &in, sizeof(in));
  return h.len;
}

static size_t init_request (char *buf, uint32_t minor, uint32_t flags) {
  return init_request2(buf, minor, flags, 0);
}

static struct fuse_init_out answer (void) {
  struct fuse_init_out io;
  memset(&io, 0, sizeof(io));
  memcpy(&io, sent + sizeof(struct fuse_out_header), sizeof(io));
  return io;
}

// The answer a fresh session ("big_writes") gives an INIT of minor `minor`
// offering `flags` and `flags2`; the negotiated state stays in hs_proto_get().
static struct fuse_init_out answer_to (uint32_t minor, uint32_t flags, uint32_t flags2) {
  struct fuse_chan *ch;
  struct fuse_session *se = session("big_writes", &ch);
  char req[256];
  size_t len = init_request2(req, minor, flags, flags2);
  CHECK_EQ(hs_proto_filter(req, &len, se, ch), 1);
  fuse_session_destroy(se);
  return answer();
}

#define OFFERED (FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_MAX_PAGES | FUSE_INIT_EXT | FUSE_DO_READDIRPLUS | FUSE_READDIRPLUS_AUTO | FUSE_PARALLEL_DIROPS)

TEST(init_is_raised_to_our_minor_and_1_MiB_requests) {
  struct fuse_chan *ch;
  struct fuse_session *se = session("big_writes,max_write=1048576", &ch);
  char req[256];
  size_t len = init_request(req, 44, OFFERED);
  inited = 0;
  CHECK_EQ(hs_proto_filter(req, &len, se, ch), 1);
  CHECK_EQ(inited, 1);
  struct fuse_out_header oh;
  memcpy(&oh, sent, sizeof(oh));
  CHECK_EQ(oh.error, 0);
  CHECK_EQ(oh.len, sizeof(oh) + sizeof(struct fuse_init_out));
  CHECK_EQ(sent_len, oh.len);
  struct fuse_init_out io = answer();
  CHECK_EQ(io.major, 7);
  CHECK_EQ(io.minor, HS_PROTO_MINOR);
  CHECK_EQ(io.max_write, 1048576);
  CHECK_EQ(io.max_pages, 256);
  CHECK(io.flags & FUSE_MAX_PAGES);
  CHECK(io.flags & FUSE_BIG_WRITES);
  // READDIRPLUS, in the kernel's adaptive mode (ops_dirs_plus.c answers it).
  CHECK(io.flags & FUSE_DO_READDIRPLUS);
  CHECK(io.flags & FUSE_READDIRPLUS_AUTO);
  // What neither libfuse 2.9 nor this layer handles stays unasked (INIT_EXT: passthrough, not offered here).
  CHECK(!(io.flags & FUSE_INIT_EXT));
  CHECK_EQ(io.flags2, 0);
  CHECK(!(io.flags & FUSE_PARALLEL_DIROPS));
  hs_proto_t p = hs_proto_get();
  CHECK_EQ(p.minor, HS_PROTO_MINOR);
  CHECK_EQ(p.kernel_minor, 44);
  CHECK_EQ(p.max_write, 1048576);
  CHECK_EQ(p.max_pages, 256);
  // Kept: the request, then the answer sent.
  CHECK_EQ(kept_len, len + sent_len);
  CHECK(memcmp(kept, req, len) == 0);
  CHECK(memcmp(kept + len, sent, sent_len) == 0);
  fuse_session_destroy(se);
}

// fuse_init_out's max_stack_depth (7.40) is the 7.38 header's unused[0].
static uint32_t stack_depth (void) {
  return answer().unused[0];
}

TEST(passthrough_is_asked_with_init_ext_only_when_wanted_and_offered) {
  struct fuse_chan *ch;
  struct fuse_session *se = session("big_writes", &ch);
  char req[256];
  size_t len = init_request2(req, 45, OFFERED, HS_FUSE2_PASSTHROUGH | 0xffu);
  CHECK_EQ(hs_proto_filter(req, &len, se, ch), 1);
  struct fuse_init_out io = answer();
  CHECK(io.flags & FUSE_INIT_EXT);
  // Only passthrough of all the kernel offers in flags2.
  CHECK_EQ(io.flags2, HS_FUSE2_PASSTHROUGH);
  CHECK_EQ(stack_depth(), HS_PROTO_STACK_DEPTH);
  CHECK_EQ(hs_proto_get().flags2, HS_FUSE2_PASSTHROUGH);
  CHECK_EQ(hs_proto_passthrough(), 1);
  // A successor takes it from the kept INIT.
  char blob[4096];
  size_t blen = kept_len;
  memcpy(blob, kept, blen);
  fuse_session_destroy(se);
  // Not offered (no FUSE_INIT_EXT from the kernel, or no flag in flags2): not asked.
  struct fuse_init_out io2 = answer_to(45, OFFERED & ~FUSE_INIT_EXT, HS_FUSE2_PASSTHROUGH);
  CHECK(!(io2.flags & FUSE_INIT_EXT));
  CHECK_EQ(io2.flags2, 0);
  CHECK_EQ(stack_depth(), 0);
  CHECK_EQ(hs_proto_passthrough(), 0);
  // An older kernel (7.39): not asked either.
  CHECK_EQ(answer_to(39, OFFERED, HS_FUSE2_PASSTHROUGH).flags2, 0);
  // Not wanted (fuse.passthrough false).
  hs_proto_want_passthrough(0);
  io2 = answer_to(45, OFFERED, HS_FUSE2_PASSTHROUGH);
  CHECK(!(io2.flags & FUSE_INIT_EXT));
  CHECK_EQ(io2.flags2, 0);
  // Adopted: what the predecessor negotiated; used only while still wanted.
  CHECK_EQ(hs_proto_adopt(blob, blen), len);
  CHECK_EQ(hs_proto_get().flags2, HS_FUSE2_PASSTHROUGH);
  CHECK_EQ(hs_proto_passthrough(), 0);
  hs_proto_want_passthrough(1);
  CHECK_EQ(hs_proto_passthrough(), 1);
}

// A 6.14+ kernel with enable_uring on offers FUSE over io_uring beside
// passthrough: the answer takes passthrough alone, and the offer is kept for
// status (a ring's requests would not survive the daemon: proto.h).
TEST(io_uring_offered_is_never_asked_and_the_offer_is_kept) {
  struct fuse_chan *ch;
  struct fuse_session *se = session("big_writes", &ch);
  char req[256];
  size_t len = init_request2(req, 45, OFFERED, HS_FUSE2_PASSTHROUGH | HS_FUSE2_OVER_IO_URING);
  CHECK_EQ(hs_proto_filter(req, &len, se, ch), 1);
  CHECK(answer().flags & FUSE_INIT_EXT);
  CHECK_EQ(answer().flags2 & HS_FUSE2_OVER_IO_URING, 0);
  CHECK_EQ(answer().flags2, HS_FUSE2_PASSTHROUGH);
  CHECK_EQ(hs_proto_get().flags2 & HS_FUSE2_OVER_IO_URING, 0);
  CHECK(hs_proto_get().kernel_flags2 & HS_FUSE2_OVER_IO_URING);
  // A successor sees the same offer and the same refusal in the kept INIT.
  char blob[4096];
  size_t blen = kept_len;
  memcpy(blob, kept, blen);
  fuse_session_destroy(se);
  CHECK_EQ(hs_proto_adopt(blob, blen), len);
  CHECK_EQ(hs_proto_get().flags2 & HS_FUSE2_OVER_IO_URING, 0);
  CHECK(hs_proto_get().kernel_flags2 & HS_FUSE2_OVER_IO_URING);
  // Offered without passthrough: nothing in flags2 is asked, FUSE_INIT_EXT neither.
  struct fuse_init_out io = answer_to(45, OFFERED, HS_FUSE2_OVER_IO_URING);
  CHECK(!(io.flags & FUSE_INIT_EXT));
  CHECK_EQ(io.flags2, 0);
}

TEST(an_older_kernel_keeps_its_minor_and_without_max_pages_its_request_size) {
  struct fuse_chan *ch;
  struct fuse_session *se = session("big_writes,max_write=1048576", &ch);
  char req[256];
  size_t len = init_request(req, 27, FUSE_ASYNC_READ | FUSE_BIG_WRITES);
  CHECK_EQ(hs_proto_filter(req, &len, se, ch), 1);
  struct fuse_init_out io = answer();
  CHECK_EQ(io.minor, 27);
  CHECK(!(io.flags & FUSE_MAX_PAGES));
  // 32 pages, the kernel's size without FUSE_MAX_PAGES.
  CHECK_EQ(io.max_write, 131072);
  CHECK_EQ(hs_proto_get().max_pages, 32);
  fuse_session_destroy(se);
}

TEST(readdirplus_is_asked_only_when_wanted_and_offered) {
  struct fuse_chan *ch;
  struct fuse_session *se = session("big_writes", &ch);
  char req[256];
  hs_proto_want_plus(0);
  size_t len = init_request(req, 44, OFFERED);
  CHECK_EQ(hs_proto_filter(req, &len, se, ch), 1);
  CHECK(!(answer().flags & (FUSE_DO_READDIRPLUS | FUSE_READDIRPLUS_AUTO)));
  fuse_session_destroy(se);
  // libfuse answers one INIT per session: a new one for each.
  hs_proto_want_plus(1);
  se = session("big_writes", &ch);
  len = init_request(req, 44, FUSE_DO_READDIRPLUS);
  CHECK_EQ(hs_proto_filter(req, &len, se, ch), 1);
  CHECK(answer().flags & FUSE_DO_READDIRPLUS);
  CHECK(!(answer().flags & FUSE_READDIRPLUS_AUTO));
  fuse_session_destroy(se);
  se = session("big_writes", &ch);
  len = init_request(req, 44, FUSE_READDIRPLUS_AUTO);
  CHECK_EQ(hs_proto_filter(req, &len, se, ch), 1);
  CHECK(!(answer().flags & (FUSE_DO_READDIRPLUS | FUSE_READDIRPLUS_AUTO)));
  fuse_session_destroy(se);
}

TEST(readdirplus_becomes_readdir_marked_on_the_thread) {
  char buf[256];
  struct fuse_in_header h = { .len = sizeof(h) + sizeof(struct fuse_read_in), .opcode = FUSE_READDIRPLUS, .unique = 4, .nodeid = 1 };
  struct fuse_read_in r = { .fh = 77, .offset = 12, .size = 4096 };
  memcpy(buf, &h, sizeof(h));
  memcpy(buf + sizeof(h), &r, sizeof(r));
  size_t len = h.len;
  uint64_t lookups0, plus0, lookups1, plus1, reads0, reads1;
  hs_proto_counts(&lookups0, &plus0, &reads0);
  CHECK_EQ(hs_proto_filter(buf, &len, NULL, NULL), 0);
  CHECK_EQ(hs_proto_plus(), 1);
  struct fuse_in_header out;
  memcpy(&out, buf, sizeof(out));
  CHECK_EQ(out.opcode, FUSE_READDIR);
  CHECK_EQ(len, h.len);
  struct fuse_read_in r2;
  memcpy(&r2, buf + sizeof(h), sizeof(r2));
  CHECK_EQ(r2.fh, 77);
  CHECK_EQ(r2.offset, 12);
  // A plain READDIR, and a LOOKUP (counted), carry no mark.
  h.opcode = FUSE_READDIR;
  memcpy(buf, &h, sizeof(h));
  CHECK_EQ(hs_proto_filter(buf, &len, NULL, NULL), 0);
  CHECK_EQ(hs_proto_plus(), 0);
  h.opcode = FUSE_LOOKUP;
  memcpy(buf, &h, sizeof(h));
  CHECK_EQ(hs_proto_filter(buf, &len, NULL, NULL), 0);
  hs_proto_counts(&lookups1, &plus1, &reads1);
  CHECK_EQ(lookups1 - lookups0, 1);
  CHECK_EQ(plus1 - plus0, 1);
}

TEST(tmpfile_becomes_create_marked_on_the_thread) {
  char buf[256];
  struct fuse_in_header h = { .opcode = FUSE_TMPFILE, .unique = 6, .nodeid = 9 };
  struct fuse_create_in c = { .flags = 0x410002, .mode = 0100600, .umask = 022 };
  h.len = sizeof(h) + sizeof(c) + 2;
  memcpy(buf, &h, sizeof(h));
  memcpy(buf + sizeof(h), &c, sizeof(c));
  memcpy(buf + sizeof(h) + sizeof(c), "/", 2);
  size_t len = h.len;
  CHECK_EQ(hs_proto_filter(buf, &len, NULL, NULL), 0);
  CHECK_EQ(hs_proto_tmpfile(), 1);
  struct fuse_in_header out;
  memcpy(&out, buf, sizeof(out));
  CHECK_EQ(out.opcode, FUSE_CREATE);
  CHECK_EQ(len, h.len);
  // The arguments are CREATE's as they came.
  CHECK(memcmp(buf + sizeof(h), &c, sizeof(c)) == 0);
  h.opcode = FUSE_CREATE;
  memcpy(buf, &h, sizeof(h));
  CHECK_EQ(hs_proto_filter(buf, &len, NULL, NULL), 0);
  CHECK_EQ(hs_proto_tmpfile(), 0);
}

TEST(a_smaller_max_write_asks_for_as_many_pages) {
  struct fuse_chan *ch;
  struct fuse_session *se = session("big_writes,max_write=262144", &ch);
  char req[256];
  size_t len = init_request(req, 44, OFFERED);
  CHECK_EQ(hs_proto_filter(req, &len, se, ch), 1);
  struct fuse_init_out io = answer();
  CHECK_EQ(io.max_write, 262144);
  CHECK_EQ(io.max_pages, 64);
  fuse_session_destroy(se);
}

TEST(a_kernel_of_another_major_gets_libfuses_answer_as_is) {
  struct fuse_chan *ch;
  struct fuse_session *se = session("big_writes", &ch);
  char req[256];
  size_t len = init_request(req, 1, 0);
  struct fuse_init_in in;
  memcpy(&in, req + sizeof(struct fuse_in_header), sizeof(in));
  in.major = 8;
  memcpy(req + sizeof(struct fuse_in_header), &in, sizeof(in));
  kept_len = 0;
  CHECK_EQ(hs_proto_filter(req, &len, se, ch), 1);
  struct fuse_init_out io = answer();
  // libfuse answers "7" for the kernel to ask again; nothing is amended or kept.
  CHECK_EQ(io.major, 7);
  CHECK(!(io.flags & FUSE_MAX_PAGES));
  CHECK_EQ(kept_len, 0);
  fuse_session_destroy(se);
}

TEST(a_kept_init_gives_the_successor_what_was_negotiated) {
  struct fuse_chan *ch;
  struct fuse_session *se = session("big_writes,max_write=1048576", &ch);
  char req[256];
  size_t len = init_request(req, 44, OFFERED);
  CHECK_EQ(hs_proto_filter(req, &len, se, ch), 1);
  char blob[512];
  size_t blen = kept_len;
  memcpy(blob, kept, blen);
  fuse_session_destroy(se);
  // A successor's state starts from nothing but the blob.
  CHECK_EQ(hs_proto_adopt(blob, blen), len);
  hs_proto_t p = hs_proto_get();
  CHECK_EQ(p.minor, HS_PROTO_MINOR);
  CHECK_EQ(p.max_write, 1048576);
  CHECK_EQ(p.max_pages, 256);
  CHECK_EQ(p.kernel_minor, 44);
  // A predecessor that kept the request alone let libfuse 2.9 answer: 7.19, 128 KiB.
  CHECK_EQ(hs_proto_adopt(blob, len), len);
  p = hs_proto_get();
  CHECK_EQ(p.minor, 19);
  CHECK_EQ(p.max_write, 131072);
  CHECK_EQ(p.max_pages, 32);
  // Not an INIT, or cut short: refused.
  CHECK_EQ(hs_proto_adopt(blob, len - 1), 0);
  struct fuse_in_header h;
  memcpy(&h, blob, sizeof(h));
  h.opcode = FUSE_LOOKUP;
  memcpy(blob, &h, sizeof(h));
  CHECK_EQ(hs_proto_adopt(blob, blen), 0);
}

TEST(rename2_becomes_rename_with_its_flags_on_the_thread) {
  char buf[256];
  struct fuse_in_header h = { .opcode = FUSE_RENAME2, .unique = 9, .nodeid = 5 };
  struct fuse_rename2_in r2 = { .newdir = 7, .flags = 1 };
  const char names[] = "old\0new";
  h.len = sizeof(h) + sizeof(r2) + sizeof(names);
  memcpy(buf, &h, sizeof(h));
  memcpy(buf + sizeof(h), &r2, sizeof(r2));
  memcpy(buf + sizeof(h) + sizeof(r2), names, sizeof(names));
  size_t len = h.len;
  CHECK_EQ(hs_proto_filter(buf, &len, NULL, NULL), 0);
  CHECK_EQ(hs_req_rename_flags, 1);
  struct fuse_in_header out;
  memcpy(&out, buf, sizeof(out));
  CHECK_EQ(out.opcode, FUSE_RENAME);
  CHECK_EQ(out.len, len);
  CHECK_EQ(len, sizeof(h) + sizeof(struct fuse_rename_in) + sizeof(names));
  struct fuse_rename_in r;
  memcpy(&r, buf + sizeof(h), sizeof(r));
  CHECK_EQ(r.newdir, 7);
  CHECK(memcmp(buf + sizeof(h) + sizeof(r), names, sizeof(names)) == 0);
  // The next request on the thread carries no flags.
  struct fuse_in_header plain = { .len = sizeof(plain), .opcode = FUSE_GETATTR };
  memcpy(buf, &plain, sizeof(plain));
  len = sizeof(plain);
  CHECK_EQ(hs_proto_filter(buf, &len, NULL, NULL), 0);
  CHECK_EQ(hs_req_rename_flags, 0);
  // A RENAME2 too short for its header is left for libfuse (ENOSYS).
  h.len = sizeof(h) + 4;
  memcpy(buf, &h, sizeof(h));
  len = h.len;
  CHECK_EQ(hs_proto_filter(buf, &len, NULL, NULL), 0);
  memcpy(&out, buf, sizeof(out));
  CHECK_EQ(out.opcode, FUSE_RENAME2);
}

TEST(the_largest_read_and_write_are_counted) {
  char buf[256];
  struct fuse_in_header h = { .len = sizeof(h) + sizeof(struct fuse_read_in), .opcode = FUSE_READ };
  struct fuse_read_in r = { .size = 1048576 };
  memcpy(buf, &h, sizeof(h));
  memcpy(buf + sizeof(h), &r, sizeof(r));
  size_t len = h.len;
  hs_proto_filter(buf, &len, NULL, NULL);
  r.size = 4096;
  memcpy(buf + sizeof(h), &r, sizeof(r));
  hs_proto_filter(buf, &len, NULL, NULL);
  struct fuse_write_in w = { .size = 65536 };
  h.opcode = FUSE_WRITE;
  h.len = sizeof(h) + sizeof(w);
  memcpy(buf, &h, sizeof(h));
  memcpy(buf + sizeof(h), &w, sizeof(w));
  len = h.len;
  hs_proto_filter(buf, &len, NULL, NULL);
  uint32_t rd, wr;
  hs_proto_largest(&rd, &wr);
  CHECK_EQ(rd, 1048576);
  CHECK_EQ(wr, 65536);
}
