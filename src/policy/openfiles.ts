/**
 * Open-file limits: every file handle the daemon keeps for a home costs it a
 * backing descriptor, and its descriptors are one shared table (RLIMIT_NOFILE)
 * for every home, its sockets and its own work. Three caps keep one home (or
 * one uid) from taking that table from the others:
 *  - per home: the profile's `maxOpenFiles` (EMFILE, `OPEN_FILES_EXCEEDED`);
 *  - per caller uid, across homes: `limits.openFilesPerUid` (EMFILE, same code;
 *    uid 0 is trusted and not counted);
 *  - all homes together: the daemon's limit minus a reserve for its own
 *    descriptors (ENFILE, `DAEMON_FILES_EXHAUSTED`: the shared table is full,
 *    which is no fault of the caller's own home).
 *
 * Open directory handles count against the same three caps (one open file
 * each), though the binding answers OPENDIR without JS: `dirs` reports how
 * many are open (per uid, in the home, in all), and `changed` is told after
 * every change here so that the binding checks OPENDIR against these files.
 *
 * PURE. A slot is taken synchronously before the backing open (the await that
 * consumes a descriptor), so concurrent opens can never pass a cap together,
 * and given back exactly once: on a failed open, or at release.
 */

import { HomesError } from '../errors.js';

/** What a home counts: HomeState carries it (`openHandles`). */
export interface HomeCount {
  openHandles: number;
}

export interface OpenFileCaps {
  /** per caller uid across homes, 0 = off */
  perUid: number;
  /** handles across all homes the daemon's descriptors can carry now */
  total: () => number;
  /** directory handles open now: uid's (0 for uid 0), in the home, in all; absent: none */
  dirs?: (uid: number, home: HomeCount) => readonly [number, number, number];
  /** after a slot of uid's in the home was taken or given back */
  changed?: (uid: number, home: HomeCount) => void;
}

export interface OpenSlot {
  /** the caller uid it counts against (0: none) */
  readonly uid: number;
  /** give the slot back; a second call does nothing */
  release(): void;
}

export class OpenFileAccounting {
  #total = 0;
  readonly #byUid = new Map<number, number>();

  constructor(private readonly caps: OpenFileCaps) {}

  /** Handles held (or being opened) across all homes. */
  get total(): number {
    return this.#total;
  }

  /** The cap on `total` right now. */
  get cap(): number {
    return this.caps.total();
  }

  get perUidCap(): number {
    return this.caps.perUid;
  }

  uidCount(uid: number): number {
    return this.#byUid.get(uid) ?? 0;
  }

  /**
   * Take one slot for a handle of `home` opened by `uid`, or throw without
   * counting anything. `homeName` and `homeLimit` (0 = off) only shape the
   * refusal.
   */
  acquire(home: HomeCount, homeLimit: number, uid: number, homeName: string): OpenSlot {
    const [uidDirs, homeDirs, allDirs] = this.caps.dirs?.(uid, home) ?? [0, 0, 0];
    const andDirs = (n: number) => (n > 0 ? ` and ${n} directories` : '');
    if (homeLimit > 0 && home.openHandles + homeDirs >= homeLimit) {
      throw new HomesError(
        'OPEN_FILES_EXCEEDED',
        `the home ${homeName} already has ${home.openHandles} files${andDirs(homeDirs)} open, its profile's limit (maxOpenFiles): close some first`,
        { limit: homeLimit, scope: 'home' },
      );
    }
    const counted = uid !== 0;
    const mine = counted ? this.uidCount(uid) : 0;
    if (counted && this.caps.perUid > 0 && mine + uidDirs >= this.caps.perUid) {
      throw new HomesError('OPEN_FILES_EXCEEDED', `uid ${uid} already has ${mine} files${andDirs(uidDirs)} open across homes, the limit per uid (limits.openFilesPerUid): close some first`, {
        limit: this.caps.perUid,
        scope: 'uid',
      });
    }
    const cap = this.caps.total();
    if (this.#total + allDirs >= cap) {
      throw new HomesError(
        'DAEMON_FILES_EXHAUSTED',
        `all homes together have ${this.#total} files${andDirs(allDirs)} open, all the daemon's descriptors allow beside its reserve: try again when others have closed theirs`,
        { limit: cap, scope: 'daemon' },
      );
    }
    return this.#take(home, uid);
  }

  /**
   * The slot of a handle the kernel already holds (handed over by a live
   * upgrade): counted like any other, under no cap, since refusing it would
   * not close it. Counts at or over a cap then refuse new opens until enough
   * are closed.
   */
  adopt(home: HomeCount, uid: number): OpenSlot {
    return this.#take(home, uid);
  }

  #take(home: HomeCount, uid: number): OpenSlot {
    const counted = uid !== 0;
    home.openHandles++;
    this.#total++;
    if (counted) this.#byUid.set(uid, this.uidCount(uid) + 1);
    this.caps.changed?.(uid, home);
    let held = true;
    return {
      uid,
      release: () => {
        if (!held) return;
        held = false;
        home.openHandles--;
        this.#total--;
        if (counted) {
          const n = (this.#byUid.get(uid) ?? 1) - 1;
          if (n > 0) this.#byUid.set(uid, n);
          else this.#byUid.delete(uid);
        }
        this.caps.changed?.(uid, home);
      },
    };
  }
}
