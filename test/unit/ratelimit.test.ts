import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { HomesError } from '../../src/errors.js';
import { RefusalLimiter } from '../../src/policy/ratelimit.js';

function clock(start = 1_000) {
  let t = start;
  return {
    now: () => t,
    advance: (ms: number) => {
      t += ms;
    },
    set: (ms: number) => {
      t = ms;
    },
  };
}

describe('RefusalLimiter', () => {
  it('admits burst lines per window, then reports the suppressed count on the next admitted line', () => {
    const c = clock();
    const rl = new RefusalLimiter({ windowMs: 1000, burst: 2, now: c.now });
    expect(rl.admit('h1:write:QUOTA_EXCEEDED')).toEqual({ log: true, suppressed: 0 });
    expect(rl.admit('h1:write:QUOTA_EXCEEDED')).toEqual({ log: true, suppressed: 0 });
    expect(rl.admit('h1:write:QUOTA_EXCEEDED')).toEqual({ log: false, suppressed: 1 });
    c.advance(500);
    expect(rl.admit('h1:write:QUOTA_EXCEEDED')).toEqual({ log: false, suppressed: 2 });
    c.advance(499);
    expect(rl.admit('h1:write:QUOTA_EXCEEDED')).toEqual({ log: false, suppressed: 3 });
    c.advance(1); // window of 1000 ms has elapsed
    expect(rl.admit('h1:write:QUOTA_EXCEEDED')).toEqual({ log: true, suppressed: 3 });
    expect(rl.admit('h1:write:QUOTA_EXCEEDED')).toEqual({ log: true, suppressed: 0 });
    expect(rl.admit('h1:write:QUOTA_EXCEEDED')).toEqual({ log: false, suppressed: 1 });
  });

  it('keeps keys independent', () => {
    const c = clock();
    const rl = new RefusalLimiter({ windowMs: 1000, burst: 1, now: c.now });
    expect(rl.admit('a').log).toBe(true);
    expect(rl.admit('a').log).toBe(false);
    expect(rl.admit('b').log).toBe(true);
    expect(rl.admit('a:write:NOT_UTF8').log).toBe(true);
  });

  it('starts a new window when the clock steps backwards', () => {
    const c = clock(10_000);
    const rl = new RefusalLimiter({ windowMs: 1000, burst: 1, now: c.now });
    rl.admit('k');
    expect(rl.admit('k').log).toBe(false);
    c.set(5_000);
    expect(rl.admit('k')).toEqual({ log: true, suppressed: 1 });
  });

  it('flush collects pending suppressed counts once', () => {
    const c = clock();
    const rl = new RefusalLimiter({ windowMs: 1000, burst: 1, now: c.now });
    rl.admit('a');
    rl.admit('a');
    rl.admit('a');
    rl.admit('b');
    expect(rl.flush()).toEqual([{ key: 'a', suppressed: 2 }]);
    expect(rl.flush()).toEqual([]);
    c.advance(1000);
    expect(rl.admit('a')).toEqual({ log: true, suppressed: 0 });
  });

  it('bounds memory by forgetting the least recently seen key', () => {
    const c = clock();
    const rl = new RefusalLimiter({ windowMs: 1000, burst: 1, now: c.now, maxKeys: 3 });
    rl.admit('a');
    rl.admit('b');
    rl.admit('c');
    expect(rl.admit('a').log).toBe(false); // touches a: b is now the oldest
    rl.admit('d');
    expect(rl.size).toBe(3);
    expect(rl.admit('b').log).toBe(true); // b was forgotten, so it logs again (evicting c)
    expect(rl.admit('a').log).toBe(false); // a survived: it was touched
    expect(rl.admit('c').log).toBe(true); // c was forgotten too
  });

  it('stays at the default cap of 10_000 keys', () => {
    const rl = new RefusalLimiter({ windowMs: 1000, burst: 1, now: () => 0 });
    for (let i = 0; i < 12_000; i += 1) rl.admit(`home${i}:write:QUOTA_EXCEEDED`);
    expect(rl.size).toBe(10_000);
  });

  it.each([
    { name: 'windowMs 0', opts: { windowMs: 0, burst: 1 } },
    { name: 'negative window', opts: { windowMs: -5, burst: 1 } },
    { name: 'burst 0', opts: { windowMs: 1000, burst: 0 } },
    { name: 'fractional burst', opts: { windowMs: 1000, burst: 1.5 } },
    { name: 'maxKeys 0', opts: { windowMs: 1000, burst: 1, maxKeys: 0 } },
  ])('refuses $name', ({ opts }) => {
    expect(() => new RefusalLimiter(opts)).toThrow(HomesError);
  });

  it('never logs more than burst lines per key per window, and loses no count', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 4 }),
        fc.integer({ min: 10, max: 1000 }),
        fc.array(fc.record({ key: fc.constantFrom('a', 'b', 'c'), dt: fc.integer({ min: 0, max: 400 }) }), { maxLength: 200 }),
        (burst, windowMs, events) => {
          const c = clock(0);
          const rl = new RefusalLimiter({ windowMs, burst, now: c.now });
          const logged = new Map<string, number[]>();
          const accounted = new Map<string, number>();
          for (const e of events) {
            c.advance(e.dt);
            const a = rl.admit(e.key);
            if (a.log) {
              logged.set(e.key, [...(logged.get(e.key) ?? []), c.now()]);
              accounted.set(e.key, (accounted.get(e.key) ?? 0) + 1 + a.suppressed);
            }
          }
          for (const { key, suppressed } of rl.flush()) accounted.set(key, (accounted.get(key) ?? 0) + suppressed);
          for (const key of ['a', 'b', 'c']) {
            // Every event is either a logged line or counted in a later line/flush.
            expect(accounted.get(key) ?? 0).toBe(events.filter((e) => e.key === key).length);
            // Fixed windows: burst+1 lines never share one instant, and
            // 2*burst+1 lines span three windows, so more than windowMs.
            const times = logged.get(key) ?? [];
            for (let i = burst; i < times.length; i += 1) {
              expect(times[i]! - times[i - burst]!).toBeGreaterThan(0);
            }
            for (let i = 2 * burst; i < times.length; i += 1) {
              expect(times[i]! - times[i - 2 * burst]!).toBeGreaterThan(windowMs);
            }
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});
