import { fstatSync } from 'node:fs';
import type { Dirent } from 'node:fs';
import { LRUCache } from 'lru-cache';
import { SlowFrees } from '../backing/freeing.js';
import { Turns } from '../policy/turns.js';
import { posix } from 'node:path';
import type { BackingStore } from '../backing/store.js';
import * as sys from '../backing/sys.js';
import { HomesError, isHomesError } from '../errors.js';
import type { Logger } from '../log.js';
import { checkComponent } from '../paths/names.js';
import { isReservedDir, isStatusPath, RESERVED_DIR, STATUS_NAME } from '../paths/reserved.js';
import { homeId, parseVirtualPath, splitLast, type HomeRef, type VirtualPath } from '../paths/parse.js';
import { ACCT_LEN, Ledger, TenantPool, type Undo } from '../policy/ledger.js';
import { symlinkTargetInsideHome, type Profile } from '../policy/profiles.js';
import { OpenFileAccounting, type OpenSlot } from '../policy/openfiles.js';
import { RefusalBook } from '../policy/refusals.js';
import type { Owner } from '../backing/store.js';
import type { HiddenNode } from './hidden.js';
import { JsRemovalClaims, type RemovalClaims } from './removals.js';
import { scanHome } from './scan.js';
import { StatusFiles } from './status.js';
import { HandleTable, Mutex, type FileHandle, type HomeState, type OpenInode, inodeKey } from './state.js';

/** How long an open at a cap waits for RELEASEs already on their way (see FsContext.openSlot). */
const RELEASE_GRACE_MS = 5;

export interface Caller {
  uid: number;
  gid: number;
  pid: number;
}

/** How often a lookup of a home re-checks its backing directory. */
const REVALIDATE_MS = 1000;

export type TimeSpec = 'now' | 'omit' | { sec: number; nsec: number };

/** Nanosecond-exact utimensat(AT_SYMLINK_NOFOLLOW), provided by the patched binding. */
export type Utimensat = (path: string, atime: TimeSpec, mtime: TimeSpec) => Promise<void>;

export interface ProfileChoice {
  name: string;
  profile: Profile;
  /** the profile's limits with any live budget override applied */
  limits: import('../policy/ledger.js').Limits;
}

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
  /** hs.nativeCreate changed: let the binding make files there, or stop it (its unused create slots come back through takeOpens) */
  createPolicy(hs: HomeState): void;
  /** one create slot (an open-file slot for uid and an inode the ledger reserved) with a reserved handle number; false: not kept */
  grantCreate(hs: HomeState, fh: number, uid: number): boolean;
  /** every unused slot of every home back through takeOpens */
  reclaim(): void;
  /**
   * [kind, fh, fd, published, dev, ino, open flags, ...]: 1 a handle the binding
   * opened, 2 an open slot it gives back, 3 a file it made, 4 a create slot it
   * gives back (with its inode); null when none
   */
  takeOpens(): BigUint64Array | null;
  clear(): void;
}

/** hs.nativeOpen: the binding answers read-only opens there; their handles are published for native reads; with direct_io. */
export const NATIVE_OPEN_ON = 1;
export const NATIVE_OPEN_READ = 2;
export const NATIVE_OPEN_DIRECT_IO = 4;
/** (with native creates) a writable handle is published for native writes */
export const NATIVE_OPEN_WRITE = 8;
/**
 * Slots a home keeps granted to the binding per caller uid that opens there,
 * topped up after adoptions: a burst of opens longer than this meets JS once
 * (which grants again). Each is a slot of the home's maxOpenFiles, the uid's
 * and the daemon's, taken back the moment a cap would refuse an open
 * (openSlot).
 */
const NATIVE_OPEN_CREDITS = 32;
/**
 * Byte credit a home keeps for the binding's write decisions (grantBytes):
 * under a budget, topped up to this when half is used, and never more than a
 * quarter of the free room; with no budget, a sum no home writes between two
 * requests JS serves. Each exhaustion costs one write's round trip to JS.
 */
const BYTE_CREDIT_CHUNK = 64 * 1024 * 1024;
const BYTE_CREDIT_MIN = 64 * 1024;
const BYTE_CREDIT_UNLIMITED = 2 ** 40;
/** After a cap was met, no slot is granted to the binding under it for this long: JS's own opens come first. */
const CAP_PRESSURE_MS = 1000;

export interface FsDeps {
  store: BackingStore;
  log: Logger;
  profileFor: (ref: HomeRef) => ProfileChoice;
  /** the tenant's total byte budget across its homes, 0 = off */
  tenantBudgetFor: (tenant: string) => number;
  utimensat: Utimensat;
  /** mknod(2) (Node has none), provided by the patched binding */
  mknod: (path: string, mode: number, dev: number) => Promise<void>;
  /** fallocate(2) on a backing descriptor (Node has none), provided by the patched binding */
  fallocate: (fd: number, mode: number, offset: number, length: number) => Promise<void>;
  /** the mount point: absolute link targets under <mount>/<tenant>/<key> stay in that home */
  mountRoot: string;
  /**
   * Open-file caps: per caller uid across homes (0 = off), and the
   * descriptors left for handles once the daemon's reserve is set aside (the
   * homes' own directory descriptors, one each, come out of it too). Absent:
   * no caps beyond the profiles'.
   */
  openFiles?: { perUid: number; forHandles: number };
  /** the binding's data plane (config `fuse.nativeRead`); absent: every READ comes to JS */
  dataPlane?: DataPlane | null;
  /** the native getattr fast path's control plane, when it is on */
  attrs?: AttrPublisher;
  /** RELEASEs the binding answers itself (config `fuse.nativeRelease`); absent: every RELEASE comes to JS */
  releases?: ReleaseQueue | null;
  /** the claim table of removals (removals.ts): the binding's, which its unlinks use too; absent: one of JS's own */
  removals?: RemovalClaims;
}

/** One remover of a name of an inode, entered in the claim table (FsContext.enterRemoval) until it leaves. */
export interface Removing {
  dev: bigint;
  ino: bigint;
  left: boolean;
}

/**
 * RELEASEs the binding answered on libfuse's thread (the kernel ignores their
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
export const DP_READ = 1;
export const DP_WRITE = 2;

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
 * DP_READ are a pread on libfuse's thread. WRITEs of a handle published with
 * DP_WRITE come here without their data (serveWrites): the charge is decided
 * by file.writeNative, the pwrite happens on libfuse's thread. It serves only
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
 * reads are where content rules (issue 8: nothing readable past an incomplete
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

/**
 * A one-shot permission for the control socket's helper process to rename a
 * home (or move it to a trash name) through the mount: renames at the home
 * level are otherwise refused. Matched on the caller's pid and both paths.
 */
