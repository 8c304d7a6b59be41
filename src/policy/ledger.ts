/**
 * The exact per-home budget ledger.
 *
 * PURE and synchronous on purpose: the fs layer calls `resize`/`addInode`
 * BEFORE its first `await` for an operation, so check-and-reserve is one
 * uninterrupted step on the JS thread. Any number of concurrent writers then
 * cannot push a home past its budget by a single byte: each reservation sees
 * every earlier one. If the backing operation fails, the returned undo gives
 * the reservation back.
 *
 * What is counted (the definition, README must say the same):
 *  - bytes: the sum of the LOGICAL sizes of the home's regular files (a sparse
 *    file counts its size; directories, symlinks and metadata count 0), plus
 *    files that are unlinked but still open until their last close (`release`).
 *  - inodes: files and directories (and symlinks, where a profile allows them).
 *
 * Limits are numbers of bytes/inodes; 0 means "off" for each one.
 *
 * Soft limits (`softHomeBytes`, `softInodes`) refuse nothing: they are warn
 * thresholds. The ledger keeps, for each, whether usage is above it, and
 * calls its `onSoftCrossed` listener once each time usage goes from at or
 * below to above (not on every change while above; again after it went back
 * down and crosses again). A ledger built already above (start-up scan,
 * rescan) or a soft limit lowered under usage sets the state without a call:
 * only growth crosses. A soft limit above the hard limit in force (a budget
 * override lowered under it) counts as the hard limit.
 *
 * A tenant's total budget is a `TenantPool` shared by the ledgers of all its
 * homes: each ledger adds every byte delta it applies to its pool in the same
 * synchronous step, and checks the pool's limit with its own. So the pool's
 * bytes are always the sum of its attached ledgers' bytes, a refused request
 * changes neither, and an undo restores both.
 *
 * Releases made elsewhere: with the binding's native unlink, a file's last
 * name can go on a session worker thread, which adds what left the home to the
 * ledger's `pending` pair [bytes, inodes] (atomically). The ledger takes that
 * pair before it answers anything (every getter, check and change), so no
 * decision is ever made on counts that miss a removal. Only releases arrive
 * there: a native removal can only make a later check more lenient, never let
 * one pass that should not. A tenant with a budget keeps its homes' removals
 * in JavaScript (the pool checks every home's bytes at once); an unbudgeted
 * pool takes its members' pending pairs when its total is read.
 *
 * Byte credit (the binding's write decisions, fastpath_write.c): the same
 * shared array goes on with [grown, credit, maxFile, inflight, refund, -].
 * `reserveBytes` puts bytes of the budget into `credit`;
 * the binding charges writes' growth from it (never more than is there, never
 * past maxFile) and adds what it charged to `grown`, or what it took and did
 * not use to `refund`. Reserved bytes count against the home's budget in
 * every check, but in no count or view until the binding used them (taken
 * from `grown` like a release). Before a growth would be refused, the unused
 * credit is taken back (`reclaimBytes`) and the check made again, so a
 * refusal is as exact as without credit. Credit is only given where the
 * tenant has no budget (as native removals).
 */

import { HomesError } from '../errors.js';
import { ABI } from '../abi.js';

export interface Limits {
  /** sum of logical file sizes in the home, 0 = off */
  maxHomeBytes: number;
  /** files + directories in the home, 0 = off */
  maxInodes: number;
  /** logical size of any one file, 0 = off */
  maxFileBytes: number;
  /** warn threshold on the home's bytes, 0 or absent = off */
  softHomeBytes?: number;
  /** warn threshold on the home's inodes, 0 or absent = off */
  softInodes?: number;
}

export type SoftWhat = 'bytes' | 'inodes';

/** What a listener hears when a count is clamped at 0: the count before, and the change that would have taken it below. */
export interface Underflow {
  what: 'bytes' | 'inodes';
  count: number;
  delta: number;
}

/** What a listener hears when usage crosses a soft limit upward. */
export interface SoftCrossing {
  what: SoftWhat;
  /** usage right after the change that crossed */
  used: number;
  soft: number;
  /** the hard limit in force, 0 = off */
  hard: number;
}

/** One soft limit as views show it: the threshold in force (0 = off) and whether usage is above it. */
export interface SoftState {
  soft: number;
  over: boolean;
}

