// GETATTR (and so LOOKUP), fgetattr and READDIR answered from the published
// homes and handles. Nothing here changes a table, and no syscall runs under
// fp_lock: a home is pinned (fp_pin) and a handle counted in (users) under
// the read lock, then used without it.
//
// The walk: openat2(home_fd, rel, O_PATH|O_NOFOLLOW|O_CLOEXEC,
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV|RESOLVE_NO_MAGICLINKS)
// then fstat, with the home pinned. The kernel refuses ".." out of the home,
// any symlink in the path (a trailing one is opened itself: O_NOFOLLOW) and
// any mount crossing. Fallback on: fewer than three components, an empty,
// ".", ".." or reserved component or one longer than the home's limit, any
// errno but ENOENT and ENOTDIR, another device, an inode open in JS, an inode
// number in the daemon's synthetic range (top bit) and a file type without
// masks.
//
// A home itself ("/<tenant>/<key>"): JS's getattr re-checks, at most once a
// second (revalidateHome), that the home's backing directory is still the one
// it opened, and otherwise answers from an fstat of the home's descriptor,
// presented as a directory 0700 of the home's owner (homeNodeAttr). Here the
// same while JS's last check stands (root_until, which JS sets after each),
// so a burst of creates in a home's root (each invalidates the home's
// attributes) meets JS once a second instead of once a create.
//
// Negative answers: ENOENT or ENOTDIR from the walk is answered here. Every
// name JS presents without a backing node (".homesfs", its status file,
// libfuse's hidden names) is reserved, so it never gets this far; for any
// other name JS's own walk (O_NOFOLLOW|O_DIRECTORY component by component,
// then lstat) meets the same first missing or non-directory component and
// answers the same errno, with nothing changed and nothing logged above
// debug. A symlink in the way (ELOOP here, ENOTDIR in JS) still goes to JS.

#include "fastpath/fastpath_internal.h"
#include "sys/clock.h"

uint64_t fp_answered = 0;    // atomic
uint64_t fp_fallbacks = 0;   // atomic (only counted while enabled)
uint64_t fp_fanswered = 0;   // fgetattr, atomic
uint64_t fp_ffallbacks = 0;  // fgetattr, atomic
uint64_t fp_negative = 0;    // ENOENT/ENOTDIR answered (also in fp_answered), atomic
uint64_t fp_home_answered = 0;  // a home itself (also in fp_answered), atomic
uint64_t fp_ranswered = 0;   // readdir, atomic

uint64_t fp_rfallbacks = 0;  // readdir, atomic

static void fp_fallback (void) {
  __atomic_add_fetch(&fp_fallbacks, 1, __ATOMIC_RELAXED);
}

// Presents st (a node of the home, or of a handle with the same masks):
// 0 when C may answer it (type published, not a synthetic inode number).
static int fp_present (struct stat *out, const struct stat *st, uint32_t types, const uint32_t *keep, const uint32_t *or,
                       int owner_from_stat, uint32_t uid, uint32_t gid) {
  uint32_t t = ((uint32_t) st->st_mode & S_IFMT) >> 12;
  if (((uint64_t) st->st_ino >> 63) != 0 || (types & (1u << t)) == 0) return -1;
  *out = *st;
  out->st_mode = (mode_t) ((t << 12) | (((uint32_t) st->st_mode & 07777) & keep[t]) | or[t]);
  if (!owner_from_stat) {
    out->st_uid = uid;
    out->st_gid = gid;
  }
  return 0;
}

// Whether JS holds (dev, ino) open, read after the fstat (an inode not open
// now was not open when it was read, so JS would have answered the same
// then): 0 not open; 1 open with its charged size in *charged (published by
// JS); -1 open and not sized yet (JS answers).
static int fp_open_size (uint64_t dev, uint64_t ino, double *charged) {
  int r = 0;
  pthread_rwlock_rdlock(&fp_lock);
  fp_inode_t *oi = fp_find_inode(dev, ino);
  if (oi != NULL) {
    r = -1;
    if (__atomic_load_n(&oi->has_size, __ATOMIC_ACQUIRE)) {
      *charged = fp_bits_double(__atomic_load_n(&oi->size_bits, __ATOMIC_ACQUIRE));
      r = 1;
    }
  }
  pthread_rwlock_unlock(&fp_lock);
  return r;
}