export interface HomeRenameAdmission {
  pid: number;
  from: string;
  to: string;
  /** the daemon's own bookkeeping, run before the kernel hears success */
  onRenamed(): void;
}

export type HomePath = { kind: 'home'; home: HomeRef; rel: readonly string[] };

/**
 * Shared state of the FUSE-independent operations: the backing store, the
 * per-home ledgers and the handle table. Operations live in attr.ts, dir.ts and
 * file.ts and take this context.
 */
export class FsContext {
  readonly handles = new HandleTable();
  /** files unlinked while open, under the hidden name libfuse gave them (see hidden.ts) */
  readonly hidden = new Map<string, HiddenNode>();
  /** unlinks, renames-over and last closes that may free many blocks: off the JS thread, bounded per home */
  readonly slowFrees = new SlowFrees();
  /** who of several removers of an inode's last names settles it (removals.ts) */
  readonly removals: RemovalClaims;
  /** listings of big directories: one per home at a time, four in all (dir.ts) */
  readonly listings = new Turns(1, 4);
  /** the names of the big directories being streamed, as read (dir.ts streamDir): a few, whatever the directories' sizes */
  readonly streamedNames = new LRUCache<string, { version: string; names: Dirent<Buffer>[] }>({ max: 4 });
  /**
   * Published to the binding (setFlushGate): slot fh & 0xffff counts the open
   * handles in it whose FLUSH must reach JS. Every other FLUSH (one per close
   * of every descriptor) is answered on libfuse's thread: flush is a no-op in
   * JS unless the handle writes into a text home, which checks the tail.
   */
  readonly flushGate = new Uint16Array(65536);
  /** the last refusals of each home and their counts (for `.homesfs/status` and metrics) */
  readonly refusals = new RefusalBook();
  /** open `.homesfs/status` files and their synthetic inode numbers */
  readonly statusFiles = new StatusFiles();
  admission: HomeRenameAdmission | null = null;
  private readonly homes = new Map<string, Promise<HomeState>>();
  /** home states whose opening resolved and that were not forgotten since (synchronously at hand) */
  private readonly loaded = new Set<HomeState>();
  /** open handles per home, per uid and in total, against their caps (see policy/openfiles.ts) */
  readonly openFiles: OpenFileAccounting;
  private readonly pools = new Map<string, TenantPool>();
  readonly log: Logger;

  constructor(readonly deps: FsDeps) {
    this.log = deps.log;
    this.removals = deps.removals ?? new JsRemovalClaims();
    const caps = deps.openFiles;
    this.openFiles = new OpenFileAccounting({
      perUid: caps?.perUid ?? 0,
      // Each loaded home holds one directory descriptor of its own.
      total: () => (caps === undefined ? Number.MAX_SAFE_INTEGER : caps.forHandles - this.homes.size),
    });
  }

  /**
   * One open-file slot, or the refusal (OPEN_FILES_EXCEEDED or
   * DAEMON_FILES_EXHAUSTED, nothing changed). close(2) returns before the kernel's
   * RELEASE is served (it is queued, not awaited), so a caller that closes a
   * file and opens the next at once can meet its own slot still held: at a
   * cap, RELEASEs in flight get a moment (RELEASE_GRACE_MS) and the queue is
   * taken again, once, before the refusal stands. Slots granted to the
   * binding for native opens and not used yet are taken back first. Each
   * attempt counts synchronously, so concurrent opens still never pass a cap
   * together.
   */
  async openSlot(hs: HomeState, caller: Caller): Promise<OpenSlot> {
    const acquire = () => this.openFiles.acquire(hs, hs.profile.maxOpenFiles, caller.uid, hs.backing.id);
    const atCap = (err: unknown) => isHomesError(err) && (err.code === 'OPEN_FILES_EXCEEDED' || err.code === 'DAEMON_FILES_EXHAUSTED');
    try {
      return acquire();
    } catch (err) {
      if (!atCap(err)) throw err;
      // Whichever cap it was, the binding gets no slots under it for a while.
      const scope = (err as HomesError).details.scope;
      this.capPressure.set(scope === 'home' ? `home:${hs.backing.id}` : scope === 'uid' ? `uid:${caller.uid}` : 'all', Date.now() + CAP_PRESSURE_MS);
    }
    if (this.reclaimCredits()) {
      try {
        return acquire();
      } catch (err) {
        if (!atCap(err)) throw err;
      }
    }
    await new Promise((resolve) => setTimeout(resolve, RELEASE_GRACE_MS));
    if (!this.reclaimCredits()) this.settle();
    return acquire();
  }

  /**
   * One inode for a create, mkdir, symlink or mknod here (Ledger.addInode).
   * Inodes reserved for the binding's creates count against the cap: at the
   * cap they are taken back first (synchronously: the binding queues them,
   * settle gives them back), so they never take the place of this one.
   */
  addInode(hs: HomeState): Undo {
    try {
      return hs.ledger.addInode();
    } catch (err) {
      if (!isHomesError(err) || err.code !== 'INODES_EXCEEDED' || hs.ledger.reservedInodes === 0) throw err;
      this.capPressure.set(`home:${hs.backing.id}`, Date.now() + CAP_PRESSURE_MS);
    }
    this.reclaimCredits();
    return hs.ledger.addInode();
  }

  /** Every slot granted to the binding and not used, back (with whatever else is queued); whether there were any. */
  private reclaimCredits(): boolean {
    if (this.credits.size === 0) return false;
    this.deps.attrs?.reclaim();
    this.settle();
    return true;
  }

  /** slots granted to the binding for native opens, by the handle number reserved with each */
  private readonly credits = new Map<number, { hs: HomeState; uid: number; slot: OpenSlot; policy: number; ledger: Ledger | null }>();
  /** caps met lately ('home:<id>', 'uid:<n>', 'all') and until when no slot is granted under them */
  private readonly capPressure = new Map<string, number>();

  private underPressure(hs: HomeState, uid: number): boolean {
    const now = Date.now();
    for (const key of ['all', `home:${hs.backing.id}`, `uid:${uid}`]) {
      const until = this.capPressure.get(key);
      if (until === undefined) continue;
      if (until > now) return true;
      this.capPressure.delete(key);
    }
    return false;
  }
  /** homes, and the caller uids in each, to grant open and create slots to, soon */
  private readonly topUps = new Map<HomeState, { open: Set<number>; create: Set<number> }>();

  /** Files open in the home, as callers see them (slots granted to the binding and unused are not files). */
  openFilesOf(hs: HomeState): number {
    return hs.openHandles - hs.openCredits;
  }

  /** Files open in all homes, likewise. */
  get openFilesTotal(): number {
    return this.openFiles.total - this.credits.size;
  }

