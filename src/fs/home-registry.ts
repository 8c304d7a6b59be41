/**
 * The registry of home states: one per home path, opened on first use (its
 * backing descriptor, profile and ledger, then the start-up scan), renamed,
 * forgotten, revalidated; the tenant pools the ledgers share; the gate that
 * holds back changes while a scan builds a ledger. A home's state is published
 * to the binding only while it is still the state of its path, and a ledger
 * replaced by a scan leaves and joins its tenant pool in one synchronous step.
 * What the binding may do in a home is decided above this (NativePublication);
 * this layer only says when to ask.
 */
import type { BackingStore } from '../backing/store.js';
import { HomesError } from '../errors.js';
import type { Logger } from '../log.js';
import { homeId, type HomeRef } from '../paths/parse.js';
import { ACCT_LEN, Ledger, TenantPool, type Limits } from '../policy/ledger.js';
import type { Profile } from '../policy/profiles.js';
import { RefusalBook } from '../policy/refusals.js';
import type { LedgerArea } from './ledger-area.js';
import type { AttrPublisher, DataPlane, KernelCache, ReleaseQueue, Utimensat } from './native-api.js';
import { scanHome } from './scan.js';

/** A home's ledger as a live upgrade hands it over (fs/handover.ts). */
export interface HandedLedger {
  home: string;
  /** the home's backing directory's inode when it was counted */
  ino: string;
  bytes: number;
  inodes: number;
}
import type { HomeState } from './state.js';
import type { RemovalClaims } from './removal-claims.js';

/** How often a lookup of a home re-checks its backing directory. */
const REVALIDATE_MS = 1000;

export interface ProfileChoice {
  name: string;
  profile: Profile;
  /** the profile's limits with any live budget override applied */
  limits: Limits;
}

export interface DirHandleCounts {
  counts(uid: number, prefix: string): readonly [number, number, number];
  files(uid: number, uidFiles: number, prefix: string, homeFiles: number, homeCap: number, total: number, capPerUid: number, capAll: number): void;
}

export interface FsDeps {
  store: BackingStore;
  log: Logger;
  profileFor: (ref: HomeRef) => ProfileChoice;
  /** the tenant's total byte budget across its homes, 0 = off */
  tenantBudgetFor: (tenant: string) => number;
  utimensat: Utimensat;
  /** mknod(2) (Node has none), provided by the addon (calls.c) */
  mknod: (path: string, mode: number, dev: number) => Promise<void>;
  /** fallocate(2) on a backing descriptor (Node has none), provided by the addon (calls.c) */
  fallocate: (fd: number, mode: number, offset: number, length: number) => Promise<void>;
  /**
   * renameat2(2) of a single component below one backing directory
   * descriptor to one below another, with RENAME_NOREPLACE or
   * RENAME_EXCHANGE (Node has none), provided by the addon (calls.c)
   */
  renameat2: (oldDirFd: number, oldName: string, newDirFd: number, newName: string, flags: number) => Promise<void>;
  /** the mount point: absolute link targets under <mount>/<tenant>/<key> stay in that home */
  mountRoot: string;
  /**
   * Open-file caps: per caller uid across homes (0 = off), and the
   * descriptors left for handles once the daemon's reserve is set aside (the
   * homes' own directory descriptors, one each, come out of it too). Absent:
   * no caps beyond the profiles'.
   */
  openFiles?: { perUid: number; forHandles: number };
  /**
   * The binding's directory handles (dirhandles.c), each one open file of its
   * caller uid, its home and the daemon: how many are open (uid's, under the
   * home's /<tenant>/<key>, in all), and where JS's open files and caps are
   * published for OPENDIR to check. Absent: no directory counts as a file.
   */
  dirHandles?: DirHandleCounts;
  /** the binding's data plane (config `fuse.nativeRead`); absent: every READ comes to JS */
  dataPlane?: DataPlane | null;
  /** the native getattr fast path's control plane, when it is on */
  attrs?: AttrPublisher;
  /** RELEASEs the binding answers itself (config `fuse.nativeRelease`); absent: every RELEASE comes to JS */
  releases?: ReleaseQueue | null;
  /** the claim table of removals (removal-claims.ts): the binding's, which its unlinks use too; absent: one of JS's own */
  removals?: RemovalClaims;
  /** the kernel's caches, told what the daemon changes behind them; absent: nothing is told (short timeouts only) */
  kernel?: KernelCache;
  /** where the ledgers keep their counts for a crash (crash survival on); absent: nowhere, a resume scans */
  ledgers?: LedgerArea | null;
  /**
   * Whether the file of a backing inode number is passed through now (config
   * `fuse.passthrough`: the kernel reads it for read-only opens made before its
   * home became a text home); absent: nothing is
   */
  passedThrough?: (ino: bigint) => boolean;
}

