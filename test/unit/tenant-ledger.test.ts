import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { HomesError } from '../../src/errors.js';
import { Ledger, TenantPool, type Limits, type Undo } from '../../src/policy/ledger.js';

const OFF: Limits = { maxHomeBytes: 0, maxInodes: 0, maxFileBytes: 0 };

function codeOf(fn: () => unknown): string {
  try {
    fn();
    return 'OK';
  } catch (err) {
    if (err instanceof HomesError) return err.code;
    throw err;
  }
}

describe('TenantPool: a tenant total across home ledgers', () => {
  it('refuses growth of any home past the tenant limit with TENANT_QUOTA_EXCEEDED, changing nothing', () => {
    const pool = new TenantPool('acme', 100);
    const a = new Ledger(OFF, { bytes: 60, inodes: 0 }, pool);
    const b = new Ledger(OFF, { bytes: 30, inodes: 0 }, pool);
    expect(pool.bytes).toBe(90);
    expect(codeOf(() => b.resize(0, 11))).toBe('TENANT_QUOTA_EXCEEDED');
    expect([a.bytes, b.bytes, pool.bytes]).toEqual([60, 30, 90]);
    b.resize(0, 10); // exactly to the limit
    expect(pool.bytes).toBe(100);
    expect(codeOf(() => a.resize(0, 1))).toBe('TENANT_QUOTA_EXCEEDED');
    // Shrinking always works; the room is usable by the other home.
    a.release(20);
    a.resize(5, 0);
    expect(pool.bytes).toBe(75);
    b.resize(10, 35);
    expect([a.bytes, b.bytes, pool.bytes]).toEqual([35, 65, 100]);
  });

  it('checks the home budget first (the more specific limit), then the tenant', () => {
    const pool = new TenantPool('acme', 10);
    const a = new Ledger({ maxHomeBytes: 5, maxInodes: 0, maxFileBytes: 0 }, { bytes: 0, inodes: 0 }, pool);
    expect(codeOf(() => a.resize(0, 6))).toBe('QUOTA_EXCEEDED');
    const err = (() => {
      try {
        new Ledger(OFF, { bytes: 8, inodes: 0 }, pool).resize(0, 3);
      } catch (e) {
        return e as HomesError;
      }
      throw new Error('expected a refusal');
    })();
    expect(err.code).toBe('TENANT_QUOTA_EXCEEDED');
    expect(err.errno).toBe(122); // EDQUOT
    expect(err.details).toMatchObject({ tenant: 'acme', tenantLimit: 10, tenantCurrent: 8, tenantRequested: 11 });
  });

  it('detach takes a home out of the total; a lowered limit only refuses growth', () => {
    const pool = new TenantPool('acme', 0);
    const a = new Ledger(OFF, { bytes: 50, inodes: 0 }, pool);
    const b = new Ledger(OFF, { bytes: 50, inodes: 0 }, pool);
    pool.setLimit(60);
    expect(codeOf(() => a.resize(0, 1))).toBe('TENANT_QUOTA_EXCEEDED');
    b.resize(10, 0);
    expect(pool.bytes).toBe(90);
    b.detach();
    expect(pool.bytes).toBe(50);
    b.resize(0, 1000); // a detached ledger no longer counts for the tenant
    expect(pool.bytes).toBe(50);
    a.resize(0, 10);
    expect(pool.bytes).toBe(60);
  });

  it('room(): the tightest of home and tenant budgets, in this home\'s terms', () => {
    const pool = new TenantPool('acme', 100);
    const a = new Ledger({ maxHomeBytes: 80, maxInodes: 0, maxFileBytes: 0 }, { bytes: 10, inodes: 0 }, pool);
    const b = new Ledger(OFF, { bytes: 50, inodes: 0 }, pool);
    expect(a.room()).toEqual({ bytes: 10, cap: 50 });
    expect(b.room()).toEqual({ bytes: 50, cap: 90 });
    pool.setLimit(0);
    expect(a.room()).toEqual({ bytes: 10, cap: 80 });
    expect(b.room()).toEqual({ bytes: 50, cap: null });
  });
});

type Cmd =
  | { k: 'resize'; home: number; file: number; size: number }
  | { k: 'undo'; n: number }
  | { k: 'release'; home: number; bytes: number }
  | { k: 'limit'; limit: number }
  | { k: 'rescan'; home: number };

const HOMES = 3;
const FILES = 3;
const cmdArb: fc.Arbitrary<Cmd> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ k: fc.constant('resize' as const), home: fc.nat(HOMES - 1), file: fc.nat(FILES - 1), size: fc.nat(120) }) },
  { weight: 2, arbitrary: fc.record({ k: fc.constant('undo' as const), n: fc.nat(50) }) },
  { weight: 1, arbitrary: fc.record({ k: fc.constant('release' as const), home: fc.nat(HOMES - 1), bytes: fc.nat(30) }) },
  { weight: 1, arbitrary: fc.record({ k: fc.constant('limit' as const), limit: fc.nat(300) }) },
  { weight: 1, arbitrary: fc.record({ k: fc.constant('rescan' as const), home: fc.nat(HOMES - 1) }) },
);