  /**
   * Whether the binding answers read-only opens in the home: it has the
   * native open, the home is loaded and not retired, and no read there needs
   * policy (binary content, so an open is only the walk and the regular-file
   * check, see file.ts openIn). Told to the binding before anything that
   * changed it is answered.
   */
  refreshNativeOpen(hs: HomeState): void {
    const attrs = this.deps.attrs;
    const on = attrs !== undefined && attrs.opens && this.loaded.has(hs) && !hs.backing.retired && hs.profile.content !== 'utf8';
    const flags = on
      ? NATIVE_OPEN_ON |
        (this.deps.dataPlane?.read && readsNeedNoPolicy(hs.profile) ? NATIVE_OPEN_READ : 0) |
        (this.deps.dataPlane?.write && writesNeedNoData(hs.profile) ? NATIVE_OPEN_WRITE : 0) |
        (hs.profile.directIo ? NATIVE_OPEN_DIRECT_IO : 0)
      : 0;
    if (flags !== hs.nativeOpen) {
      hs.nativeOpen = flags;
      attrs?.openPolicy(hs);
    }
    this.refreshNativeCreate(hs);
  }

  /**
   * Whether the binding makes new files in the home (createIn for a name that
   * does not exist): it opens there, the home is mutable (ledger built, no
   * rescan, no tenant budget: what native unlinks need too), no per-directory
   * entry limit needs a listing, and the new file's mode has the form
   * (asked & m) | or (fileModeMasks). Its owner on disk is diskOwner's: the
   * home's owner, or with chown 'allow' the caller, a setgid parent's group
   * kept (ownNew). Told to the binding before anything that changed it is
   * answered; off, its create slots come back with their inodes.
   */
  refreshNativeCreate(hs: HomeState): void {
    const attrs = this.deps.attrs;
    const masks = attrs?.creates && hs.nativeOpen !== 0 && hs.nativeUnlink && hs.profile.maxEntriesPerDir === 0 ? attrs.fileModeMasks(hs.profile) : null;
    const want = masks ? { ...masks, maxDepth: hs.profile.maxDepth, callerOwns: hs.profile.chown === 'allow' } : null;
    const was = hs.nativeCreate;
    const same =
      want === null ? was === null : was !== null && want.m === was.m && want.or === was.or && want.maxDepth === was.maxDepth && want.callerOwns === was.callerOwns;
    if (same) return;
    hs.nativeCreate = want;
    attrs?.createPolicy(hs);
  }

  /** Grant the binding slots for uid's opens (or creates) in the home, soon (not inside the request that used one: a cap check may follow). */
  wantCredits(hs: HomeState, uid: number, create = false): void {
    if (create ? hs.nativeCreate === null : hs.nativeOpen === 0) return;
    if (((create ? hs.createCreditsByUid : hs.creditsByUid).get(uid) ?? 0) >= NATIVE_OPEN_CREDITS) return;
    if (this.topUps.size === 0) setImmediate(() => this.topUp());
    let wanted = this.topUps.get(hs);
    if (!wanted) this.topUps.set(hs, (wanted = { open: new Set(), create: new Set() }));
    (create ? wanted.create : wanted.open).add(uid);
  }

  private topUp(): void {
    const wanted = [...this.topUps];
    this.topUps.clear();
    for (const [hs, { open, create: creates }] of wanted) {
      for (const [uid, create] of [...[...open].map((u) => [u, false] as const), ...[...creates].map((u) => [u, true] as const)]) {
        if (hs.nativeOpen === 0 || (create && hs.nativeCreate === null) || !this.loaded.has(hs) || hs.backing.retired) continue;
        if (this.underPressure(hs, uid)) continue;
        const byUid = create ? hs.createCreditsByUid : hs.creditsByUid;
        // Under a small maxOpenFiles the slots held for the binding stay a quarter of what is free, per kind and caller.
        const cap = hs.profile.maxOpenFiles;
        const most = cap > 0 ? Math.min(NATIVE_OPEN_CREDITS, Math.floor((cap - this.openFilesOf(hs)) / 4)) : NATIVE_OPEN_CREDITS;
        while ((byUid.get(uid) ?? 0) < most) {
          let slot: OpenSlot;
          try {
            slot = this.openFiles.acquire(hs, hs.profile.maxOpenFiles, uid, hs.backing.id);
          } catch {
            break; // at a cap: the binding's opens of this home come here, which decides
          }
          const ledger = create ? hs.ledger : null;
          try {
            ledger?.reserveInode();
          } catch {
            slot.release();
            break; // at the inode cap: creates come here, which refuses them
          }
          const fh = this.handles.reserve();
          if (!(create ? this.deps.attrs!.grantCreate(hs, fh, uid) : this.deps.attrs!.grant(hs, fh, uid))) {
            slot.release();
            ledger?.releaseReservedInode();
            this.handles.unreserve(fh);
            break;
          }
          this.credits.set(fh, { hs, uid, slot, policy: hs.policyEpoch, ledger });
          this.countCredit(hs, uid, ledger !== null, 1);
        }
      }
    }
  }

  private countCredit(hs: HomeState, uid: number, create: boolean, delta: 1 | -1): void {
    hs.openCredits += delta;
    const byUid = create ? hs.createCreditsByUid : hs.creditsByUid;
    const n = (byUid.get(uid) ?? 0) + delta;
    if (n > 0) byUid.set(uid, n);
    else byUid.delete(uid);
  }

  /**
   * What the binding queued about native opens and creates: handles it opened
   * or files it made (adopted here), slots it gives back. Records are
   * [kind, fh, fd, published, dev, ino, open flags]; kinds 1 opened, 2 an open
   * slot back, 3 created, 4 a create slot back (its inode too).
   */
  private settleOpens(opens: BigUint64Array): void {
    for (let i = 0; i < opens.length; i += 7) {
      const kind = Number(opens[i]);
      const fh = Number(opens[i + 1]);
      const credit = this.credits.get(fh);
      if (!credit) {
        // Cannot happen (every number the binding holds was granted here); never leave a descriptor behind.
        this.log.error({ fh, kind }, 'the binding reported a native open this daemon never granted');
        if (kind === 1 || kind === 3) sys.close(Number(opens[i + 2])).catch(() => undefined);
        continue;
      }
      this.credits.delete(fh);
      this.countCredit(credit.hs, credit.uid, credit.ledger !== null, -1);
      if (kind === 2 || kind === 4) {
        // The inode goes back to the ledger it was reserved in (a rescan may have replaced the home's since).
        credit.ledger?.releaseReservedInode();
        credit.slot.release();
        this.handles.unreserve(fh);
        continue;
      }
      if (kind === 3) credit.ledger?.commitReservedInode();
      const oflags = Number(opens[i + 6]);
      const writable = kind === 3 && (oflags & (sys.C.O_RDONLY | sys.C.O_WRONLY | sys.C.O_RDWR)) !== sys.C.O_RDONLY;
      this.adoptOpen(credit.hs, fh, Number(opens[i + 2]), Number(opens[i + 3]), opens[i + 4]!, opens[i + 5]!, credit.slot, credit.policy !== credit.hs.policyEpoch, {
        writable,
        append: kind === 3 && (oflags & sys.C.O_APPEND) !== 0,
        created: kind === 3,
      });
      this.wantCredits(credit.hs, credit.uid, kind === 3);
      if (kind === 3) this.grantBytes(credit.hs);
    }
  }

