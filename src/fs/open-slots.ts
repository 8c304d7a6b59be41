/**
 * Open handles and the open-file slots they hold: the handle table (and the
 * open status files), the caps per home, per caller uid and in all
 * (policy/openfiles.ts), and the slots granted ahead to the binding so that
 * it can open and create files itself.
 * A granted slot is a real slot under every cap, taken back before a cap
 * refuses an open of JS's; what the binding did with its slots (and the
 * RELEASEs it answered) is taken here by settle() before any request, control
 * command or metrics scrape, so no decision sees a handle the kernel let go.
 */
import { fstatSync } from 'node:fs';
import * as sys from '../backing/sys.js';
import { HomesError, isHomesError } from '../errors.js';
import type { Ledger, Undo } from '../policy/ledger.js';
import { OpenFileAccounting, type OpenSlot } from '../policy/openfiles.js';
import { OpenInodes } from './inodes.js';
import type { FsDeps } from './home-registry.js';
import { HandleTable, inodeKey, type Caller, type FileHandle, type HomeState } from './state.js';
import { StatusFiles } from './status.js';
import { ABI } from '../abi.js';

/** The records of names the binding made, each with the inode its create slot reserved. */
const MAKES_A_NAME = new Set<number>([ABI.REC_CREATED, ABI.REC_MKDIR, ABI.REC_SYMLINK, ABI.REC_LINK, ABI.REC_CREATED_CLOSED]);

/** The path prefix of the home under the mount, as the binding sees OPENDIR's paths. */
const homePrefix = (hs: HomeState) => `/${hs.backing.ref.tenant}/${hs.backing.ref.key}`;

/** How long an open at a cap waits for RELEASEs already on their way (see openSlot). */
const RELEASE_GRACE_MS = 5;

/**
 * Slots a home keeps granted to the binding per caller uid that opens there,
 * topped up after adoptions: a burst of opens longer than this meets JS once
 * (which grants again). Each is a slot of the home's maxOpenFiles, the uid's
 * and the daemon's, taken back the moment a cap would refuse an open
 * (openSlot).
 */
const NATIVE_OPEN_CREDITS = 32;
/** After a cap was met, no slot is granted to the binding under it for this long: JS's own opens come first. */
const CAP_PRESSURE_MS = 1000;

export abstract class OpenSlots extends OpenInodes {
  readonly handles = new HandleTable();
  /** open `.homesfs/status` files and their synthetic inode numbers */
  readonly statusFiles = new StatusFiles();
  /** open handles per home, per uid and in total, against their caps (see policy/openfiles.ts) */
  readonly openFiles: OpenFileAccounting;
  /** slots granted to the binding for native opens, by the handle number reserved with each */
  private readonly credits = new Map<number, { hs: HomeState; uid: number; slot: OpenSlot; policy: number; ledger: Ledger | null }>();
  /** slots granted to the binding and unused, per caller uid across homes */
  private readonly creditsOfUid = new Map<number, number>();
  /** caps met lately ('home:<id>', 'uid:<n>', 'all') and until when no slot is granted under them */
  private readonly capPressure = new Map<string, number>();
  /** homes, and the caller uids in each, to grant open and create slots to, soon */
  private readonly topUps = new Map<HomeState, { open: Set<number>; create: Set<number> }>();
  private releaseHandler: ((fh: number) => void) | null = null;

  constructor(deps: FsDeps) {
    super(deps);
    const caps = deps.openFiles;
    const dirs = deps.dirHandles;
    this.openFiles = new OpenFileAccounting({
      perUid: caps?.perUid ?? 0,
      // Each loaded home holds its directory's descriptors (descriptorsPerHome).
      total: () => (caps === undefined ? Number.MAX_SAFE_INTEGER : caps.forHandles - this.homes.size * this.descriptorsPerHome),
      ...(dirs ? { dirs: (uid: number, home) => dirs.counts(uid, homePrefix(home as HomeState)), changed: (uid: number, home) => this.publishOpenFiles(home as HomeState, uid) } : {}),
    });
    // The adoptions it takes ask for top-ups (wantCredits), granted at the next setImmediate.
    deps.attrs?.onSlotsLow?.(() => this.settle());
  }

