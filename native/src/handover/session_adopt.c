// A session served from another daemon's device, the handover module's
// last step: a live successor's adopt (the descriptor and the kernel's INIT
// handed over, the node table and open directories imported) and a revive
// after a crash (the descriptor and INIT a holder kept, the node table the
// journal recovered, the kernel asked to resend what the dead daemon read).
// Either way the kernel's INIT is replayed into a new libfuse session, whose
// reply goes nowhere (the kernel had it), and the session is then served as
// a mount's is (session/session.c: hs_session_serve).
//
// Runs on the JS main thread (session_napi.c's exports), before any worker of
// this session exists: no lock of its own; the node table's import takes
// hs_nt.mu itself.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/uio.h>

#include "handover/nodes_journal.h"
#include "session/channel.h"
#include "session/handles.h"
#include "session/loop.h"
#include "session/nodes.h"
#include "session/ops.h"
#include "session/proto.h"
#include "session/session.h"
#include "session/session_internal.h"

// The reply to a replayed INIT went to the kernel already, from the daemon it was sent to.
static int discard_send (struct fuse_chan *ch, const struct iovec iov[], size_t count) {
  (void) ch; (void) iov; (void) count;
  return 0;
}

// A kept INIT: the request as the kernel sent it (its header's length and
// opcode), and the answer the kernel was sent after it, if the predecessor
// kept one (proto.h). The negotiated state is taken from it.
static int is_init (const char *init, size_t len) {
  return hs_proto_adopt(init, len) != 0;
}

// The new session on fd (owned: closed on failure), INIT replayed into it. 0 or -errno.
static int adopt_session (int fd, size_t bufsize, const char *init, size_t init_len, const char *ll_opts, struct fuse_session **sep, struct fuse_chan **chp) {
  // Never smaller than the requests this build negotiates: a predecessor's
  // smaller buffer size is for requests as large as its own, which fit.
  if (bufsize < HS_PROTO_BUFSIZE) bufsize = HS_PROTO_BUFSIZE;
  struct fuse_chan *ch = hs_chan_on_fd(fd, bufsize);
  if (ch == NULL) {
    close(fd);
    return -ENOMEM;
  }
  struct fuse_session *se = hs_session_new(ll_opts);
  struct fuse_chan_ops discard = { .send = discard_send };
  struct fuse_chan *replay = se != NULL ? fuse_chan_new(&discard, -1, bufsize, NULL) : NULL;
  if (replay == NULL) {
    if (se != NULL) fuse_session_destroy(se);
    fuse_chan_destroy(ch);
    return se == NULL ? -EINVAL : -ENOMEM;
  }
  fuse_session_add_chan(se, ch);
  // libfuse refuses every request before INIT: the kernel's, replayed, sets
  // the same negotiated state (its reply goes nowhere: the kernel had it).
  // ll_init runs only for an INIT libfuse accepted.
  hs_session_inited_reset();
  fuse_session_process(se, init, hs_proto_adopt(init, init_len), replay);
  fuse_chan_destroy(replay);
  if (!hs_session_inited()) {
    fuse_session_destroy(se);  // destroys ch, which closes fd
    return -EPROTO;
  }
  *sep = se;
  *chp = ch;
  return 0;
}

// Before it serves: the table it imported goes, so that a retry starts fresh.
static void adopt_undo (void) {
  hs_dirs_clear();
  hs_nodes_clear();
  hs_nodes_init();
}

// A successor imports the node table early (hs_session_preimport: on a thread
// of its own while JavaScript adopts the rest; nodes_handover.c), and the
// adopt finishes that import.
int hs_session_preimport (const char *nodes, size_t len) {
  if (hs_session_started()) return -EEXIST;
  hs_nodes_init();
  return hs_nodes_import_start(nodes, len);
}

int hs_session_adopt (int fd, size_t bufsize, const char *init, size_t init_len, const char *nodes, size_t nodes_len, const char *dirs, size_t dirs_len, const char *ll_opts) {
  int err = 0;
  if (hs_session_started()) err = -EEXIST;
  else if (!is_init(init, init_len)) err = -EINVAL;
  if (err == 0) {
    hs_nodes_init();
    // No table handed over: this successor loaded it by following the journal (nodes_journal.h).
    if (nodes_len == 0) err = hs_journal_followed() ? 0 : -EINVAL;
    else err = hs_nodes_import_finish(nodes, nodes_len);
    if (err != 0) adopt_undo();
    else if ((err = hs_dirs_import(dirs, dirs_len)) != 0) adopt_undo();
  }
  if (err != 0) {
    close(fd);
    return err;
  }
  struct fuse_session *se = NULL;
  struct fuse_chan *ch = NULL;
  if ((err = adopt_session(fd, bufsize, init, init_len, ll_opts, &se, &ch)) != 0) {
    adopt_undo();
    return err;
  }
  hs_loop_keep_init(init, init_len);
  return hs_session_serve(se, ch);
}

// The kernel sends again every request the connection's daemons read but
// never answered (Linux 6.9+, FUSE_NOTIFY_RESEND; their uniques marked with
// bit 63). Written before the first read, so none is read twice.
#define HS_NOTIFY_RESEND 7
static int notify_resend (struct fuse_chan *ch) {
  struct { uint32_t len; int32_t error; uint64_t unique; } out = { 16, HS_NOTIFY_RESEND, 0 };
  struct iovec iov = { &out, sizeof(out) };
  return fuse_chan_send(ch, &iov, 1);
}

int hs_session_revive (int fd, size_t bufsize, const char *init, size_t init_len, uint32_t epoch, const char *ll_opts, int *resent) {
  if (hs_session_started()) {
    close(fd);
    return -EEXIST;
  }
  if (!is_init(init, init_len)) {
    close(fd);
    return -EINVAL;
  }
  struct fuse_session *se = NULL;
  struct fuse_chan *ch = NULL;
  int err = adopt_session(fd, bufsize, init, init_len, ll_opts, &se, &ch);
  if (err != 0) return err;
  hs_fh_set_epoch(epoch);
  hs_loop_keep_init(init, init_len);
  *resent = notify_resend(ch);
  return hs_session_serve(se, ch);
}
