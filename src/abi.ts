/**
 * The numbers and strings the native addon and this code must agree on, as
 * native/src/abi.h defines them (test/unit/abi.test.ts compares the two files name by name).
 * The addon exports its own copy as `ABI`; the daemon refuses to start on an
 * addon whose copy differs (an older or newer build): a stale build must not
 * run with half its features silently missing or a slot read as another.
 */
export const ABI = {
  VERSION: 35,
  ACCT_RELEASED_BYTES: 0,
  ACCT_RELEASED_INODES: 1,
  ACCT_GROWN: 2,
  ACCT_CREDIT_BYTES: 3,
  ACCT_MAXFILE: 4,
  ACCT_INFLIGHT: 5,
  ACCT_REFUND: 6,
  ACCT_BUSY: 7,
  ACCT_LEN: 8,
  LEDGER_SLOTS: 16384,
  LEDGER_SLOT_BYTES: 1024,
  OPEN_ON: 1,
  OPEN_DP_READ: 2,
  OPEN_DIRECT_IO: 4,
  OPEN_DP_WRITE: 8,
  REC_OPENED: 1,
  REC_UNUSED: 2,
  REC_CREATED: 3,
  REC_UNUSED_CREATE: 4,
  REC_MKDIR: 5,
  REC_SYMLINK: 6,
  REC_LINK: 7,
  REC_CREATED_CLOSED: 8,
  ATTR_UTIMENS: 1,
  ATTR_CHMOD: 2,
  ATTR_CHOWN_OWNER: 4,
  ATTR_CHOWN_ALLOW: 8,
  DP_READ: 1,
  DP_WRITE: 2,
  WRITE_DECIDE: 0,
  WRITE_DONE: 1,
  OP_INIT: 0,
  OP_GETATTR: 1,
  OP_FGETATTR: 2,
  OP_ACCESS: 3,
  OP_STATFS: 4,
  OP_READDIR: 5,
  OP_READLINK: 6,
  OP_OPEN: 7,
  OP_CREATE: 8,
  OP_READ: 9,
  OP_WRITE: 10,
  OP_FLUSH: 11,
  OP_FSYNC: 12,
  OP_FSYNCDIR: 13,
  OP_RELEASE: 14,
  OP_TRUNCATE: 15,
  OP_FTRUNCATE: 16,
  OP_FALLOCATE: 17,
  OP_UTIMENS: 18,
  OP_CHMOD: 19,
  OP_CHOWN: 20,
  OP_MKDIR: 21,
  OP_RMDIR: 22,
  OP_UNLINK: 23,
  OP_RENAME: 24,
  OP_LINK: 25,
  OP_SYMLINK: 26,
  OP_MKNOD: 27,
  OP_COUNT: 28,
  OPEN_OPT_DIRECT_IO: 1,
  OPEN_OPT_KEEP_CACHE: 2,
  OPEN_OPT_NONSEEKABLE: 4,
  STAT_WORDS: 22,
  INVAL_PATH: 0,
  INVAL_TREE: 1,
  INVAL_ENTRY: 2,
  HIDDEN_DIGITS: 16,
  MODE_TYPES: 16,
  NAME_MAX: 255,
  HOME_ROOT_PERMS: 448,
  OPEN_TMPFILE: 4194304,
  DIRCACHE_READLINK_MAX: 4000,
  MAX_SAFE_INTEGER: 9007199254740991,
  HIDDEN_PREFIX: '.fuse_hidden',
} as const;

export type AbiName = keyof typeof ABI;

/** What differs between the addon's ABI and ours ([] when they agree). */
export function abiMismatches(native: unknown): string[] {
  if (native === null || typeof native !== 'object') return ['the addon exports no ABI (built before it had one)'];
  const theirs = native as Record<string, unknown>;
  const out: string[] = [];
  if (theirs.VERSION !== ABI.VERSION) out.push(`ABI version ${String(theirs.VERSION)}, this daemon needs ${ABI.VERSION}`);
  for (const [name, value] of Object.entries(ABI)) {
    if (name !== 'VERSION' && theirs[name] !== value) out.push(`${name} is ${String(theirs[name])} in the addon, ${value} here`);
  }
  for (const name of Object.keys(theirs)) if (!(name in ABI)) out.push(`${name} is in the addon only`);
  return out;
}