  /**
   * What the binding checks OPENDIR against (dirhandles.c): the files uid has
   * open, the home's and all of them, as callers hold them (slots granted to
   * the binding and unused are not counted there: an OPENDIR may take their
   * room, see README "Open files"), with the caps. Told after every change.
   */
  publishOpenFiles(hs: HomeState, uid: number): void {
    const dirs = this.deps.dirHandles;
    if (!dirs) return;
    const cap = this.openFiles.cap;
    const uidFiles = uid === 0 ? 0 : this.openFiles.uidCount(uid) - (this.creditsOfUid.get(uid) ?? 0);
    dirs.files(uid, uidFiles, homePrefix(hs), this.openFilesOf(hs), hs.profile.maxOpenFiles, this.openFilesTotal, this.openFiles.perUidCap, Math.max(0, Math.min(cap, 2 ** 32 - 1)));
  }

  /**
   * A home to load must find its descriptors beside the files open now, and
   * the homes together may hold at most half of what the daemon's descriptors
   * allow beside its reserve (so open files always keep the other half). Past
   * that it is refused here (ENFILE, as an open is) rather than meeting
   * EMFILE in the reserve (limits.reserveFiles).
   */
  protected override roomForHome(id: string): void {
    const caps = this.deps.openFiles;
    if (caps === undefined) return;
    const homes = (this.homes.size + 1) * this.descriptorsPerHome;
    const fits = () => homes + this.openFiles.total <= caps.forHandles;
    // Slots granted to the binding and unused are no descriptors yet: they make room first.
    if (homes <= Math.floor(caps.forHandles / 2) && (fits() || (this.reclaimCredits() && fits()))) return;
    throw new HomesError(
      'DAEMON_FILES_EXHAUSTED',
      `the home ${id} cannot be loaded: ${this.homes.size} homes (${this.descriptorsPerHome} descriptors each) and ${this.openFilesTotal} open files hold what the daemon's descriptors allow beside its reserve`,
      { limit: caps.forHandles, scope: 'daemon' },
    );
  }

  /** (Re)publish whether the handle's FLUSH needs JS (NativePublication). */
  abstract gateFlush(h: FileHandle): void;
  /** (Re)publish the handle's descriptor to the data plane (NativePublication). */
  abstract publishData(h: FileHandle): void;

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

  /** Files open in the home, as callers see them (slots granted to the binding and unused are not files). */
  openFilesOf(hs: HomeState): number {
    return hs.openHandles - hs.openCredits;
  }

  /** Files open in all homes, likewise. */
  get openFilesTotal(): number {
    return this.openFiles.total - this.credits.size;
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
        // So do they under the per-uid cap, and directory handles (which may take what these hold unused) are counted in.
        const cap = hs.profile.maxOpenFiles;
        const [uidDirs, homeDirs] = this.deps.dirHandles?.counts(uid, homePrefix(hs)) ?? [0, 0];
        const perUid = this.openFiles.perUidCap;
        let most = cap > 0 ? Math.min(NATIVE_OPEN_CREDITS, Math.floor((cap - this.openFilesOf(hs) - homeDirs) / 4)) : NATIVE_OPEN_CREDITS;
        if (perUid > 0 && uid !== 0) most = Math.min(most, Math.floor((perUid - this.openFiles.uidCount(uid) - uidDirs) / 4) + (byUid.get(uid) ?? 0));
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
    const all = (this.creditsOfUid.get(uid) ?? 0) + delta;
    if (all > 0) this.creditsOfUid.set(uid, all);
    else this.creditsOfUid.delete(uid);
    this.publishOpenFiles(hs, uid);
  }