  /**
   * A handle the binding opened (read-only) or made (a new file): it did what
   * openIn and createIn do up to attach (the walk, the regular-file check, for
   * a new file its mode and owner, the inode counted open in its table, the
   * handle published for fgetattr and maybe the data plane); this is attach.
   */
  private adoptOpen(
    hs: HomeState,
    fh: number,
    fd: number,
    published: number,
    dev: bigint,
    ino: bigint,
    slot: OpenSlot,
    policyChanged: boolean,
    how: { writable: boolean; append: boolean; created: boolean },
  ): void {
    const key = inodeKey(dev, ino);
    let inode = hs.inodes.get(key);
    if (inode) {
      // The binding counted this open in its table; the record already holds the one count JS keeps per record.
      this.deps.attrs?.inode(dev, ino, -1);
    } else {
      // A file the binding made may be its own already (its writes grew it before this): the record reads the size there.
      inode = this.newInode(hs, dev, ino, how.created ? 0 : Number(fstatSync(fd, { bigint: true }).size), how.created);
    }
    inode.handles++;
    if (how.writable) inode.writers++;
    inode.fds.add(fd);
    const rec = inode;
    const h = this.handles.adopt(fh, () => ({ fh, fd, home: hs, inode: rec, writable: how.writable, append: how.append, rel: [], leftIncompleteTail: false, jsFlush: false, slot, published }));
    // The home's policy changed since the slot was granted (the binding opened with what it had then): publish what it is now.
    if (!policyChanged) return;
    this.gateFlush(h);
    this.publishData(h);
    this.deps.attrs?.handle(h);
  }

  get store(): BackingStore {
    return this.deps.store;
  }

  parse(path: string): VirtualPath {
    return parseVirtualPath(path);
  }

  /** A path that must lie inside a home (anything else is the daemon's tree). */
  parseHomePath(path: string, op: string): HomePath {
    const vp = parseVirtualPath(path);
    if (vp.kind !== 'home') throw new HomesError('DAEMON_TREE', `${op} on the daemon's tenant/home levels is not allowed`);
    if (op !== 'open' && isStatusPath(vp.rel)) {
      throw new HomesError('OP_REFUSED', `${RESERVED_DIR}/${STATUS_NAME} is presented by the daemon: it can only be read`);
    }
    return vp;
  }

  /** As parseHomePath, but the home directory itself is also refused. */
  parseInHome(path: string, op: string): HomePath & { dir: readonly string[]; name: string } {
    const vp = this.parseHomePath(path, op);
    const last = splitLast(vp.rel);
    if (last === null) throw new HomesError('DAEMON_TREE', `${op} of a home itself is done through the control socket`);
    return { ...vp, ...last };
  }

  home(ref: HomeRef): Promise<HomeState> {
    const id = homeId(ref);
    let p = this.homes.get(id);
    if (!p) {
      const opened = this.openHomeState(ref);
      p = opened;
      this.homes.set(id, opened);
      opened.then(
        // Published only while it is still the state of that path (a forget or rename may have come first).
        (hs) => {
          if (this.homes.get(homeId(hs.backing.ref)) === opened) this.deps.attrs?.publish(hs);
        },
        () => this.homes.delete(id),
      );
    }
    return p;
  }

  /** The home, once its ledger has been built by the start-up scan. */
  async readyHome(ref: HomeRef): Promise<HomeState> {
    const hs = await this.home(ref);
    // A rescan may close the gate again while we wait: wait until it stays open.
    for (let gate = hs.ready; ; gate = hs.ready) {
      await gate;
      if (gate === hs.ready) break;
    }
    // Without a ledger the budget cannot be kept exact: refuse changes rather than guess.
    if (hs.scan !== 'done') throw new HomesError('IO', `the ledger of ${hs.backing.id} could not be built: ${hs.scanError ?? 'unknown'}`);
    return hs;
  }

  /**
   * Run an operation that changes the home's tree or a file's size by name
   * (create, unlink, rename, truncate, …) once the home is ready. It is counted
   * from the moment the gate lets it through (no await in between) until it
   * ends, so a rescan that closes the gate can wait for the ones already inside.
   */
  async changing<T>(ref: HomeRef, fn: (hs: HomeState) => Promise<T>): Promise<T> {
    const hs = await this.readyHome(ref);
    hs.changing++;
    try {
      return await fn(hs);
    } finally {
      if (--hs.changing === 0) for (const wake of hs.drained.splice(0)) wake();
    }
  }

  /** Resolves when no changing operation is inside the home (call after closing its gate). */
  drained(hs: HomeState): Promise<void> {
    if (hs.changing === 0) return Promise.resolve();
    return new Promise((resolve) => hs.drained.push(resolve));
  }

  /** Hold back operations that change the home's tree (for a rescan); call the result to let them go. */
  closeGate(hs: HomeState): () => void {
    let open!: () => void;
    hs.ready = new Promise<void>((resolve) => (open = resolve));
    // Native unlinks and creates stop too (and the ones in flight are waited for) before the caller walks
    // the tree; the files made before that are adopted now, so the ledger the walk is held against has them.
    hs.gateClosed = true;
    this.refreshNativeUnlink(hs);
    this.settle();
    return () => {
      hs.gateClosed = false;
      open();
      this.refreshNativeUnlink(hs);
    };
  }

  /**
   * Whether the binding may unlink in the home now: its ledger is built and
   * no rescan holds the gate (a walk must see a still tree), and its tenant
   * has no budget (the pool's checks need every home's bytes at once, see
   * policy/ledger.ts). Turning it off returns once no native unlink of the
   * home is in flight, and the ledger has taken what they released.
   */
  refreshNativeUnlink(hs: HomeState): void {
    const attrs = this.deps.attrs;
    const want =
      attrs !== undefined && attrs.unlinks && this.loaded.has(hs) && !hs.backing.retired && hs.scan === 'done' && !hs.gateClosed && (hs.ledger.pool?.limit ?? 0) === 0;
    this.setNativeUnlink(hs, want);
  }

