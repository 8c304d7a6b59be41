import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { abiMismatches } from '../abi.js';
import { attachAddon } from './addon.js';
import { FuseSession, type Handed, type Kept, type SessionOptions, type SessionRaw } from './session.js';
import type { TimeSpec } from '../fs/native-api.js';
import type { Caller } from '../fs/state.js';

type Cb = (err: number) => void;
export type OpenOpts = { directIo?: boolean; keepCache?: boolean; nonseekable?: boolean };

/**
 * The operations the session hands to JavaScript (src/fuse/session.ts). Every
 * op receives the caller (uid, gid, pid of the request) after its callback;
 * handle ops receive a null path for a file that has no name any more.
 */
export interface NativeOps {
  init(cb: Cb): void;
  getattr(path: string, cb: (err: number, st?: object) => void, caller: Caller): void;
  fgetattr(path: string | null, fh: number, cb: (err: number, st?: object) => void, caller: Caller): void;
  access(path: string, mode: number, cb: Cb, caller: Caller): void;
  statfs(path: string, cb: (err: number, st?: object) => void, caller: Caller): void;
  /**
   * stats (same length as names) feed d_ino and d_type; with use_ino, d_ino is the stat's ino.
   * offset: where the kernel's listing stands (0: the start); `offsets` (one per name, each > 0)
   * answer a part of a streamed listing, without them the names are the whole listing.
   */
  readdir(path: string | null, cb: (err: number, names?: string[], stats?: object[], offsets?: number[]) => void, caller: Caller, offset?: number): void;
  readlink(path: string, cb: (err: number, target?: string) => void, caller: Caller): void;
  /** reopen: the session reopens a dead daemon's handle, which must reach this inode (session/handles.c); absent or 0n for an open */
  open(path: string, flags: number, cb: (err: number, fh?: number, o?: OpenOpts) => void, caller: Caller, reopen?: bigint): void;
  create(path: string, mode: number, flags: number, cb: (err: number, fh?: number, o?: OpenOpts) => void, caller: Caller): void;
  read(path: string | null, fh: number, buf: Buffer, len: number, pos: number, cb: (res: number) => void, caller: Caller): void;
  write(path: string | null, fh: number, buf: Buffer, len: number, pos: number, cb: (res: number) => void, caller: Caller): void;
  flush(path: string | null, fh: number, cb: Cb, caller: Caller): void;
  fsync(path: string | null, fh: number, datasync: number | boolean, cb: Cb, caller: Caller): void;
  fsyncdir(path: string | null, fh: number, datasync: number | boolean, cb: Cb, caller: Caller): void;
  release(path: string | null, fh: number, cb: Cb, caller: Caller): void;
  truncate(path: string, size: number, cb: Cb, caller: Caller): void;
  ftruncate(path: string | null, fh: number, size: number, cb: Cb, caller: Caller): void;
  fallocate(path: string | null, fh: number, mode: number, offset: number, length: number, cb: Cb, caller: Caller): void;
  utimens(path: string, atime: TimeSpec, mtime: TimeSpec, cb: Cb, caller: Caller): void;
  chmod(path: string, mode: number, cb: Cb, caller: Caller): void;
  chown(path: string, uid: number, gid: number, cb: Cb, caller: Caller): void;
  mkdir(path: string, mode: number, cb: Cb, caller: Caller): void;
  rmdir(path: string, cb: Cb, caller: Caller): void;
  /** hidden: the session's unlink of a hidden name at the node's last release (fs/hidden.ts) */
  unlink(path: string, cb: Cb, caller: Caller, hidden?: boolean): void;
  /** hide: the session hides an open file whose last name goes (`dest` a hidden name at its home's root: fs/hidden.ts) */
  rename(src: string, dest: string, cb: Cb, caller: Caller, hide?: boolean): void;
  link(src: string, dest: string, cb: Cb, caller: Caller): void;
  symlink(target: string, path: string, cb: Cb, caller: Caller): void;
  mknod(path: string, mode: number, dev: number, cb: Cb, caller: Caller): void;
  setxattr(...args: unknown[]): void;
  getxattr(...args: unknown[]): void;
  listxattr(...args: unknown[]): void;
  removexattr(...args: unknown[]): void;
}

export interface FuseInstance {
  mount(cb: (err: Error | null) => void): void;
  /** serve a session a predecessor handed over (takeover.ts) */
  adopt(h: Handed, cb: (err: Error | null) => void): void;
  /** serve a session whose daemon died, kept by a holder (its node table recovered first) */
  revive(k: Kept, cb: (err: Error | null) => void): void;
  handleStats(): { resent: number; refused: number; reopened: number; epoch: number };
  /** the resend notification's result after a revive: 0, or -errno (a kernel without FUSE_NOTIFY_RESEND) */
  readonly resendResult: number | undefined;
  pause(): void;
  paused(): boolean;
  resume(): void;
  /** how long JavaScript has held the oldest request it has not answered, in ms (0: none) */
  oldestHeldMs(): number;
  handed(withNodes?: boolean): Handed;
  unmount(cb: (err: Error | null) => void): void;
  loopState(): number;
  setFlushGate(gate: Uint16Array): void;
  /** told of each request as it reaches JavaScript; what it returns is called at the answer */
  tracker: ((op: number, args: readonly unknown[]) => (() => void) | undefined) | null;
}