export interface LedgerSnapshot {
  bytes: number;
  inodes: number;
  limits: Limits;
}

/** Undo one reservation. Idempotent: a second call does nothing. */
export type Undo = () => void;

/** Slots of the shared array (see the file comment), as native/src/abi.h defines them. */
export const { ACCT_RELEASED_BYTES, ACCT_RELEASED_INODES, ACCT_GROWN, ACCT_CREDIT_BYTES, ACCT_MAXFILE, ACCT_INFLIGHT, ACCT_REFUND, ACCT_LEN } = ABI;

function assertCount(what: string, n: number): void {
  // Sizes arrive from stat() and FUSE offsets; a NaN or fraction here would
  // poison the ledger forever, so refuse it at the door.
  if (!Number.isSafeInteger(n) || n < 0) {
    throw new HomesError('INVALID_ARGUMENT', `ledger: ${what} must be a non-negative integer`, { [what]: n });
  }
}

function checkedLimits(l: Limits): Limits {
  assertCount('maxHomeBytes', l.maxHomeBytes);
  assertCount('maxInodes', l.maxInodes);
  assertCount('maxFileBytes', l.maxFileBytes);
  if (l.softHomeBytes !== undefined) assertCount('softHomeBytes', l.softHomeBytes);
  if (l.softInodes !== undefined) assertCount('softInodes', l.softInodes);
  return Object.freeze({
    maxHomeBytes: l.maxHomeBytes,
    maxInodes: l.maxInodes,
    maxFileBytes: l.maxFileBytes,
    ...(l.softHomeBytes !== undefined ? { softHomeBytes: l.softHomeBytes } : {}),
    ...(l.softInodes !== undefined ? { softInodes: l.softInodes } : {}),
  });
}

/**
 * The soft limit in force: off (0) when unset, and never above a hard limit
 * that is on (a budget override lowered under the soft limit warns at the
 * budget, not never).
 */
export function effectiveSoft(soft: number | undefined, hard: number): number {
  const s = soft ?? 0;
  if (s === 0) return 0;
  return hard > 0 ? Math.min(s, hard) : s;
}

/** Usage is above a soft limit that is on. */
export function overSoft(used: number, soft: number): boolean {
  return soft > 0 && used > soft;
}

function once(fn: () => void): Undo {
  let done = false;
  return () => {
    if (done) return;
    done = true;
    fn();
  };
}

/**
 * One tenant's byte total across its homes, and its optional limit (0 = off).
 * Only ledgers change `bytes` (through `charge`), so it is the sum of the
 * attached ledgers' bytes. Like a home, a tenant may be over a lowered limit:
 * that only refuses growth.
 */
export class TenantPool {
  #bytes = 0;
  #limit: number;
  #underflows = 0;
  readonly #members = new Set<Ledger>();

  constructor(
    readonly tenant: string,
    limit = 0,
  ) {
    assertCount('tenant limit', limit);
    this.#limit = limit;
  }

  get bytes(): number {
    // A budgeted pool's homes have no native removals (see the file comment).
    if (this.#limit === 0) for (const m of this.#members) m.takePending();
    return this.#bytes;
  }

  get limit(): number {
    return this.#limit;
  }

  get underflows(): number {
    return this.#underflows;
  }

  /** For Ledger only: membership, so that the total can take the members' pending releases. */
  join(l: Ledger): void {
    this.#members.add(l);
  }

  leave(l: Ledger): void {
    this.#members.delete(l);
  }

  setLimit(limit: number): void {
    assertCount('tenant limit', limit);
    this.#limit = limit;
  }

  /** For Ledger only: apply a delta a home ledger has applied to itself. */
  charge(delta: number): void {
    const next = this.#bytes + delta;
    if (next < 0) {
      this.#underflows += 1;
      this.#bytes = 0;
      return;
    }
    this.#bytes = next;
  }
}

/**
 * Where a ledger keeps its counts for a crash to find (fs/ledger-area.ts): every
 * change stored as it is applied, and the taking of the binding's array
 * marked busy from before it empties the array until the counts are stored.
 */
export interface LedgerCheckpoint {
  store(bytes: number, inodes: number): void;
  busy(delta: 1 | -1): void;
}

export class Ledger {
  #bytes: number;
  #inodes: number;
  /** inodes reserved for creates the binding may make (see reserveInode); not in #inodes until committed */
  #reserved = 0;
  /** bytes put in the binding's credit and not yet used (in #bytes) or taken back */
  #reservedBytes = 0;
  #limits: Limits;
  #underflows = 0;
  #pool: TenantPool | null;
  readonly #pending: BigInt64Array | null;
  /** dropped at detach: a replaced ledger some credit still names must not write over its successor's counts */
  #checkpoint: LedgerCheckpoint | null;
  #overSoftBytes = false;
  #overSoftInodes = false;
  /** Told once per upward crossing of a soft limit (see the file comment); it must not throw. */
  onSoftCrossed: ((e: SoftCrossing) => void) | null = null;
  /**
   * Told each time a count would have gone below 0 and was clamped there: the
   * ledger missed a charge (a bug), and now counts less than the disk holds
   * until a rescan. It must not throw.
   */
  onUnderflow: ((e: Underflow) => void) | null = null;