export abstract class HomeRegistry {
  /** the last refusals of each home and their counts (for `.homesfs/status` and metrics) */
  readonly refusals = new RefusalBook();
  protected readonly homes = new Map<string, Promise<HomeState>>();
  /** home states whose opening resolved and that were not forgotten since (synchronously at hand) */
  protected readonly loaded = new Set<HomeState>();
  /**
   * Ledgers a live upgrade's predecessor handed over, by home: taken by the
   * home's first open here instead of a start-up scan (adoptLedgers).
   */
  private readonly handedLedgers = new Map<string, HandedLedger>();
  #ledgerUnderflows = 0;
  private readonly pools = new Map<string, TenantPool>();
  /** start-up scans begin once this resolves (holdScans) */
  private scansMayStart: Promise<void> = Promise.resolve();
  readonly log: Logger;

  constructor(readonly deps: FsDeps) {
    this.log = deps.log;
  }

  /** Tell the binding whether it opens and creates in the home (NativePublication). */
  abstract refreshNativeOpen(hs: HomeState): void;
  /** Tell the binding whether it unlinks in the home (NativePublication). */
  abstract refreshNativeUnlink(hs: HomeState): void;
  /** Take everything the binding queued for JavaScript (OpenSlots). */
  abstract settle(): void;
  /** Refuse (DAEMON_FILES_EXHAUSTED) a home whose descriptors would not fit beside the open files (OpenSlots). */
  protected abstract roomForHome(id: string): void;

  /**
   * Descriptors each loaded home holds: its directory's, and the binding's
   * copy of it when the fast path is on (it dups each published home's).
   */
  get descriptorsPerHome(): number {
    return this.deps.attrs ? 2 : 1;
  }

  /**
   * Scans of homes opened from now on begin only once `until` resolves (a
   * live upgrade: the session is adopted first, so the mount's pause is not
   * shared with a tree walk; a home's changes wait for its scan as ever).
   */
  holdScans(until: Promise<void>): void {
    this.scansMayStart = until.catch(() => undefined);
  }

  /**
   * The ledgers of a live upgrade's predecessor (exact: taken in its pause,
   * with everything the binding queued settled). A home opened from now on
   * whose backing directory is still the one they were counted for (its
   * inode) starts with its ledger instead of a scan, so no write waits for
   * a tree walk after an upgrade; any other home is scanned as at any start.
   */
  adoptLedgers(ledgers: readonly HandedLedger[]): void {
    for (const l of ledgers) this.handedLedgers.set(l.home, l);
  }

  /** The ledgers to hand a successor: every loaded home whose ledger is built (call in the pause, settled). */
  handLedgers(): HandedLedger[] {
    const out: HandedLedger[] = [];
    for (const hs of this.loaded) {
      if (hs.scan !== 'done') continue;
      const { bytes, inodes } = hs.ledger.snapshot();
      out.push({ home: hs.backing.id, ino: String(hs.backing.ino), bytes, inodes });
    }
    return out;
  }

  get store(): BackingStore {
    return this.deps.store;
  }

