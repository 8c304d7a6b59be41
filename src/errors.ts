import { constants as osConstants } from 'node:os';

/**
 * Every refusal and failure the daemon reports has one of these codes. The same
 * code travels in log lines and control-socket replies; the table below is the
 * only place that turns a code into the errno a writing process sees.
 */
export type HomesCode =
  | 'NOT_FOUND'
  | 'EXISTS'
  | 'NOT_DIR'
  | 'IS_DIR'
  | 'NOT_EMPTY'
  | 'INVALID_NAME'
  | 'NAME_TOO_LONG'
  | 'NOT_UTF8_NAME'
  | 'DAEMON_TREE'
  | 'OP_REFUSED'
  | 'SYMLINK_ESCAPES'
  | 'CROSS_HOME'
  | 'CROSS_DEVICE'
  | 'QUOTA_EXCEEDED'
  | 'TENANT_QUOTA_EXCEEDED'
  | 'INODES_EXCEEDED'
  | 'FILE_TOO_LARGE'
  | 'OPEN_FILES_EXCEEDED'
  | 'DAEMON_FILES_EXHAUSTED'
  | 'NOT_UTF8'
  | 'NOT_SUPPORTED'
  | 'BAD_HANDLE'
  | 'INVALID_ARGUMENT'
  | 'ACCESS_DENIED'
  | 'BUSY'
  | 'PASSED_THROUGH'
  | 'RENAME_BLOCKED'
  | 'RENAMED'
  | 'CONFIRM_REQUIRED'
  | 'IO';

export const ERRNO_OF = {
  NOT_FOUND: osConstants.errno.ENOENT,
  EXISTS: osConstants.errno.EEXIST,
  NOT_DIR: osConstants.errno.ENOTDIR,
  IS_DIR: osConstants.errno.EISDIR,
  NOT_EMPTY: osConstants.errno.ENOTEMPTY,
  INVALID_NAME: osConstants.errno.EINVAL,
  NAME_TOO_LONG: osConstants.errno.ENAMETOOLONG,
  NOT_UTF8_NAME: osConstants.errno.EILSEQ,
  // The two top levels belong to the daemon: mkdir/rmdir/rename there is a
  // permission problem, not a missing feature.
  DAEMON_TREE: osConstants.errno.EPERM,
  OP_REFUSED: osConstants.errno.EPERM,
  SYMLINK_ESCAPES: osConstants.errno.EACCES,
  // EXDEV makes mv(1) fall back to copy + delete, so the target budget applies.
  CROSS_HOME: osConstants.errno.EXDEV,
  CROSS_DEVICE: osConstants.errno.EXDEV,
  QUOTA_EXCEEDED: osConstants.errno.EDQUOT,
  // The tenant's total across its homes: the same errno as a home budget, a code of its own.
  TENANT_QUOTA_EXCEEDED: osConstants.errno.EDQUOT,
  INODES_EXCEEDED: osConstants.errno.EDQUOT,
  FILE_TOO_LARGE: osConstants.errno.EFBIG,
  // A home's (or a uid's) open-file limit: "Too many open files", the caller's
  // side is over its share; tools that pool descriptors (graceful-fs, make)
  // wait and retry on it.
  OPEN_FILES_EXCEEDED: osConstants.errno.EMFILE,
  // Every home together reached what the daemon's descriptors carry beside its
  // reserve: "Too many open files in system", not the caller's own doing.
  DAEMON_FILES_EXHAUSTED: osConstants.errno.ENFILE,
  NOT_UTF8: osConstants.errno.EILSEQ,
  NOT_SUPPORTED: osConstants.errno.EOPNOTSUPP,
  BAD_HANDLE: osConstants.errno.EBADF,
  INVALID_ARGUMENT: osConstants.errno.EINVAL,
  ACCESS_DENIED: osConstants.errno.EACCES,
  BUSY: osConstants.errno.EBUSY,
  // A text home's open of a file the kernel reads itself for opens made before
  // the home became one (passthrough): a shared mmap of it would bypass the
  // text check. "Text file busy": it passes once those readers close.
  PASSED_THROUGH: osConstants.errno.ETXTBSY,
  // The per-scope-home design's renameBlocker: the target home exists; never a merge.
  RENAME_BLOCKED: osConstants.errno.EEXIST,
  // A renamed home's old name: no home lives there, and none may be created
  // there until an admin releases the name (details.to names the new home).
  RENAMED: osConstants.errno.ENOENT,
  // A control change that would leave data behind (orphaned homes) and was
  // sent without `yes`: try again, knowingly.
  CONFIRM_REQUIRED: osConstants.errno.EAGAIN,
  IO: osConstants.errno.EIO,
} as const satisfies Record<HomesCode, number>;

export const HOMES_CODES = Object.keys(ERRNO_OF) as HomesCode[];

export class HomesError extends Error {
  readonly code: HomesCode;
  readonly details: Record<string, unknown>;

  constructor(code: HomesCode, message: string, details: Record<string, unknown> = {}) {
    super(message);
    this.name = 'HomesError';
    this.code = code;
    this.details = details;
  }

  get errno(): number {
    return ERRNO_OF[this.code];
  }
}

export function isHomesError(err: unknown): err is HomesError {
  return err instanceof HomesError;
}

const errnoByName = osConstants.errno as Record<string, number>;

/**
 * The positive errno for anything thrown inside an operation. Node system errors
 * carry their symbolic `code` (ENOENT, EACCES…): that is mapped through the OS
 * table, never through `err.errno`, whose sign differs between APIs. Anything
 * unknown is EIO: never ENOSYS (the kernel would switch the op off for the whole
 * mount) and never a bare 1 (EPERM by accident).
 */
export function errnoOf(err: unknown): number {
  if (err instanceof HomesError) return err.errno;
  if (typeof err === 'object' && err !== null && 'code' in err) {
    const code = (err as { code: unknown }).code;
    if (typeof code === 'string') {
      const n = errnoByName[code];
      if (typeof n === 'number' && n > 0 && n !== osConstants.errno.ENOSYS) return n;
    }
  }
  return osConstants.errno.EIO;
}

/** Where Linux has two names for one number, the one strace and the man pages print. */
const PREFERRED_NAMES = new Set(['EOPNOTSUPP', 'EAGAIN', 'EDEADLK']);

/** Symbolic name of a positive errno, for log lines. */
export function errnoName(errno: number): string {
  let found: string | undefined;
  for (const [name, n] of Object.entries(errnoByName)) {
    if (n !== errno) continue;
    if (PREFERRED_NAMES.has(name)) return name;
    found ??= name;
  }
  return found ?? `E${errno}`;
}
