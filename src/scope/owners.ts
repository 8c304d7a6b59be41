import { HomesError } from '../errors.js';

/** The largest valid uid/gid: (uid_t)-1 means "unchanged" to chown(2). */
export const MAX_ID = 0xfffffffe;
/** The kernel's overflow uid/gid (nobody/nogroup): files of unmapped ids show up as it. */
export const OVERFLOW_ID = 65534;

export interface OwnerRange {
  /** first uid of the range, inclusive */
  from: number;
  /** last uid of the range, inclusive */
  to: number;
}

export interface Owner {
  uid: number;
  gid: number;
}

/**
 * The owner of a new home: the lowest id in `range` above `highWater` (the
 * highest id ever handed out, when the caller keeps one) that is in neither
 * `used` nor reserved, as uid and gid alike (gid = uid). Pass every uid AND
 * every gid already recorded for a home (an explicitly set owner may have a
 * gid that differs from its uid), and every retired id, so a new home never
 * shares a group either.
 *
 * With a high-water mark the allocator only moves forward: the uid of a
 * deleted home may still own processes or files elsewhere, so it is never
 * handed out again. When the mark reaches the end of the range, the range is
 * exhausted even if homes were deleted: widen it (or move it) in the config.
 *
 * Never hands out root (0, which `default_permissions` does not stop) or the
 * overflow id 65534: the range must lie within 1..0xfffffffe, and 65534 is
 * skipped. Throws HomesError INVALID_ARGUMENT for a bad range, and
 * INVALID_ARGUMENT with `details.reason = 'owner-range-exhausted'` when no id
 * is left.
 */
export function allocateOwner(range: OwnerRange, used: Iterable<number>, highWater?: number): Owner {
  const { from, to } = range;
  if (!Number.isSafeInteger(from) || !Number.isSafeInteger(to) || from < 1 || to > MAX_ID || from > to) {
    throw new HomesError('INVALID_ARGUMENT', `owner range ${from}..${to} must be whole numbers with 1 <= from <= to <= ${MAX_ID}`, {
      from,
      to,
    });
  }
  const taken = new Set<number>();
  for (const id of used) if (id >= from && id <= to) taken.add(id);
  const start = highWater !== undefined && highWater >= from ? highWater + 1 : from;
  // At most |taken| + 2 steps: the loop only walks over taken or reserved ids.
  for (let id = start; id <= to; id++) {
    if (id === OVERFLOW_ID || taken.has(id)) continue;
    return { uid: id, gid: id };
  }
  throw new HomesError('INVALID_ARGUMENT', `no free owner uid left in the range ${from}..${to} (ids are never reused; ${taken.size} in use): widen the range`, {
    reason: 'owner-range-exhausted',
    from,
    to,
    inUse: taken.size,
    ...(highWater !== undefined ? { highWater } : {}),
  });
}