int fp_present_node (const fp_home_t *home, const struct stat *node, struct stat *out) {
  if ((uint64_t) node->st_dev != home->dev) return -1;
  struct stat st = *node;
  double charged = 0;
  int open = fp_open_size((uint64_t) st.st_dev, (uint64_t) st.st_ino, &charged);
  if (open < 0) return -1;
  // An open inode is answered with its charged size, once JS published it.
  if (open > 0 && S_ISREG(st.st_mode) && charged > (double) st.st_size) st.st_size = (off_t) charged;
  return fp_present(out, &st, home->types, home->keep, home->or, home->owner_from_stat, home->uid, home->gid);
}

// "/<tenant>/<key>" exactly: its length, else 0.
static size_t fp_home_path (const char *path) {
  if (path == NULL || path[0] != '/') return 0;
  const char *t_end = strchr(path + 1, '/');
  if (t_end == NULL || t_end == path + 1 || t_end[1] == 0 || strchr(t_end + 1, '/') != NULL) return 0;
  return strlen(path);
}

// The home itself while JS's check of it stands: 1 answered in *out, else 0.
static int fp_home_getattr (const char *path, size_t plen, struct stat *out) {
  fp_pin_t pin;
  if (!fp_pin(path, plen, NULL, &pin)) return 0;
  const fp_home_t *home = pin.home;
  int answered = 0;
  struct stat st;
  if (hs_mono_ns() < __atomic_load_n(&home->root_until, __ATOMIC_ACQUIRE) && fstat(home->fd, &st) == 0 && S_ISDIR(st.st_mode) &&
      (uint64_t) st.st_dev == home->dev && ((uint64_t) st.st_ino >> 63) == 0) {
    *out = st;
    out->st_mode = S_IFDIR | HOMESFS_HOME_ROOT_PERMS;
    out->st_uid = home->uid;
    out->st_gid = home->gid;
    answered = 1;
  }
  fp_unpin(&pin);
  return answered;
}

int fp_home_checked (const char *prefix, size_t n, double token, double ms) {
  int found = 0;
  int64_t until = hs_mono_ns() + (int64_t) (ms * 1e6);
  pthread_rwlock_rdlock(&fp_lock);
  fp_home_t *e = fp_find_home(prefix, n, fp_hash(prefix, n));
  if (e != NULL && e->token == token) {
    __atomic_store_n(&e->root_until, until, __ATOMIC_RELEASE);
    found = 1;
  }
  pthread_rwlock_unlock(&fp_lock);
  return found;
}

int hs_fastpath_getattr (const char *path, struct stat *out) {
  if (!__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE)) return HOMESFS_FASTPATH_FALLBACK;
  size_t plen;
  const char *rel;
  if (fp_split_path(path, &plen, &rel) != 0) {
    // the root and a tenant are JS's; a home itself while JS's check of it stands
    size_t hlen = fp_home_path(path);
    if (hlen != 0 && fp_home_getattr(path, hlen, out)) {
      __atomic_add_fetch(&fp_answered, 1, __ATOMIC_RELAXED);
      __atomic_add_fetch(&fp_home_answered, 1, __ATOMIC_RELAXED);
      return 0;
    }
    fp_fallback();
    return HOMESFS_FASTPATH_FALLBACK;
  }

  int answered = 0;
  fp_pin_t pin;
  if (fp_pin(path, plen, rel, &pin)) {
    const fp_home_t *home = pin.home;
    struct stat st;
    int r = -1;
    const char *last_slash = strrchr(rel, '/');
    int dc = FP_DC_WALK;
    if (pin.names_ok && last_slash == NULL) {
      // A name in the home's own directory (a dotfile, a tool's top directory): one lstat
      // instead of a confined open, fstat and close. One valid component crosses no symlink
      // and no "..", and a mount point on it shows another st_dev, refused below as
      // RESOLVE_NO_XDEV refuses it in the walk.
      r = fstatat(home->fd, rel, &st, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT);
      if (r != 0 && errno == ENOENT) answered = -ENOENT;
    } else if (pin.names_ok && (dc = fp_dc_stat(home, rel, (size_t) (last_slash - rel), &st)) != FP_DC_WALK) {
      // Deeper: the same lstat below the kept descriptor of its directory (fastpath_dircache.c).
      r = dc == 0 ? 0 : -1;
      if (dc == -ENOENT) answered = -ENOENT;
    } else {
      int fd = pin.names_ok ? fp_openat2(home->fd, rel, O_PATH | O_NOFOLLOW | O_CLOEXEC) : -2;
      if (fd == -1 && errno == ENOSYS) {
        // A kernel before 5.6: nothing to walk with, JS answers everything.
        __atomic_store_n(&fp_enabled, 0, __ATOMIC_RELEASE);
      } else if (fd == -1 && (errno == ENOENT || errno == ENOTDIR)) {
        answered = -errno;
      }
      if (fd >= 0) {
        r = fstat(fd, &st);
        close(fd);
      }
    }
    if (r == 0 && fp_present_node(home, &st, out) == 0) answered = 1;
    fp_unpin(&pin);
  }
  if (!answered) { fp_fallback(); return HOMESFS_FASTPATH_FALLBACK; }
  __atomic_add_fetch(&fp_answered, 1, __ATOMIC_RELAXED);
  if (answered < 0) {
    __atomic_add_fetch(&fp_negative, 1, __ATOMIC_RELAXED);
    return answered;
  }
  return 0;
}

