// The kernel's FUSE protocol where the session speaks it itself (proto.h).
//
// Threads: hs_proto_filter on the session's worker threads; hs_proto_get and
// hs_proto_largest on any thread. Lock: none. s_neg is written by the worker
// that serves INIT before it answers (the kernel sends nothing else until it
// has the answer) or by an adoption before its workers start, and read after;
// the largest sizes are atomics.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "session/loop.h"
#include "session/proto.h"

__thread uint32_t hs_req_rename_flags;
static __thread uint32_t hs_req_plus;
static __thread uint32_t hs_req_tmpfile;

int hs_proto_tmpfile (void) {
  return hs_req_tmpfile != 0;
}

int hs_proto_plus (void) {
  return hs_req_plus != 0;
}

static hs_proto_t s_neg;
static uint32_t s_largest_read, s_largest_write;  // atomics
static uint64_t s_lookups, s_plus, s_reads;       // atomics
static int s_want_plus = 1;                       // set by the JavaScript thread before the mount
static int s_want_pt = 1;                         // likewise

// fuse_init_out as 7.40 lays it out (the 7.38 header's unused[0] is max_stack_depth).
struct hs_init_out {
  uint32_t major, minor, max_readahead, flags;
  uint16_t max_background, congestion_threshold;
  uint32_t max_write, time_gran;
  uint16_t max_pages, map_alignment;
  uint32_t flags2, max_stack_depth;
  uint32_t unused[6];
};
_Static_assert(sizeof(struct hs_init_out) == sizeof(struct fuse_init_out), "7.40's fuse_init_out is 7.38's size");
_Static_assert(offsetof(struct hs_init_out, flags2) == offsetof(struct fuse_init_out, flags2), "flags2 where 7.38 has it");

// What libfuse 2.9 negotiates: its protocol version and, as its options
// allow, 128 KiB requests (its channel's 132 KiB buffer less 4 KiB).
#define LIBFUSE_MINOR 19
#define LIBFUSE_MAX_WRITE (128 * 1024)

static uint32_t min_u32 (uint32_t a, uint32_t b) {
  return a < b ? a : b;
}

size_t hs_proto_amend_init (const struct fuse_init_in *in, const char *lib, size_t lib_len, char *out, hs_proto_t *neg) {
  struct fuse_out_header oh;
  if (lib_len < sizeof(oh)) return 0;
  memcpy(&oh, lib, sizeof(oh));
  // An error (a kernel major libfuse refuses): sent as libfuse wrote it.
  if (oh.error != 0 || lib_len < sizeof(oh) + 8) return 0;
  struct fuse_init_out io;
  memset(&io, 0, sizeof(io));
  memcpy(&io, lib + sizeof(oh), min_u32((uint32_t) (lib_len - sizeof(oh)), sizeof(io)));
  // libfuse answers major 7 to a newer kernel (which then sends INIT again
  // at 7): only a 7 is amended.
  if (in->major != FUSE_KERNEL_VERSION || io.major != FUSE_KERNEL_VERSION) return 0;
  io.minor = min_u32(in->minor, HS_PROTO_MINOR);
  uint32_t max_pages = 32;  // the kernel's default without FUSE_MAX_PAGES
  if (io.minor >= 28 && (in->flags & FUSE_MAX_PAGES)) {
    max_pages = (io.max_write + 4095) / 4096;
    if (max_pages > HS_PROTO_MAX_PAGES) max_pages = HS_PROTO_MAX_PAGES;
    if (max_pages < 1) max_pages = 1;
    io.flags |= FUSE_MAX_PAGES;
    io.max_pages = (uint16_t) max_pages;
  }
  // Listings with attributes, answered from the fast path's answers (ops_dirs_plus.c).
  if (s_want_plus && io.minor >= 21 && (in->flags & FUSE_DO_READDIRPLUS)) io.flags |= FUSE_DO_READDIRPLUS | (in->flags & FUSE_READDIRPLUS_AUTO);
  // A WRITE is at most max_pages long, whatever max_write says.
  if (io.max_write > max_pages * 4096) io.max_write = max_pages * 4096;
  // What libfuse 2.9 does not know stays unasked: flags2 only for passthrough.
  io.flags &= ~FUSE_INIT_EXT;
  io.flags2 = 0;
  struct hs_init_out ext;
  memcpy(&ext, &io, sizeof(ext));
  ext.max_stack_depth = 0;
  // Passthrough (ops_files.c, nodes.h): the kernel reads flags2 only with
  // FUSE_INIT_EXT, and takes passthrough only with a stack depth of 1 or 2
  // and no writeback cache (process_init_reply, Linux fs/fuse/inode.c).
  if (s_want_pt && io.minor >= 40 && (in->flags & FUSE_INIT_EXT) && (in->flags2 & HS_FUSE2_PASSTHROUGH) && !(io.flags & FUSE_WRITEBACK_CACHE)) {
    ext.flags |= FUSE_INIT_EXT;
    ext.flags2 = HS_FUSE2_PASSTHROUGH;
    ext.max_stack_depth = HS_PROTO_STACK_DEPTH;
  }
  oh.len = sizeof(oh) + sizeof(ext);
  memcpy(out, &oh, sizeof(oh));
  memcpy(out + sizeof(oh), &ext, sizeof(ext));
  io.flags = ext.flags;
  io.flags2 = ext.flags2;
  neg->minor = io.minor;
  neg->max_write = io.max_write;
  neg->max_pages = max_pages;
  neg->flags = io.flags;
  neg->kernel_minor = in->minor;
  neg->flags2 = (io.flags & FUSE_INIT_EXT) ? io.flags2 : 0;
  neg->kernel_flags2 = (in->flags & FUSE_INIT_EXT) ? in->flags2 : 0;
  return oh.len;
}