  home(ref: HomeRef): Promise<HomeState> {
    const id = homeId(ref);
    let p = this.homes.get(id);
    if (!p) {
      try {
        this.roomForHome(id);
      } catch (err) {
        return Promise.reject(err);
      }
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
    await this.ledgerBuilt(hs);
    return hs;
  }

  /** Resolves once the home's gate is open with its ledger built; throws if it could not be built. */
  async ledgerBuilt(hs: HomeState): Promise<void> {
    // A rescan may close the gate again while we wait: wait until it stays open.
    for (let gate = hs.ready; ; gate = hs.ready) {
      await gate;
      if (gate === hs.ready) break;
    }
    // Without a ledger the budget cannot be kept exact: refuse changes rather than guess.
    if (hs.scan !== 'done') throw new HomesError('IO', `the ledger of ${hs.backing.id} could not be built: ${hs.scanError ?? 'unknown'}`);
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
    // Until the rescan's counts replace the ledger's, a crash must not trust them.
    this.deps.ledgers?.building(hs.backing.id);
    this.refreshNativeUnlink(hs);
    this.settle();
    return () => {
      hs.gateClosed = false;
      open();
      this.refreshNativeUnlink(hs);
    };
  }

  knownHomes(): Promise<HomeState>[] {
    return [...this.homes.values()];
  }

  /** A home renamed through the mount keeps its state (ledger, handles, descriptor) under the new name. */
  rekeyHome(from: HomeRef, to: HomeRef): void {
    const p = this.homes.get(homeId(from));
    this.homes.delete(homeId(from));
    this.refusals.rename(homeId(from), homeId(to));
    this.deps.ledgers?.rename(homeId(from), homeId(to));
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

  /**
   * The home is presented otherwise now (profile, owner, modes repaired):
   * the kernel drops the attributes it keeps for anything in it. Called once
   * the new presentation is what every answer gives, native ones included.
   */
  homePresentationChanged(ref: HomeRef): void {
    this.deps.kernel?.tree(`/${homeId(ref)}`);
  }

  /**
   * A name at the daemon's levels came or went behind the kernel's back (a
   * home or tenant made, removed or found replaced by the daemon itself):
   * the kernel drops its entry and its directory's attributes.
   */
  daemonNameChanged(id: string): void {
    this.deps.kernel?.entry(`/${id}`);
  }

  /** The home was deleted or replaced: drop its state and retire its descriptor. */
  forgetHome(ref: HomeRef): void {
    const p = this.homes.get(homeId(ref));
    this.refusals.forget(homeId(ref));
    this.homes.delete(homeId(ref));
    this.deps.ledgers?.forget(homeId(ref));
    this.deps.attrs?.pathGone(homeId(ref));
    // What the kernel keeps of the old home goes: its nodes' attributes, then
    // the name (resolved now, while the node table still names them).
    this.homePresentationChanged(ref);
    this.daemonNameChanged(homeId(ref));
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
    // What the check found stands for REVALIDATE_MS: the binding answers the home's own getattr meanwhile, as this does.
    if (now - hs.backing.checkedAt < REVALIDATE_MS) {
      this.deps.attrs?.homeChecked?.(hs, REVALIDATE_MS - (now - hs.backing.checkedAt));
      return hs;
    }
    hs.backing.checkedAt = now;
    if (await this.store.stillInPlace(hs.backing)) {
      this.deps.attrs?.homeChecked?.(hs, Math.max(0, REVALIDATE_MS - (Date.now() - now)));
      return hs;
    }
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

  /** Counts clamped at 0 by any home's ledger since start (each one logged; see watchSoft). */
  get ledgerUnderflows(): number {
    return this.#ledgerUnderflows;
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
    hs.ledger = new Ledger(hs.ledger.limits, counts, pool, hs.pending, hs.slot);
    this.deps.ledgers?.built(hs.backing.id);
    this.watchSoft(hs);
  }

  /**
   * One warn line each time the home's usage crosses a soft limit upward
   * (the ledger tells once per crossing, at the change that crossed or, for
   * growth the binding charged, at the ledger's next answer).
   */
  private watchSoft(hs: HomeState): void {
    // A clamped count means the ledger missed a charge: the home now counts
    // less than its disk holds, until `homesctl rescan`. Rare, and a bug.
    const ledger = hs.ledger;
    ledger.onUnderflow = (e) => {
      this.#ledgerUnderflows += 1;
      this.log.error({ home: hs.backing.id, what: e.what, count: e.count, delta: e.delta }, `ledger underflow: a ${e.what} count was clamped at 0 (homesctl rescan repairs it)`);
    };
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
    const handed = this.handedLedgers.get(backing.id);
    this.handedLedgers.delete(backing.id);
    const fromHandover = handed !== undefined && handed.ino === String(backing.ino) ? handed : null;
    // After a crash: the counts the dead daemon left, where nothing was in flight (ledger-area.ts).
    const area = this.deps.ledgers ?? null;
    let keptCounts = fromHandover === null ? (area?.adopt(backing.id, backing) ?? null) : null;
    if (keptCounts !== null && (await this.store.hasOrphans(backing).catch(() => true))) {
      this.log.info({ home: backing.id }, 'home ledger kept across the crash not used: the home keeps files unlinked while open (scanned)');
      keptCounts = null;
    }
    const slot = area?.bind(backing.id, backing, fromHandover !== null || keptCounts !== null) ?? null;
    // [released bytes, released inodes, then the binding's byte credit] (policy/ledger.ts)
    const pending = slot?.pending ?? new BigInt64Array(ACCT_LEN);
    // Kept counts are the ledger's from its first moment: what the binding added to the kept array
    // and the dead daemon's ledger had not taken yet is on top of them (a ledger replaced later
    // would take it into the discarded one at its detach).
    const ledger = new Ledger(limits, keptCounts ?? { bytes: 0, inodes: 0 }, this.pool(ref.tenant), pending, keptCounts !== null ? slot : null);
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
      nativeRename: null,
      openCredits: 0,
      creditsByUid: new Map(),
      createCreditsByUid: new Map(),
      policyEpoch: 0,
      slot,
    };
    this.watchSoft(hs);
    this.loaded.add(hs);
    this.refreshNativeOpen(hs);
    // A ledger kept across a crash, or the predecessor's in a live upgrade: exact, no scan, the home is ready now.
    const exact = keptCounts ?? fromHandover;
    if (exact !== null) {
      if (keptCounts === null) this.replaceLedger(hs, { bytes: exact.bytes, inodes: exact.inodes });
      hs.scan = 'done';
      if (keptCounts !== null) hs.ledgerKept = true;
      else hs.ledgerHanded = true;
      this.log.info({ home: backing.id, bytes: exact.bytes, inodes: exact.inodes }, keptCounts !== null ? 'home ledger kept across the crash' : 'home ledger handed over');
      markReady();
      this.refreshNativeUnlink(hs);
      return hs;
    }
    void this.scansMayStart.then(() => scanHome(this, hs)).finally(() => {
      markReady();
      this.refreshNativeUnlink(hs);
    });
    return hs;
  }
}
