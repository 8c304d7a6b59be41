// Every number C and TypeScript must agree on, defined once.
//
// The binding exports this list as `ABI` (addon.c); src/abi.ts holds the
// same names and values, test/unit/abi.test.ts compares this file with it,
// and the daemon compares the loaded binding's ABI with its own at start and
// refuses a mismatch (exit 4: rebuild with `node scripts/build-native.mjs`).
// Bump HOMESFS_ABI_VERSION with any change to a value, to a struct shared
// through memory, to the meaning of an export or to the set of exports.
#ifndef HOMESFS_ABI_H
#define HOMESFS_ABI_H

#define HOMESFS_ABI_VERSION 35

// X(name, value): the shared constants.
#define HOMESFS_ABI_CONSTANTS(X) \
  /* Slots of a home's accounting array (BigInt64Array JS allocates and C */ \
  /* adds to atomically; src/policy/ledger.ts).                            */ \
  X(ACCT_RELEASED_BYTES, 0)   /* bytes of files removed here, for the ledger to release */ \
  X(ACCT_RELEASED_INODES, 1)  /* names/inodes removed here */ \
  X(ACCT_GROWN, 2)            /* bytes charged here to files, for the ledger to count */ \
  X(ACCT_CREDIT_BYTES, 3)     /* bytes JS reserved that writes here may still charge */ \
  X(ACCT_MAXFILE, 4)          /* the per-file limit (0: none), as the ledger has it */ \
  X(ACCT_INFLIGHT, 5)         /* writes decided here and not settled yet */ \
  X(ACCT_REFUND, 6)           /* byte credit a write took and did not use: no longer reserved */ \
  X(ACCT_BUSY, 7)             /* unlinks and creates made here and not yet in JS's counts */ \
  X(ACCT_LEN, 8)              /* the array's length */ \
  /* The ledgers' checkpoint area (handover/ledgers.c, src/fs/ledger-area.ts): */ \
  /* a header and this many slots of this size, each a home's, its         */ \
  /* accounting array first.                                               */ \
  X(LEDGER_SLOTS, 16384) \
  X(LEDGER_SLOT_BYTES, 1024) \
  /* A home's native-open flags (fastPath.setHome).                        */ \
  X(OPEN_ON, 1)               /* read-only opens (and creates) answered here */ \
  X(OPEN_DP_READ, 2)          /* their handles published for native reads */ \
  X(OPEN_DIRECT_IO, 4)        /* answered with direct_io (the profile's directIo) */ \
  X(OPEN_DP_WRITE, 8)         /* created handles published for native writes */ \
  /* Kinds of the records takeOpens returns.                               */ \
  X(REC_OPENED, 1)            /* a read-only open answered here: JS adopts it */ \
  X(REC_UNUSED, 2)            /* an open slot not used: back to JS */ \
  X(REC_CREATED, 3)           /* a create answered here: JS adopts it */ \
  X(REC_UNUSED_CREATE, 4)     /* a create slot not used: back to JS */ \
  X(REC_MKDIR, 5)             /* a mkdir answered here with a create slot's inode: JS counts it, the open slot back */ \
  X(REC_SYMLINK, 6)           /* a symlink answered here, the same way */ \
  X(REC_LINK, 7)              /* a hard link answered here, the same way */ \
  X(REC_CREATED_CLOSED, 8)    /* a create answered here, released before JS adopted it: JS counts it as a mkdir's */ \
  /* SETATTR answered here (fastPath.setAttrs flags).                      */ \
  X(ATTR_UTIMENS, 1) \
  X(ATTR_CHMOD, 2) \
  X(ATTR_CHOWN_OWNER, 4)      /* only the no-op chown to the owner */ \
  X(ATTR_CHOWN_ALLOW, 8)      /* lchown as JS does (profile chown: allow) */ \
  /* What a handle is published to the data plane for (publish flags).     */ \
  X(DP_READ, 1) \
  X(DP_WRITE, 2) \
  /* Messages to the write handler (setWriteHandler's first argument).     */ \
  X(WRITE_DECIDE, 0)          /* (id, fh, offset, length, path, uid, gid, pid) */ \
  X(WRITE_DONE, 1)            /* (id, result of the pwrite) */ \
  /* The session's requests to JavaScript (its dispatch function's first   */ \
  /* argument; session/bridge.c, src/fuse/session.ts).                     */ \
  X(OP_INIT, 0) \
  X(OP_GETATTR, 1)            /* (path) -> stat, volatile? */ \
  X(OP_FGETATTR, 2)           /* (path|null, fh) -> stat, volatile? */ \
  X(OP_ACCESS, 3)             /* (path, mask) */ \
  X(OP_STATFS, 4)             /* (path) -> statvfs */ \
  X(OP_READDIR, 5)            /* (path, offset) -> names, stats, offsets? */ \
  X(OP_READLINK, 6)           /* (path) -> target */ \
  X(OP_OPEN, 7)               /* (path, flags, reopen: the inode a dead handle's reopen must reach, 0n for an open) -> fh, open options */ \
  X(OP_CREATE, 8)             /* (path, mode, flags) -> fh, open options */ \
  X(OP_READ, 9)               /* (path|null, fh, length, offset) -> bytes */ \
  X(OP_WRITE, 10)             /* (path|null, fh, data, offset) -> count */ \
  X(OP_FLUSH, 11)             /* (path|null, fh) */ \
  X(OP_FSYNC, 12)             /* (path|null, fh, datasync) */ \
  X(OP_FSYNCDIR, 13)          /* (path|null, datasync) */ \
  X(OP_RELEASE, 14)           /* (path|null, fh) */ \
  X(OP_TRUNCATE, 15)          /* (path, size) */ \
  X(OP_FTRUNCATE, 16)         /* (path|null, fh, size) */ \
  X(OP_FALLOCATE, 17)         /* (path|null, fh, mode, offset, length) */ \
  X(OP_UTIMENS, 18)           /* (path, atime, mtime) */ \
  X(OP_CHMOD, 19)             /* (path, mode) */ \
  X(OP_CHOWN, 20)             /* (path, uid, gid) */ \
  X(OP_MKDIR, 21)             /* (path, mode) */ \
  X(OP_RMDIR, 22)             /* (path) */ \
  X(OP_UNLINK, 23)            /* (path, hidden: 1 for the session's unlink of a hidden name at its last release) */ \
  X(OP_RENAME, 24)            /* (from, to, hide: 1 for the session's hiding of an open file, `to` at its home's root) */ \
  X(OP_LINK, 25)              /* (from, to) */ \
  X(OP_SYMLINK, 26)           /* (target, path) */ \
  X(OP_MKNOD, 27)             /* (path, mode, rdev) */ \
  X(OP_COUNT, 28) \
  /* Open options JavaScript answers an open or create with (bits).        */ \
  X(OPEN_OPT_DIRECT_IO, 1) \
  X(OPEN_OPT_KEEP_CACHE, 2) \
  X(OPEN_OPT_NONSEEKABLE, 4) \
  /* A stat as JavaScript hands it over: this many uint32 (session/marshal.c). */ \
  X(STAT_WORDS, 22) \
  /* What hs_session_invalidate(kind, path) drops from the kernel's caches    */ \
  /* (session/inval.c).                                                     */ \
  X(INVAL_PATH, 0)            /* the name, its node's and its directory's attributes */ \
  X(INVAL_TREE, 1)            /* the attributes of every node at or below the path */ \
  X(INVAL_ENTRY, 2)           /* the name and its directory's attributes */ \
  /* Hidden names: HIDDEN_PREFIX (below), then this many lowercase hex     */ \
  /* digits (session/nodes.c makes them, src/paths/hidden-names.ts knows    */ \
  /* them).                                                                 */ \
  X(HIDDEN_DIGITS, 16) \
  /* File types (mode >> 12) a presentation-mask array covers: keep[this], */ \
  /* then or[this], uint32 each (fastPath.setHome and setHandle; the bit of */ \
  /* each type that has the masks' form in `types`).                       */ \
  X(MODE_TYPES, 16) \
  /* The longest name component, in bytes (Linux NAME_MAX): no profile's   */ \
  /* maxNameBytes exceeds it, and no longer name is served.                */ \
  X(NAME_MAX, 255) \
  /* The permission bits a home itself is presented with (its owner's     */ \
  /* only, whatever its backing directory has): src/fs/present.ts         */ \
  /* homeNodeAttr, fastpath/fastpath_attr.c fp_home_getattr (448 = 0700).  */ \
  X(HOME_ROOT_PERMS, 448) \
  /* The open flag that marks a CREATE as O_TMPFILE (O_TMPFILE without     */ \
  /* O_DIRECTORY: 020000000): the session keeps it in the flags it hands   */ \
  /* JavaScript for a FUSE_TMPFILE (session/ops_files.c; src/fs/file.ts). */ \
  X(OPEN_TMPFILE, 4194304) \
  /* The longest backing path of a directory the directory cache checks by */ \
  /* procfs (src/backing/dircache.ts); a longer one is trusted by generation. */ \
  X(DIRCACHE_READLINK_MAX, 4000) \
  /* 2^53 - 1, the largest integer a JavaScript number holds exactly         */ \
  /* (Number.MAX_SAFE_INTEGER): offsets, sizes and ids beyond it are never  */ \
  /* handed to or taken from JavaScript. The one value wider than 32 bits.  */ \
  X(MAX_SAFE_INTEGER, 9007199254740991)

// X(name, "value"): the shared strings.
#define HOMESFS_ABI_STRINGS(X) \
  /* The prefix of the names a file unlinked while open is hidden under.   */ \
  X(HIDDEN_PREFIX, ".fuse_hidden")

// An anonymous enum: GNU C gives MAX_SAFE_INTEGER's enumerator a 64-bit type.
#define HOMESFS_ABI_ENUM(name, value) HOMESFS_##name = (value),
enum { HOMESFS_ABI_CONSTANTS(HOMESFS_ABI_ENUM) };
#undef HOMESFS_ABI_ENUM
// Arrays, not macros, so that every user spells the one value; sizeof - 1 is
// the length. (GCC does not warn about unused ones defined in a header.)
#define HOMESFS_ABI_STRING(name, value) static const char HOMESFS_##name[] = value;
HOMESFS_ABI_STRINGS(HOMESFS_ABI_STRING)
#undef HOMESFS_ABI_STRING

#endif
