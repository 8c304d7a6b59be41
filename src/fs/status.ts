import { HomesError } from '../errors.js';
import { homeId } from '../paths/parse.js';
import { RESERVED_DIR, STATUS_NAME } from '../paths/reserved.js';
import type { SoftState } from '../policy/ledger.js';
import type { Refusal, RefusalBook } from '../policy/refusals.js';
import { S_IFDIR, S_IFREG, SYNTHETIC_INO, type Attr } from './present.js';
import { RESERVED_FH_FROM, SELFCHECK_FH, type HomeState } from './state.js';

/**
 * `.homesfs/status`: what an agent can read about its own home without admin
 * rights — usage, limits and the last refusals with their reasons — generated
 * at open, so one open reads one consistent text. Never stored, never counted
 * in a budget, owner-readable only (0400; the home itself is 0700).
 */

/** Open status handles at most: each holds a few KiB of text. */
const MAX_OPEN = 4096;

const PLAIN: Record<string, string> = {
  QUOTA_EXCEEDED: "the home's byte budget is used up",
  TENANT_QUOTA_EXCEEDED: "the tenant's total budget across all its homes is used up",
  INODES_EXCEEDED: 'the home holds as many files and directories as it may',
  FILE_TOO_LARGE: 'the file would grow past the largest size allowed for one file',
  NOT_UTF8: 'this home accepts only UTF-8 text, and these bytes are not',
  OP_REFUSED: "the home's policy does not allow this operation",
  CROSS_HOME: 'files cannot be moved or linked between two homes (copy them instead)',
  CROSS_DEVICE: 'the file is on another device than its home',
  DAEMON_TREE: 'the tenant and home levels are managed by the administrators',
  INVALID_NAME: 'the name is not allowed (empty, ".", "..", "/" or NUL)',
  NAME_TOO_LONG: 'the name is longer than allowed',
  NOT_UTF8_NAME: 'the name is not valid UTF-8',
  SYMLINK_ESCAPES: 'the symlink points outside the home',
  OPEN_FILES_EXCEEDED: 'the home (or your uid) has as many files open as it may: close some',
  DAEMON_FILES_EXHAUSTED: 'all homes together have as many files open as the daemon allows: try again when others have closed theirs',
};

