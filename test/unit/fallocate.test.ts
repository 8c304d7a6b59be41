import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  FALLOC_FL_COLLAPSE_RANGE,
  FALLOC_FL_INSERT_RANGE,
  FALLOC_FL_KEEP_SIZE as KEEP,
  FALLOC_FL_PUNCH_HOLE as PUNCH,
  FALLOC_FL_UNSHARE_RANGE,
  FALLOC_FL_ZERO_RANGE as ZERO,
  planFallocate,
} from '../../src/policy/fallocate.js';

describe('planFallocate: what each mode does to the size (the charge is its growth)', () => {
  it.each([
    { name: 'allocate past EOF grows the size', mode: 0, off: 100, len: 50, size: 120, plan: { action: 'extend', size: 150 } },
    { name: 'allocate past a gap grows to its end', mode: 0, off: 500, len: 1, size: 10, plan: { action: 'extend', size: 501 } },
    { name: 'allocate inside the file changes nothing', mode: 0, off: 0, len: 100, size: 100, plan: { action: 'none' } },
    { name: 'keep size inside the file: no-op', mode: KEEP, off: 10, len: 90, size: 100, plan: { action: 'none' } },
    { name: 'keep size past EOF: refused (space the budget cannot see)', mode: KEEP, off: 10, len: 91, size: 100, plan: { action: 'refuse', code: 'NOT_SUPPORTED' } },
    { name: 'keep size on an empty file: refused', mode: KEEP, off: 0, len: 4096, size: 0, plan: { action: 'refuse', code: 'NOT_SUPPORTED' } },
    { name: 'punch inside', mode: PUNCH | KEEP, off: 10, len: 20, size: 100, plan: { action: 'punch', from: 10, to: 30 } },
    { name: 'punch across EOF stops at EOF', mode: PUNCH | KEEP, off: 90, len: 50, size: 100, plan: { action: 'punch', from: 90, to: 100 } },
    { name: 'punch past EOF: nothing to do', mode: PUNCH | KEEP, off: 100, len: 50, size: 100, plan: { action: 'none' } },
    { name: 'punch without keep size: refused (the kernel rule)', mode: PUNCH, off: 0, len: 1, size: 100, plan: { action: 'refuse', code: 'NOT_SUPPORTED' } },
    { name: 'punch and zero together: invalid', mode: PUNCH | ZERO | KEEP, off: 0, len: 1, size: 100, plan: { action: 'refuse', code: 'INVALID_ARGUMENT' } },
    { name: 'zero inside', mode: ZERO, off: 10, len: 20, size: 100, plan: { action: 'zero', from: 10, to: 30, size: 100 } },
    { name: 'zero across EOF zeroes to EOF and grows', mode: ZERO, off: 90, len: 20, size: 100, plan: { action: 'zero', from: 90, to: 100, size: 110 } },
    { name: 'zero past EOF is a growth only', mode: ZERO, off: 200, len: 20, size: 100, plan: { action: 'extend', size: 220 } },
    { name: 'zero keep size inside', mode: ZERO | KEEP, off: 0, len: 100, size: 100, plan: { action: 'zero', from: 0, to: 100, size: 100 } },
    { name: 'zero keep size past EOF: refused', mode: ZERO | KEEP, off: 50, len: 51, size: 100, plan: { action: 'refuse', code: 'NOT_SUPPORTED' } },
    { name: 'collapse range: refused', mode: FALLOC_FL_COLLAPSE_RANGE, off: 0, len: 4096, size: 8192, plan: { action: 'refuse', code: 'NOT_SUPPORTED' } },
    { name: 'insert range: refused', mode: FALLOC_FL_INSERT_RANGE, off: 0, len: 4096, size: 8192, plan: { action: 'refuse', code: 'NOT_SUPPORTED' } },
    { name: 'unshare range: refused', mode: FALLOC_FL_UNSHARE_RANGE, off: 0, len: 4096, size: 8192, plan: { action: 'refuse', code: 'NOT_SUPPORTED' } },
    { name: 'an unknown bit: refused', mode: 0x100, off: 0, len: 1, size: 0, plan: { action: 'refuse', code: 'NOT_SUPPORTED' } },
    { name: 'length 0: invalid', mode: 0, off: 0, len: 0, size: 0, plan: { action: 'refuse', code: 'INVALID_ARGUMENT' } },
    { name: 'negative offset: invalid', mode: 0, off: -1, len: 1, size: 0, plan: { action: 'refuse', code: 'INVALID_ARGUMENT' } },
  ])('$name', ({ mode, off, len, size, plan }) => {
    expect(planFallocate(mode, off, len, size)).toMatchObject(plan);
  });

  it('property: never shrinks, grows at most to offset+length, and never grows with KEEP_SIZE', () => {
    fc.assert(
      fc.property(fc.constantFrom(0, KEEP, PUNCH | KEEP, ZERO, ZERO | KEEP), fc.nat(1 << 20), fc.integer({ min: 1, max: 1 << 20 }), fc.nat(1 << 21), (mode, off, len, size) => {
        const p = planFallocate(mode, off, len, size);
        const after = p.action === 'extend' || p.action === 'zero' ? p.size : size;
        expect(after).toBeGreaterThanOrEqual(size);
        expect(after).toBeLessThanOrEqual(Math.max(size, off + len));
        if (mode & KEEP) expect(after).toBe(size);
        // KEEP_SIZE reaching past EOF is the only refusal among these modes
        if (p.action === 'refuse') expect(mode & KEEP && off + len > size && !(mode & PUNCH)).toBeTruthy();
        // zeroed and punched ranges are within the old size
        if (p.action === 'zero' || p.action === 'punch') expect(p.from < p.to && p.to <= size).toBe(true);
      }),
    );
  });
});