  /** `pending`: [bytes, inodes] that removals outside JavaScript took out of the home (see the file comment). */
  constructor(
    limits: Limits,
    initial: { bytes: number; inodes: number } = { bytes: 0, inodes: 0 },
    pool: TenantPool | null = null,
    pending: BigInt64Array | null = null,
    checkpoint: LedgerCheckpoint | null = null,
  ) {
    this.#limits = checkedLimits(limits);
    assertCount('bytes', initial.bytes);
    assertCount('inodes', initial.inodes);
    // The start-up scan may find a home already over its budget (limits were
    // lowered, or files were placed in the backing tree): that is a valid state;
    // it only refuses growth.
    this.#bytes = initial.bytes;
    this.#inodes = initial.inodes;
    this.#pool = pool;
    this.#pending = pending;
    this.#checkpoint = checkpoint;
    checkpoint?.store(this.#bytes, this.#inodes);
    pool?.charge(initial.bytes);
    pool?.join(this);
    this.#publishMaxFile();
    this.#settleSoft(false);
  }

  /**
   * Bring the over-soft states up to date with the counts. `tell`: a change
   * of usage (a crossing is reported); false for a new ledger or new limits.
   */
  #settleSoft(tell: boolean): void {
    const l = this.#limits;
    const softBytes = effectiveSoft(l.softHomeBytes, l.maxHomeBytes);
    const softInodes = effectiveSoft(l.softInodes, l.maxInodes);
    const bytesOver = overSoft(this.#bytes, softBytes);
    const inodesOver = overSoft(this.#inodes, softInodes);
    const crossedBytes = tell && bytesOver && !this.#overSoftBytes;
    const crossedInodes = tell && inodesOver && !this.#overSoftInodes;
    this.#overSoftBytes = bytesOver;
    this.#overSoftInodes = inodesOver;
    const listener = this.onSoftCrossed;
    if (listener === null) return;
    if (crossedBytes) listener({ what: 'bytes', used: this.#bytes, soft: softBytes, hard: l.maxHomeBytes });
    if (crossedInodes) listener({ what: 'inodes', used: this.#inodes, soft: softInodes, hard: l.maxInodes });
  }

  /** Each soft limit in force and whether usage is above it. */
  soft(): { bytes: SoftState; inodes: SoftState } {
    this.takePending();
    const l = this.#limits;
    return {
      bytes: { soft: effectiveSoft(l.softHomeBytes, l.maxHomeBytes), over: this.#overSoftBytes },
      inodes: { soft: effectiveSoft(l.softInodes, l.maxInodes), over: this.#overSoftInodes },
    };
  }

  #publishMaxFile(): void {
    const p = this.#pending;
    if (p !== null && p.length >= ACCT_LEN) Atomics.store(p, ACCT_MAXFILE, BigInt(this.#limits.maxFileBytes));
  }

  /** Apply what removals outside JavaScript took out of the home since the last call. */
  takePending(): void {
    this.#takePending(0);
  }

  /**
   * takePending, with `made` names the binding made (their reserved inodes)
   * counted in the same change: a name made and removed there before its
   * record came in is then never taken off a count that does not hold it yet
   * (which clamps at 0 and loses it for good).
   */
  #takePending(made: number): void {
    const p = this.#pending;
    // Most calls find nothing: a plain read first (a release that lands meanwhile is taken next time).
    const taking = p !== null && (p[0] !== 0n || p[1] !== 0n || (p.length >= ACCT_LEN && (p[ACCT_GROWN] !== 0n || p[ACCT_REFUND] !== 0n)));
    if (!taking) {
      this.#addMadeAndRemoved(made, 0);
      return;
    }
    this.#checkpoint?.busy(1);
    let released = 0;
    let inodes = 0;
    if (p[0] !== 0n || p[1] !== 0n) {
      released = Number(Atomics.exchange(p, ACCT_RELEASED_BYTES, 0n));
      inodes = Number(Atomics.exchange(p, ACCT_RELEASED_INODES, 0n));
    }
    // Growth is read after the releases and applied with them as one change.
    // The binding removes a file only once no handle has it open, so its writes
    // were added to GROWN before its size was added to RELEASED: read in this
    // order, the growth covers every byte the releases give back. Applied
    // releases first, a file written, closed and unlinked all in the binding
    // took the count below 0 (clamped there) and its growth stayed charged.
    let grown = 0;
    if (p.length >= ACCT_LEN && (p[ACCT_GROWN] !== 0n || p[ACCT_REFUND] !== 0n)) {
      grown = Number(Atomics.exchange(p, ACCT_GROWN, 0n));
      const refund = Number(Atomics.exchange(p, ACCT_REFUND, 0n));
      this.#reservedBytes = Math.max(0, this.#reservedBytes - grown - refund);
    }
    if (grown !== released) this.#addBytes(grown - released);
    this.#addMadeAndRemoved(made, inodes);
    this.#checkpoint?.busy(-1);
  }

  /**
   * Put `n` bytes of the budget in the binding's credit. The caller keeps it
   * within the free room (it is not checked here: credit is an advance on
   * growth the checks below would allow, and taken back before they refuse).
   */
  reserveBytes(n: number): void {
    assertCount('bytes', n);
    const p = this.#pending;
    if (p === null || p.length < ACCT_LEN || n === 0) return;
    this.#reservedBytes += n;
    Atomics.add(p, ACCT_CREDIT_BYTES, BigInt(n));
  }

  /** Take the binding's unused credit back; returns how much there was. */
  reclaimBytes(): number {
    const p = this.#pending;
    if (p === null || p.length < ACCT_LEN) return 0;
    const back = Number(Atomics.exchange(p, ACCT_CREDIT_BYTES, 0n));
    this.#reservedBytes = Math.max(0, this.#reservedBytes - back);
    return back;
  }

  /** Bytes reserved for the binding's writes and not used or taken back yet (against the budget, in no count). */
  get reservedBytes(): number {
    this.takePending();
    return this.#reservedBytes;
  }

  /** What the binding's credit holds now (for tests and views). */
  get credit(): number {
    const p = this.#pending;
    return p === null || p.length < ACCT_LEN ? 0 : Number(Atomics.load(p, ACCT_CREDIT_BYTES));
  }

  get pool(): TenantPool | null {
    return this.#pool;
  }

  /**
   * Leave the tenant pool, taking this home's bytes out of its total: the
   * ledger is being replaced (scan, rescan) or the home is gone (delete).
   */
  detach(): void {
    this.reclaimBytes();
    this.takePending();
    this.#checkpoint = null;
    this.#pool?.leave(this);
    this.#pool?.charge(-this.#bytes);
    this.#pool = null;
  }

  get bytes(): number {
    this.takePending();
    return this.#bytes;
  }

  get inodes(): number {
    this.takePending();
    return this.#inodes;
  }

  get limits(): Limits {
    return this.#limits;
  }

  /**
   * How many times a release/shrink/removal would have taken a counter below 0
   * (it was clamped at 0 instead). Non-zero means the ledger and the backing
   * tree disagree: a bug or an outside change; a rescan of the home fixes it.
   */
  get underflows(): number {
    return this.#underflows;
  }

  /** Lowering below current usage deletes nothing; it only refuses growth. */
  setLimits(l: Limits): void {
    this.#limits = checkedLimits(l);
    this.#publishMaxFile();
    this.#settleSoft(false);
    // Credit was sized by the old budget: what a lower one leaves is granted again by the caller.
    this.reclaimBytes();
  }

  /**
   * Check and apply one file's logical size change `oldSize -> newSize`
   * (write past EOF, truncate up or down, fallocate, or a new file's content).
   *
   * Growth is refused whole, changing nothing:
   *  - newSize over maxFileBytes -> FILE_TOO_LARGE (EFBIG), checked first: it
   *    is the more specific cause and no cleanup elsewhere would help;
   *  - home bytes over maxHomeBytes -> QUOTA_EXCEEDED (EDQUOT);
   *  - the tenant's total over its pool's limit -> TENANT_QUOTA_EXCEEDED (EDQUOT).
   * Shrinking or staying the same always succeeds, even over a lowered limit:
   * refusing `rm`/truncate to someone over budget would leave no way out.
   *
   * Returns an undo that gives back exactly what was applied. Undo never checks
   * limits: it restores a state the backing store is actually in (a failed
   * truncate-down leaves the bytes there).
   */
  resize(oldSize: number, newSize: number): Undo {
    const delta = this.checkResize(oldSize, newSize);
    const applied = this.#addBytes(delta);
    return once(() => {
      this.#addBytes(-applied);
    });
  }

  /**
   * The checks of `resize` without the charge: throws what resize would throw,
   * else returns the delta. For a caller that must refuse early but charges
   * later (a text home checks the budget before it reads around a write).
   */
  checkResize(oldSize: number, newSize: number): number {
    this.takePending();
    assertCount('oldSize', oldSize);
    assertCount('newSize', newSize);
    const delta = newSize - oldSize;
    if (delta > 0) {
      const { maxFileBytes, maxHomeBytes } = this.#limits;
      if (maxFileBytes > 0 && newSize > maxFileBytes) {
        throw new HomesError('FILE_TOO_LARGE', `file would grow to ${newSize} bytes, over the per-file limit of ${maxFileBytes}`, {
          current: oldSize,
          limit: maxFileBytes,
          requested: newSize,
        });
      }
      // Credit counts against the budget until used; before a refusal stands, the unused part comes back.
      if (maxHomeBytes > 0 && this.#bytes + this.#reservedBytes + delta > maxHomeBytes && this.#reservedBytes > 0) {
        this.reclaimBytes();
        this.takePending();
      }
      if (maxHomeBytes > 0 && this.#bytes + this.#reservedBytes + delta > maxHomeBytes) {
        throw new HomesError(
          'QUOTA_EXCEEDED',
          `home would grow to ${this.#bytes + delta} bytes, over its budget of ${maxHomeBytes}`,
          { current: this.#bytes, limit: maxHomeBytes, requested: this.#bytes + delta, growth: delta, ...(this.#reservedBytes > 0 ? { inFlight: this.#reservedBytes } : {}) },
        );
      }
      const pool = this.#pool;
      if (pool !== null && pool.limit > 0 && pool.bytes + delta > pool.limit) {
        throw new HomesError(
          'TENANT_QUOTA_EXCEEDED',
          `tenant ${pool.tenant} would grow to ${pool.bytes + delta} bytes across its homes, over its budget of ${pool.limit}`,
          { tenant: pool.tenant, tenantCurrent: pool.bytes, tenantLimit: pool.limit, tenantRequested: pool.bytes + delta, growth: delta },
        );
      }
    }
    return delta;
  }

  /** Reserve one inode (create, mkdir, symlink). INODES_EXCEEDED (EDQUOT) at the cap. */
  addInode(): Undo {
    this.#checkInode();
    this.#addInodes(1);
    return once(() => {
      this.#addInodes(-1);
    });
  }

  /**
   * Hold one inode for a create made elsewhere (the binding's native create):
   * checked against the cap with every inode counted and held, but not counted
   * itself until commitReservedInodes (the file was made) or given back with
   * releaseReservedInode. Views of the home show only what exists.
   */
  reserveInode(): void {
    this.#checkInode();
    this.#reserved += 1;
  }

  /** `n` reserved inodes whose names were made, counted with what removals took out meanwhile (#takePending). */
  commitReservedInodes(n: number): void {
    assertCount('inodes', n);
    this.#reserved = Math.max(0, this.#reserved - n);
    this.#takePending(n);
  }

  releaseReservedInode(): void {
    this.#reserved = Math.max(0, this.#reserved - 1);
  }

  /** Inodes held by reserveInode and neither committed nor given back. */
  get reservedInodes(): number {
    return this.#reserved;
  }

  #checkInode(): void {
    this.takePending();
    const { maxInodes } = this.#limits;
    const held = this.#inodes + this.#reserved;
    if (maxInodes > 0 && held + 1 > maxInodes) {
      throw new HomesError('INODES_EXCEEDED', `home would hold ${held + 1} files and directories, over its limit of ${maxInodes}`, {
        current: this.#inodes,
        limit: maxInodes,
        requested: held + 1,
        ...(this.#reserved > 0 ? { reserved: this.#reserved } : {}),
      });
    }
  }

  /** An inode left the home (unlink, rmdir, rename over an existing entry). */
  removeInode(): void {
    this.takePending();
    this.#addInodes(-1);
  }

  /**
   * A file's bytes leave the home: unlink of a closed file, the last close of
   * an unlinked one, rename over an existing file, a tree removed whole.
   */
  release(bytes: number): void {
    assertCount('bytes', bytes);
    // Growth the binding charged may still be in the array: taken first, or this release would clamp at 0 against a count that misses it.
    this.takePending();
    this.#addBytes(-bytes);
  }

  /**
   * Bytes already on the disk that the scan could not see: a file unlinked
   * while open (no name reaches it), handed over by a live upgrade after the
   * ledger was built. Counted, never refused (refusing would not free them);
   * its last close gives them back (release).
   */
  hold(bytes: number): void {
    assertCount('bytes', bytes);
    this.takePending();
    this.#addBytes(bytes);
  }

  /** Free room under each limit; null when the limit is off (for statfs/status). */
  available(): { bytes: number | null; inodes: number | null } {
    this.takePending();
    const { maxHomeBytes, maxInodes } = this.#limits;
    return {
      bytes: maxHomeBytes > 0 ? Math.max(0, maxHomeBytes - this.#bytes) : null,
      inodes: maxInodes > 0 ? Math.max(0, maxInodes - this.#inodes) : null,
    };
  }

  /**
   * The byte room this home sees, for statfs: `cap` is the tightest of the
   * home budget and the tenant budget (what is left of the tenant's limit
   * after its other homes, plus this home's bytes), null when neither is set.
   */
  room(): { bytes: number; cap: number | null } {
    this.takePending();
    const caps: number[] = [];
    if (this.#limits.maxHomeBytes > 0) caps.push(this.#limits.maxHomeBytes);
    const pool = this.#pool;
    if (pool !== null && pool.limit > 0) caps.push(Math.max(0, pool.limit - (pool.bytes - this.#bytes)));
    return { bytes: this.#bytes, cap: caps.length ? Math.min(...caps) : null };
  }

  snapshot(): LedgerSnapshot {
    this.takePending();
    return { bytes: this.#bytes, inodes: this.#inodes, limits: this.#limits };
  }

  /** Apply a byte delta, clamping at 0; returns the delta actually applied. */
  #addBytes(delta: number): number {
    const next = this.#bytes + delta;
    let applied = delta;
    if (next < 0) {
      this.#underflows += 1;
      this.onUnderflow?.({ what: 'bytes', count: this.#bytes, delta });
      applied = -this.#bytes;
      this.#bytes = 0;
    } else {
      this.#bytes = next;
    }
    this.#checkpoint?.store(this.#bytes, this.#inodes);
    this.#pool?.charge(applied);
    if (applied !== 0) this.#settleSoft(applied > 0);
    return applied;
  }

  /**
   * `made` names counted and `removed` taken off: the removals the count holds
   * first, then each name made on its own (a soft limit crossed is reported at
   * the count that crossed it, as one create at a time would), then the
   * removals of names among those just made.
   */
  #addMadeAndRemoved(made: number, removed: number): void {
    const held = Math.min(removed, this.#inodes);
    if (held > 0) this.#addInodes(-held);
    for (let i = 0; i < made; i++) this.#addInodes(1);
    if (removed > held) this.#addInodes(held - removed);
  }

  #addInodes(delta: number): void {
    const next = this.#inodes + delta;
    if (next < 0) {
      this.#underflows += 1;
      this.onUnderflow?.({ what: 'inodes', count: this.#inodes, delta });
      this.#inodes = 0;
    } else {
      this.#inodes = next;
    }
    this.#checkpoint?.store(this.#bytes, this.#inodes);
    if (delta !== 0) this.#settleSoft(delta > 0);
  }
}