/** The binding's native getattr/lookup table (native/src/fastpath/fastpath_*.c): one per process. */
export interface FastPathNative {
  setHome(prefix: string, fd: number, dev: bigint, uid: number, gid: number, ownerFromStat: boolean, maxName: number, types: number, masks: Uint32Array, token: number): void;
  removeHome(prefix: string, token?: number): boolean;
  /** pending: [bytes, inodes] the binding's unlinks add to; null: no native unlinks there (returns once none is in flight) */
  setMutable(prefix: string, token: number, pending: BigInt64Array | null): boolean;
  /** whether the binding can unlink natively */
  readonly unlinks: boolean;
  /** regular files with more allocated bytes are never unlinked natively: JS frees them off its thread */
  setFreeInlineMax?(bytes: number): void;
  inode(dev: bigint, ino: bigint, delta: 1 | -1): void;
  /** the size JS charges an inode it tracks; getattrs of it are then answered natively */
  inodeSize?(dev: bigint, ino: bigint, size: number): void;
  setHandle(fh: number, fd: number, uid: number, gid: number, ownerFromStat: boolean, types: number, masks: Uint32Array): void;
  removeHandle(fh: number): void;
  /** read-only opens answered natively (flags: ABI.OPEN_*) */
  setOpen?(prefix: string, token: number, flags: number): boolean;
  /** UTIMENS (flags & 1), CHMOD (flags & 2, new = asked & chmodM unless equal to current & chmodK), CHOWN (4: owner-only's no-op, 8: lchown) by path */
  setAttrOps?(prefix: string, token: number, flags: number, chmodM: number, chmodK: number): boolean;
  readonly opens?: boolean;
  grant?(prefix: string, token: number, fh: number, uid: number): boolean;
  /** CREATE of new names answered natively; one create slot (open-file slot for uid, reserved inode, fh) */
  setCreate?(prefix: string, token: number, on: boolean, modeM: number, modeOr: number, maxDepth: number, ownerIsCaller: boolean): boolean;
  grantCreate?(prefix: string, token: number, fh: number, uid: number): boolean;
  reclaim?(): number;
  /** writes' growth decided natively for inodes handed over (acct: the home's BigInt64Array(8), policy/ledger.ts) */
  wlDelegate?(dev: bigint, ino: bigint, size: number, acct: BigInt64Array): boolean;
  /** the size, now JS's; -1 a native write is in flight (ask again); -2 not handed over */
  wlRevoke?(dev: bigint, ino: bigint): number;
  wlSize?(dev: bigint, ino: bigint): number;
  /** files made natively in the home start handed over */
  setWriteCredit?(prefix: string, token: number, on: boolean): boolean;
  readonly writeDecisions?: boolean;
  takeOpens?(): BigUint64Array | null;
  setReserved(names: string[]): void;
  enable(on: boolean): void;
  clear(): void;
  stats(): { enabled: boolean; answered: number; fallbacks: number; negative: number; unlinkAnswered: number; unlinkFallbacks: number; unlinkSlowFrees?: number; readdirAnswered: number; readdirFallbacks: number; fgetattrAnswered: number; fgetattrFallbacks: number; openAnswered?: number; openClosedNatively?: number; openFallbacks?: number; writesDecided?: number; writeDecisionFallbacks?: number; createAnswered?: number; createFallbacks?: number; openSlots?: number; utimensAnswered?: number; chmodAnswered?: number; chownAnswered?: number; setattrFallbacks?: number; homes: number; inodes: number; handles: number; inFlight?: number; retiredHomes?: number };
}

