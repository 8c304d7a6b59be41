/**
 * The fs layer's side of the contract with our addon (native/src): what it
 * provides (utimensat, the data plane, queued RELEASEs) and where the fs
 * layer publishes the state the addon answers from on the session's workers
 * (AttrPublisher). Types and flags only, plus the two rules that decide which
 * handles the addon may serve without JavaScript. No state lives here: the
 * fs layers and src/fuse/ both depend on it, and it only on the state types
 * (state.ts).
 */
import { ABI } from '../abi.js';
import type { Profile } from '../policy/profiles.js';
import type { Caller, FileHandle, HomeState } from './state.js';

import type { TimeSpec } from '../addon-raw.js';

export type { TimeSpec };

/** Nanosecond-exact utimensat(AT_SYMLINK_NOFOLLOW), provided by the addon (calls.c). */
export type Utimensat = (path: string, atime: TimeSpec, mtime: TimeSpec) => Promise<void>;

/**
 * Where the fs layer publishes what a native getattr/lookup needs (the FUSE
 * binding's fast path, src/fuse/fastpath.ts). Every call happens before the
 * change it reports is answered to anyone (an open, a control reply), so the
 * native side never answers from state JS has left behind.
 */
export interface AttrPublisher {
  /** publish or replace the home's presentation under its current path */
  publish(hs: HomeState): void;
  /** the home's policy or owner changed: publish again if it is published */
  republish(hs: HomeState): void;
  /** this home state is retired: drop its publication, wherever it is */
  homeGone(hs: HomeState): void;
  /** nothing may be answered natively under `/<id>` any more */
  pathGone(id: string): void;
  /** an inode whose size only JS knows (open in JS): +1 before the open is answered, -1 at the last close */
  inode(dev: bigint, ino: bigint, delta: 1 | -1): void;
  /**
   * the home's backing directory was found in place (revalidateHome), and JS
   * answers the home's own getattr without checking again for ms more: so
   * may the binding
   */
  homeChecked?(hs: HomeState, ms: number): void;
  /** that inode's charged size, after every change of its record (so a getattr of it need not come to JS) */
  inodeSize(dev: bigint, ino: bigint, size: number): void;
  /** whether the binding can decide writes' growth (config fuse.nativeWriteDecision and a binding that has it) */
  readonly writeDecisions: boolean;
  /** hand the inode's charged size to the binding, which grows it from acct's credit; false: not kept */
  wlDelegate(dev: bigint, ino: bigint, size: number, acct: BigInt64Array): boolean;
  /** take it back: the size; -1 a write decided there is in flight (ask again); -2 not handed over */
  wlRevoke(dev: bigint, ino: bigint): number;
  /** the charged size while the binding owns it, else -1 */
  wlSize(dev: bigint, ino: bigint): number;
  /** whether the binding can unlink (config fuse.nativeUnlink and a binding that has it) */
  readonly unlinks: boolean;
  /** hs.nativeUnlink changed: let the binding unlink there (with hs.pending), or stop it (returns once none is in flight) */
  mutable(hs: HomeState): void;
  /** an open file's fgetattr (fstat of its descriptor, presented by its home): before the open is answered, and when its home's policy changes */
  handle(h: FileHandle): void;
  /** before the handle's descriptor is closed */
  handleGone(fh: number): void;
  /** whether the binding can answer read-only opens (config fuse.nativeOpen and a binding that has it) */
  readonly opens: boolean;
  /** hs.nativeOpen changed: let the binding open there, or stop it (its unused slots come back through takeOpens) */
  openPolicy(hs: HomeState): void;
  /** one open-file slot taken for caller uid, with a reserved handle number; false: not kept (the home is not published for opens) */
  grant(hs: HomeState, fh: number, uid: number): boolean;
  /** whether the binding can make new files (config fuse.nativeCreate and a binding that has it) */
  readonly creates: boolean;
  /** the new file's mode as (asked & m) | or, if the profile's effectiveFileMode has that form */
  fileModeMasks(profile: Profile): { m: number; or: number } | null;
  /** whether the binding can make new directories where it makes files (config fuse.nativeMkdir) */
  readonly mkdirs: boolean;
  /** whether the binding can make new symlinks where it makes files (config fuse.nativeSymlink) */
  readonly symlinks: boolean;
  /** whether the binding can make hard links where it makes files (config fuse.nativeLink) */
  readonly links: boolean;
  /** the new directory's mode as (asked & m) | or, if the profile's effectiveDirMode has that form */
  dirModeMasks(profile: Profile): { m: number; or: number } | null;
  /** whether the binding can rename regular files within a home where it unlinks (config fuse.nativeRename) */
  readonly renames: boolean;
  /** hs.nativeRename changed: let the binding rename files there (with its depth limit), or stop it (returns once none is in flight) */
  renamePolicy(hs: HomeState): void;
  /** hs.nativeCreate changed: let the binding make files there, or stop it (its unused create slots come back through takeOpens) */
  createPolicy(hs: HomeState): void;
  /** one create slot (an open-file slot for uid and an inode the ledger reserved) with a reserved handle number; false: not kept */
  grantCreate(hs: HomeState, fh: number, uid: number): boolean;
  /** every unused slot of every home back through takeOpens */
  reclaim(): void;
  /**
   * [kind, fh, fd, published, dev, ino, open flags, ...]: 1 a handle the binding
   * opened, 2 an open slot it gives back, 3 a file it made, 4 a create slot it
   * gives back (with its inode), 5 a directory it made with a create slot's
   * inode (the open-file slot back), 7 a hard link it made with a create
   * slot's inode (the open-file slot back); null when none
   */
  takeOpens(): BigUint64Array | null;
  /**
   * fn() whenever the binding, making files, has used a caller's create slots
   * in a home down to a few: fn takes what it queued (takeOpens) and grants
   * more, before a burst of creates runs out and each further one comes to JS
   */
  onSlotsLow?(fn: () => void): void;
  clear(): void;
}

