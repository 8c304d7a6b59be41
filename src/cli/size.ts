/**
 * Sizes and counts as admins type them, and back. PURE (no I/O): the CLI turns
 * text into exact numbers here; the daemon only ever sees whole bytes.
 *
 * The unit convention is GNU coreutils' (dd, du --block-size, df -B) and the
 * one homectl and xfs_quota use for single letters:
 *   K M G T P      powers of 1024 (K = 1024)
 *   KiB MiB …      powers of 1024
 *   KB MB GB …     powers of 1000 (KB = 1000)
 *   B or nothing   bytes
 * Letters are case-insensitive (`10g` = `10G`), a space before the unit is
 * allowed, a fraction or an exponent is allowed (`1.5G`, `1e9`), and the result
 * is rounded down to whole bytes. Negative values, NaN, Infinity and results
 * beyond 2^53 - 1 are refused.
 */

export interface UnitInfo {
  /** the spelling shown in help texts */
  name: string;
  factor: number;
}

const UNITS: ReadonlyArray<readonly [string[], number]> = [
  [['', 'b', 'byte', 'bytes'], 1],
  [['k', 'kib'], 1024],
  [['m', 'mib'], 1024 ** 2],
  [['g', 'gib'], 1024 ** 3],
  [['t', 'tib'], 1024 ** 4],
  [['p', 'pib'], 1024 ** 5],
  [['kb'], 1000],
  [['mb'], 1000 ** 2],
  [['gb'], 1000 ** 3],
  [['tb'], 1000 ** 4],
  [['pb'], 1000 ** 5],
];

const FACTOR: ReadonlyMap<string, number> = new Map(UNITS.flatMap(([names, f]) => names.map((n) => [n, f] as const)));

/** One line for help texts and error messages. */
export const SIZE_SYNTAX =
  'a number of bytes, optionally with a unit: K, M, G, T, P or KiB, MiB, GiB, TiB, PiB (powers of 1024), ' +
  'KB, MB, GB, TB, PB (powers of 1000); fractions and exponents are allowed (1.5G, 1e9)';

export class SizeSyntaxError extends Error {}

const NUMBER = /^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]\+?([0-9]{1,3}))?\s*([a-zA-Z]*)$/;

/** Bytes for `text` (see the module comment). Throws SizeSyntaxError with a reason fit for an admin. */
export function parseSize(text: string): number {
  const s = text.trim();
  if (/^[-−]/.test(s)) throw new SizeSyntaxError(`'${text}' is negative: a size is 0 or more bytes`);
  const m = NUMBER.exec(s);
  if (!m) throw new SizeSyntaxError(`'${text}' is not a size: expected ${SIZE_SYNTAX}`);
  const factor = FACTOR.get(m[3]!.toLowerCase());
  if (factor === undefined) throw new SizeSyntaxError(`'${text}': unknown unit '${m[3]}': expected ${SIZE_SYNTAX}`);
  const value = Number(m[1]) * 10 ** Number(m[2] ?? 0) * factor;
  const bytes = Math.floor(value);
  if (!Number.isFinite(value) || !Number.isSafeInteger(bytes)) throw new SizeSyntaxError(`'${text}' is too large (at most ${Number.MAX_SAFE_INTEGER} bytes)`);
  return bytes;
}

/** A count (inodes): a whole number, optionally as an exponent (1e6). No units: an inode is not a byte. */
export function parseCount(text: string): number {
  const s = text.trim();
  if (/^[-−]/.test(s)) throw new SizeSyntaxError(`'${text}' is negative: a count is 0 or more`);
  const m = /^([0-9]+)(?:[eE]\+?([0-9]{1,2}))?$/.exec(s);
  if (!m) throw new SizeSyntaxError(`'${text}' is not a count: expected a whole number such as 100000 or 1e6`);
  const n = Number(m[1]) * 10 ** Number(m[2] ?? 0);
  if (!Number.isSafeInteger(n)) throw new SizeSyntaxError(`'${text}' is too large`);
  return n;
}

/**
 * A limit as typed after set-budget / set-limits: `off` (no limit: 0 on the
 * wire, as everywhere in homesfs), `default` (drop the override: null on the
 * wire, the profile decides again), or a size/count. `0` is the same as `off`,
 * as in xfs_quota and juicefs quota.
 */
export function parseLimit(text: string, kind: 'size' | 'count'): number | null {
  const s = text.trim().toLowerCase();
  if (s === 'off' || s === 'none' || s === 'unlimited') return 0;
  if (s === 'default') return null;
  return kind === 'size' ? parseSize(text) : parseCount(text);
}

/** Human size with binary units, one decimal (`1.5 GiB`, `512 B`). */
export function formatBytes(n: number | undefined | null): string {
  if (n === undefined || n === null || !Number.isFinite(n)) return '-';
  const neg = n < 0;
  let v = Math.abs(n);
  if (v < 1024) return `${neg ? '-' : ''}${v} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  v /= 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${neg ? '-' : ''}${v.toFixed(1)} ${units[i]}`;
}

/** A drift or a change: `+64 B`, `-1.5 MiB`, `0 B`. */
export function formatSignedBytes(n: number): string {
  return n > 0 ? `+${formatBytes(n)}` : formatBytes(n);
}

/** Bytes over budget as a percentage with one decimal, or null without a budget. */
export function percentOf(used: number, limit: number): number | null {
  if (!(limit > 0)) return null;
  return Math.round((used / limit) * 1000) / 10;
}
