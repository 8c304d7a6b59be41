/**
 * Sizes and counts as admins type them. PURE (no I/O): `homesctl` and the
 * configuration file both read sizes here, so `2G` is the same number of bytes
 * on the command line and in the config; the daemon only ever sees whole bytes.
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

import { z } from 'zod';

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

/**
 * A byte size in a configuration file: a whole number of bytes as before, or a
 * string read by `parseSize` (the CLI's rules, so `"2G"` there is `2G` here),
 * checked afterwards by `inner` (range, integer). The parsed config holds
 * numbers only. Strings in `keep` (`"unlimited"`) pass to `inner` as they are.
 * One refusal the CLI does not make: a size that is not zero but rounds down
 * to 0 bytes (`"0.5"`, `"0.0001K"`), because 0 means "off" and a slip of the
 * pen should not silently lift a limit.
 */
export function byteSizeSchema<T extends z.ZodType>(inner: T, keep: readonly string[] = []): z.ZodPreprocess<T, unknown> {
  return z.preprocess((v, ctx) => {
    if (typeof v === 'number' || (typeof v === 'string' && keep.includes(v))) return v;
    if (typeof v !== 'string') {
      const also = keep.length ? ` (or ${keep.map((k) => `"${k}"`).join(', ')})` : '';
      ctx.addIssue({ code: 'custom', message: `expected a size: a whole number of bytes or a string such as "2G", "1.5 GiB" or "2 GB"${also}` });
      return z.NEVER;
    }
    let bytes: number;
    try {
      bytes = parseSize(v);
    } catch (err) {
      if (!(err instanceof SizeSyntaxError)) throw err;
      ctx.addIssue({ code: 'custom', message: err.message });
      return z.NEVER;
    }
    if (bytes === 0 && /[1-9]/.test(v.replace(/[eE].*$/, ''))) {
      ctx.addIssue({ code: 'custom', message: `'${v}' rounds down to 0 bytes, which means "off" (write 0 if that is meant)` });
      return z.NEVER;
    }
    return bytes;
  }, inner);
}
