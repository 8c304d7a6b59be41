import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { editDistance, nearestNames } from '../../src/paths/nearest.js';

describe('nearest names (a refused resolve of a mistyped home)', () => {
  it('counts insertions, deletions, substitutions and adjacent swaps as one edit each', () => {
    expect(editDistance('frontend', 'frontend')).toBe(0);
    expect(editDistance('frontend', 'frontedn')).toBe(1);
    expect(editDistance('hello', 'helo')).toBe(1);
    expect(editDistance('hello', 'hallo')).toBe(1);
    expect(editDistance('hello', 'xhello')).toBe(1);
    expect(editDistance('', 'abc')).toBe(3);
  });

  it('is a metric-like distance: symmetric, zero only on equals, at most the longer length', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 12 }), fc.string({ maxLength: 12 }), (a, b) => {
        const d = editDistance(a, b);
        expect(d).toBe(editDistance(b, a));
        expect(d === 0).toBe(a === b);
        expect(d).toBeLessThanOrEqual(Math.max(a.length, b.length));
      }),
    );
  });

  it('suggests close names only, closest first, never the name itself', () => {
    const homes = ['demo/hello', 'demo/help', 'demo/_tenant', 'acme/web', 'acme/frontend'];
    expect(nearestNames('demo/helo', homes)).toEqual(['demo/hello', 'demo/help']);
    expect(nearestNames('acme/frontedn', homes)).toEqual(['acme/frontend']);
    expect(nearestNames('acme/Web', homes)).toEqual(['acme/web']);
    expect(nearestNames('acme/web', homes)).toEqual([]);
    expect(nearestNames('zz/qq', homes)).toEqual([]);
    expect(nearestNames('demo/hel', ['demo/hel1', 'demo/hel2', 'demo/hel3', 'demo/hel4'], 2)).toEqual(['demo/hel1', 'demo/hel2']);
  });
});
