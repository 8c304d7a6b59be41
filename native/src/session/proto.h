// The kernel's FUSE protocol where this session speaks it itself, before
// libfuse 2.9 decodes a request (proto.c): the INIT negotiation, and the
// requests of protocol versions libfuse 2.9 (7.19) never knew.
//
// INIT: libfuse 2.9 computes its answer as before (its options, the flags
// it takes), into a buffer; this layer raises the answer to the protocol
// version it handles (HS_PROTO_MINOR, or the kernel's if lower) and to
// 1 MiB requests (FUSE_MAX_PAGES), and sends it. The kernel's request and
// the answer sent are kept together (hs_proto_init_blob): a successor
// replays the request into its libfuse and takes the negotiated answer as
// the kernel has it, so it never assumes a request size or a flag its
// predecessor did not negotiate (a predecessor that kept only the request
// negotiated as libfuse 2.9 does: hs_proto_adopt).
//
// Requests libfuse 2.9 does not know become ones it does, with what it
// cannot carry kept for the op on the same thread: RENAME2 becomes RENAME,
// its flags in hs_req_rename_flags; READDIRPLUS becomes READDIR, marked for
// the thread (hs_proto_plus: the listing is answered in READDIRPLUS's form,
// ops_dirs_plus.c); TMPFILE (an O_TMPFILE open) becomes a CREATE marked for
// the thread (hs_proto_tmpfile: its name is "/", which the create replaces
// by a hidden name at the home's root, ops_files.c). READDIRPLUS is asked for at INIT when the kernel offers
// it (and READDIRPLUS_AUTO with it: the kernel asks for attributes only
// where its lookups showed they are wanted).
//
// Threads: hs_proto_filter runs on the session's worker threads, one
// request each; hs_proto_info on the JavaScript thread. The negotiated state
// is written while no other request can be read (INIT comes first on a
// connection; an adoption sets it before its workers start), then only read.
#ifndef HOMESFS_PROTO_H
#define HOMESFS_PROTO_H
#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <linux/fuse.h>
#include <fuse_lowlevel.h>

// The protocol version this session handles in full: every request the
// kernel may send at it is decoded here or by libfuse 2.9, or answered
// ENOSYS where the kernel has a fallback (7.39's STATX: the kernel then asks
// GETATTR, fuse_update_get_attr). Debian 12's <linux/fuse.h> (linux-libc-dev
// 6.1) describes 7.38; what 7.40 added that this session uses is defined
// below, from the kernel's include/uapi/linux/fuse.h.
#define HS_PROTO_MINOR 40
// 7.40: passthrough. FUSE_PASSTHROUGH is bit 37 of the flags, i.e. bit 5 of
// flags2 (read only with FUSE_INIT_EXT); fuse_init_out's max_stack_depth
// took unused[0]; fuse_open_out's backing_id took its padding.
#define HS_FUSE2_PASSTHROUGH (1u << 5)
#define HS_FOPEN_PASSTHROUGH (1u << 7)
// 7.42: FUSE over io_uring, bit 41 (bit 9 of flags2), offered only while the
// fuse module's enable_uring is on. Never asked: a ring's requests are
// delivered to, and answered from, the memory of the process that registered
// its entries, so those a crashed daemon held are lost for good, and a ring
// cannot be given up once taken (native-notes, "FUSE over io_uring").
#define HS_FUSE2_OVER_IO_URING (1u << 9)
// The backing file's stack depth the session declares: 1 (a plain local
// filesystem). A backing directory on overlayfs or another FUSE mount has a
// depth of its own, and its backing opens fail (ELOOP): its opens stay cached.
#define HS_PROTO_STACK_DEPTH 1
struct hs_backing_map { int32_t fd; uint32_t flags; uint64_t padding; };
#define HS_DEV_IOC_BACKING_OPEN _IOW(229, 1, struct hs_backing_map)
#define HS_DEV_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)
// The largest request the session asks for: 256 pages, the kernel's cap
// (fuse_max_pages_limit's default, Linux fs/fuse/inode.c).
#define HS_PROTO_MAX_PAGES 256
#define HS_PROTO_MAX_WRITE (HS_PROTO_MAX_PAGES * 4096)
// A worker's request buffer: the largest WRITE with its headers, plus room
// (the kernel refuses a read of the device with less:
// fuse_dev_do_read's check, Linux fs/fuse/dev.c).
#define HS_PROTO_BUFSIZE (HS_PROTO_MAX_WRITE + 4096)

#ifndef FUSE_RENAME2
#define FUSE_RENAME2 45
#endif
#ifndef FUSE_READDIRPLUS
#define FUSE_READDIRPLUS 44
#endif
#ifndef FUSE_TMPFILE
#define FUSE_TMPFILE 51
#endif

typedef struct {
  uint32_t minor;      // the version both speak (the answer's)
  uint32_t max_write;  // the largest WRITE the kernel sends
  uint32_t max_pages;  // the largest request in pages (32 unless FUSE_MAX_PAGES)
  uint32_t flags;      // the answer's flags
  uint32_t kernel_minor;  // what the kernel offered
  uint32_t flags2;     // the answer's flags2 (with FUSE_INIT_EXT in flags)
  uint32_t kernel_flags2;  // what the kernel offered in flags2
} hs_proto_t;

// The flags of the RENAME2 this thread is serving (0 for a plain RENAME).
extern __thread uint32_t hs_req_rename_flags;
// 1 while this thread serves a READDIRPLUS (decoded as a READDIR). A call,
// not the thread-local itself: the C tests stub what ops_dirs.c calls.
int hs_proto_plus (void);
// 1 while this thread serves a TMPFILE (decoded as a CREATE).
int hs_proto_tmpfile (void);

// Before hs_handles_filter: an INIT is answered here (1); a request libfuse
// 2.9 does not know is rewritten, in place, into one it does (*len updated,
// 0). 0 for anything else.
int hs_proto_filter (char *buf, size_t *len, struct fuse_session *se, struct fuse_chan *ch);

// Pure: libfuse's INIT answer (lib, lib_len bytes: a fuse_out_header and a
// fuse_init_out as long as its version has it) amended to what this session
// handles, for the kernel's INIT (in). Writes the answer to out (at least
// sizeof(struct fuse_out_header) + sizeof(struct fuse_init_out) bytes) and
// returns its length, 0 when libfuse's answer is an error (sent as is).
size_t hs_proto_amend_init (const struct fuse_init_in *in, const char *lib, size_t lib_len, char *out, hs_proto_t *neg);

// What a successor takes from a predecessor's kept INIT: the request (its
// header's length), and the answer after it, if any. Sets the negotiated
// state; returns the request's length, or 0 if blob is no INIT.
size_t hs_proto_adopt (const char *blob, size_t len);

// Whether INIT asks for READDIRPLUS (fuse.readdirplus; set before the mount).
void hs_proto_want_plus (int on);
// Whether INIT asks for passthrough (fuse.passthrough; set before the mount).
void hs_proto_want_passthrough (int on);
// Whether the session has passthrough: negotiated (by it or its predecessor)
// and still wanted.
int hs_proto_passthrough (void);

// The negotiated state (zeros before INIT).
hs_proto_t hs_proto_get (void);
// The largest READ and WRITE the kernel has sent so far.
void hs_proto_largest (uint32_t *read, uint32_t *write);
// How many LOOKUPs, READDIRPLUSes and READs the kernel has sent so far.
void hs_proto_counts (uint64_t *lookups, uint64_t *plus, uint64_t *reads);
#endif
