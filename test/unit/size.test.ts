import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { formatBytes, formatSignedBytes, parseCount, parseLimit, parseSize, percentOf, SizeSyntaxError } from '../../src/cli/size.js';

const Ki = 1024;
const Mi = 1024 ** 2;
const Gi = 1024 ** 3;
const Ti = 1024 ** 4;

describe('parseSize: the units people type', () => {
  const cases: Array<[string, number]> = [
    ['0', 0],
    ['1', 1],
    ['4096', 4096],
    ['100B', 100],
    ['100 bytes', 100],
    // single letters and IEC names: powers of 1024 (homectl, xfs_quota, dd's K)
    ['1K', Ki],
    ['1k', Ki],
    ['500M', 500 * Mi],
    ['10g', 10 * Gi],
    ['2G', 2 * Gi],
    ['2GiB', 2 * Gi],
    ['2gib', 2 * Gi],
    ['1T', Ti],
    ['1TiB', Ti],
    ['1P', 1024 * Ti],
    ['2 GiB', 2 * Gi],
    // SI names with B: powers of 1000 (dd's KB, df -H)
    ['1KB', 1000],
    ['1kB', 1000],
    ['2GB', 2_000_000_000],
    ['500MB', 500_000_000],
    ['1TB', 1e12],
    // fractions and exponents
    ['1.5G', 1.5 * Gi],
    ['1.5GB', 1_500_000_000],
    ['.5M', Mi / 2],
    ['1.', 1],
    ['1e9', 1_000_000_000],
    ['1E3K', 1000 * Ki],
    ['2.5e3', 2500],
    // rounded down to whole bytes
    ['1.1K', 1126],
    ['0.5', 0],
    ['  7M  ', 7 * Mi],
    [String(Number.MAX_SAFE_INTEGER), Number.MAX_SAFE_INTEGER],
  ];
  it.each(cases)('%s = %d bytes', (text, bytes) => {
    expect(parseSize(text)).toBe(bytes);
  });

  const bad: Array<[string, RegExp]> = [
    ['-5', /negative/],
    ['-1G', /negative/],
    ['−5', /negative/],
    ['', /not a size/],
    ['G', /not a size/],
    ['abc', /not a size/],
    ['1.2.3', /not a size/],
    ['1 2', /not a size/],
    ['5X', /unknown unit 'X'/],
    ['5GX', /unknown unit 'GX'/],
    ['5Gi', /unknown unit 'Gi'/],
    ['0x10', /unknown unit|not a size/],
    ['NaN', /not a size/],
    ['Infinity', /not a size/],
    ['1e999', /too large/],
    ['9007199254740992', /too large/],
    ['9P', /too large/],
    ['1e9999', /not a size/],
  ];
  it.each(bad)('%j is refused (%s)', (text, why) => {
    expect(() => parseSize(text)).toThrow(SizeSyntaxError);
    expect(() => parseSize(text)).toThrow(why);
  });

  it('never answers anything but a safe non-negative integer or a SizeSyntaxError', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 24 }), (s) => {
        try {
          const n = parseSize(s);
          return Number.isSafeInteger(n) && n >= 0;
        } catch (err) {
          return err instanceof SizeSyntaxError;
        }
      }),
    );
  });

  it('reads back what formatBytes prints for whole units', () => {
    for (const n of [1, 512, 2 * Ki, 3 * Mi, 5 * Gi, 7 * Ti]) {
      expect(parseSize(formatBytes(n).replace(' ', ''))).toBe(n);
    }
  });
});

describe('parseCount and parseLimit', () => {
  it.each([
    ['0', 0],
    ['100000', 100000],
    ['1e6', 1_000_000],
  ] as const)('count %s = %d', (t, n) => expect(parseCount(t)).toBe(n));
  it.each(['-1', '1.5', '10K', 'x', ''])('count %j is refused', (t) => expect(() => parseCount(t)).toThrow(SizeSyntaxError));

  it('off/none/unlimited = 0 (no limit), default = null (drop the override), else the value', () => {
    for (const t of ['off', 'OFF', 'none', 'unlimited']) expect(parseLimit(t, 'size')).toBe(0);
    expect(parseLimit('default', 'size')).toBeNull();
    expect(parseLimit('default', 'count')).toBeNull();
    expect(parseLimit('0', 'size')).toBe(0);
    expect(parseLimit('2G', 'size')).toBe(2 * Gi);
    expect(parseLimit('5000', 'count')).toBe(5000);
    expect(() => parseLimit('2G', 'count')).toThrow(SizeSyntaxError);
  });
});

describe('formatting', () => {
  it.each([
    [0, '0 B'],
    [1023, '1023 B'],
    [1024, '1.0 KiB'],
    [1.5 * Gi, '1.5 GiB'],
    [-3 * Mi, '-3.0 MiB'],
  ] as const)('formatBytes(%d) = %s', (n, s) => expect(formatBytes(n)).toBe(s));
  it('signs changes and computes percentages', () => {
    expect(formatSignedBytes(64)).toBe('+64 B');
    expect(formatSignedBytes(-2 * Mi)).toBe('-2.0 MiB');
    expect(formatSignedBytes(0)).toBe('0 B');
    expect(percentOf(25.1 * Mi, 10 * Mi)).toBe(251);
    expect(percentOf(5, 0)).toBeNull();
  });
});