int hs_fastpath_fgetattr (uint64_t fh, struct stat *out) {
  if (!__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE)) return HOMESFS_FASTPATH_FALLBACK;
  int answered = 0;
  pthread_rwlock_rdlock(&fp_lock);
  fp_handle_t *e = fp_handles[fh % FP_HANDLE_BUCKETS];
  while (e != NULL && e->fh != fh) e = e->next;
  if (e != NULL) __atomic_add_fetch(&e->users, 1, __ATOMIC_ACQUIRE);
  pthread_rwlock_unlock(&fp_lock);
  struct stat st;
  if (e != NULL) {
    // The descriptor stays open until the handle is retired, which waits for this.
    if (fstat(e->fd, &st) == 0) answered = fp_present(out, &st, e->types, e->keep, e->or, e->owner_from_stat, e->uid, e->gid) == 0;
    fp_handle_done(e);
  }
  __atomic_add_fetch(answered ? &fp_fanswered : &fp_ffallbacks, 1, __ATOMIC_RELAXED);
  return answered ? 0 : HOMESFS_FASTPATH_FALLBACK;
}

// READDIR, the copy of dir.ts's readdirBacking for a home's directories (its
// root too), streamed: every request is answered from the directory itself at
// the kernel's offset, so libfuse keeps one request's worth per open handle
// (its offset form of the filler) instead of a copy of the whole listing, and
// an open handle costs no descriptor and no memory in proportion to the
// directory. The offsets are the backing filesystem's own (getdents64's d_off,
// which lseek on a new descriptor of the directory accepts again: ext4's hash
// cookies, tmpfs's stable offsets), so the entries come in the directory's
// order, not sorted. Each entry as JS would list it: its name UTF-8 (JS could
// never look another up again), lstat'ed (fstatat AT_SYMLINK_NOFOLLOW), left
// out when it vanished or lies on another device, with its inode number and
// type; "." and ".." as the directory gives them. An inode number in the
// synthetic range makes JS fail the whole listing: that goes to JS, as does a
// directory the confined walk cannot open (a symlink or mount anywhere) or one
// C does not serve at all (JS streams its big listings by offsets of its own:
// a directory is always listed by one side, unless its home is republished
// while a listing is under way, which then may end early). A failure of a
// listing C has under way (offset > 0) answers its errno, never JS.

static int fp_readdir_fallback (void) {
  __atomic_add_fetch(&fp_rfallbacks, 1, __ATOMIC_RELAXED);
  return HOMESFS_FASTPATH_FALLBACK;
}

#define FP_DENTS_BUF 32768

struct fp_linux_dirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

// Opens the directory `rel` of the home `path` names (the home itself when rel
// is empty) by the confined walk; -1 when C cannot serve it.
static int fp_open_listed_dir (const char *path, uint64_t *dev) {
  if (path == NULL || path[0] != '/') return -1;
  const char *t_end = strchr(path + 1, '/');
  if (t_end == NULL) return -1;
  const char *k_end = strchr(t_end + 1, '/');
  size_t plen = k_end == NULL ? strlen(path) : (size_t) (k_end - path);
  const char *rel = k_end == NULL || k_end[1] == 0 ? "" : k_end + 1;
  if (k_end == NULL && t_end[1] == 0) return -1;
  const uint64_t flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  int dfd = -1;
  // The home pinned while its descriptor is used.
  fp_pin_t pin;
  if (fp_pin(path, plen, rel[0] == 0 ? NULL : rel, &pin)) {
    if (pin.names_ok) {
      *dev = pin.home->dev;
      dfd = rel[0] == 0 ? openat(pin.home->fd, ".", flags) : fp_openat2(pin.home->fd, rel, flags);
    }
    fp_unpin(&pin);
  }
  return dfd;
}