describe('TenantPool: properties', () => {
  it('the pool is the sum of its homes, never grows past its limit, a refusal changes nothing, an undo restores both', () => {
    fc.assert(
      fc.property(fc.nat(300), fc.array(fc.nat(80), { minLength: HOMES, maxLength: HOMES }), fc.array(cmdArb, { maxLength: 80 }), (limit, homeBudgets, cmds) => {
        const pool = new TenantPool('t', limit);
        const ledgers = homeBudgets.map((b) => new Ledger({ maxHomeBytes: b, maxInodes: 0, maxFileBytes: 0 }, { bytes: 0, inodes: 0 }, pool));
        // The model: each file's charged size; undos restore a file's size.
        const sizes = ledgers.map(() => new Array<number>(FILES).fill(0));
        const undos: Array<{ undo: Undo; home: number; file: number; before: number; after: number; done: boolean }> = [];
        for (const c of cmds) {
          const poolBefore = pool.bytes;
          const homesBefore = ledgers.map((l) => l.bytes);
          if (c.k === 'resize') {
            const before = sizes[c.home]![c.file]!;
            let undo: Undo;
            try {
              undo = ledgers[c.home]!.resize(before, c.size);
            } catch (err) {
              expect(err).toBeInstanceOf(HomesError);
              const code = (err as HomesError).code;
              expect(['QUOTA_EXCEEDED', 'TENANT_QUOTA_EXCEEDED']).toContain(code);
              if (code === 'TENANT_QUOTA_EXCEEDED') expect(poolBefore + (c.size - before)).toBeGreaterThan(pool.limit);
              // Refused: nothing changed anywhere.
              expect(pool.bytes).toBe(poolBefore);
              expect(ledgers.map((l) => l.bytes)).toEqual(homesBefore);
              continue;
            }
            // Accepted growth never takes the pool past a limit it was under.
            if (c.size > before && pool.limit > 0) expect(pool.bytes).toBeLessThanOrEqual(pool.limit);
            sizes[c.home]![c.file] = c.size;
            undos.push({ undo, home: c.home, file: c.file, before, after: c.size, done: false });
          } else if (c.k === 'undo') {
            const u = undos[c.n % Math.max(1, undos.length)];
            // Undo only the latest change of that file (what the fs layer does on a failed backing write).
            if (u && !u.done && sizes[u.home]![u.file] === u.after && undos.filter((x) => x.home === u.home && x.file === u.file && !x.done).at(-1) === u) {
              u.undo();
              u.undo(); // idempotent
              u.done = true;
              sizes[u.home]![u.file] = u.before;
              expect(pool.bytes).toBe(poolBefore - (u.after - u.before));
            }
          } else if (c.k === 'release') {
            // A file of that home leaves (unlink): release its charged size.
            const f = sizes[c.home]!.findIndex((s) => s > 0);
            if (f >= 0) {
              ledgers[c.home]!.release(sizes[c.home]![f]!);
              sizes[c.home]![f] = 0;
              for (const u of undos) if (u.home === c.home && u.file === f) u.done = true;
            }
          } else if (c.k === 'limit') {
            pool.setLimit(c.limit);
          } else {
            // A rescan replaces the home's ledger: the old leaves the pool, the new joins with the same bytes.
            const old = ledgers[c.home]!;
            old.detach();
            ledgers[c.home] = new Ledger(old.limits, { bytes: old.bytes, inodes: 0 }, pool);
            for (const u of undos) if (u.home === c.home) u.done = true;
          }
          const sum = ledgers.reduce((a, l) => a + l.bytes, 0);
          expect(pool.bytes).toBe(sum);
          expect(sum).toBe(sizes.flat().reduce((a, b) => a + b, 0));
          expect(pool.underflows).toBe(0);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('racing growth from many homes never passes the limit by one byte', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 5000 }), fc.array(fc.tuple(fc.nat(HOMES - 1), fc.integer({ min: 1, max: 700 })), { maxLength: 200 }), (limit, writes) => {
        const pool = new TenantPool('t', limit);
        const ledgers = Array.from({ length: HOMES }, () => new Ledger(OFF, { bytes: 0, inodes: 0 }, pool));
        const ends = ledgers.map(() => 0);
        for (const [h, n] of writes) {
          try {
            ledgers[h]!.resize(ends[h]!, ends[h]! + n);
            ends[h]! += n;
          } catch (err) {
            expect((err as HomesError).code).toBe('TENANT_QUOTA_EXCEEDED');
          }
          expect(pool.bytes).toBeLessThanOrEqual(limit);
        }
        expect(pool.bytes).toBe(ends.reduce((a, b) => a + b, 0));
      }),
    );
  });
});
