import type { BigIntStats } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { HomesError } from '../../src/errors.js';
import { backingIno, dirEntryAttr, homeNodeAttr, S_IFDIR, S_IFREG, SYNTHETIC_INO, SYNTHETIC_INO_BASE } from '../../src/fs/present.js';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';

function st(over: Partial<Record<keyof BigIntStats, unknown>>): BigIntStats {
  return {
    mode: BigInt(S_IFREG | 0o644),
    uid: 1000n,
    gid: 1000n,
    size: 3n,
    nlink: 2n,
    ino: 12345n,
    dev: 2049n,
    rdev: 0n,
    blksize: 4096n,
    blocks: 8n,
    atimeNs: 1n,
    mtimeNs: 2n,
    ctimeNs: 3n,
    ...over,
  } as unknown as BigIntStats;
}

describe('presented inode numbers', () => {
  it('are the backing numbers, the same for stat and readdir', () => {
    const s = st({});
    expect(homeNodeAttr(BUILTIN_PROFILES.posix, { uid: 1, gid: 1 }, s, false).ino).toBe(12345n);
    expect(dirEntryAttr(s)).toEqual({ ino: 12345n, mode: S_IFREG });
    expect(dirEntryAttr(st({ mode: BigInt(S_IFDIR | 0o755) })).mode).toBe(S_IFDIR);
  });

  it('keep st_nlink of hard links', () => {
    expect(homeNodeAttr(BUILTIN_PROFILES.home, { uid: 1, gid: 1 }, st({ nlink: 3n }), false).nlink).toBe(3);
  });

  it('never take a number from the synthetic range (top bit set)', () => {
    for (const v of Object.values(SYNTHETIC_INO)) expect(v & SYNTHETIC_INO_BASE).toBe(SYNTHETIC_INO_BASE);
    expect(() => backingIno(SYNTHETIC_INO_BASE)).toThrow(HomesError);
    expect(() => dirEntryAttr(st({ ino: SYNTHETIC_INO_BASE | 5n }))).toThrow(/synthetic range/);
    expect(backingIno(SYNTHETIC_INO_BASE - 1n)).toBe(SYNTHETIC_INO_BASE - 1n);
  });
});
