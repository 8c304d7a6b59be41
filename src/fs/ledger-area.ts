/**
 * The homes' ledgers where a crash cannot take them: one memfd (the
 * binding's handover/ledgers.c) the keeper holds beside the node table's
 * journal, mapped shared, a slot per home. A slot holds the home's
 * accounting array (the one the binding adds its releases and growth to,
 * abi.h ACCT_*), the ledger's counts as it last applied them, the home's
 * backing directory (dev, inode, birth time) and its id.
 *
 * A daemon that resumes a session after a crash maps the same memfd and
 * starts each home whose slot was exact at the kill with those counts (and
 * what the binding had added to the array and the ledger had not taken yet),
 * instead of a scan of its whole tree. A slot is exact when nothing could
 * have changed the home behind its counts:
 *  - its ledger was built (not being scanned or rescanned);
 *  - no request that can change a home (MUTATING) was in JavaScript for that
 *    home (`busy`: counted from the dispatch to the answer, and across the
 *    ledger's taking of the array), and no such request without a path was
 *    (the header's `loose`: it could have been any home's);
 *  - the binding had no write (ACCT_INFLIGHT), unlink or create (ACCT_BUSY)
 *    of the home between the disk and the array;
 *  - the home keeps no orphan (a file unlinked while open: its bytes leave
 *    the ledger at a last close the resumed daemon may never see), checked
 *    by the caller on the disk.
 * Anything else is scanned as at any start. A live upgrade's successor takes
 * the ledgers in the pause instead (home-registry.ts adoptLedgers) and opens an area
 * of its own; the predecessor marks its area handed, so a keeper that still
 * holds it until the successor registers leads no later resume to old counts.
 */
import { ABI } from '../abi.js';
import { homeId } from '../paths/parse.js';
import type { AddonRaw } from '../addon-raw.js';

/** The binding's area calls (handover/ledgers.c). */
export type LedgerAreaRaw = Pick<AddonRaw, 'hs_handover_ledgers_open' | 'hs_handover_ledgers_map'>;

const SLOT_BYTES = ABI.LEDGER_SLOT_BYTES;
const SLOT_WORDS = SLOT_BYTES / 8;
const SLOTS = ABI.LEDGER_SLOTS;
/** The header is the first slot's room; slot i starts at (i + 1) * SLOT_BYTES. */
const H_MAGIC = 0;
const H_VERSION = 1;
const H_STATE = 2;
const H_LOOSE = 3;
const MAGIC = 0x48534c4544474552n; // "HSLEDGER"
const VERSION = 1n;
const AREA_LIVE = 1n;
const AREA_HANDED = 2n;
/** A slot's words after its accounting array (words 0 .. ACCT_LEN - 1). */
const W_STATE = ABI.ACCT_LEN;
const W_BYTES = W_STATE + 1;
const W_INODES = W_STATE + 2;
const W_BUSY = W_STATE + 3;
const W_DEV = W_STATE + 4;
const W_INO = W_STATE + 5;
const W_BIRTH = W_STATE + 6;
const W_IDLEN = W_STATE + 7;
const ID_OFFSET = (W_IDLEN + 1) * 8;
const ID_MAX = SLOT_BYTES - ID_OFFSET;
const FREE = 0n;
const BUILDING = 1n;
const BUILT = 2n;
/** a forgotten home's slot: never reused by this process (the binding may still add to its array) */
const RETIRED = 3n;

/** Requests that can change a home's counts (see the file comment). */
const MUTATING = new Set<number>([
  ABI.OP_OPEN,
  ABI.OP_CREATE,
  ABI.OP_WRITE,
  ABI.OP_FLUSH,
  ABI.OP_RELEASE,
  ABI.OP_TRUNCATE,
  ABI.OP_FTRUNCATE,
  ABI.OP_FALLOCATE,
  ABI.OP_MKDIR,
  ABI.OP_RMDIR,
  ABI.OP_UNLINK,
  ABI.OP_RENAME,
  ABI.OP_LINK,
  ABI.OP_SYMLINK,
  ABI.OP_MKNOD,
]);

