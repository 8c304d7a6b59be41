import type { BackingHome } from '../backing/store.js';
import { HomesError } from '../errors.js';
import type { HomeSlot } from './ledger-area.js';
import type { Ledger } from '../policy/ledger.js';
import type { OpenSlot } from '../policy/openfiles.js';
import type { Profile } from '../policy/profiles.js';

/** Who asked: the FUSE request's caller. */
export interface Caller {
  uid: number;
  gid: number;
  pid: number;
}

/** A FIFO mutex: writes to one file are checked and applied one at a time. */
export class Mutex {
  private tail: Promise<void> = Promise.resolve();
  #queued = 0;

  run<T>(fn: () => Promise<T>): Promise<T> {
    this.#queued++;
    const result = this.tail.then(fn);
    this.tail = result.then(
      () => void this.#queued--,
      () => void this.#queued--,
    );
    return result;
  }

  /** Runs holding or waiting for the lock (the one running included). */
  get queued(): number {
    return this.#queued;
  }
}

/**
 * What the daemon knows about a regular file while any handle has it open. Its
 * `size` is the logical size the ledger has charged for it; it is the truth
 * while the file is open (the kernel and other handles change it only through
 * us), so budget checks never wait on an fstat.
 */
export interface OpenInode {
  readonly key: string;
  readonly dev: bigint;
  readonly ino: bigint;
  /** read from the binding while it owns it (delegated); set only while JS does */
  size: number;
  /**
   * The binding owns the charged size and decides the growth of writes
   * published to it (FsContext.handSize); JS takes it back before any size
   * change of its own (FsContext.sizeOp).
   */
  delegated: boolean;
  handles: number;
  writers: number;
  /** unlinked while open: its bytes stay charged until the last close */
  unlinked: boolean;
  /**
   * Hidden by the session: one of its links is its orphan at the home's root
   * (hidden.ts), never a name anyone sees. Its nlink is presented one less,
   * and its handles' fgetattr is JavaScript's (the binding's would count the
   * orphan).
   */
  orphaned: boolean;
  /** text homes: the file currently ends inside a multi-byte character */
  incompleteTail: boolean;
  readonly lock: Mutex;
  /**
   * Descriptors of the handles open on it (taken out before their close is
   * issued): a file unlinked while open is served from one of them, so hiding
   * it costs no descriptor of its own (see hidden.ts).
   */
  readonly fds: Set<number>;
}

export type ScanState = 'pending' | 'scanning' | 'done' | 'failed';

export interface HomeState {
  readonly backing: BackingHome;
  /** both change when a profile override is set through the control socket */
  profileName: string;
  profile: Profile;
  /** replaced once by the start-up scan, before `ready` resolves */
  ledger: Ledger;
  scan: ScanState;
  /** the ledger came with a live upgrade (the predecessor's, exact at its pause): no start-up scan */
  ledgerHanded?: true;
  /** the ledger's counts came from the checkpoint a crash left (ledger-area.ts): no start-up scan */
  ledgerKept?: true;
  /** where the ledger keeps its counts for a crash (ledger-area.ts); null: nowhere (no area, or it is full) */
  slot: HomeSlot | null;
  scanError?: string;
  /** counts so far while the start-up scan runs */
  scanProgress?: { bytes: number; inodes: number };
  /** resolves when the ledger is built (or a rescan ends); mutating operations wait for it */
  ready: Promise<void>;
  readonly inodes: Map<string, OpenInode>;
  /** handles open or being opened (counted before the backing open; see FsContext.openSlot) */
  openHandles: number;
  /** operations that change the tree or a size by name, inside the gate right now */
  changing: number;
  /** wake-ups for a rescan waiting until `changing` is 0 */
  readonly drained: Array<() => void>;
  /** a rescan holds the gate closed */
  gateClosed: boolean;
  /** [bytes, inodes] the binding's native unlinks took out of the home; the ledger takes them (policy/ledger.ts) */
  readonly pending: BigInt64Array;
  /** the binding may unlink in this home now (FsContext.refreshNativeUnlink decides) */
  nativeUnlink: boolean;
  /** read-only opens the binding may answer in this home: 0 = none, else NATIVE_OPEN_* flags (FsContext.refreshNativeOpen decides) */
  nativeOpen: number;
  /**
   * the binding makes new files here, with this mode form and depth limit, and new directories with dir's mode form
   * (dir null: it makes none), and new symlinks under SYMLINK_RULE's rule (0: none) (FsContext.refreshNativeCreate
   * decides); null: it does none of these
   */
  nativeCreate: { m: number; or: number; maxDepth: number; callerOwns: boolean; dir: { m: number; or: number } | null; symlinks: 0 | 1 | 2; link: boolean } | null;
  /**
   * the binding renames regular files within this home (not open, over nothing or a regular file), the target at most
   * maxDepth deep (0: no limit) (FsContext.refreshNativeRename decides); null: it does not
   */
  nativeRename: { maxDepth: number } | null;
  /** of openHandles, the slots granted to the binding for native opens and creates and not used yet; per caller uid, each kind */
  openCredits: number;
  readonly creditsByUid: Map<number, number>;
  readonly createCreditsByUid: Map<number, number>;
  /** counts policy changes (FsContext.policyChanged): a native open granted before one is republished when adopted */
  policyEpoch: number;
}

