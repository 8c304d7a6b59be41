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
 */

import { HomesError } from '../errors.js';

export interface Limits {
  /** sum of logical file sizes in the home, 0 = off */
  maxHomeBytes: number;
  /** files + directories in the home, 0 = off */
  maxInodes: number;
  /** logical size of any one file, 0 = off */
  maxFileBytes: number;
}

export interface LedgerSnapshot {
  bytes: number;
  inodes: number;
  limits: Limits;
}

/** Undo one reservation. Idempotent: a second call does nothing. */
export type Undo = () => void;

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
  return Object.freeze({ maxHomeBytes: l.maxHomeBytes, maxInodes: l.maxInodes, maxFileBytes: l.maxFileBytes });
}

function once(fn: () => void): Undo {
  let done = false;
  return () => {
    if (done) return;
    done = true;
    fn();
  };
}

export class Ledger {
  #bytes: number;
  #inodes: number;
  #limits: Limits;
  #underflows = 0;

  constructor(limits: Limits, initial: { bytes: number; inodes: number } = { bytes: 0, inodes: 0 }) {
    this.#limits = checkedLimits(limits);
    assertCount('bytes', initial.bytes);
    assertCount('inodes', initial.inodes);
    // The start-up scan may find a home already over its budget (limits were
    // lowered, or files were placed in the backing tree): that is a valid state;
    // it only refuses growth.
    this.#bytes = initial.bytes;
    this.#inodes = initial.inodes;
  }

  get bytes(): number {
    return this.#bytes;
  }

  get inodes(): number {
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
  }

  /**
   * Check and apply one file's logical size change `oldSize -> newSize`
   * (write past EOF, truncate up or down, fallocate, or a new file's content).
   *
   * Growth is refused whole, changing nothing:
   *  - newSize over maxFileBytes -> FILE_TOO_LARGE (EFBIG), checked first: it
   *    is the more specific cause and no cleanup elsewhere would help;
   *  - home bytes over maxHomeBytes -> QUOTA_EXCEEDED (EDQUOT).
   * Shrinking or staying the same always succeeds, even over a lowered limit:
   * refusing `rm`/truncate to someone over budget would leave no way out.
   *
   * Returns an undo that gives back exactly what was applied. Undo never checks
   * limits: it restores a state the backing store is actually in (a failed
   * truncate-down leaves the bytes there).
   */
  resize(oldSize: number, newSize: number): Undo {
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
      if (maxHomeBytes > 0 && this.#bytes + delta > maxHomeBytes) {
        throw new HomesError(
          'QUOTA_EXCEEDED',
          `home would grow to ${this.#bytes + delta} bytes, over its budget of ${maxHomeBytes}`,
          { current: this.#bytes, limit: maxHomeBytes, requested: this.#bytes + delta, growth: delta },
        );
      }
    }
    const applied = this.#addBytes(delta);
    return once(() => {
      this.#addBytes(-applied);
    });
  }

  /** Reserve one inode (create, mkdir, symlink). INODES_EXCEEDED (EDQUOT) at the cap. */
  addInode(): Undo {
    const { maxInodes } = this.#limits;
    if (maxInodes > 0 && this.#inodes + 1 > maxInodes) {
      throw new HomesError('INODES_EXCEEDED', `home would hold ${this.#inodes + 1} files and directories, over its limit of ${maxInodes}`, {
        current: this.#inodes,
        limit: maxInodes,
        requested: this.#inodes + 1,
      });
    }
    this.#inodes += 1;
    return once(() => {
      this.#addInodes(-1);
    });
  }

  /** An inode left the home (unlink, rmdir, rename over an existing entry). */
  removeInode(): void {
    this.#addInodes(-1);
  }

  /**
   * A file's bytes leave the home: unlink of a closed file, the last close of
   * an unlinked one, rename over an existing file, a tree removed whole.
   */
  release(bytes: number): void {
    assertCount('bytes', bytes);
    this.#addBytes(-bytes);
  }

  /** Free room under each limit; null when the limit is off (for statfs/status). */
  available(): { bytes: number | null; inodes: number | null } {
    const { maxHomeBytes, maxInodes } = this.#limits;
    return {
      bytes: maxHomeBytes > 0 ? Math.max(0, maxHomeBytes - this.#bytes) : null,
      inodes: maxInodes > 0 ? Math.max(0, maxInodes - this.#inodes) : null,
    };
  }

  snapshot(): LedgerSnapshot {
    return { bytes: this.#bytes, inodes: this.#inodes, limits: this.#limits };
  }

  /** Apply a byte delta, clamping at 0; returns the delta actually applied. */
  #addBytes(delta: number): number {
    const next = this.#bytes + delta;
    if (next < 0) {
      this.#underflows += 1;
      const applied = -this.#bytes;
      this.#bytes = 0;
      return applied;
    }
    this.#bytes = next;
    return delta;
  }

  #addInodes(delta: number): void {
    const next = this.#inodes + delta;
    if (next < 0) {
      this.#underflows += 1;
      this.#inodes = 0;
      return;
    }
    this.#inodes = next;
  }
}