/**
 * The kernel's caches of names and attributes (the session's invalidation
 * queue, native/src/session/inval.c). The daemon is the only writer of the
 * backing tree, so the kernel keeps both for long (fuse.attrTimeout,
 * fuse.entryTimeout); whatever the daemon changes that the kernel did not
 * cause itself (a request it sent) is told here, as a virtual path
 * ("/tenant/key/a"). Each call only queues: it never waits for the kernel,
 * which may hold a directory's lock until a request the caller serves is
 * answered.
 */
export interface KernelCache {
  /** the name's entry, its node's attributes and its directory's (the node is presented otherwise now) */
  path(path: string): void;
  /** the attributes of every node at or below the path (a home presented otherwise: profile, owner) */
  tree(path: string): void;
  /** the name's entry and its directory's attributes (a name that came or went) */
  entry(path: string): void;
  /**
   * Resolves once everything queued before the call has reached the kernel
   * (or after `limitMs`, whichever is first): an admin command answers only
   * then, so what it changed is what the next `stat` shows. Never called
   * from a request's path (a send may wait for a directory lock that request
   * holds); the JS thread stays free meanwhile.
   */
  settled(limitMs?: number): Promise<boolean>;
}

/** hs.nativeOpen: the binding answers read-only opens there; their handles are published for native reads; with direct_io. */
export const NATIVE_OPEN_ON = ABI.OPEN_ON;
export const NATIVE_OPEN_READ = ABI.OPEN_DP_READ;
export const NATIVE_OPEN_DIRECT_IO = ABI.OPEN_DIRECT_IO;
/** (with native creates) a writable handle is published for native writes */
export const NATIVE_OPEN_WRITE = ABI.OPEN_DP_WRITE;

/**
 * RELEASEs the binding answered on a session worker thread (the kernel ignores their
 * result) and queued: JavaScript carries each out later, exactly as if the
 * request had come then. Until it is taken the handle is simply still open
 * here, which is what it would be had the kernel sent the RELEASE later.
 */