// One getdents64 batch through the filler: each entry with its own d_off (where the next request
// starts when it is the last that fits), or 0 for a listing given whole. Sets *full when the
// reply is full, *fallback on an inode JS would refuse.
static void fp_fill_batch (char *dents, long got, int dfd, uint64_t dev, int whole, void *buf, hs_fill_t filler,
                           int (*name_ok) (const unsigned char *, size_t), int *full, int *fallback) {
  struct stat out;
  for (long pos = 0; pos < got && !*full; ) {
    struct fp_linux_dirent64 *e = (struct fp_linux_dirent64 *) (dents + pos);
    pos += e->d_reclen;
    const char *nm = e->d_name;
    memset(&out, 0, sizeof(out));
    if (nm[0] == '.' && (nm[1] == 0 || (nm[1] == '.' && nm[2] == 0))) {
      // "." and "..": what the directory says (".." of a home root is its tenant's, as JS lists it).
      out.st_ino = (ino_t) e->d_ino;
      out.st_mode = S_IFDIR;
    } else {
      size_t len = strlen(nm);
      if (len > HOMESFS_NAME_MAX || !name_ok((const unsigned char *) nm, len)) continue;
      struct stat st;
      if (fstatat(dfd, nm, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // vanished meanwhile
      if ((uint64_t) st.st_dev != dev) continue;                       // a mount point: never served
      if (((uint64_t) st.st_ino >> 63) != 0) { *fallback = 1; return; }
      out.st_ino = st.st_ino;
      out.st_mode = st.st_mode & S_IFMT;
    }
    if (((uint64_t) out.st_ino >> 63) != 0) { *fallback = 1; return; }
    *full = filler(buf, nm, &out, whole ? 0 : (off_t) e->d_off);
  }
}

int hs_fastpath_readdir (const char *path, void *buf, hs_fill_t filler, off_t offset, int (*name_ok) (const unsigned char *, size_t)) {
  if (!__atomic_load_n(&fp_enabled, __ATOMIC_ACQUIRE)) return HOMESFS_FASTPATH_FALLBACK;
  uint64_t dev = 0;
  // Not a directory C serves (unpublished, a reserved name, a symlink or mount on the way): JS's, at any offset.
  int dfd = fp_open_listed_dir(path, &dev);
  if (dfd < 0) return fp_readdir_fallback();
  struct stat self;
  if (fstat(dfd, &self) != 0 || (uint64_t) self.st_dev != dev) {
    close(dfd);
    if (offset > 0) return -EIO;
    return fp_readdir_fallback();
  }
  if (offset > 0 && lseek(dfd, offset, SEEK_SET) < 0) {
    int err = errno;
    close(dfd);
    return -err;
  }
  // Two batches: a listing that starts here and ends within the first is a small directory, given to
  // libfuse whole (offset 0 for every entry: libfuse keeps it and answers the kernel's next READDIRs,
  // the empty one that ends the listing among them, without calling here again). A longer one is
  // streamed by offset: what a handle holds stays one request's worth whatever the directory's size.
  char *dents = malloc(2 * FP_DENTS_BUF);
  if (dents == NULL) { close(dfd); return offset > 0 ? -ENOMEM : fp_readdir_fallback(); }
  int full = 0, fallback = 0, err = 0;
  long got = syscall(SYS_getdents64, dfd, dents, FP_DENTS_BUF);
  long next = 0;
  if (got < 0) err = errno;
  else if (got > 0 && offset == 0) {
    next = syscall(SYS_getdents64, dfd, dents + FP_DENTS_BUF, FP_DENTS_BUF);
    if (next < 0) err = errno;
  }
  int whole = offset == 0 && got > 0 && next == 0;
  for (int batch = 0; !full && !fallback && !err && got > 0; batch++) {
    char *at = batch == 1 && next > 0 ? dents + FP_DENTS_BUF : dents;
    fp_fill_batch(at, got, dfd, dev, whole, buf, filler, name_ok, &full, &fallback);
    if (whole) break;
    if (batch == 0 && next > 0) { got = next; continue; }
    got = syscall(SYS_getdents64, dfd, dents, FP_DENTS_BUF);
    if (got < 0) err = errno;
  }
  free(dents);
  close(dfd);
  // A failing getdents, or an inode JS would refuse: a listing not yet under way goes to JS, which maps the errno.
  if (fallback || err) {
    if (offset > 0) return fallback ? -EIO : -err;
    return fp_readdir_fallback();
  }
  __atomic_add_fetch(&fp_ranswered, 1, __ATOMIC_RELAXED);
  return 0;
}