/** The home a mount path is in ("t/k" of "/t/k/…"), or null above the homes. */
export function homeOfPath(path: string): string | null {
  const a = path.indexOf('/', 1);
  if (a < 0) return null;
  const b = path.indexOf('/', a + 1);
  const id = b < 0 ? path.slice(1) : path.slice(1, b);
  return id.length > a ? id : null;
}

/** The paths of a request's arguments that name homes (by op code), or null when it names none (a handle's). */
export function requestPaths(op: number, args: readonly unknown[]): string[] | null {
  if (op === ABI.OP_SYMLINK) return typeof args[1] === 'string' ? [args[1]] : null;
  if (op === ABI.OP_RENAME || op === ABI.OP_LINK) return [args[0], args[1]].filter((p): p is string => typeof p === 'string');
  return typeof args[0] === 'string' ? [args[0]] : null;
}

/** What a crash left of a home: its counts, when they were exact. */
interface Found {
  slot: number;
  exact: boolean;
  bytes: number;
  inodes: number;
  dev: bigint;
  ino: bigint;
  birth: bigint;
}

export interface HomeIdentity {
  dev: bigint;
  ino: bigint;
  birth: bigint;
}

export class LedgerArea {
  readonly #words: BigInt64Array;
  readonly #bytes: Uint8Array;
  readonly #byId = new Map<string, number>();
  /** slots in use before this process (a kept area), by id, as the crash left them */
  readonly #found = new Map<string, Found>();
  #next = 0;
  /** busy counts of homes that have no slot yet, by id */
  readonly #early = new Map<string, number>();

  private constructor(
    /** the memfd, this process's; the keeper gets copies with each registration */
    readonly fd: number,
    buffer: ArrayBuffer,
    /** counts of homes found exact in a kept area (for the log) */
    readonly kept: { exact: number; scanned: number } | null,
  ) {
    this.#words = new BigInt64Array(buffer);
    this.#bytes = new Uint8Array(buffer);
  }

  /** A new, empty area. */
  static create(raw: LedgerAreaRaw): LedgerArea {
    const r = raw.hs_handover_ledgers_open();
    if (typeof r === 'number') throw new Error(`the ledgers' area could not be made: errno ${-r}`);
    const area = new LedgerArea(r[0], r[1], null);
    area.#init();
    return area;
  }

  /**
   * The area a dead daemon left (the fd becomes this process's). An area that
   * is not one, or that a live upgrade handed over, is started afresh in the
   * same memfd: nothing of it is trusted.
   */
  static kept(raw: LedgerAreaRaw, fd: number): LedgerArea {
    const buf = raw.hs_handover_ledgers_map(fd);
    if (typeof buf === 'number') throw new Error(`the kept ledgers' area could not be mapped: errno ${-buf}`);
    const w = new BigInt64Array(buf);
    const valid = w[H_MAGIC] === MAGIC && w[H_VERSION] === VERSION && w[H_STATE] === AREA_LIVE;
    if (!valid) {
      const area = new LedgerArea(fd, buf, { exact: 0, scanned: 0 });
      area.#init();
      return area;
    }
    const loose = w[H_LOOSE] !== 0n;
    let exact = 0;
    let scanned = 0;
    const found: Array<[string, Found]> = [];
    let next = 0;
    const tmp = new LedgerArea(fd, buf, null);
    for (let i = 0; i < SLOTS; i++) {
      const b = tmp.#base(i);
      const state = w[b + W_STATE]!;
      if (state === FREE) continue;
      next = i + 1;
      if (state === RETIRED) {
        tmp.#clear(i);
        continue;
      }
      const ok =
        state === BUILT && !loose && w[b + W_BUSY] === 0n && w[b + ABI.ACCT_INFLIGHT] === 0n && w[b + ABI.ACCT_BUSY] === 0n && w[b + W_BYTES]! >= 0n && w[b + W_INODES]! >= 0n;
      const id = tmp.#idOf(i);
      if (id === null) {
        tmp.#clear(i);
        continue;
      }
      found.push([id, { slot: i, exact: ok, bytes: Number(w[b + W_BYTES]), inodes: Number(w[b + W_INODES]), dev: w[b + W_DEV]!, ino: w[b + W_INO]!, birth: w[b + W_BIRTH]! }]);
      if (ok) exact++;
      else scanned++;
      // The binding's state is this process's now: nothing is in flight or credited.
      w[b + W_BUSY] = 0n;
      w[b + ABI.ACCT_INFLIGHT] = 0n;
      w[b + ABI.ACCT_BUSY] = 0n;
      w[b + ABI.ACCT_CREDIT_BYTES] = 0n;
      w[b + ABI.ACCT_REFUND] = 0n;
      if (!ok) {
        // Not trusted from now on either, until a scan built the home's ledger again.
        w[b + W_STATE] = BUILDING;
        for (const k of [ABI.ACCT_RELEASED_BYTES, ABI.ACCT_RELEASED_INODES, ABI.ACCT_GROWN]) w[b + k] = 0n;
      }
    }
    w[H_LOOSE] = 0n;
    const area = new LedgerArea(fd, buf, { exact, scanned });
    area.#next = next;
    for (const [id, f] of found) {
      area.#found.set(id, f);
      area.#byId.set(id, f.slot);
    }
    return area;
  }