  private setNativeUnlink(hs: HomeState, on: boolean): void {
    if (on === hs.nativeUnlink) return;
    hs.nativeUnlink = on;
    // Byte credit goes with it: taken back first, then the binding waits for the writes that took some (mutable(hs)).
    if (!on) hs.ledger.reclaimBytes();
    // Made immutable, the binding gives its create slots back (fastpath_set_mutable) and makes no more files there.
    this.deps.attrs?.mutable(hs);
    if (!on) hs.ledger.takePending();
    this.refreshNativeCreate(hs);
  }

  /** A tenant budget is set or changed: its homes' unlinks come to JS first while it is on. */
  setTenantLimit(tenant: string, limit: number): void {
    const pool = this.pool(tenant);
    const homes = [...this.loaded].filter((hs) => hs.backing.ref.tenant === tenant);
    // Before a limit applies, so that no check of it ever misses a native removal.
    if (limit > 0) for (const hs of homes) this.setNativeUnlink(hs, false);
    pool.setLimit(limit);
    for (const hs of homes) this.refreshNativeUnlink(hs);
  }


  knownHomes(): Promise<HomeState>[] {
    return [...this.homes.values()];
  }

  /** A home renamed through the mount keeps its state (ledger, handles, descriptor) under the new name. */
  rekeyHome(from: HomeRef, to: HomeRef): void {
    const p = this.homes.get(homeId(from));
    this.homes.delete(homeId(from));
    this.refusals.rename(homeId(from), homeId(to));
    // Before the rename is answered: nothing is served natively under the old path.
    this.deps.attrs?.pathGone(homeId(from));
    if (!p) return;
    this.homes.set(homeId(to), p);
    void p.then((hs) => {
      hs.backing.ref = to;
      hs.backing.id = homeId(to);
      if (this.homes.get(homeId(to)) === p) this.deps.attrs?.publish(hs);
    });
  }

  /** The home's state if it is loaded (no scan is started). */
  loadedHome(ref: HomeRef): Promise<HomeState> | undefined {
    return this.homes.get(homeId(ref));
  }

  /** The home was deleted or replaced: drop its state and retire its descriptor. */
  forgetHome(ref: HomeRef): void {
    const p = this.homes.get(homeId(ref));
    this.refusals.forget(homeId(ref));
    this.homes.delete(homeId(ref));
    this.deps.attrs?.pathGone(homeId(ref));
    void p?.then(
      (hs) => {
        this.loaded.delete(hs);
        hs.nativeUnlink = false;
        hs.nativeOpen = 0;
        hs.nativeCreate = null;
        this.deps.attrs?.homeGone(hs);
        // A deleted or replaced home's bytes leave its tenant's total.
        hs.ledger.detach();
        this.store.retire(hs.backing);
      },
      () => undefined,
    );
  }

  /**
   * Re-check the home's backing directory (on lookups of the home itself). The
   * kernel asks after every change inside the home; a replaced or removed
   * directory is noticed within a second, not on every operation.
   */
  async revalidateHome(ref: HomeRef): Promise<HomeState> {
    const hs = await this.home(ref);
    const now = Date.now();
    if (now - hs.backing.checkedAt < REVALIDATE_MS) return hs;
    hs.backing.checkedAt = now;
    if (await this.store.stillInPlace(hs.backing)) return hs;
    // Unless a concurrent lookup already replaced it, drop the stale state and open afresh.
    const current = this.homes.get(homeId(ref));
    if (current && (await current.catch(() => null)) === hs) this.forgetHome(ref);
    return this.home(ref);
  }

  /** The tenant's byte pool (created on first use with the configured budget). */
  pool(tenant: string): TenantPool {
    let p = this.pools.get(tenant);
    if (!p) {
      p = new TenantPool(tenant, this.deps.tenantBudgetFor(tenant));
      this.pools.set(tenant, p);
    }
    return p;
  }

  /** A deleted tenant leaves the totals (kept while a home of it is still loaded). */
  forgetPool(tenant: string): void {
    for (const id of this.homes.keys()) if (id.startsWith(`${tenant}/`)) return;
    this.pools.delete(tenant);
  }

  /** Every tenant pool in use. */
  knownPools(): TenantPool[] {
    return [...this.pools.values()];
  }

  /**
   * A home's ledger rebuilt from a scan: the old one leaves the tenant pool and
   * the new one joins it in the same synchronous step, so the tenant total
   * never counts the home twice or not at all.
   */
  replaceLedger(hs: HomeState, counts: { bytes: number; inodes: number }): void {
    const pool = this.pool(hs.backing.ref.tenant);
    hs.ledger.detach();
    hs.ledger = new Ledger(hs.ledger.limits, counts, pool, hs.pending);
    this.watchSoft(hs);
  }

  /**
   * One warn line each time the home's usage crosses a soft limit upward
   * (the ledger tells once per crossing, at the change that crossed or, for
   * growth the binding charged, at the ledger's next answer).
   */
  private watchSoft(hs: HomeState): void {
    hs.ledger.onSoftCrossed = (e) => {
      this.log.warn(
        { home: hs.backing.id, what: e.what, used: e.used, soft: e.soft, hard: e.hard, profile: hs.profileName },
        e.what === 'bytes' ? 'home crossed its soft byte limit' : 'home crossed its soft inode limit',
      );
    };
  }

  /** Shut down: retire every home's descriptor. */
  async close(): Promise<void> {
    const all = [...this.homes.values()];
    this.homes.clear();
    this.deps.attrs?.clear();
    for (const p of all) {
      const hs = await p.catch(() => null);
      if (hs) this.store.retire(hs.backing);
    }
  }

  private async openHomeState(ref: HomeRef): Promise<HomeState> {
    const backing = await this.store.openHome(ref);
    const { name, profile, limits } = this.deps.profileFor(ref);
    // [released bytes, released inodes, then the binding's byte credit] (policy/ledger.ts)
    const pending = new BigInt64Array(ACCT_LEN);
    const ledger = new Ledger(limits, { bytes: 0, inodes: 0 }, this.pool(ref.tenant), pending);
    let markReady!: () => void;
    const ready = new Promise<void>((resolve) => (markReady = resolve));
    const hs: HomeState = {
      backing,
      profileName: name,
      profile,
      ledger,
      scan: 'pending',
      ready,
      inodes: new Map(),
      openHandles: 0,
      changing: 0,
      drained: [],
      gateClosed: false,
      pending,
      nativeUnlink: false,
      nativeOpen: 0,
      nativeCreate: null,
      openCredits: 0,
      creditsByUid: new Map(),
      createCreditsByUid: new Map(),
      policyEpoch: 0,
    };
    this.watchSoft(hs);
    this.loaded.add(hs);
    this.refreshNativeOpen(hs);
    void scanHome(this, hs).finally(() => {
      markReady();
      this.refreshNativeUnlink(hs);
    });
    return hs;
  }

