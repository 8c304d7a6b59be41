import { describe, expect, it } from 'vitest';
import { HandleTable, RESERVED_FH_FROM, type FileHandle } from '../../src/fs/state.js';

const make = (fh: number) => ({ fh }) as unknown as FileHandle;

describe('HandleTable', () => {
  it('never hands out 0 (the binding reads it as "no handle") nor a reserved number, even after wrapping', () => {
    const t = new HandleTable();
    (t as unknown as { next: number }).next = RESERVED_FH_FROM - 2;
    const got = Array.from({ length: 5 }, () => t.add(make).fh);
    expect(got).toEqual([RESERVED_FH_FROM - 2, RESERVED_FH_FROM - 1, 1, 2, 3]);
  });

  it('skips numbers still in use and frees them on remove', () => {
    const t = new HandleTable();
    const a = t.add(make).fh;
    const b = t.add(make).fh;
    t.remove(a);
    (t as unknown as { next: number }).next = b;
    expect(t.add(make).fh).toBe(b + 1);
    expect(() => t.get(a)).toThrow(/unknown file handle/);
    expect(t.size).toBe(2);
  });
});