export function inodeKey(dev: bigint, ino: bigint): string {
  return `${dev}:${ino}`;
}

export interface FileHandle {
  readonly fh: number;
  readonly fd: number;
  readonly home: HomeState;
  readonly inode: OpenInode;
  readonly writable: boolean;
  readonly append: boolean;
  /** its place under the open-file caps, given back at release */
  readonly slot: OpenSlot;
  /** this handle wrote the bytes that left an incomplete character at EOF */
  leftIncompleteTail: boolean;
  /** components below the home, for log lines only (may be stale after a rename) */
  readonly rel: readonly string[];
  /** counted in the flush gate: its FLUSH must reach JS (see FsContext.gateFlush) */
  jsFlush: boolean;
  /** what is published to the data plane for it: DP_READ | DP_WRITE (see FsContext.publishData) */
  published: number;
}

/** fh numbers from here up are the daemon's own: status files, then the self-check file. */
export const RESERVED_FH_FROM = 0xff000000;
/** The self-check file's fh; status-file handles use RESERVED_FH_FROM up to below it. */
export const SELFCHECK_FH = 0xfffffff0;

/**
 * fh numbers handed to the kernel. 0 is never used: the binding treats fh 0 as
 * "no handle".
 */
export class HandleTable {
  private readonly byFh = new Map<number, FileHandle>();
  /** numbers handed to the binding for opens it answers itself (adopt or unreserve) */
  private readonly reserved = new Set<number>();
  /** numbers the kernel holds with no handle behind them (a handed-over handle refused): kept out of use until their RELEASE */
  private readonly dead = new Set<number>();
  private next = 1;

  private taken(fh: number): boolean {
    return this.byFh.has(fh) || this.reserved.has(fh) || this.dead.has(fh) || fh === 0 || fh >= RESERVED_FH_FROM;
  }

  private take(): number {
    while (this.taken(this.next)) this.next = (this.next + 1) >>> 0;
    const fh = this.next;
    this.next = (this.next + 1) >>> 0;
    return fh;
  }

  /** The number the next new handle is looked for from (a live upgrade carries it over). */
  get nextNumber(): number {
    return this.next === 0 || this.next >= RESERVED_FH_FROM ? 1 : this.next;
  }

  /** Look for the next new handle's number from `fh` on (numbers in use are skipped as always). */
  resumeAt(fh: number): void {
    this.next = Number.isInteger(fh) && fh > 0 && fh < RESERVED_FH_FROM ? fh : 1;
  }

  /**
   * A handle under a number of the caller's choice: one the kernel already
   * holds (a live upgrade hands it over). Throws BAD_HANDLE, before `make` is
   * called, when the number is outside the handles' range or in use.
   */
  claim(fh: number, make: (fh: number) => FileHandle): FileHandle {
    if (!Number.isInteger(fh) || this.taken(fh)) throw new HomesError('BAD_HANDLE', `handle ${fh} cannot be claimed: out of range or in use`);
    const h = make(fh);
    this.byFh.set(fh, h);
    return h;
  }

  /**
   * A number the kernel holds that has no handle here (every request on it is
   * EBADF): no new handle gets it before the kernel's RELEASE of it (remove),
   * or that RELEASE would close the new one.
   */
  bury(fh: number): void {
    if (Number.isInteger(fh) && !this.taken(fh)) this.dead.add(fh);
  }

  add(make: (fh: number) => FileHandle): FileHandle {
    const h = make(this.take());
    this.byFh.set(h.fh, h);
    return h;
  }

  /** A number no other handle gets until it is adopted or unreserved. */
  reserve(): number {
    const fh = this.take();
    this.reserved.add(fh);
    return fh;
  }

  unreserve(fh: number): void {
    this.reserved.delete(fh);
  }

  /** The handle the binding opened under a reserved number. */
  adopt(fh: number, make: (fh: number) => FileHandle): FileHandle {
    if (!this.reserved.delete(fh)) throw new HomesError('BAD_HANDLE', `handle ${fh} was not reserved`);
    const h = make(fh);
    this.byFh.set(fh, h);
    return h;
  }

  get(fh: number): FileHandle {
    const h = this.byFh.get(fh);
    if (!h) throw new HomesError('BAD_HANDLE', `unknown file handle ${fh}`);
    return h;
  }

  remove(fh: number): FileHandle | undefined {
    this.dead.delete(fh);
    const h = this.byFh.get(fh);
    this.byFh.delete(fh);
    return h;
  }

  get size(): number {
    return this.byFh.size;
  }

  values(): IterableIterator<FileHandle> {
    return this.byFh.values();
  }
}