  /**
   * The open-file record for the inode behind `fd`, created on first open.
   * A new record's size is read here, synchronously, with no await between the
   * read and the record becoming visible: a size read earlier (before an await)
   * may predate a truncate or write that finished meanwhile, and a record built
   * from it would let later writes up to that size pass as uncharged
   * overwrites. Once the record exists, every size change goes through it.
   * An inode whose last name is gone and that has no record was already given
   * back to the ledger by the unlink or rename that removed it: the open lost
   * that race and answers ENOENT.
   */
  attachInode(hs: HomeState, fd: number, dev: bigint, ino: bigint): OpenInode {
    const key = inodeKey(dev, ino);
    let inode = hs.inodes.get(key);
    if (!inode) {
      // Told to the binding first (its size is the ledger's from now on: the native getattr
      // must ask JS, and a native unlink must leave it to JS), then nlink read: a native
      // unlink either saw it open or removed the last name before this fstat.
      this.deps.attrs?.inode(dev, ino, 1);
      // fstat of an open descriptor on the local backing disk: metadata only, microseconds.
      const st = fstatSync(fd, { bigint: true });
      if (st.nlink === 0n) {
        this.deps.attrs?.inode(dev, ino, -1);
        throw new HomesError('NOT_FOUND', 'the file was removed while it was being opened');
      }
      inode = this.newInode(hs, dev, ino, Number(st.size));
    }
    return inode;
  }

  /** A new open-file record of hs, with its charged size published to the binding (which already counts the inode open). */
  private newInode(hs: HomeState, dev: bigint, ino: bigint, initial: number, madeNatively = false): OpenInode {
    // Every change of the charged size reaches the binding's table too: the
    // accessor makes one that forgets to tell it impossible.
    const attrs = this.deps.attrs;
    let size = initial;
    // Only a file the binding made can be its own before JS has a record of it (fastpath_set_write_credit).
    const owned = madeNatively && attrs?.writeDecisions ? attrs.wlSize(dev, ino) : -1;
    const inode: OpenInode = {
      key: inodeKey(dev, ino),
      dev,
      ino,
      get size() {
        if (inode.delegated) {
          const v = attrs!.wlSize(dev, ino);
          if (v >= 0) return v;
        }
        return size;
      },
      set size(v: number) {
        if (inode.delegated) throw new HomesError('IO', 'internal: a size the binding owns was set in JavaScript');
        size = v;
        attrs?.inodeSize(dev, ino, v);
      },
      delegated: owned >= 0,
      handles: 0,
      writers: 0,
      unlinked: false,
      incompleteTail: false,
      lock: new Mutex(),
      fds: new Set(),
    };
    if (!inode.delegated) attrs?.inodeSize(dev, ino, size);
    hs.inodes.set(inode.key, inode);
    return inode;
  }

  /**
   * A size change of JS's own (a write it decides, truncate, fallocate):
   * under the file's lock, with the size taken back from the binding first,
   * and handed over again after when nothing else waits for the lock.
   */
  sizeOp<T>(hs: HomeState, inode: OpenInode, fn: () => Promise<T>): Promise<T> {
    return inode.lock.run(async () => {
      if (inode.delegated) await this.takeSize(inode);
      try {
        return await fn();
      } finally {
        if (inode.lock.queued === 1) this.handSize(hs, inode);
      }
    });
  }

  /** The charged size back from the binding; a write it decided may still be in flight (no new one starts): wait it out. */
  private async takeSize(inode: OpenInode): Promise<void> {
    for (let tries = 0; ; tries++) {
      if (this.takeSizeNow(inode)) return;
      // One pwrite on libfuse's thread: yield to the event loop, then back off to a millisecond.
      await new Promise<void>((resolve) => (tries < 16 ? setImmediate(resolve) : setTimeout(resolve, 1)));
    }
  }

  /** Take the size back if no write the binding decided is in flight on it (false: ask again soon; no new one starts meanwhile). */
  private takeSizeNow(inode: OpenInode): boolean {
    const v = this.deps.attrs!.wlRevoke(inode.dev, inode.ino);
    if (v === -1) return false;
    inode.delegated = false;
    if (v >= 0) inode.size = v;
    return true;
  }

  /**
   * Hand the inode's charged size to the binding, which from now on decides
   * the growth of writes through handles published DP_WRITE, from byte credit
   * the ledger reserved (grantBytes). Only in binary homes with the data
   * plane's writes on; a file nobody writes is left to JS.
   */
  handSize(hs: HomeState, inode: OpenInode): void {
    if (inode.delegated || !this.mayHand(hs, inode)) return;
    const size = inode.size;
    if (!this.deps.attrs!.wlDelegate(inode.dev, inode.ino, size, hs.pending)) return;
    inode.delegated = true;
    this.grantBytes(hs);
  }

  /** Whether handSize would hand the inode over (so a write JS decides for it waits for JS's end before its answer: writeAt). */
  mayHand(hs: HomeState, inode: OpenInode): boolean {
    return this.deps.attrs?.writeDecisions === true && this.deps.dataPlane?.write === true && inode.writers > 0 && writesNeedNoData(hs.profile) && hs.inodes.get(inode.key) === inode;
  }

  /**
   * Keep the home's byte credit topped up: bytes of the budget the binding
   * may charge writes' growth from without asking (policy/ledger.ts). At most
   * a quarter of the free room and BYTE_CREDIT_CHUNK; only where native
   * removals are on too (ledger built, no rescan, no tenant budget). Taken
   * back before any growth would be refused.
   */
  grantBytes(hs: HomeState): void {
    if (!hs.nativeUnlink || !this.deps.attrs?.writeDecisions) return;
    const ledger = hs.ledger;
    const have = ledger.credit;
    const max = ledger.limits.maxHomeBytes;
    // Below a soft limit, credit stops at it: the write that crosses it is decided (and warned about) here, at once.
    const soft = ledger.soft().bytes;
    const softRoom = soft.soft > 0 && !soft.over ? soft.soft - ledger.bytes - ledger.reservedBytes : Infinity;
    if (max === 0 && softRoom === Infinity) {
      if (have < BYTE_CREDIT_UNLIMITED / 2) ledger.reserveBytes(BYTE_CREDIT_UNLIMITED - have);
      return;
    }
    if (have >= BYTE_CREDIT_CHUNK / 2) return;
    const free = max === 0 ? Infinity : max - ledger.bytes - ledger.reservedBytes;
    const add = Math.min(BYTE_CREDIT_CHUNK - have, Math.floor(free / 4), softRoom);
    if (add >= BYTE_CREDIT_MIN) ledger.reserveBytes(add);
  }