typedef struct {
  char data[256];
  size_t len;
} capture_t;

static int capture_send (struct fuse_chan *ch, const struct iovec iov[], size_t count) {
  capture_t *c = fuse_chan_data(ch);
  c->len = 0;
  for (size_t i = 0; i < count; i++) {
    if (c->len + iov[i].iov_len > sizeof(c->data)) return -EINVAL;
    memcpy(c->data + c->len, iov[i].iov_base, iov[i].iov_len);
    c->len += iov[i].iov_len;
  }
  return 0;
}

// INIT: libfuse's answer, captured, amended, sent; the request and the answer kept.
static int serve_init (char *buf, size_t len, struct fuse_session *se, struct fuse_chan *ch) {
  const size_t hlen = sizeof(struct fuse_in_header);
  capture_t cap = { .len = 0 };
  struct fuse_chan_ops ops = { .send = capture_send };
  // The channel's buffer size is what libfuse caps max_write by.
  struct fuse_chan *cc = fuse_chan_new(&ops, -1, fuse_chan_bufsize(ch), &cap);
  if (cc == NULL) return 0;  // libfuse answers it itself
  fuse_session_process(se, buf, len, cc);
  fuse_chan_destroy(cc);
  struct fuse_init_in in;
  memset(&in, 0, sizeof(in));
  if (len > hlen) memcpy(&in, buf + hlen, min_u32((uint32_t) (len - hlen), sizeof(in)));
  char out[sizeof(struct fuse_out_header) + sizeof(struct fuse_init_out)];
  hs_proto_t neg;
  size_t olen = hs_proto_amend_init(&in, cap.data, cap.len, out, &neg);
  struct iovec iov;
  if (olen == 0) {
    iov = (struct iovec) { .iov_base = cap.data, .iov_len = cap.len };
    if (cap.len > 0) fuse_chan_send(ch, &iov, 1);
    return 1;
  }
  s_neg = neg;
  // Kept before the kernel has the answer: a handover that follows at once carries both.
  char *blob = malloc(len + olen);
  if (blob != NULL) {
    memcpy(blob, buf, len);
    memcpy(blob + len, out, olen);
    hs_loop_keep_init(blob, len + olen);
    free(blob);
  }
  iov = (struct iovec) { .iov_base = out, .iov_len = olen };
  fuse_chan_send(ch, &iov, 1);
  return 1;
}

