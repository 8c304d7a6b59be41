import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { JsRemovalClaims, type RemovalClaims } from '../../src/fs/removal-claims.js';
import { loadFuse } from '../../src/fuse/binding.js';
import { nativeRemovals } from '../../src/fuse/native-claims.js';

/**
 * The claim on an inode's last names (fs/removal-claims.ts, native/src/fastpath/claims.c):
 * of the removers registered on an inode, the first to leave having seen
 * nlink 0 settles it, once per registration epoch; the entry goes with the
 * last registrant. The binding's table and JS's own must decide alike.
 */

type Step = { enter: boolean; inode: number; gone: boolean };

/** A sequence of enters and leaves on a few inodes, every leave matching an earlier enter. */
const steps = fc.array(fc.record({ enter: fc.boolean(), inode: fc.integer({ min: 0, max: 2 }), gone: fc.boolean() }), { minLength: 20, maxLength: 80 });

/** Plays seq, then leaves every registrant still in: each leave's answer, and per epoch of an inode [settled, saw 0]. */
function play(claims: RemovalClaims, seq: Step[], base: bigint): { answers: boolean[]; epochs: [number, number][] } {
  const held = new Map<number, { n: number; settled: number; gone: number }>();
  const answers: boolean[] = [];
  const epochs: [number, number][] = [];
  const drain = [0, 1, 2].flatMap((inode) => Array.from({ length: 64 }, () => ({ enter: false, inode, gone: false })));
  for (const s of [...seq, ...drain]) {
    const e = held.get(s.inode) ?? { n: 0, settled: 0, gone: 0 };
    held.set(s.inode, e);
    if (s.enter) {
      claims.enter(base + 1n, base + BigInt(s.inode));
      e.n++;
    } else if (e.n > 0) {
      const settles = claims.leave(base + 1n, base + BigInt(s.inode), s.gone);
      answers.push(settles);
      // the first to leave having seen 0 settles
      expect(settles).toBe(s.gone && e.gone === 0);
      if (settles) e.settled++;
      if (s.gone) e.gone++;
      if (--e.n === 0) {
        epochs.push([e.settled, e.gone]);
        held.delete(s.inode);
      }
    }
  }
  return { answers, epochs };
}

describe('removal claims', () => {
  it('two removers that both saw nlink 0: the first settles, the second not; a new epoch settles again', () => {
    const c = new JsRemovalClaims();
    c.enter(1n, 7n);
    c.enter(1n, 7n);
    expect(c.leave(1n, 7n, true)).toBe(true);
    expect(c.leave(1n, 7n, true)).toBe(false);
    expect(c.inFlight).toBe(0);
    // the inode number again, after every registrant left: another file
    c.enter(1n, 7n);
    expect(c.leave(1n, 7n, true)).toBe(true);
  });

  it('a remover that saw a name left claims nothing; the one that saw 0 after it does', () => {
    const c = new JsRemovalClaims();
    c.enter(1n, 7n);
    c.enter(1n, 7n);
    expect(c.leave(1n, 7n, false)).toBe(false);
    expect(c.leave(1n, 7n, true)).toBe(true);
    // other inodes and devices are apart
    c.enter(1n, 8n);
    c.enter(2n, 7n);
    expect(c.leave(1n, 8n, true)).toBe(true);
    expect(c.leave(2n, 7n, true)).toBe(true);
    expect(c.leave(2n, 7n, true)).toBe(false);
  });

  it('one settles per epoch if any saw 0, none otherwise, and the table empties (random sequences)', () => {
    fc.assert(
      fc.property(steps, (seq) => {
        const c = new JsRemovalClaims();
        for (const [settled, gone] of play(c, seq, 0n).epochs) expect(settled).toBe(gone > 0 ? 1 : 0);
        expect(c.inFlight).toBe(0);
      }),
    );
  });

  it("the binding's table decides as JS's does", () => {
    const native = nativeRemovals(loadFuse());
    let base = 1n << 40n;
    fc.assert(
      fc.property(steps, (seq) => {
        base += 16n;
        const before = native.stats().inFlight;
        expect(play(native, seq, base).answers).toEqual(play(new JsRemovalClaims(), seq, base).answers);
        expect(native.stats().inFlight).toBe(before);
      }),
    );
  });
});
