/**
 * What a fallocate(2) request does to a file's size and to the ledger.
 *
 * PURE. The ledger charges the APPARENT (logical) size of files, so a
 * request is charged exactly its growth of the size, like a write or a
 * truncate, and nothing else: blocks are never counted. Every rule below
 * follows from that, and from one more: no request may put bytes on the disk
 * that the budget cannot see. Space allocated past end of file without
 * growing the size (FALLOC_FL_KEEP_SIZE) would be exactly that, so it is
 * refused (EOPNOTSUPP) rather than given away.
 *
 *  - 0 (allocate): the size grows to offset+length if that is larger;
 *    growth is charged. Inside the file: nothing changes, nothing charged.
 *  - KEEP_SIZE: inside the file nothing changes (no-op); a range reaching
 *    past the end is refused.
 *  - PUNCH_HOLE|KEEP_SIZE: the range inside the file reads back as zeros and
 *    its blocks are freed; size and charge unchanged.
 *  - ZERO_RANGE: the range reads back as zeros; the size grows to its end if
 *    larger (growth charged). With KEEP_SIZE, a range reaching past the end
 *    is refused like KEEP_SIZE alone.
 *  - COLLAPSE_RANGE, INSERT_RANGE, UNSHARE_RANGE, NO_HIDE_STALE and unknown
 *    bits: refused (EOPNOTSUPP); PUNCH_HOLE without KEEP_SIZE likewise (the
 *    kernel's own rule), PUNCH_HOLE with ZERO_RANGE is invalid (EINVAL).
 */

/** linux/falloc.h */
export const FALLOC_FL_KEEP_SIZE = 0x01;
export const FALLOC_FL_PUNCH_HOLE = 0x02;
export const FALLOC_FL_NO_HIDE_STALE = 0x04;
export const FALLOC_FL_COLLAPSE_RANGE = 0x08;
export const FALLOC_FL_ZERO_RANGE = 0x10;
export const FALLOC_FL_INSERT_RANGE = 0x20;
export const FALLOC_FL_UNSHARE_RANGE = 0x40;

const KNOWN = FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;

export type FallocatePlan =
  /** nothing changes and nothing is charged */
  | { action: 'none' }
  /** the size grows to `size` (the new bytes read as zeros): charged as growth, like a truncate up */
  | { action: 'extend'; size: number }
  /** [from, to) of the existing bytes become zeros, then the size grows to `size` (>= the old size): growth charged */
  | { action: 'zero'; from: number; to: number; size: number }
  /** [from, to) of the existing bytes become a hole: size and charge unchanged */
  | { action: 'punch'; from: number; to: number }
  | { action: 'refuse'; code: 'NOT_SUPPORTED' | 'INVALID_ARGUMENT'; reason: string };

function refuse(code: 'NOT_SUPPORTED' | 'INVALID_ARGUMENT', reason: string): FallocatePlan {
  return { action: 'refuse', code, reason };
}

/** The plan for `fallocate(fd, mode, offset, length)` on a file whose charged size is `size`. */
export function planFallocate(mode: number, offset: number, length: number, size: number): FallocatePlan {
  if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length <= 0) {
    return refuse('INVALID_ARGUMENT', `fallocate needs offset >= 0 and length > 0 (got ${offset}, ${length})`);
  }
  if (!Number.isInteger(mode) || mode < 0 || (mode & ~KNOWN) !== 0) {
    return refuse('NOT_SUPPORTED', `fallocate mode 0x${Math.max(0, mode).toString(16)} is not supported (collapse, insert and unshare ranges are not)`);
  }
  const end = offset + length;
  const keep = (mode & FALLOC_FL_KEEP_SIZE) !== 0;
  const pastEof = `allocating past the end of the file without growing it (FALLOC_FL_KEEP_SIZE) is refused: budgets charge the apparent size, which would not see that space`;
  if (mode & FALLOC_FL_PUNCH_HOLE) {
    if (mode & FALLOC_FL_ZERO_RANGE) return refuse('INVALID_ARGUMENT', 'FALLOC_FL_PUNCH_HOLE and FALLOC_FL_ZERO_RANGE together are invalid');
    if (!keep) return refuse('NOT_SUPPORTED', 'FALLOC_FL_PUNCH_HOLE needs FALLOC_FL_KEEP_SIZE');
    const to = Math.min(end, size);
    return offset < to ? { action: 'punch', from: offset, to } : { action: 'none' };
  }
  if (mode & FALLOC_FL_ZERO_RANGE) {
    if (keep && end > size) return refuse('NOT_SUPPORTED', pastEof);
    const to = Math.min(end, size);
    const grown = Math.max(size, end);
    if (offset >= to) return grown > size ? { action: 'extend', size: grown } : { action: 'none' };
    return { action: 'zero', from: offset, to, size: grown };
  }
  if (keep) return end > size ? refuse('NOT_SUPPORTED', pastEof) : { action: 'none' };
  return end > size ? { action: 'extend', size: end } : { action: 'none' };
}
