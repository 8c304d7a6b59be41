import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { abiMismatches } from '../abi.js';
import { attachAddon } from './addon.js';
import { FuseSession, type Handed, type Kept, type SessionOptions } from './session.js';
import type { AddonRaw, DataPlaneStats, FastPathStats, WriteHandler } from '../addon-raw.js';
import type { TimeSpec } from '../fs/native-api.js';
import type { Serve } from './ops.js';

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

/** The native fast path (native/src/fastpath_*.c), as addon.ts wraps it: one per process. */
export interface FastPathNative {
  setHome(prefix: string, fd: number, dev: bigint, uid: number, gid: number, ownerFromStat: boolean, maxName: number, types: number, masks: Uint32Array, token: number): void;
  /** token absent: whatever is published there */
  removeHome(prefix: string, token?: number): boolean;
  /** pending: [bytes, inodes] the binding's unlinks add to; null: no native unlinks there (returns once none is in flight) */
  setMutable(prefix: string, token: number, pending: BigInt64Array | null): boolean;
  /** regular files with more allocated bytes are never unlinked natively: JS frees them off its thread */
  setFreeInlineMax(bytes: number): void;
  inode(dev: bigint, ino: bigint, delta: 1 | -1): void;
  /** the size JS charges an inode it tracks; getattrs of it are then answered natively */
  inodeSize(dev: bigint, ino: bigint, size: number): void;
  setHandle(fh: number, fd: number, uid: number, gid: number, ownerFromStat: boolean, types: number, masks: Uint32Array): void;
  removeHandle(fh: number): void;
  /** read-only opens answered natively (flags: ABI.OPEN_*) */
  setOpen(prefix: string, token: number, flags: number): boolean;
  /** UTIMENS (flags & 1), CHMOD (flags & 2, new = asked & chmodM unless equal to current & chmodK), CHOWN (4: owner-only's no-op, 8: lchown) by path */
  setAttrOps(prefix: string, token: number, flags: number, chmodM: number, chmodK: number): boolean;
  grant(prefix: string, token: number, fh: number, uid: number): boolean;
  /** CREATE of new names answered natively; one create slot (open-file slot for uid, reserved inode, fh) */
  setCreate(prefix: string, token: number, on: boolean, modeM: number, modeOr: number, maxDepth: number, ownerIsCaller: boolean): boolean;
  grantCreate(prefix: string, token: number, fh: number, uid: number): boolean;
  reclaim(): number;
  /** writes' growth decided natively for inodes handed over (acct: the home's BigInt64Array(8), policy/ledger.ts) */
  wlDelegate(dev: bigint, ino: bigint, size: number, acct: BigInt64Array): boolean;
  /** the size, now JS's; -1 a native write is in flight (ask again); -2 not handed over */
  wlRevoke(dev: bigint, ino: bigint): number;
  wlSize(dev: bigint, ino: bigint): number;
  /** files made natively in the home start handed over */
  setWriteCredit(prefix: string, token: number, on: boolean): boolean;
  takeOpens(): BigUint64Array | null;
  setReserved(names: string[]): void;
  enable(on: boolean): void;
  clear(): void;
  stats(): FastPathStats;
}