export interface FuseClass {
  new (mnt: string, ops: Partial<NativeOps>, opts: SessionOptions): FuseInstance;
  /** the addon itself: its ABI (native/src/abi.h) */
  native?: { ABI?: unknown };
  BINDING_PATH?: string;
  utimensat(path: string, atime: TimeSpec, mtime: TimeSpec, cb: (errno: number) => void): void;
  mknod(path: string, mode: number, dev: number, cb: (errno: number) => void): void;
  /** open directory handles counted per caller uid (0 not) and in all; past a cap (0: none) OPENDIR answers EMFILE */
  setDirHandleCaps?(perUid: number, all: number): void;
  dirHandleStats?(): { open: number; refused: number };
  /** directory handles open: uid's, under a home's "/<tenant>/<key>", in all */
  dirHandleCounts?(uid: number, prefix: string): [number, number, number];
  /** JS's open files and caps, which OPENDIR counts its handles beside (each directory handle is one open file too) */
  setOpenFileCounts?(uid: number, uidFiles: number, prefix: string, homeFiles: number, homeCap: number, total: number, capPerUid: number, capAll: number): void;
  /** fallocate(2) on the libuv threadpool; cb(0) or cb(-errno) (-EOPNOTSUPP from a build without it) */
  fallocate?(fd: number, mode: number, offset: number, length: number, cb: (errno: number) => void): void;
  unmount(mnt: string, cb: (err: Error | null) => void): void;
  /** umount2(2) on the libuv threadpool: no child process, no descriptor. cb(0) or cb(-errno). */
  umount2(mnt: string, flags: number, cb: (errno: number) => void): void;
  /** RLIMIT_NOFILE: read it, or set it (0 keeps a value); res 0 or -errno, Infinity = unlimited */
  nofile(soft?: number, hard?: number): { res: number; soft: number; hard: number };
  /** the data plane (dataplane.c); optional so an older build is named, not crashed on */
  publish?(fh: number, fd: number, flags: number, dev?: bigint, ino?: bigint, append?: boolean): void;
  setPublishFlags?(fh: number, flags: number): boolean;
  unpublish?(fh: number): boolean;
  setWriteHandler?(handler: WriteHandler): void;
  /** [id, bytes, ...] of writes that landed whole since the last call (answered already); null when none */
  takeWriteReports?(): Float64Array | null;
  /** wait: even a write that lands whole is answered only after writeDone (JS hands the file back to native decisions at its end) */
  writeDecision?(id: number, offset: number, wait?: boolean): boolean;
  writeDone?(id: number, result: number): boolean;
  dataPlaneStats?(): { published: number; reads: number; bytes: number; fallbacks: number; writes: number; writeBytes: number; writeFallbacks: number; releases?: number };
  /** RELEASE answered on libfuse's thread and queued for takeReleases (true), or sent to ops.release (false, the default) */
  setReleaseDeferred?(on: boolean): void;
  /** [fh, ...] of the RELEASEs answered since the last call, oldest first; null when none */
  takeReleases?(): Float64Array | null;
  /** the native fast path (fastpath_*.c); a build that passed the ABI check has it */
  fastPath?: FastPathNative;
  /** opens of handles in a zero flush-gate slot answered with FOPEN_NOFLUSH; returns opens answered so */
  setNoFlush?(on: boolean): number;
  noFlushCount?(): { opens: number; flushes: number };
  /** one thread reads the device at a time, from the next mount on */
  setSingleReader?(on: boolean): void;
  leadStats?(): { on: boolean; handoffs: number; revocations: number; readWaits: number };
  /** drop the kernel's cached entry/attributes for a virtual path (kind: ABI.INVAL_*); queued, never waited for; -> notifications queued or -errno */
  invalidate?(kind: number, path: string): number;
  /** notifications queued, sent (the kernel dropped something), not cached (it had nothing), failed, still pending */
  invalidationStats?(): { queued: number; sent: number; notCached: number; failed: number; pending: number };
  /** the session's node table: nodes the kernel may name, of them reachable by inode number */
  nodeStats?(): { nodes: number; byInode: number };
  /** handles across daemons (session/handles.c): this daemon's epoch, requests resent after a crash, of them answered EIO, dead handles reopened */
  handleStats?(): { epoch: number; resent: number; refused: number; reopened: number };
  /** [entries queued, of them sent]: sent in the order queued */
  invalidationProgress?(): [number, number];
  /** start importing a handed-over node table before the session is adopted; 0 or -errno */
  preimportNodes?(nodes: Buffer): number;
}

/** (0, id, fh, offset, length, path, uid, gid, pid): decide a write; (1, id, result): its pwrite returned result. */
export type WriteHandler = (kind: number, id: number, a: number, b: number, c: number, path: string | null, uid: number, gid: number, pid: number) => void;

export class NativeBindingError extends Error {}

/** Where the addons are: native/addon/ of this package (scripts/build-native.mjs installs them there). */
export function addonPath(name: 'homesfs.node' | 'scandir.node'): string {
  return path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../native/addon', name);
}

/**
 * Load our addon (native/src: the FUSE session and everything it answers
 * from) and refuse one built from other sources than this daemon.
 */
export function loadFuse(): FuseClass {
  const require = createRequire(import.meta.url);
  const at = addonPath('homesfs.node');
  let raw: Record<string, unknown>;
  try {
    raw = require(at) as Record<string, unknown>;
  } catch (err) {
    throw new NativeBindingError(
      `the native addon cannot be loaded from ${at} (${(err as Error).message}); install libfuse2 and libfuse-dev, then run "npm ci" (it builds the addon) or "node scripts/build-native.mjs"`,
    );
  }
  const mismatches = abiMismatches(raw.ABI);
  if (mismatches.length > 0) {
    throw new NativeBindingError(
      `the native addon at ${at} was built from other sources than this daemon (${mismatches.slice(0, 3).join('; ')}); rebuild it: node scripts/build-native.mjs (or npm ci)`,
    );
  }
  const session = raw as unknown as SessionRaw;
  const Fuse = class {
    static native = raw;
    static BINDING_PATH = at;
    constructor(mnt: string, ops: Partial<NativeOps>, opts: SessionOptions) {
      return new FuseSession(session, mnt, ops, opts, (m, cb) => (Fuse as unknown as FuseClass).unmount(m, cb));
    }
  };
  attachAddon(Fuse as unknown as Parameters<typeof attachAddon>[0], raw as Parameters<typeof attachAddon>[1]);
  return Fuse as unknown as FuseClass;
}