static void note_largest (uint32_t *at, uint32_t size) {
  uint32_t cur = __atomic_load_n(at, __ATOMIC_RELAXED);
  while (size > cur && !__atomic_compare_exchange_n(at, &cur, size, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

int hs_proto_filter (char *buf, size_t *len, struct fuse_session *se, struct fuse_chan *ch) {
  hs_req_rename_flags = 0;
  hs_req_plus = 0;
  hs_req_tmpfile = 0;
  struct fuse_in_header h;
  if (*len < sizeof(h)) return 0;
  memcpy(&h, buf, sizeof(h));
  char *arg = buf + sizeof(h);
  size_t alen = *len - sizeof(h);
  switch (h.opcode) {
    case FUSE_INIT:
      return serve_init(buf, *len, se, ch);
    case FUSE_READ:
      __atomic_add_fetch(&s_reads, 1, __ATOMIC_RELAXED);
      if (alen >= sizeof(struct fuse_read_in)) {
        struct fuse_read_in r;
        memcpy(&r, arg, sizeof(r));
        note_largest(&s_largest_read, r.size);
      }
      return 0;
    case FUSE_WRITE:
      if (alen >= sizeof(struct fuse_write_in)) {
        struct fuse_write_in w;
        memcpy(&w, arg, sizeof(w));
        note_largest(&s_largest_write, w.size);
      }
      return 0;
    case FUSE_LOOKUP:
      __atomic_add_fetch(&s_lookups, 1, __ATOMIC_RELAXED);
      return 0;
    case FUSE_READDIRPLUS:
      // The same fuse_read_in as READDIR; the answer's form is READDIRPLUS's.
      __atomic_add_fetch(&s_plus, 1, __ATOMIC_RELAXED);
      h.opcode = FUSE_READDIR;
      memcpy(buf, &h, sizeof(h));
      hs_req_plus = 1;
      return 0;
    case FUSE_TMPFILE:
      // fuse_create_in and a name, as CREATE's (fuse_create_open, Linux fs/fuse/dir.c).
      h.opcode = FUSE_CREATE;
      memcpy(buf, &h, sizeof(h));
      hs_req_tmpfile = 1;
      return 0;
    case FUSE_RENAME2: {
      // struct fuse_rename2_in then the two names; RENAME's is fuse_rename_in
      // (newdir alone): the names move up, the flags stay on this thread.
      struct fuse_rename2_in r2;
      if (alen < sizeof(r2)) return 0;  // libfuse answers ENOSYS
      memcpy(&r2, arg, sizeof(r2));
      size_t shift = sizeof(r2) - sizeof(struct fuse_rename_in);
      memmove(arg + sizeof(struct fuse_rename_in), arg + sizeof(r2), alen - sizeof(r2));
      h.opcode = FUSE_RENAME;
      h.len -= (uint32_t) shift;
      memcpy(buf, &h, sizeof(h));
      *len -= shift;
      hs_req_rename_flags = r2.flags;
      return 0;
    }
    default:
      return 0;
  }
}

size_t hs_proto_adopt (const char *blob, size_t len) {
  struct fuse_in_header h;
  if (len < sizeof(h)) return 0;
  memcpy(&h, blob, sizeof(h));
  if (h.opcode != FUSE_INIT || h.len > len || h.len < sizeof(h) + 8) return 0;
  struct fuse_init_in in;
  memset(&in, 0, sizeof(in));
  memcpy(&in, blob + sizeof(h), min_u32(h.len - (uint32_t) sizeof(h), sizeof(in)));
  hs_proto_t neg = { .kernel_minor = in.minor, .kernel_flags2 = (in.flags & FUSE_INIT_EXT) ? in.flags2 : 0 };
  size_t rest = len - h.len;
  struct fuse_out_header oh;
  if (rest >= sizeof(oh) + 8) {
    memcpy(&oh, blob + h.len, sizeof(oh));
    struct fuse_init_out io;
    memset(&io, 0, sizeof(io));
    memcpy(&io, blob + h.len + sizeof(oh), min_u32((uint32_t) (rest - sizeof(oh)), sizeof(io)));
    neg.minor = io.minor;
    neg.flags = io.flags;
    neg.max_write = io.max_write;
    neg.max_pages = (io.flags & FUSE_MAX_PAGES) ? io.max_pages : 32;
    neg.flags2 = (io.flags & FUSE_INIT_EXT) ? io.flags2 : 0;
  } else {
    // Kept by a daemon that let libfuse 2.9 answer.
    neg.minor = min_u32(in.minor, LIBFUSE_MINOR);
    neg.max_write = LIBFUSE_MAX_WRITE;
    neg.max_pages = 32;
  }
  s_neg = neg;
  return h.len;
}

void hs_proto_want_plus (int on) {
  s_want_plus = on;
}

void hs_proto_want_passthrough (int on) {
  s_want_pt = on;
}

int hs_proto_passthrough (void) {
  return s_want_pt && (s_neg.flags2 & HS_FUSE2_PASSTHROUGH) != 0;
}

hs_proto_t hs_proto_get (void) {
  return s_neg;
}

void hs_proto_counts (uint64_t *lookups, uint64_t *plus, uint64_t *reads) {
  *reads = __atomic_load_n(&s_reads, __ATOMIC_RELAXED);
  *lookups = __atomic_load_n(&s_lookups, __ATOMIC_RELAXED);
  *plus = __atomic_load_n(&s_plus, __ATOMIC_RELAXED);
}

void hs_proto_largest (uint32_t *read, uint32_t *write) {
  *read = __atomic_load_n(&s_largest_read, __ATOMIC_RELAXED);
  *write = __atomic_load_n(&s_largest_write, __ATOMIC_RELAXED);
}