  /**
   * Before a removal (unlink, rename over it) that may take a name of the node
   * `st` describes, whose descriptor the caller holds until it has called
   * removal, or leaveRemoval if the removal failed.
   */
  enterRemoval(st: { dev: bigint; ino: bigint }): Removing {
    this.removals.enter(st.dev, st.ino);
    return { dev: st.dev, ino: st.ino, left: false };
  }

  /** A removal that did not happen (or whose outcome was settled): out of the claim table, once. */
  leaveRemoval(r: Removing, gone = false): boolean {
    if (r.left) return false;
    r.left = true;
    return this.removals.leave(r.dev, r.ino, gone);
  }

  /**
   * Account for a node whose name went away (unlink, rename over it). `nodeFd`
   * is an O_PATH descriptor of the node, read after the removal and
   * synchronously here, so nlink and size are current when the decision
   * is made (an fstat awaited earlier could predate the last write of a handle
   * that closed meanwhile). An open file keeps its bytes until last close.
   * Two removals of one name never interleave (the kernel holds the parent
   * directory's lock across the FUSE unlink/rename request), but two names of
   * one inode can go at once: `r` (enterRemoval, before the removal) makes one
   * of the removers that see nlink 0 settle the bytes.
   */
  settleRemoved(hs: HomeState, nodeFd: number, r: Removing): void {
    this.removal(hs, nodeFd, r)();
  }

  /**
   * settleRemoved's decision, with what the ledger gives back returned rather
   * than applied: for a caller whose
   * descriptor is the file's last reference, which frees the blocks when it
   * closes (closeRemoved).
   */
  removal(hs: HomeState, nodeFd: number, r: Removing): () => void {
    let st;
    try {
      st = fstatSync(nodeFd, { bigint: true });
    } catch (err) {
      // It does not fail on an O_PATH descriptor; if it did, this remover settles nothing.
      this.leaveRemoval(r);
      throw err;
    }
    const settles = this.leaveRemoval(r, st.nlink === 0n);
    // Every name counts as an inode (a hard link is one more, see scan-walk.ts): the
    // one that went is given back whatever remains. The bytes go with the last name,
    // or with the last close of a file still open: once, however many names went at the same time.
    const inode = settles ? hs.inodes.get(inodeKey(st.dev, st.ino)) : undefined;
    if (inode) inode.unlinked = true;
    const bytes = settles && !inode && st.isFile() ? Number(st.size) : 0;
    return () => {
      if (bytes > 0) hs.ledger.release(bytes);
      hs.ledger.removeInode();
    };
  }

  /**
   * Close the O_PATH descriptor of a removed node, `release` (from removal)
   * applied. The descriptor may be the file's last reference, and its close
   * frees the blocks: for a file slowToFree (checked before the removal) on the
   * threadpool, the ledger letting go once they are free; otherwise at once.
   */
  async closeRemoved(hs: HomeState, nodeFd: number, slow: boolean, release: (() => void) | null): Promise<void> {
    if (!slow) {
      release?.();
      return sys.close(nodeFd);
    }
    try {
      await this.slowFrees.close(hs.backing.id, nodeFd);
    } finally {
      release?.();
    }
  }

  /** Drop one handle's claim on an inode; the last close of an unlinked file frees its bytes (its inode went with its name). */
  detachInode(hs: HomeState, inode: OpenInode): void {
    inode.handles--;
    if (inode.handles > 0) return;
    // The last handle is gone, so no write of it is in flight (unpublish waited for it): the size comes back at once.
    if (inode.delegated && !this.takeSizeNow(inode)) this.log.error({ home: hs.backing.id, ino: String(inode.ino) }, 'the binding still writes a file whose last handle is gone');
    hs.inodes.delete(inode.key);
    this.deps.attrs?.inode(inode.dev, inode.ino, -1);
    // Its name was given back when it went (removal): what is left is the bytes.
    if (inode.unlinked) hs.ledger.release(inode.size);
  }

  /** (Re)publish whether the handle's FLUSH needs JS: before the open is answered, and whenever its home's profile changes. */
  gateFlush(h: FileHandle): void {
    const want = h.writable && h.home.profile.content === 'utf8';
    if (want === h.jsFlush) return;
    h.jsFlush = want;
    const slot = h.fh & 0xffff;
    this.flushGate[slot] = this.flushGate[slot]! + (want ? 1 : -1);
  }

  ungateFlush(h: FileHandle): void {
    if (!h.jsFlush) return;
    h.jsFlush = false;
    const slot = h.fh & 0xffff;
    this.flushGate[slot] = this.flushGate[slot]! - 1;
  }

  /**
   * (Re)publish the handle's descriptor to the data plane for what needs no
   * JavaScript (reads without policy, writes decided without their data), or
   * take it back: before the open is answered, and whenever its home's profile
   * changes.
   */
  publishData(h: FileHandle): void {
    const dp = this.deps.dataPlane;
    if (!dp) return;
    const p = h.home.profile;
    const want = (dp.read && readsNeedNoPolicy(p) ? DP_READ : 0) | (dp.write && h.writable && writesNeedNoData(p) ? DP_WRITE : 0);
    if (want === h.published) return;
    if (h.published === 0) dp.publish(h.fh, h.fd, want, h.inode.dev, h.inode.ino, h.append);
    else if (want === 0) dp.unpublish(h.fh);
    else dp.setFlags(h.fh, want);
    h.published = want;
    // No size change of JS's own in progress: the binding may decide this file's writes from now on.
    if ((want & DP_WRITE) !== 0 && h.inode.lock.queued === 0) this.handSize(h.home, h.inode);
  }

  /** Counters of the data plane, null when it is off. */
  /**
   * Take everything the binding queued for JavaScript: RELEASEs it answered
   * and writes that landed whole. Called before every request JS serves,
   * every control command and metrics scrape, so no decision and no view ever
   * sees a handle the kernel has let go of, nor a write still waiting. The
   * RELEASEs are taken first: the kernel sends a handle's RELEASE only after
   * its last WRITE was answered, whose report is queued before that answer,
   * so every write of a handle closed here has its report in hand.
   */
  settle(): void {
    const rq = this.deps.releases;
    const released = rq ? rq.take() : null;
    // After the RELEASEs: a handle the binding opened is queued before its open is answered, so before its RELEASE.
    // Whatever the binding queued about opens was granted here first: nothing is queued while no grant is out.
    const opens = this.credits.size > 0 ? this.deps.attrs!.takeOpens() : null;
    this.deps.dataPlane?.settle();
    if (rq) rq.kick();
    if (opens !== null) this.settleOpens(opens);
    if (released === null) return;
    for (const fh of released) this.releaseHandler!(fh);
  }