function human(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${n} B` : `${v.toFixed(1)} ${units[u]}`;
}

function limitLine(used: number, limit: number, what: string): string {
  if (limit === 0) return `${human(used)} (${used} bytes), no ${what}`;
  const pct = ((used / limit) * 100).toFixed(1);
  const over = used > limit ? ' — OVER: files can only shrink until usage is back under' : used === limit ? ' — FULL' : '';
  return `${human(used)} (${used} bytes) of ${human(limit)} (${limit} bytes), ${pct}%${over}`;
}

/** A soft limit's line: the threshold, and whether usage is above it (a warning: nothing is refused there). */
function softLine(s: SoftState, bytes: boolean): string {
  if (s.soft === 0) return 'off';
  const limit = bytes ? `${human(s.soft)} (${s.soft} bytes)` : String(s.soft);
  return s.over ? `${limit} — EXCEEDED: nothing is refused yet, the hard limit will stop growth; free some space` : `${limit}, not reached`;
}

/** The text of a home's status file. */
/** `openFiles`: the home's open files as callers see them (FsContext.openFilesOf: not the slots held for the binding). */
export function renderStatus(hs: HomeState, refusals: readonly Refusal[], now: Date, openFiles: number): string {
  const snap = hs.ledger.snapshot();
  const { limits } = snap;
  const pool = hs.ledger.pool;
  const soft = hs.ledger.soft();
  const lines = [
    `homesfs status of ${hs.backing.id} at ${now.toISOString()}`,
    '',
    `profile:        ${hs.profileName}`,
    `bytes:          ${limitLine(snap.bytes, limits.maxHomeBytes, 'home budget')}`,
    `soft bytes:     ${softLine(soft.bytes, true)}`,
    `inodes:         ${limits.maxInodes === 0 ? `${snap.inodes}, no cap` : `${snap.inodes} of ${limits.maxInodes}${snap.inodes >= limits.maxInodes ? ' — FULL' : ''}`}`,
    `soft inodes:    ${softLine(soft.inodes, false)}`,
    `per-file cap:   ${limits.maxFileBytes === 0 ? 'off' : `${human(limits.maxFileBytes)} (${limits.maxFileBytes} bytes)`}`,
    `tenant total:   ${pool ? `${limitLine(pool.bytes, pool.limit, 'tenant budget')} (tenant ${pool.tenant})` : 'unknown'}`,
    `content:        ${hs.profile.content === 'utf8' ? 'UTF-8 text only' : 'any bytes'}`,
    `open files:     ${openFiles}${hs.profile.maxOpenFiles === 0 ? ', no cap' : ` of ${hs.profile.maxOpenFiles}${openFiles >= hs.profile.maxOpenFiles ? ' — FULL' : ''}`}`,
    ...(hs.scan !== 'done' ? [`ledger:         ${hs.scan}${hs.scanError ? ` (${hs.scanError})` : ''}: changes wait or are refused until it is built`] : []),
    '',
    refusals.length === 0 ? 'no refusals recorded since the daemon started' : `last ${refusals.length} refusal${refusals.length === 1 ? '' : 's'}, newest first:`,
  ];
  for (const r of refusals) {
    const plain = PLAIN[r.code];
    lines.push(`${new Date(r.at).toISOString()}  ${r.op} ${r.path === '' ? '.' : r.path}: ${r.code} (${r.errno}) — ${plain ? `${plain}: ` : ''}${r.reason}`);
  }
  lines.push('', 'Ways out: delete or shrink files; ask an administrator to raise a limit (homesctl set-budget, set-tenant-budget).', '');
  return lines.join('\n');
}

/** Handles of open status files (fh numbers in the daemon's reserved range) and synthetic inode numbers. */
export class StatusFiles {
  readonly #open = new Map<number, Buffer>();
  readonly #serials = new Map<string, bigint>();
  #lastSerial = 0n;
  #next = RESERVED_FH_FROM;

  owns(fh: number): boolean {
    return this.#open.has(fh);
  }

  open(text: Buffer): number {
    if (this.#open.size >= MAX_OPEN) throw new HomesError('BUSY', 'too many status files open');
    while (this.#open.has(this.#next) || this.#next >= SELFCHECK_FH) this.#next = this.#next >= SELFCHECK_FH ? RESERVED_FH_FROM : this.#next + 1;
    const fh = this.#next++;
    this.#open.set(fh, text);
    return fh;
  }

  read(fh: number, buf: Buffer, len: number, pos: number): number {
    const text = this.#open.get(fh);
    if (!text) throw new HomesError('BAD_HANDLE', `unknown file handle ${fh}`);
    if (pos >= text.length) return 0;
    return text.copy(buf, 0, pos, Math.min(text.length, pos + len));
  }

  release(fh: number): void {
    this.#open.delete(fh);
  }

  /** Every open status file and its text (a live upgrade hands them over: each read of an open sees one text). */
  entries(): Array<[number, Buffer]> {
    return [...this.#open];
  }

  /** A status file the kernel already holds, under its number, with the text it was opened with. */
  restore(fh: number, text: Buffer): void {
    if (!Number.isInteger(fh) || fh < RESERVED_FH_FROM || fh >= SELFCHECK_FH || this.#open.has(fh)) {
      throw new HomesError('BAD_HANDLE', `status handle ${fh} cannot be restored: out of range or in use`);
    }
    if (this.#open.size >= MAX_OPEN) throw new HomesError('BUSY', 'too many status files open');
    this.#open.set(fh, text);
  }

  /** how many are open */
  get openCount(): number {
    return this.#open.size;
  }

  size(fh: number): number {
    return this.#open.get(fh)?.length ?? 0;
  }

  /** The status file's inode number for a home (stable while the daemon runs; renames keep it by id only). */
  /** The serial of every home that has one: a successor keeps them, so the kernel's nodes keep their numbers. */
  serials(): Array<[string, string]> {
    return [...this.#serials].map(([id, s]) => [id, s.toString()]);
  }

  /** Before any is given out: the serials a predecessor gave. */
  restoreSerials(list: ReadonlyArray<readonly [string, string]>): void {
    for (const [id, s] of list) {
      const v = BigInt(s);
      this.#serials.set(id, v);
      if (v > this.#lastSerial) this.#lastSerial = v;
    }
  }

  ino(id: string): bigint {
    let s = this.#serials.get(id);
    if (s === undefined) {
      s = ++this.#lastSerial;
      this.#serials.set(id, s);
    }
    return SYNTHETIC_INO.statusTag | (s << 1n);
  }
}

function nowNs(): bigint {
  return BigInt(Date.now()) * 1_000_000n;
}

/** A node only the daemon serves, owned by the home's owner, timestamped now. */
function syntheticAttr(hs: HomeState, mode: number, size: bigint, nlink: number, ino: bigint): Attr {
  const t = nowNs();
  return {
    mode,
    uid: hs.backing.owner.uid,
    gid: hs.backing.owner.gid,
    size,
    nlink,
    ino,
    dev: hs.backing.dev,
    rdev: 0n,
    blksize: 4096,
    blocks: 0n,
    atimeNs: t,
    mtimeNs: t,
    ctimeNs: t,
  };
}

/**
 * The status file's size is its text's at this moment, which every change in
 * the home (and every refusal) alters without a request about the file: its
 * attributes are volatile, never kept by the kernel. Its reads are direct
 * (file.ts), so they never stop at a size the kernel remembers.
 */
export function statusAttr(ctx: { readonly statusFiles: StatusFiles }, hs: HomeState, size: number): Attr {
  return { ...syntheticAttr(hs, S_IFREG | 0o400, BigInt(size), 1, ctx.statusFiles.ino(hs.backing.id)), volatile: true };
}

/** `.homesfs` when it does not exist in the backing tree: an empty owner-only directory. */
export function virtualDirAttr(ctx: { readonly statusFiles: StatusFiles }, hs: HomeState): Attr {
  return syntheticAttr(hs, S_IFDIR | 0o700, 4096n, 2, ctx.statusFiles.ino(hs.backing.id) | 1n);
}

/** The text of the home's status file, from its refusals and open files (FsContext provides both). */
export function statusText(ctx: { readonly refusals: RefusalBook; openFilesOf(hs: HomeState): number }, hs: HomeState): Buffer {
  return Buffer.from(renderStatus(hs, ctx.refusals.recent(homeId(hs.backing.ref)), new Date(), ctx.openFilesOf(hs)), 'utf8');
}

export { RESERVED_DIR, STATUS_NAME };
