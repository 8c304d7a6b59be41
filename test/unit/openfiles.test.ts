import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isHomesError } from '../../src/errors.js';
import { OpenFileAccounting, type OpenSlot } from '../../src/policy/openfiles.js';

function refusal(fn: () => unknown): { code: string; scope: unknown } | null {
  try {
    fn();
    return null;
  } catch (err) {
    if (!isHomesError(err)) throw err;
    return { code: err.code, scope: err.details.scope };
  }
}

describe('OpenFileAccounting', () => {
  it('refuses at the home limit, the uid limit and the shared cap, in that order, counting nothing', () => {
    const acc = new OpenFileAccounting({ perUid: 3, total: () => 5 });
    const h1 = { openHandles: 0 };
    const h2 = { openHandles: 0 };
    const slots: OpenSlot[] = [];
    slots.push(acc.acquire(h1, 2, 1000, 't/a'), acc.acquire(h1, 2, 1000, 't/a'));
    expect(refusal(() => acc.acquire(h1, 2, 1000, 't/a'))).toEqual({ code: 'OPEN_FILES_EXCEEDED', scope: 'home' });
    slots.push(acc.acquire(h2, 0, 1000, 't/b'));
    expect(refusal(() => acc.acquire(h2, 0, 1000, 't/b'))).toEqual({ code: 'OPEN_FILES_EXCEEDED', scope: 'uid' });
    // uid 0 is not counted per uid, but the shared cap holds for it too
    slots.push(acc.acquire(h2, 0, 0, 't/b'), acc.acquire(h2, 0, 0, 't/b'));
    expect(refusal(() => acc.acquire(h2, 0, 0, 't/b'))).toEqual({ code: 'DAEMON_FILES_EXHAUSTED', scope: 'daemon' });
    expect(refusal(() => acc.acquire(h2, 0, 2000, 't/b'))).toEqual({ code: 'DAEMON_FILES_EXHAUSTED', scope: 'daemon' });
    expect({ h1: h1.openHandles, h2: h2.openHandles, total: acc.total, uid: acc.uidCount(1000), root: acc.uidCount(0) }).toEqual({ h1: 2, h2: 3, total: 5, uid: 3, root: 0 });
    for (const s of slots) {
      s.release();
      s.release(); // a second release changes nothing
    }
    expect({ h1: h1.openHandles, h2: h2.openHandles, total: acc.total, uid: acc.uidCount(1000) }).toEqual({ h1: 0, h2: 0, total: 0, uid: 0 });
  });

  it('open directory handles (the binding counts them) take room under all three caps, and every change is told', () => {
    const dirs = new Map<string, number>([['uid', 0], ['home', 0], ['all', 0]]);
    const told: number[] = [];
    const acc = new OpenFileAccounting({
      perUid: 4,
      total: () => 6,
      dirs: () => [dirs.get('uid')!, dirs.get('home')!, dirs.get('all')!],
      changed: (uid) => told.push(uid),
    });
    const h = { openHandles: 0 };
    dirs.set('uid', 3);
    const a = acc.acquire(h, 0, 1000, 't/a');
    expect(refusal(() => acc.acquire(h, 0, 1000, 't/a'))).toEqual({ code: 'OPEN_FILES_EXCEEDED', scope: 'uid' });
    dirs.set('uid', 0).set('home', 2);
    expect(refusal(() => acc.acquire(h, 3, 1000, 't/a'))).toEqual({ code: 'OPEN_FILES_EXCEEDED', scope: 'home' });
    dirs.set('home', 0).set('all', 5);
    expect(refusal(() => acc.acquire(h, 0, 0, 't/a'))).toEqual({ code: 'DAEMON_FILES_EXHAUSTED', scope: 'daemon' });
    a.release();
    expect(told).toEqual([1000, 1000]);
    expect({ h: h.openHandles, total: acc.total }).toEqual({ h: 0, total: 0 });
  });

  it('a shrinking shared cap (more homes loaded) refuses new opens and never breaks held ones', () => {
    let cap = 3;
    const acc = new OpenFileAccounting({ perUid: 0, total: () => cap });
    const h = { openHandles: 0 };
    const held = [acc.acquire(h, 0, 5, 'x'), acc.acquire(h, 0, 5, 'x'), acc.acquire(h, 0, 5, 'x')];
    cap = 1;
    expect(refusal(() => acc.acquire(h, 0, 5, 'x'))?.code).toBe('DAEMON_FILES_EXHAUSTED');
    held.pop()!.release();
    held.pop()!.release();
    expect(refusal(() => acc.acquire(h, 0, 5, 'x'))?.code).toBe('DAEMON_FILES_EXHAUSTED');
    held.pop()!.release();
    expect(refusal(() => acc.acquire(h, 0, 5, 'x'))).toBeNull();
  });

  it('no sequence of acquires and releases passes a cap or leaves a count behind', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ home: fc.nat(2), uid: fc.constantFrom(0, 1, 2), release: fc.boolean(), pick: fc.nat() }), { maxLength: 200 }),
        fc.nat(6),
        fc.nat(8),
        fc.nat(12),
        (steps, homeLimit, perUid, total) => {
          const acc = new OpenFileAccounting({ perUid, total: () => total });
          const homes = [{ openHandles: 0 }, { openHandles: 0 }, { openHandles: 0 }];
          const held: Array<{ slot: OpenSlot; uid: number }> = [];
          for (const s of steps) {
            if (s.release && held.length > 0) {
              held.splice(s.pick % held.length, 1)[0]!.slot.release();
              continue;
            }
            try {
              held.push({ slot: acc.acquire(homes[s.home]!, homeLimit, s.uid, `t/${s.home}`), uid: s.uid });
            } catch (err) {
              if (!isHomesError(err)) throw err;
            }
            for (const h of homes) if (homeLimit > 0) expect(h.openHandles).toBeLessThanOrEqual(homeLimit);
            for (const uid of [1, 2]) if (perUid > 0) expect(acc.uidCount(uid)).toBeLessThanOrEqual(perUid);
            expect(acc.total).toBeLessThanOrEqual(total);
            expect(acc.total).toBe(held.length);
          }
          for (const h of held) h.slot.release();
          expect([acc.total, ...homes.map((h) => h.openHandles), acc.uidCount(1), acc.uidCount(2)]).toEqual([0, 0, 0, 0, 0, 0]);
        },
      ),
    );
  });
});
