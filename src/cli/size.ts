/**
 * Sizes and counts as admins type them, and back. PURE (no I/O): the CLI turns
 * text into exact numbers here; the daemon only ever sees whole bytes. The
 * parser itself (units, rounding, refusals) and `formatBytes` live in
 * `policy/size.ts`, shared with the configuration file, so `2G` means the
 * same bytes in both.
 */

import { formatBytes, parseCount, parseSize } from '../policy/size.js';

export { formatBytes, parseCount, parseSize, SIZE_SYNTAX, SizeSyntaxError } from '../policy/size.js';

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

/** A drift or a change: `+64 B`, `-1.5 MiB`, `0 B`. */
export function formatSignedBytes(n: number): string {
  return n > 0 ? `+${formatBytes(n)}` : formatBytes(n);
}

/** Bytes over budget as a percentage with one decimal, or null without a budget. */
export function percentOf(used: number, limit: number): number | null {
  if (!(limit > 0)) return null;
  return Math.round((used / limit) * 1000) / 10;
}