/** The daemon's Fuse class: the session, and the addon's other exports as addon.ts wraps them. */
export interface FuseClass {
  new (mnt: string, serve: Serve, opts: SessionOptions): FuseInstance;
  /** the addon itself, for the modules that take a part of it (a Pick of AddonRaw) */
  native: AddonRaw;
  /** where it was loaded from */
  BINDING_PATH: string;
  utimensat(path: string, atime: TimeSpec, mtime: TimeSpec, cb: (errno: number) => void): void;
  mknod(path: string, mode: number, dev: number, cb: (errno: number) => void): void;
  /** open directory handles counted per caller uid (0 not) and in all; past a cap (0: none) OPENDIR answers EMFILE */
  setDirHandleCaps(perUid: number, all: number): void;
  dirHandleStats(): { open: number; refused: number };
  /** directory handles open: uid's, under a home's "/<tenant>/<key>", in all */
  dirHandleCounts(uid: number, prefix: string): [number, number, number];
  /** JS's open files and caps, which OPENDIR counts its handles beside (each directory handle is one open file too) */
  setOpenFileCounts(uid: number, uidFiles: number, prefix: string, homeFiles: number, homeCap: number, total: number, capPerUid: number, capAll: number): void;
  /** fallocate(2) on the libuv threadpool; cb(0) or cb(-errno) */
  fallocate(fd: number, mode: number, offset: number, length: number, cb: (errno: number) => void): void;
  unmount(mnt: string, cb: (err: Error | null) => void): void;
  /** umount2(2) on the libuv threadpool: no child process, no descriptor. cb(0) or cb(-errno). */
  umount2(mnt: string, flags: number, cb: (errno: number) => void): void;
  /** RLIMIT_NOFILE: read it, or set it (0 keeps a value); res 0 or -errno, Infinity = unlimited */
  nofile(soft?: number, hard?: number): { res: number; soft: number; hard: number };
  /** the data plane (dataplane.c) */
  publish(fh: number, fd: number, flags: number, dev?: bigint, ino?: bigint, append?: boolean): void;
  setPublishFlags(fh: number, flags: number): boolean;
  unpublish(fh: number): boolean;
  setWriteHandler(handler: WriteHandler): void;
  /** [id, bytes, ...] of writes that landed whole since the last call (answered already); null when none */
  takeWriteReports(): Float64Array | null;
  /** wait: even a write that lands whole is answered only after writeDone (JS hands the file back to native decisions at its end) */
  writeDecision(id: number, offset: number, wait?: boolean): boolean;
  writeDone(id: number, result: number): boolean;
  dataPlaneStats(): DataPlaneStats;
  /** RELEASE answered on the session's worker and queued for takeReleases (true), or handed to JavaScript (false, the default) */
  setReleaseDeferred(on: boolean): void;
  /** [fh, ...] of the RELEASEs answered since the last call, oldest first; null when none */
  takeReleases(): Float64Array | null;
  /** the native fast path (fastpath_*.c) */
  fastPath: FastPathNative;
  /** opens of handles in a zero flush-gate slot answered with FOPEN_NOFLUSH; returns opens answered so */
  setNoFlush(on: boolean): number;
  noFlushCount(): { opens: number; flushes: number };
  /** one thread reads the device at a time, from the next mount on */
  setSingleReader(on: boolean): void;
  leadStats(): { on: boolean; handoffs: number; revocations: number; readWaits: number };
  /** drop the kernel's cached entry/attributes for a virtual path (kind: ABI.INVAL_*); queued, never waited for; -> notifications queued or -errno */
  invalidate(kind: number, path: string): number;
  /** notifications queued, sent (the kernel dropped something), not cached (it had nothing), failed, still pending */
  invalidationStats(): { queued: number; sent: number; notCached: number; failed: number; pending: number };
  /** the session's node table: nodes the kernel may name, of them reachable by inode number */
  nodeStats(): { nodes: number; byInode: number };
  /** handles across daemons (session/handles.c): this daemon's epoch, requests resent after a crash, of them answered EIO, dead handles reopened */
  handleStats(): { epoch: number; resent: number; refused: number; reopened: number };
  /** [entries queued, of them sent]: sent in the order queued */
  invalidationProgress(): [number, number];
  /** start importing a handed-over node table before the session is adopted; 0 or -errno */
  preimportNodes(nodes: Buffer): number;
  /** strict UTF-8, as C checks names (tests compare it with TextDecoder's) */
  _isValidUtf8(buf: Uint8Array): boolean;
}

export type { WriteHandler };

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
  let raw: AddonRaw;
  try {
    raw = require(at) as AddonRaw;
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
  const Fuse = class {
    static native = raw;
    static BINDING_PATH = at;
    constructor(mnt: string, serve: Serve, opts: SessionOptions) {
      return new FuseSession(raw, mnt, serve, opts, (m, cb) => (Fuse as unknown as FuseClass).unmount(m, cb));
    }
  };
  attachAddon(Fuse as unknown as Record<string, unknown>, raw);
  return Fuse as unknown as FuseClass;
}