  /**
   * What the binding queued about native opens and creates: handles it opened
   * or files it made (adopted here), slots it gives back. Records are
   * [kind, fh, fd, published, dev, ino, open flags]; kinds 1 opened, 2 an open
   * slot back, 3 created, 4 a create slot back (its inode too), 5 a directory
   * made with a create slot's inode, 6 a symlink and 7 a hard link made so, 8
   * a file made so and closed before it reached here (fastpath_open.c
   * hs_fastpath_release).
   */
  private settleOpens(opens: BigUint64Array): void {
    // Every name the binding made counted first, per ledger together with the removals it made
    // since (Ledger.commitReservedInodes): one made and removed there before this batch came in
    // must not be taken off a count that does not hold it yet.
    const made = new Map<Ledger, number>();
    for (let i = 0; i < opens.length; i += 7) {
      const ledger = this.credits.get(Number(opens[i + 1]))?.ledger;
      if (ledger && MAKES_A_NAME.has(Number(opens[i]))) made.set(ledger, (made.get(ledger) ?? 0) + 1);
    }
    for (const [ledger, n] of made) ledger.commitReservedInodes(n);
    for (let i = 0; i < opens.length; i += 7) {
      const kind = Number(opens[i]);
      const fh = Number(opens[i + 1]);
      const credit = this.credits.get(fh);
      if (!credit) {
        // Cannot happen (every number the binding holds was granted here); never leave a descriptor behind.
        this.log.error({ fh, kind }, 'the binding reported a native open this daemon never granted');
        if (kind === ABI.REC_OPENED || kind === ABI.REC_CREATED) sys.close(Number(opens[i + 2])).catch(() => undefined);
        continue;
      }
      this.credits.delete(fh);
      this.countCredit(credit.hs, credit.uid, credit.ledger !== null, -1);
      if (kind === ABI.REC_MKDIR || kind === ABI.REC_SYMLINK || kind === ABI.REC_LINK || kind === ABI.REC_CREATED_CLOSED) {
        // A directory, a symlink or a hard link the binding made (dir.ts mkdir's, symlink's or link's step for step): the
        // slot's inode is its charge, all it has (every name counts as an inode; a directory and a symlink count no bytes,
        // a link's bytes stay the file's). The open-file slot and the handle number go back unused. A file the binding
        // made and closed before this: the same, its bytes charged by the binding as each write landed.
        const p = credit.hs.pending;
        if (p.length >= ABI.ACCT_LEN && Atomics.load(p, ABI.ACCT_BUSY) > 0n) Atomics.sub(p, ABI.ACCT_BUSY, 1n);
        credit.slot.release();
        this.handles.unreserve(fh);
        this.wantCredits(credit.hs, credit.uid, true);
        if (kind === ABI.REC_CREATED_CLOSED) this.grantBytes(credit.hs);
        continue;
      }
      if (kind === ABI.REC_UNUSED || kind === ABI.REC_UNUSED_CREATE) {
        // The inode goes back to the ledger it was reserved in (a rescan may have replaced the home's since).
        credit.ledger?.releaseReservedInode();
        credit.slot.release();
        this.handles.unreserve(fh);
        continue;
      }
      if (kind === ABI.REC_CREATED) {
        // Counted now (its inode above): the binding marked the home busy from before the file existed (fastpath_create.c).
        const p = credit.hs.pending;
        if (p.length >= ABI.ACCT_LEN && Atomics.load(p, ABI.ACCT_BUSY) > 0n) Atomics.sub(p, ABI.ACCT_BUSY, 1n);
      }
      const oflags = Number(opens[i + 6]);
      const writable = kind === ABI.REC_CREATED && (oflags & (sys.C.O_RDONLY | sys.C.O_WRONLY | sys.C.O_RDWR)) !== sys.C.O_RDONLY;
      this.adoptOpen(credit.hs, fh, Number(opens[i + 2]), Number(opens[i + 3]), opens[i + 4]!, opens[i + 5]!, credit.slot, credit.policy !== credit.hs.policyEpoch, {
        writable,
        append: kind === ABI.REC_CREATED && (oflags & sys.C.O_APPEND) !== 0,
        created: kind === ABI.REC_CREATED,
      });
      this.wantCredits(credit.hs, credit.uid, kind === ABI.REC_CREATED);
      if (kind === ABI.REC_CREATED) this.grantBytes(credit.hs);
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
    if (!policyChanged) {
      // Unchanged: what the binding published holds, and is JS's from now on (its generation in the binding may
      // have moved with another home's change, which stops a native handle until it is adopted, dataplane.c).
      if (published !== 0) this.deps.dataPlane?.setFlags(fh, published);
      return;
    }
    this.gateFlush(h);
    this.publishData(h);
    this.deps.attrs?.handle(h);
  }

  /**
   * Take everything the binding queued for JavaScript: RELEASEs it answered
   * and writes that landed whole. Called before every request JS serves,
   * every control command and metrics scrape, so no decision and no view ever
   * sees a handle the kernel has let go of, nor a write still waiting. The
   * RELEASEs are taken first: the kernel sends a handle's RELEASE only after
   * its last WRITE was answered, whose report is queued before that answer,
   * so every write of a handle closed here has its report in hand.
   */
  override settle(): void {
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

  /**
   * Where queued RELEASEs are carried out (the op table's release, src/fuse/ops.ts). The
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
}
