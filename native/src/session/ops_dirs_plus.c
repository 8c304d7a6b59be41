// READDIRPLUS: a listing with each entry's attributes and node, so `ls -l`
// and `find -printf` need no LOOKUP per name (proto.h decodes it as a
// READDIR marked hs_req_plus; the listing itself is READDIR's: ops_dirs.c).
//
// The entries come from a READDIR-form listing (fuse_dirent records: the
// whole listing's slice, or a part filled for one request), each written in
// READDIRPLUS's form with the offset it had. An entry's attributes are the
// fast path's answer for its path (fastpath_attr.c), under the path lock a
// LOOKUP takes, and its node is found or made as LOOKUP's answer makes it
// (hs_node_found: the lookup count raised, which the kernel's FORGET takes
// back). Where the fast path does not answer (JavaScript must: a home not
// published, a name it is unsure of), and for "." and "..", the entry has
// node 0: the kernel takes the name and no attributes, and looks the name
// up when it needs it, as before.
//
// Threads: session workers (a READDIR they answer), with lookups; the
// JavaScript thread (a listing JavaScript made), without: it never takes a
// path lock (a worker holding one may wait for JavaScript) nor calls the
// fast path's stat, so every entry there has node 0. Lock: the caller holds
// the directory record's mu; a path lock is taken and dropped per entry
// (the order is the record's mu, then the node table's: as READDIR's).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <linux/fuse.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "abi.h"
#include "fastpath/fastpath.h"
#include "sys/utf8.h"
#include "session/ops.h"
#include "session/ops_steps.h"

// libfuse 2.9's conversion of timeouts (seconds as a double) into the kernel's (sec, nsec).
static void split_timeout (double t, uint64_t *sec, uint32_t *nsec) {
  if (!(t > 0.0)) {
    *sec = 0;
    *nsec = 0;
    return;
  }
  *sec = t >= 1.8e19 ? UINT64_MAX : (uint64_t) t;
  double f = t - (double) *sec;
  *nsec = f <= 0.0 ? 0 : f >= 0.999999999 ? 999999999u : (uint32_t) (f * 1.0e9);
}

static void fill_attr (struct fuse_attr *a, const struct stat *st) {
  a->ino = st->st_ino;
  a->size = (uint64_t) st->st_size;
  a->blocks = (uint64_t) st->st_blocks;
  a->atime = (uint64_t) st->st_atim.tv_sec;
  a->mtime = (uint64_t) st->st_mtim.tv_sec;
  a->ctime = (uint64_t) st->st_ctim.tv_sec;
  a->atimensec = (uint32_t) st->st_atim.tv_nsec;
  a->mtimensec = (uint32_t) st->st_mtim.tv_nsec;
  a->ctimensec = (uint32_t) st->st_ctim.tv_nsec;
  a->mode = st->st_mode;
  a->nlink = (uint32_t) st->st_nlink;
  a->uid = st->st_uid;
  a->gid = st->st_gid;
  a->rdev = (uint32_t) st->st_rdev;
  a->blksize = (uint32_t) st->st_blksize;
}

// The entry_out of (dir, name) when the fast path answers for it: 1 and
// *nodeid counted once, else 0 (node 0: no attributes).
static int look (hs_node_t *dir, const char *name, size_t namelen, struct fuse_entry_out *eo) {
  if ((namelen == 1 && name[0] == '.') || (namelen == 2 && name[0] == '.' && name[1] == '.')) return 0;
  if (!hs_utf8_valid_n((const unsigned char *) name, namelen)) return 0;
  char *path = NULL;
  hs_plock_t pl;
  if (hs_path_lock(dir, name, 0, &path, &pl) != 0) return 0;
  struct stat st;
  int found = 0;
  uint64_t nodeid = 0;
  if (hs_fastpath_getattr(path, &st) == 0 && hs_node_found(dir, name, (uint64_t) st.st_ino, st.st_mode, (uint32_t) st.st_nlink, &nodeid) == 0) {
    eo->nodeid = nodeid;
    eo->generation = 0;
    split_timeout(hs_conf.entry_timeout, &eo->entry_valid, &eo->entry_valid_nsec);
    split_timeout(hs_conf.attr_timeout, &eo->attr_valid, &eo->attr_valid_nsec);
    fill_attr(&eo->attr, &st);
    found = 1;
  }
  hs_path_unlock(&pl);
  free(path);
  return found;
}

void ops_dir_reply_plus (hs_op_t *op, const char *list, size_t len, int lookups) {
  size_t size = op->len;
  char *out = malloc(size > 0 ? size : 1);
  uint64_t *counted = NULL;
  size_t ncounted = 0, cap = 0;
  if (out == NULL) {
    if (op->req != NULL) fuse_reply_err(op->req, ENOMEM);
    op->req = NULL;
    return;
  }
  size_t at = 0, olen = 0;
  char name[HOMESFS_NAME_MAX + 1];
  while (at + FUSE_NAME_OFFSET <= len) {
    struct fuse_dirent d;
    memcpy(&d, list + at, FUSE_NAME_OFFSET);
    size_t dsize = FUSE_DIRENT_SIZE(&d);
    if (d.namelen == 0 || d.namelen > HOMESFS_NAME_MAX || at + dsize > len) break;
    size_t psize = FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET_DIRENTPLUS + d.namelen);
    if (olen + psize > size) break;
    memcpy(name, list + at + FUSE_NAME_OFFSET, d.namelen);
    name[d.namelen] = '\0';
    struct fuse_direntplus p;
    memset(&p, 0, sizeof(p));
    if (lookups && op->dir != NULL && look(op->dir, name, d.namelen, &p.entry_out)) {
      if (ncounted == cap) {
        size_t ncap = cap == 0 ? 64 : cap * 2;
        uint64_t *n = realloc(counted, ncap * sizeof(*n));
        if (n == NULL) {
          // Not counted for an answer that names it: taken back at once.
          hs_node_forget(p.entry_out.nodeid, 1);
          memset(&p.entry_out, 0, sizeof(p.entry_out));
        } else {
          counted = n;
          cap = ncap;
        }
      }
      if (p.entry_out.nodeid != 0) counted[ncounted++] = p.entry_out.nodeid;
    }
    p.dirent = d;
    memset(out + olen, 0, psize);
    memcpy(out + olen, &p, FUSE_NAME_OFFSET_DIRENTPLUS);
    memcpy(out + olen + FUSE_NAME_OFFSET_DIRENTPLUS, name, d.namelen);
    olen += psize;
    at += dsize;
  }
  // An answer the kernel did not take (the request was interrupted) counted no lookup.
  if (op->req != NULL && fuse_reply_buf(op->req, olen > 0 ? out : NULL, olen) == -ENOENT) {
    for (size_t i = 0; i < ncounted; i++) hs_node_forget(counted[i], 1);
  }
  op->req = NULL;
  free(counted);
  free(out);
}