export interface ReleaseQueue {
  /** fhs queued since the last call, oldest first; null when none */
  take(): Float64Array | null;
  /** from now on RELEASE is queued; `poll` takes the queue on a timer while `busy` says handles are open */
  start(poll: () => void, busy: () => boolean): void;
  /** a request was served: the next poll comes soon */
  kick(): void;
  /** RELEASEs the binding has answered so far */
  answered(): number;
}

/** Published flags: READs answered natively; WRITEs decided here, written natively. */
/**
 * A profile's symlink rule as the binding takes it (fastPath.setSymlink): 0 it makes none (JS refuses),
 * 1 relative targets that stay in the home (an absolute one needs the home's paths, JS's), 2 any target.
 */
export const SYMLINK_RULE: Readonly<Record<Profile['symlinks'], 0 | 1 | 2>> = { deny: 0, 'inside-home': 1, any: 2 };

export const DP_READ = ABI.DP_READ;
export const DP_WRITE = ABI.DP_WRITE;

export interface DataPlaneStats {
  reads: number;
  bytes: number;
  /** reads of published handles handed to JavaScript (a backing error, an offset past 2^53) */
  fallbacks: number;
  writes: number;
  writeBytes: number;
  /** writes of published handles whose data JavaScript asked for after all */
  writeFallbacks: number;
  /** of `writes`, those whose growth the binding decided too (FsContext.handSize) */
  decided: number;
  /** writes of handed-over files that came to JS for their decision (credit short, a limit, JS holding the file) */
  decisionFallbacks: number;
}

/**
 * The binding's data plane (dataplane.c). READs of a handle published with
 * DP_READ are a pread on a session worker thread. WRITEs of a handle published with
 * DP_WRITE come here without their data (serveWrites): the charge is decided
 * by file.writeNative, the pwrite happens on a session worker thread. It serves only
 * what is published here; which handles qualify is decided in TypeScript
 * (readsNeedNoPolicy, writesNeedNoData).
 */
export interface DataPlane {
  /** which halves are on (fuse.nativeRead, fuse.nativeWrite) */
  readonly read: boolean;
  readonly write: boolean;
  /** before the open is answered; dev/ino/append name the inode a write decided in the binding charges (FsContext.handSize) */
  publish(fh: number, fd: number, flags: number, dev: bigint, ino: bigint, append: boolean): void;
  /** for the next request; the descriptor stays open */
  setFlags(fh: number, flags: number): void;
  /** before the descriptor is closed; waits for syscalls in flight */
  unpublish(fh: number): void;
  stats(): DataPlaneStats;
  /** end the waits of writes that landed whole (the binding queues them): before anything that may wait for a file's lock */
  settle(): void;
  /** where the decisions of DP_WRITE handles' writes are asked for */
  serveWrites(handler: (w: NativeWrite) => void): void;
}

/** One WRITE of a DP_WRITE handle, without its data (the binding holds it). */
export interface NativeWrite {
  readonly fh: number;
  readonly offset: number;
  readonly len: number;
  readonly path: string | null;
  readonly caller: Caller;
  /** Charged: pwrite at `start`. Resolves with its byte count, rejects with its errno. */
  /**
   * `wait`: the answer to the kernel waits for JS's (finish) even when the
   * write lands whole, so the file's next write comes after this one's end
   * (for a file handed back to the binding then: FsContext.mayHand).
   */
  proceed(start: number, wait?: boolean): Promise<number>;
  /** The write needs its data here after all: the binding sends it to ops.write. */
  fallback(): void;
  /** The answer to the kernel: bytes, or -errno (a refusal before proceed, or after a failed pwrite). */
  finish(result: number): void;
}

/**
 * Whether a READ of this profile's files is a plain pread of the backing file,
 * the same bytes file.read would return. Text homes stay in JavaScript: their
 * reads are where content rules (nothing readable past an incomplete
 * character) apply.
 */
export function readsNeedNoPolicy(profile: Profile): boolean {
  return profile.content !== 'utf8';
}

/**
 * Whether a WRITE of this profile's files needs only its offset and length to
 * be decided (the byte ledger), not its bytes. Text homes check the bytes.
 */
export function writesNeedNoData(profile: Profile): boolean {
  return profile.content !== 'utf8';
}