  #init(): void {
    this.#words.fill(0n, 0, SLOT_WORDS);
    this.#words[H_MAGIC] = MAGIC;
    this.#words[H_VERSION] = VERSION;
    this.#words[H_STATE] = AREA_LIVE;
  }

  #base(slot: number): number {
    return (slot + 1) * SLOT_WORDS;
  }

  #clear(slot: number): void {
    this.#words.fill(0n, this.#base(slot), this.#base(slot) + SLOT_WORDS);
  }

  #idOf(slot: number): string | null {
    const b = this.#base(slot);
    const n = Number(this.#words[b + W_IDLEN]);
    if (!(n > 0 && n <= ID_MAX)) return null;
    const at = b * 8 + ID_OFFSET;
    return Buffer.from(this.#bytes.buffer, at, n).toString('utf8');
  }

  #setId(slot: number, id: string): boolean {
    const enc = Buffer.from(id, 'utf8');
    if (enc.length === 0 || enc.length > ID_MAX) return false;
    const b = this.#base(slot);
    this.#bytes.set(enc, b * 8 + ID_OFFSET);
    this.#words[b + W_IDLEN] = BigInt(enc.length);
    return true;
  }

  /**
   * A crash's exact counts for the home, once (its slot is the home's from
   * now on): only for the very directory they were counted for. null: scan.
   */
  adopt(id: string, who: HomeIdentity): { bytes: number; inodes: number } | null {
    const f = this.#found.get(id);
    if (f === undefined) return null;
    this.#found.delete(id);
    if (!f.exact || f.dev !== who.dev || f.ino !== who.ino || f.birth !== who.birth) {
      this.#building(f.slot);
      return null;
    }
    return { bytes: f.bytes, inodes: f.inodes };
  }

  #building(slot: number): void {
    const b = this.#base(slot);
    this.#words[b + W_STATE] = BUILDING;
    for (const k of [ABI.ACCT_RELEASED_BYTES, ABI.ACCT_RELEASED_INODES, ABI.ACCT_GROWN, ABI.ACCT_CREDIT_BYTES, ABI.ACCT_REFUND]) this.#words[b + k] = 0n;
  }

  /**
   * The home's slot (made now if it has none), its directory recorded; its
   * accounting array is `pending`, its counts are written by `store`. null:
   * the area is full (the home is scanned after a crash, as before).
   */
  bind(id: string, who: HomeIdentity, built: boolean): HomeSlot | null {
    let slot = this.#byId.get(id);
    if (slot === undefined) {
      if (this.#next >= SLOTS) return null;
      slot = this.#next++;
      this.#clear(slot);
      if (!this.#setId(slot, id)) {
        this.#next--;
        return null;
      }
      this.#byId.set(id, slot);
      const early = this.#early.get(id);
      this.#early.delete(id);
      if (early !== undefined) this.#words[this.#base(slot) + W_BUSY] = BigInt(early);
    }
    this.#found.delete(id);
    const b = this.#base(slot);
    const w = this.#words;
    w[b + W_DEV] = who.dev;
    w[b + W_INO] = who.ino;
    w[b + W_BIRTH] = who.birth;
    w[b + W_STATE] = built ? BUILT : BUILDING;
    return new HomeSlot(w, b);
  }

  /** The home's ledger is being (re)built by a scan: its slot is not exact until built(). */
  building(id: string): void {
    const slot = this.#byId.get(id);
    if (slot !== undefined) this.#words[this.#base(slot) + W_STATE] = BUILDING;
  }

  /** The home's ledger was built (its counts were just stored). */
  built(id: string): void {
    const slot = this.#byId.get(id);
    if (slot !== undefined) this.#words[this.#base(slot) + W_STATE] = BUILT;
  }

  /** The home is gone (deleted, replaced): its slot is retired, never reused by this process. */
  forget(id: string): void {
    const slot = this.#byId.get(id);
    this.#found.delete(id);
    if (slot === undefined) return;
    this.#byId.delete(id);
    const b = this.#base(slot);
    this.#words[b + W_STATE] = RETIRED;
    this.#words[b + W_IDLEN] = 0n;
  }

  /** The home was renamed: its slot goes with it. */
  rename(from: string, to: string): void {
    const slot = this.#byId.get(from);
    this.forget(to);
    if (slot === undefined) return;
    this.#byId.delete(from);
    if (!this.#setId(slot, to)) {
      this.#words[this.#base(slot) + W_STATE] = RETIRED;
      return;
    }
    this.#byId.set(to, slot);
  }

  /**
   * A request reached JavaScript (the session's dispatch): a change of the
   * homes it names is in flight until the returned function is called at
   * its answer. Requests that change no count are not counted.
   */
  track(op: number, args: readonly unknown[]): (() => void) | undefined {
    if (!MUTATING.has(op)) return undefined;
    const paths = requestPaths(op, args);
    const w = this.#words;
    if (paths === null || paths.length === 0) {
      w[H_LOOSE]! += 1n;
      return () => {
        w[H_LOOSE]! -= 1n;
      };
    }
    const ids = [...new Set(paths.map(homeOfPath).filter((h): h is string => h !== null))];
    if (ids.length === 0) return undefined;
    // The answer gives back what the dispatch took: a home's slot follows it through a rename
    // (an id looked up again at the answer would miss it, and the slot stay busy for good).
    const taken = ids.map((id) => this.#busy(id, 1));
    return () => {
      for (const t of taken) if (typeof t === 'number') this.#slotBusy(t, -1);
      else this.#busy(t, -1);
    };
  }

  /**
   * A home's busy count: its slot's, or while it has none (its first request
   * may be what opens it) one kept here, which its slot starts with when
   * bind() makes it, so a slot made under a request in flight does not look
   * settled. Resolved at each call: the count goes where the home is then.
   */
  #busy(id: string, delta: 1 | -1): number | string {
    const slot = this.#byId.get(id);
    if (slot !== undefined) {
      this.#slotBusy(slot, delta);
      return slot;
    }
    const n = (this.#early.get(id) ?? 0) + delta;
    if (n > 0) this.#early.set(id, n);
    else this.#early.delete(id);
    return id;
  }

  #slotBusy(slot: number, delta: 1 | -1): void {
    const at = this.#base(slot) + W_BUSY;
    const n = this.#words[at]! + BigInt(delta);
    this.#words[at] = n < 0n ? 0n : n;
  }

  /** A live upgrade took the session over (called in the pause): nothing here is current from now on. */
  handed(): void {
    this.#words[H_STATE] = AREA_HANDED;
  }

  /** A handover was abandoned (called as this daemon serves on): the counts here are current again. */
  live(): void {
    this.#words[H_STATE] = AREA_LIVE;
  }

  /** Homes with a slot (for status). */
  get slots(): number {
    return this.#byId.size;
  }
}

/** One home's slot: its accounting array and the ledger's checkpoint of its counts. */
export class HomeSlot {
  readonly pending: BigInt64Array;
  constructor(
    private readonly w: BigInt64Array,
    private readonly b: number,
  ) {
    this.pending = w.subarray(b, b + ABI.ACCT_LEN);
  }

  /** The ledger's counts, as it applied them. */
  store(bytes: number, inodes: number): void {
    this.w[this.b + W_BYTES] = BigInt(bytes);
    this.w[this.b + W_INODES] = BigInt(inodes);
  }

  /** The ledger is between taking the array and storing what it took. */
  busy(delta: 1 | -1): void {
    this.w[this.b + W_BUSY]! += BigInt(delta);
  }
}

export { homeId };