  private releaseHandler: ((fh: number) => void) | null = null;

  /**
   * Where queued RELEASEs are carried out (the FUSE adapter's release). The
   * binding starts answering RELEASE itself only once this is set.
   */
  serveReleases(handler: (fh: number) => void): void {
    const rq = this.deps.releases;
    if (!rq) return;
    const first = this.releaseHandler === null;
    this.releaseHandler = handler;
    // Polled while anything may still be released: open handles, and slots the binding may open with (opened and closed there, never seen here yet).
    if (first) rq.start(() => this.settle(), () => this.handles.size > 0 || this.statusFiles.openCount > 0 || this.credits.size > 0);
  }

  dataPlaneStats(): DataPlaneStats | null {
    return this.deps.dataPlane ? this.deps.dataPlane.stats() : null;
  }

  /** Before the handle's descriptor is closed: no native read or write may use it afterwards. */
  unpublishData(h: FileHandle): void {
    if (h.published === 0) return;
    h.published = 0;
    this.deps.dataPlane!.unpublish(h.fh);
  }

  /** A home's profile or budget changed (control socket, reload): republish what depends on it. */
  policyChanged(hs: HomeState): void {
    hs.policyEpoch++;
    this.refreshNativeOpen(hs);
    for (const h of this.handles.values()) {
      if (h.home !== hs) continue;
      this.gateFlush(h);
      this.publishData(h);
      this.deps.attrs?.handle(h);
    }
    this.deps.attrs?.republish(hs);
  }

  /** Name-shape rules of the profile for a new entry (length, depth, entries per directory). */
  async checkNewEntry(hs: HomeState, dirFd: number, dir: readonly string[], name: string): Promise<void> {
    checkComponent(name, hs.profile.maxNameBytes);
    if (hs.profile.maxDepth > 0 && dir.length + 1 > hs.profile.maxDepth) {
      throw new HomesError('OP_REFUSED', `nesting deeper than ${hs.profile.maxDepth} levels is not allowed in profile ${hs.profileName}`);
    }
    if (hs.profile.maxEntriesPerDir > 0) {
      const n = (await sys.readdirRaw(sys.fdPath(dirFd))).length;
      if (n >= hs.profile.maxEntriesPerDir) {
        throw new HomesError('OP_REFUSED', `a directory holds at most ${hs.profile.maxEntriesPerDir} entries in profile ${hs.profileName}`);
      }
    }
  }

  /**
   * Does a symlink standing in `dir` with this target stay in the home, under
   * the home's profile? Asked at creation and at every follow: the home's
   * path is taken as it is now (a renamed home's old absolute links lead out).
   * A profile that denies links still judges planted relative ones, so they
   * can be read.
   */
  linkStaysInside(hs: HomeState, dir: readonly string[], target: string): boolean {
    const rule = hs.profile.symlinks;
    if (rule === 'any') return true;
    if (rule === 'deny') return symlinkTargetInsideHome([...dir], target);
    const { tenant, key } = hs.backing.ref;
    return symlinkTargetInsideHome([...dir], target, {
      homePaths: [`${posix.resolve(this.deps.mountRoot)}/${tenant}/${key}`, ...hs.profile.homeAliases],
      systemPrefixes: hs.profile.symlinkSystemPrefixes,
    });
  }

  /**
   * Who owns a new backing node on disk: whom the profile presents. The home's
   * owner, or the creating caller where real ownership is shown (`chown:
   * allow`). The backing tree then says who owns what without the daemon, and
   * a profile switch never locks the owner out.
   */
  diskOwner(hs: HomeState, caller: Caller): Owner {
    return hs.profile.chown === 'allow' ? { uid: caller.uid, gid: caller.gid } : hs.backing.owner;
  }

  /**
   * Give a new backing node its owner on disk (diskOwner). Where real ownership
   * is shown (chown 'allow'), a setgid parent directory's group stays (the
   * backing create as root already inherited it, as a local filesystem does).
   * chown clears setuid/setgid on files, so a mode asked with them is applied
   * again after it, by descriptor (the open file, or an O_PATH descriptor).
   */
  async ownNew(hs: HomeState, dirFd: number, name: string, caller: Caller, mode: number, fileFd?: number): Promise<void> {
    const owner = this.diskOwner(hs, caller);
    const setgidParent = hs.profile.chown === 'allow' && (Number((await sys.fstat(dirFd)).mode) & 0o2000) !== 0;
    const gid = setgidParent ? -1 : owner.gid;
    if (fileFd !== undefined) await sys.fchown(fileFd, owner.uid, gid);
    else await sys.lchown(sys.fdPath(dirFd, name), owner.uid, gid);
    if ((mode & 0o6000) === 0) return;
    if (fileFd !== undefined) return void (await sys.fchmod(fileFd, mode & 0o7777));
    const fd = await this.store.openNode(dirFd, name);
    try {
      if (!(await sys.fstat(fd)).isSymbolicLink()) await sys.chmod(sys.fdPath(fd), mode & 0o7777);
    } finally {
      await sys.close(fd);
    }
  }

  /**
   * Before a new entry `dir/name` is made: `.homesfs` at the home root may only
   * be a directory (its `status` must stay reachable), and a `.homesfs` the
   * daemon presents without a backing directory is created first (one inode).
   */
  async prepareNewEntry(hs: HomeState, dir: readonly string[], name: string, isDir: boolean): Promise<void> {
    if (dir.length === 0 && name === RESERVED_DIR && !isDir) {
      throw new HomesError('OP_REFUSED', `${RESERVED_DIR} at the root of a home is reserved for a directory`);
    }
    if (!isReservedDir(dir)) return;
    await this.store.withDir(hs.backing, [], async (rootFd) => {
      const path = sys.fdPath(rootFd, RESERVED_DIR);
      const exists = await sys.lstat(path).then(
        () => true,
        (err) => (sys.sysCode(err) === 'ENOENT' ? false : Promise.reject(err)),
      );
      if (exists) return;
      const undo = this.addInode(hs);
      try {
        await sys.mkdir(path, 0o700);
      } catch (err) {
        undo();
        if (sys.sysCode(err) === 'EEXIST') return;
        throw err;
      }
      // Owned on disk by whom the profile presents: the home's owner (the daemon made it for them).
      await sys.lchown(path, hs.backing.owner.uid, hs.backing.owner.gid);
    });
  }

  /** Open an O_PATH descriptor for `name` in `dirFd` if it exists. */
  async probeNode(dirFd: number, name: string): Promise<number | null> {
    try {
      return await this.store.openNode(dirFd, name);
    } catch (err) {
      if (sys.sysCode(err) === 'ENOENT') return null;
      throw err;
    }
  }
}
