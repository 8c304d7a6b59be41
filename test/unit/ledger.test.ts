import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { HomesError } from '../../src/errors.js';
import { ACCT_CREDIT_BYTES, ACCT_GROWN, ACCT_LEN, ACCT_MAXFILE, ACCT_REFUND, ACCT_RELEASED_BYTES, ACCT_RELEASED_INODES, effectiveSoft, Ledger, TenantPool, type Limits, type SoftCrossing, type Undo } from '../../src/policy/ledger.js';

const OFF: Limits = { maxHomeBytes: 0, maxInodes: 0, maxFileBytes: 0 };

function refusal(fn: () => unknown): HomesError {
  try {
    fn();
  } catch (err) {
    if (err instanceof HomesError) return err;
    throw err;
  }
  throw new Error('expected a HomesError');
}

describe('Ledger: table', () => {
  it.each([
    { name: 'growth within every limit', limits: { maxHomeBytes: 100, maxInodes: 0, maxFileBytes: 50 }, start: 10, old: 0, next: 50, code: null, bytes: 60 },
    { name: 'growth exactly to the home budget', limits: { maxHomeBytes: 100, maxInodes: 0, maxFileBytes: 0 }, start: 60, old: 0, next: 40, code: null, bytes: 100 },
    { name: 'one byte over the home budget', limits: { maxHomeBytes: 100, maxInodes: 0, maxFileBytes: 0 }, start: 60, old: 0, next: 41, code: 'QUOTA_EXCEEDED', bytes: 60 },
    { name: 'one byte over the file cap', limits: { maxHomeBytes: 0, maxInodes: 0, maxFileBytes: 50 }, start: 0, old: 50, next: 51, code: 'FILE_TOO_LARGE', bytes: 0 },
    { name: 'file cap wins when both are crossed', limits: { maxHomeBytes: 10, maxInodes: 0, maxFileBytes: 5 }, start: 0, old: 0, next: 20, code: 'FILE_TOO_LARGE', bytes: 0 },
    { name: 'overwrite in place (no growth) over a lowered budget', limits: { maxHomeBytes: 10, maxInodes: 0, maxFileBytes: 5 }, start: 100, old: 40, next: 40, code: null, bytes: 100 },
    { name: 'shrink over a lowered budget', limits: { maxHomeBytes: 10, maxInodes: 0, maxFileBytes: 5 }, start: 100, old: 40, next: 30, code: null, bytes: 90 },
    { name: 'growth of a file already over a lowered cap', limits: { maxHomeBytes: 0, maxInodes: 0, maxFileBytes: 5 }, start: 40, old: 40, next: 41, code: 'FILE_TOO_LARGE', bytes: 40 },
    { name: 'growth when the home is already over a lowered budget', limits: { maxHomeBytes: 10, maxInodes: 0, maxFileBytes: 0 }, start: 100, old: 0, next: 1, code: 'QUOTA_EXCEEDED', bytes: 100 },
    { name: 'all limits off: anything goes', limits: OFF, start: 0, old: 0, next: 2 ** 40, code: null, bytes: 2 ** 40 },
  ])('$name', ({ limits, start, old, next, code, bytes }) => {
    const l = new Ledger(limits, { bytes: start, inodes: 0 });
    if (code === null) l.resize(old, next);
    else expect(refusal(() => l.resize(old, next)).code).toBe(code);
    expect(l.bytes).toBe(bytes);
  });

  it('QUOTA_EXCEEDED carries current, limit and requested (and maps to EDQUOT)', () => {
    const l = new Ledger({ maxHomeBytes: 100, maxInodes: 0, maxFileBytes: 0 }, { bytes: 90, inodes: 3 });
    const err = refusal(() => l.resize(5, 20));
    expect(err.code).toBe('QUOTA_EXCEEDED');
    expect(err.details).toEqual({ current: 90, limit: 100, requested: 105, growth: 15 });
    expect(err.errno).toBe(122); // EDQUOT on Linux
  });

  it('FILE_TOO_LARGE carries the file size, cap and requested size (EFBIG)', () => {
    const l = new Ledger({ maxHomeBytes: 0, maxInodes: 0, maxFileBytes: 262144 });
    const err = refusal(() => l.resize(262000, 262145));
    expect(err.details).toEqual({ current: 262000, limit: 262144, requested: 262145 });
    expect(err.errno).toBe(27); // EFBIG
  });

  it('inode cap: INODES_EXCEEDED with details, removal always works', () => {
    const l = new Ledger({ maxHomeBytes: 0, maxInodes: 2, maxFileBytes: 0 });
    l.addInode();
    l.addInode();
    const err = refusal(() => l.addInode());
    expect(err.code).toBe('INODES_EXCEEDED');
    expect(err.details).toEqual({ current: 2, limit: 2, requested: 3 });
    expect(l.inodes).toBe(2);
    l.removeInode();
    expect(l.inodes).toBe(1);
    l.addInode();
    expect(l.inodes).toBe(2);
  });

  it('lowering limits below usage deletes nothing and refuses growth only', () => {
    const l = new Ledger({ maxHomeBytes: 1000, maxInodes: 10, maxFileBytes: 0 }, { bytes: 800, inodes: 8 });
    l.setLimits({ maxHomeBytes: 500, maxInodes: 5, maxFileBytes: 0 });
    expect(l.snapshot()).toEqual({ bytes: 800, inodes: 8, limits: { maxHomeBytes: 500, maxInodes: 5, maxFileBytes: 0 } });
    expect(refusal(() => l.resize(0, 1)).code).toBe('QUOTA_EXCEEDED');
    expect(refusal(() => l.addInode()).code).toBe('INODES_EXCEEDED');
    l.release(400);
    l.removeInode();
    l.resize(0, 100);
    expect(l.bytes).toBe(500);
    expect(l.available()).toEqual({ bytes: 0, inodes: 0 });
  });

  it('undo restores exactly and is idempotent', () => {
    const l = new Ledger({ maxHomeBytes: 100, maxInodes: 5, maxFileBytes: 0 }, { bytes: 10, inodes: 1 });
    const before = l.snapshot();
    const u1 = l.resize(0, 90);
    const u2 = l.addInode();
    u2();
    u2();
    u1();
    u1();
    expect(l.snapshot()).toEqual(before);
  });

  it('undo of a shrink may go over a lowered limit: it restores what is on disk', () => {
    const l = new Ledger({ maxHomeBytes: 100, maxInodes: 0, maxFileBytes: 0 }, { bytes: 100, inodes: 0 });
    const undo = l.resize(50, 0);
    l.setLimits({ maxHomeBytes: 10, maxInodes: 0, maxFileBytes: 0 });
    undo();
    expect(l.bytes).toBe(100);
  });

  it('clamps at zero and counts underflows instead of going negative', () => {
    const l = new Ledger(OFF, { bytes: 5, inodes: 0 });
    l.release(8);
    l.removeInode();
    expect(l.snapshot()).toMatchObject({ bytes: 0, inodes: 0 });
    expect(l.underflows).toBe(2);
    const undo = l.resize(10, 0); // applies -0 after clamping
    undo();
    expect(l.bytes).toBe(0);
  });

  it.each([
    { name: 'negative size', fn: (l: Ledger) => l.resize(-1, 5) },
    { name: 'fractional size', fn: (l: Ledger) => l.resize(0, 1.5) },
    { name: 'NaN release', fn: (l: Ledger) => l.release(Number.NaN) },
    { name: 'negative limit', fn: (l: Ledger) => l.setLimits({ maxHomeBytes: -1, maxInodes: 0, maxFileBytes: 0 }) },
    { name: 'unsafe integer', fn: (l: Ledger) => l.resize(0, 2 ** 60) },
  ])('refuses $name with INVALID_ARGUMENT and changes nothing', ({ fn }) => {
    const l = new Ledger({ maxHomeBytes: 100, maxInodes: 0, maxFileBytes: 0 }, { bytes: 7, inodes: 1 });
    const before = l.snapshot();
    expect(refusal(() => fn(l)).code).toBe('INVALID_ARGUMENT');
    expect(l.snapshot()).toEqual(before);
  });

  it('limits are frozen copies', () => {
    const mine = { maxHomeBytes: 10, maxInodes: 0, maxFileBytes: 0 };
    const l = new Ledger(mine);
    mine.maxHomeBytes = 1_000_000;
    expect(l.limits.maxHomeBytes).toBe(10);
    expect(Object.isFrozen(l.limits)).toBe(true);
  });
});

// ---------------------------------------------------------------------------
// Model-based: random create/grow/shrink/unlink/limit changes, with failures
// (immediate undo) and in-flight reservations settled later in any order.

type Cmd =
  | { t: 'create'; fail: boolean }
  | { t: 'mkdir'; fail: boolean }
  | { t: 'rmdir' }
  | { t: 'resize'; pick: number; size: number; outcome: 'commit' | 'fail' | 'defer' }
  | { t: 'settle'; pick: number; commit: boolean }
  | { t: 'unlink'; pick: number; stillOpen: boolean }
  | { t: 'lastClose'; pick: number }
  | { t: 'limits'; limits: Limits }
  | { t: 'undoAgain'; pick: number };

const limitArb = fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 400 }));
const cmdArb: fc.Arbitrary<Cmd> = fc.oneof(
  fc.record({ t: fc.constant('create' as const), fail: fc.boolean() }),
  fc.record({ t: fc.constant('mkdir' as const), fail: fc.boolean() }),
  fc.constant<Cmd>({ t: 'rmdir' }),
  fc.record({
    t: fc.constant('resize' as const),
    pick: fc.nat(),
    size: fc.integer({ min: 0, max: 200 }),
    outcome: fc.constantFrom('commit' as const, 'fail' as const, 'defer' as const),
  }),
  fc.record({
    t: fc.constant('resize' as const),
    pick: fc.nat(),
    size: fc.integer({ min: 0, max: 200 }),
    outcome: fc.constant('commit' as const),
  }),
  fc.record({ t: fc.constant('settle' as const), pick: fc.nat(), commit: fc.boolean() }),
  fc.record({ t: fc.constant('unlink' as const), pick: fc.nat(), stillOpen: fc.boolean() }),
  fc.record({ t: fc.constant('lastClose' as const), pick: fc.nat() }),
  fc.record({
    t: fc.constant('limits' as const),
    limits: fc.record({ maxHomeBytes: limitArb, maxInodes: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 12 })), maxFileBytes: limitArb }),
  }),
  fc.record({ t: fc.constant('undoAgain' as const), pick: fc.nat() }),
);

interface FileModel {
  size: number;
  busy: boolean; // a reservation for it is in flight
}

describe('Ledger: model-based', () => {
  it('equals a simple model, never grows past a limit, and undo restores exactly', () => {
    fc.assert(
      fc.property(fc.record({ limits: fc.record({ maxHomeBytes: limitArb, maxInodes: fc.integer({ min: 0, max: 12 }), maxFileBytes: limitArb }) }), fc.array(cmdArb, { maxLength: 60 }), ({ limits: initialLimits }, cmds) => {
        const ledger = new Ledger(initialLimits);
        let limits = initialLimits;
        const files: FileModel[] = [];
        const unlinkedOpen: number[] = [];
        let dirs = 0;
        const inFlight: Array<{ file: FileModel; oldSize: number; undo: Undo }> = [];
        const ranUndos: Undo[] = [];

        const modelBytes = () =>
          files.reduce((n, f) => n + f.size, 0) + unlinkedOpen.reduce((n, s) => n + s, 0);
        const expectInSync = () => {
          expect(ledger.bytes).toBe(modelBytes());
          expect(ledger.inodes).toBe(files.length + dirs);
          expect(ledger.limits).toEqual(limits);
          expect(ledger.underflows).toBe(0);
        };

        for (const cmd of cmds) {
          switch (cmd.t) {
            case 'create':
            case 'mkdir': {
              const full = limits.maxInodes > 0 && files.length + dirs + 1 > limits.maxInodes;
              if (full) {
                expect(refusal(() => ledger.addInode()).code).toBe('INODES_EXCEEDED');
              } else if (cmd.fail) {
                // The backing create failed: the reservation is given back.
                const before = ledger.snapshot();
                const undo = ledger.addInode();
                undo();
                ranUndos.push(undo);
                expect(ledger.snapshot()).toEqual(before);
              } else {
                ledger.addInode();
                if (cmd.t === 'create') files.push({ size: 0, busy: false });
                else dirs += 1;
                if (limits.maxInodes > 0) expect(ledger.inodes).toBeLessThanOrEqual(limits.maxInodes);
              }
              break;
            }
            case 'rmdir':
              if (dirs > 0) {
                ledger.removeInode();
                dirs -= 1;
              }
              break;
            case 'resize': {
              const idle = files.filter((f) => !f.busy);
              const file = idle[cmd.pick % Math.max(1, idle.length)];
              if (file === undefined) break;
              const old = file.size;
              const growth = cmd.size - old;
              const expected =
                growth > 0 && limits.maxFileBytes > 0 && cmd.size > limits.maxFileBytes
                  ? 'FILE_TOO_LARGE'
                  : growth > 0 && limits.maxHomeBytes > 0 && modelBytes() + growth > limits.maxHomeBytes
                    ? 'QUOTA_EXCEEDED'
                    : null;
              const before = ledger.snapshot();
              if (expected !== null) {
                expect(refusal(() => ledger.resize(old, cmd.size)).code).toBe(expected);
                expect(ledger.snapshot()).toEqual(before); // a refusal changes nothing
                break;
              }
              const undo = ledger.resize(old, cmd.size);
              file.size = cmd.size;
              if (growth > 0 && limits.maxHomeBytes > 0) expect(ledger.bytes).toBeLessThanOrEqual(limits.maxHomeBytes);
              if (cmd.outcome === 'fail') {
                undo(); // the backing write failed
                ranUndos.push(undo);
                file.size = old;
                expect(ledger.snapshot()).toEqual(before);
              } else if (cmd.outcome === 'defer') {
                file.busy = true;
                inFlight.push({ file, oldSize: old, undo });
              }
              break;
            }
            case 'settle': {
              if (inFlight.length === 0) break;
              const [op] = inFlight.splice(cmd.pick % inFlight.length, 1);
              if (op === undefined) break;
              op.file.busy = false;
              if (!cmd.commit) {
                op.undo();
                ranUndos.push(op.undo);
                op.file.size = op.oldSize;
              }
              break;
            }
            case 'unlink': {
              const idle = files.filter((f) => !f.busy);
              const file = idle[cmd.pick % Math.max(1, idle.length)];
              if (file === undefined) break;
              files.splice(files.indexOf(file), 1);
              ledger.removeInode();
              // An unlinked file that is still open keeps its bytes until the last close.
              if (cmd.stillOpen) unlinkedOpen.push(file.size);
              else ledger.release(file.size);
              break;
            }
            case 'lastClose': {
              if (unlinkedOpen.length === 0) break;
              const [size] = unlinkedOpen.splice(cmd.pick % unlinkedOpen.length, 1);
              ledger.release(size ?? 0);
              break;
            }
            case 'limits':
              ledger.setLimits(cmd.limits);
              limits = cmd.limits;
              break;
            case 'undoAgain': {
              // An undo that already ran (a failed write, a reservation given
              // back) must be a no-op the second time, whatever happened since.
              const again = ranUndos[cmd.pick % Math.max(1, ranUndos.length)];
              if (again === undefined) break;
              const before = ledger.snapshot();
              again();
              expect(ledger.snapshot()).toEqual(before);
              break;
            }
          }
          expectInSync();
        }
        // Settle everything: failures give back exactly what they took.
        for (const op of inFlight.splice(0)) {
          op.undo();
          op.undo();
          op.file.size = op.oldSize;
          op.file.busy = false;
        }
        expectInSync();
      }),
      { numRuns: 400 },
    );
  });
});

// ---------------------------------------------------------------------------
// The edge of the budget under concurrency: the fs layer reserves synchronously,
// awaits the backing write, then commits or undoes. Interleave many of those.

describe('Ledger: interleaved reservations at the edge', () => {
  it('never exceed the budget by one byte, and end equal to what was committed', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: 64 }),
        fc.array(fc.record({ bytes: fc.integer({ min: 1, max: 16 }), fails: fc.boolean(), delay: fc.nat({ max: 3 }) }), {
          minLength: 1,
          maxLength: 40,
        }),
        async (headroom, writers) => {
          const budget = 1000;
          const ledger = new Ledger({ maxHomeBytes: budget, maxInodes: 0, maxFileBytes: 0 }, { bytes: budget - headroom, inodes: 0 });
          let committed = budget - headroom;
          let peak = ledger.bytes;
          const tick = () => new Promise<void>((resolve) => setImmediate(resolve));
          await Promise.all(
            writers.map(async (w, i) => {
              for (let k = 0; k < i % 3; k += 1) await tick();
              let undo: Undo;
              try {
                undo = ledger.resize(0, w.bytes); // each writer appends to its own new file
              } catch (err) {
                expect((err as HomesError).code).toBe('QUOTA_EXCEEDED');
                return;
              }
              peak = Math.max(peak, ledger.bytes);
              for (let k = 0; k < w.delay; k += 1) await tick();
              if (w.fails) undo();
              else committed += w.bytes;
            }),
          );
          expect(peak).toBeLessThanOrEqual(budget);
          expect(ledger.bytes).toBe(committed);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('fills the budget exactly, one byte at a time, from many writers', () => {
    const ledger = new Ledger({ maxHomeBytes: 4096, maxInodes: 0, maxFileBytes: 0 });
    const sizes = new Array<number>(64).fill(0);
    let refused = 0;
    for (let round = 0; round < 100; round += 1) {
      for (let w = 0; w < sizes.length; w += 1) {
        try {
          ledger.resize(sizes[w]!, sizes[w]! + 1);
          sizes[w]! += 1;
        } catch {
          refused += 1;
        }
      }
    }
    expect(ledger.bytes).toBe(4096);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(4096);
    expect(refused).toBe(64 * 100 - 4096);
  });
});

describe('Ledger: releases made outside JavaScript (the pending pair of native unlinks)', () => {
  const limits: Limits = { maxHomeBytes: 1000, maxInodes: 10, maxFileBytes: 0 };
  /** What the binding does after a native unlink: add to the pair, atomically. */
  const nativeRelease = (p: BigInt64Array, bytes: number) => {
    Atomics.add(p, 0, BigInt(bytes));
    Atomics.add(p, 1, 1n);
  };

  it('a check sees a release made since the last call: growth into the freed room passes, past it is refused', () => {
    const p = new BigInt64Array(2);
    const l = new Ledger(limits, { bytes: 1000, inodes: 10 }, null, p);
    nativeRelease(p, 300);
    // the very first call after the release is the check itself
    expect(() => l.resize(0, 300)).not.toThrow();
    expect(() => l.resize(0, 1)).toThrow(HomesError);
    expect(l.snapshot()).toMatchObject({ bytes: 1000, inodes: 9 });
    expect(Array.from(p)).toEqual([0n, 0n]);
  });

  it('an inode freed natively is available to the next create, and every getter answers with it', () => {
    const p = new BigInt64Array(2);
    const l = new Ledger(limits, { bytes: 10, inodes: 10 }, null, p);
    expect(() => l.addInode()).toThrow(HomesError);
    nativeRelease(p, 10);
    expect(l.inodes).toBe(9);
    expect(l.bytes).toBe(0);
    expect(() => l.addInode()).not.toThrow();
    nativeRelease(p, 0);
    expect(l.available()).toEqual({ bytes: 1000, inodes: 1 });
  });

  it('names made and removed natively before their commit came in: counted in one change, never below zero, none lost', () => {
    // A home of one name, three more made in the binding with reserved inodes and removed there
    // before JavaScript took their records: the removals arrive first, the commits after.
    const p = new BigInt64Array(2);
    const l = new Ledger(limits, { bytes: 0, inodes: 1 }, null, p);
    const under: unknown[] = [];
    l.onUnderflow = (u) => under.push(u);
    for (let i = 0; i < 3; i++) l.reserveInode();
    for (let i = 0; i < 3; i++) nativeRelease(p, 0);
    l.commitReservedInodes(3);
    expect(l.snapshot()).toMatchObject({ inodes: 1 });
    expect(l.reservedInodes).toBe(0);
    expect(under).toEqual([]);
    // Nothing pending: the commit alone.
    l.reserveInode();
    l.commitReservedInodes(1);
    expect(l.snapshot()).toMatchObject({ inodes: 2 });
  });

  it('an unbudgeted tenant pool takes its members\' releases when its total is read; detach takes them first', () => {
    const pool = new TenantPool('t');
    const pa = new BigInt64Array(2);
    const pb = new BigInt64Array(2);
    const a = new Ledger(limits, { bytes: 400, inodes: 4 }, pool, pa);
    const b = new Ledger(limits, { bytes: 100, inodes: 1 }, pool, pb);
    nativeRelease(pa, 150);
    nativeRelease(pb, 100);
    expect(pool.bytes).toBe(250);
    nativeRelease(pa, 50);
    a.detach();
    // a's 200 left bytes leave the pool whole, after its last release was taken
    expect(pool.bytes).toBe(0);
    expect(b.bytes).toBe(0);
    expect(pool.underflows).toBe(0);
  });

  it('model: any interleaving of JS changes and native releases ends where applying them in order ends', () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.record({ native: fc.nat(200) }), fc.record({ grow: fc.nat(200) }), fc.record({ create: fc.constant(true) })), { maxLength: 60 }),
        (ops) => {
          const p = new BigInt64Array(2);
          const l = new Ledger({ maxHomeBytes: 0, maxInodes: 0, maxFileBytes: 0 }, { bytes: 5000, inodes: 50 }, null, p);
          let bytes = 5000;
          let inodes = 50;
          for (const op of ops) {
            if ('native' in op) {
              const b = Math.min(op.native, bytes);
              if (inodes === 0) continue;
              nativeRelease(p, b);
              bytes -= b;
              inodes -= 1;
            } else if ('grow' in op) {
              l.resize(0, op.grow);
              bytes += op.grow;
            } else {
              l.addInode();
              inodes += 1;
            }
          }
          expect(l.snapshot()).toMatchObject({ bytes, inodes });
          expect(l.underflows).toBe(0);
        },
      ),
    );
  });
});

describe('Ledger: inodes reserved for creates made outside JavaScript (the native create)', () => {
  const cap = (n: number): Limits => ({ ...OFF, maxInodes: n });

  it('a reserved inode counts against the cap but not in any count, until committed or released', () => {
    const l = new Ledger(cap(3), { bytes: 0, inodes: 1 });
    l.reserveInode();
    l.reserveInode();
    expect([l.inodes, l.reservedInodes, l.snapshot().inodes]).toEqual([1, 2, 1]);
    expect(refusal(() => l.addInode()).code).toBe('INODES_EXCEEDED');
    expect(refusal(() => l.reserveInode()).details).toMatchObject({ current: 1, limit: 3, requested: 4, reserved: 2 });
    l.commitReservedInodes(1);
    expect([l.inodes, l.reservedInodes]).toEqual([2, 1]);
    l.releaseReservedInode();
    expect([l.inodes, l.reservedInodes]).toEqual([2, 0]);
    l.addInode();
    expect(refusal(() => l.reserveInode()).code).toBe('INODES_EXCEEDED');
  });

  it('model: any mix of creates, reservations, commits, releases and removals never holds more than the cap, and counts exactly what was made', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 12 }), fc.array(fc.constantFrom('add', 'reserve', 'commit', 'release', 'remove'), { maxLength: 200 }), (max, ops) => {
        const l = new Ledger(cap(max));
        let made = 0;
        let held = 0;
        for (const op of ops) {
          if (op === 'add') {
            try {
              l.addInode();
              made++;
            } catch {
              expect(made + held).toBe(max);
            }
          } else if (op === 'reserve') {
            try {
              l.reserveInode();
              held++;
            } catch {
              expect(made + held).toBe(max);
            }
          } else if (op === 'commit' && held > 0) {
            l.commitReservedInodes(1);
            held--;
            made++;
          } else if (op === 'release' && held > 0) {
            l.releaseReservedInode();
            held--;
          } else if (op === 'remove' && made > 0) {
            l.removeInode();
            made--;
          }
          expect(made + held).toBeLessThanOrEqual(max);
          expect([l.inodes, l.reservedInodes]).toEqual([made, held]);
        }
      }),
    );
  });
});

describe('Ledger: byte credit for writes decided outside JavaScript (the native write decision)', () => {
  const limits: Limits = { maxHomeBytes: 1000, maxInodes: 0, maxFileBytes: 0 };
  /** What the binding does for a write it decides (fastpath_write.c hs_fastpath_wl_begin/end): take growth from credit, or ask JS. */
  const nativeGrow = (p: BigInt64Array, growth: number, landed = growth): boolean => {
    const c = Atomics.load(p, ACCT_CREDIT_BYTES);
    if (c < BigInt(growth)) return false;
    Atomics.sub(p, ACCT_CREDIT_BYTES, BigInt(growth));
    Atomics.add(p, ACCT_GROWN, BigInt(landed));
    if (landed < growth) Atomics.add(p, ACCT_REFUND, BigInt(growth - landed));
    return true;
  };

  it('reserved bytes count against the budget but in no count or view until the binding used them', () => {
    const p = new BigInt64Array(ACCT_LEN);
    const l = new Ledger(limits, { bytes: 100, inodes: 0 }, null, p);
    l.reserveBytes(400);
    expect([l.bytes, l.reservedBytes, l.credit, l.available().bytes]).toEqual([100, 400, 400, 900]);
    expect(nativeGrow(p, 150)).toBe(true);
    expect([l.bytes, l.reservedBytes, l.credit]).toEqual([250, 250, 250]);
    // a short write: 100 of 150 landed; the other 50 are no longer reserved
    expect(nativeGrow(p, 150, 100)).toBe(true);
    expect([l.bytes, l.reservedBytes, l.credit]).toEqual([350, 100, 100]);
    expect(Array.from(p.slice(ACCT_GROWN, ACCT_REFUND + 1))).toEqual([0n, 100n, 0n, 0n, 0n]);
  });

  it('a release of a file the binding grew takes that growth first: no clamp at 0, no bytes left behind', () => {
    const p = new BigInt64Array(ACCT_LEN);
    const l = new Ledger(limits, { bytes: 100, inodes: 1 }, null, p);
    l.reserveBytes(500);
    // the file had 100 bytes counted by JS, then the binding grew it by 400
    nativeGrow(p, 400);
    l.release(500);
    l.removeInode();
    expect([l.bytes, l.inodes, l.underflows]).toEqual([0, 0, 0]);
  });

  it('a file grown, closed and removed all in the binding before JS looks: its growth and release net out, nothing stays charged', () => {
    const p = new BigInt64Array(ACCT_LEN);
    const l = new Ledger(limits, { bytes: 100, inodes: 2 }, null, p);
    l.reserveBytes(400);
    // a native write grows an empty file by 400, then a native unlink of its last name gives the 400 back
    nativeGrow(p, 400);
    Atomics.add(p, ACCT_RELEASED_BYTES, 400n);
    Atomics.add(p, ACCT_RELEASED_INODES, 1n);
    expect([l.bytes, l.inodes, l.reservedBytes, l.underflows]).toEqual([100, 1, 0, 0]);
  });

  it('a growth the unused credit stands in the way of passes: the credit is taken back first; a refusal changes nothing', () => {
    const p = new BigInt64Array(ACCT_LEN);
    const l = new Ledger(limits, { bytes: 500, inodes: 0 }, null, p);
    l.reserveBytes(400);
    expect(() => l.resize(0, 500)).not.toThrow();
    expect([l.bytes, l.reservedBytes, l.credit]).toEqual([1000, 0, 0]);
    expect(nativeGrow(p, 1)).toBe(false);
    expect(() => l.resize(0, 1)).toThrow(HomesError);
    expect([l.bytes, l.reservedBytes]).toEqual([1000, 0]);
  });

  it('credit the binding took for a write in flight still counts: a check made meanwhile cannot give the same bytes away', () => {
    const p = new BigInt64Array(ACCT_LEN);
    const l = new Ledger(limits, { bytes: 0, inodes: 0 }, null, p);
    l.reserveBytes(600);
    // taken from the credit, not reported yet (the pwrite is running)
    Atomics.sub(p, ACCT_CREDIT_BYTES, 600n);
    let err: unknown;
    try {
      l.resize(0, 500);
    } catch (e) {
      err = e;
    }
    expect((err as HomesError).code).toBe('QUOTA_EXCEEDED');
    expect((err as HomesError).details).toMatchObject({ inFlight: 600 });
    Atomics.add(p, ACCT_GROWN, 600n);
    expect([l.bytes, l.reservedBytes]).toEqual([600, 0]);
  });

  it('new limits take the credit back and publish the per-file limit; detach takes it back too', () => {
    const p = new BigInt64Array(ACCT_LEN);
    const pool = new TenantPool('t');
    const l = new Ledger({ ...limits, maxFileBytes: 77 }, { bytes: 0, inodes: 0 }, pool, p);
    expect(p[ACCT_MAXFILE]).toBe(77n);
    l.reserveBytes(300);
    l.setLimits({ ...limits, maxFileBytes: 5 });
    expect([p[ACCT_MAXFILE], p[ACCT_CREDIT_BYTES], BigInt(l.reservedBytes)]).toEqual([5n, 0n, 0n]);
    l.reserveBytes(300);
    nativeGrow(p, 100);
    l.detach();
    expect([p[ACCT_CREDIT_BYTES], pool.bytes]).toEqual([0n, 0]);
  });

  it('model: with credit granted, used natively and taken back in any order, every JS check answers as the plain ledger does', () => {
    fc.assert(
      fc.property(
        fc.nat(2000),
        fc.array(
          fc.oneof(
            fc.record({ grant: fc.nat(1000) }),
            fc.record({ native: fc.nat(300), short: fc.nat(300) }),
            fc.record({ js: fc.nat(400) }),
            fc.record({ shrink: fc.nat(300) }),
            fc.record({ reclaim: fc.constant(true) }),
            fc.record({ budget: fc.nat(3000) }),
          ),
          { maxLength: 80 },
        ),
        (start, ops) => {
          const p = new BigInt64Array(ACCT_LEN);
          const withCredit = new Ledger(limits, { bytes: Math.min(start, 1000), inodes: 0 }, null, p);
          const spec = new Ledger(limits, { bytes: Math.min(start, 1000), inodes: 0 });
          const outcome = (f: () => void): string => {
            try {
              f();
              return 'ok';
            } catch (e) {
              return (e as HomesError).code;
            }
          };
          for (const op of ops) {
            if ('grant' in op) {
              // as FsContext.grantBytes: never more than a quarter of the free room
              const max = withCredit.limits.maxHomeBytes;
              const free = max - withCredit.bytes - withCredit.reservedBytes;
              if (max > 0 && free > 0) withCredit.reserveBytes(Math.min(op.grant, Math.floor(free / 4)));
            } else if ('native' in op) {
              const landed = Math.min(op.short, op.native);
              if (nativeGrow(p, op.native, landed)) {
                // what the binding allowed, the specification allows too
                expect(outcome(() => spec.resize(0, op.native))).toBe('ok');
                spec.resize(op.native, landed);
              } else {
                // asked JS instead: both decide the same
                expect(outcome(() => withCredit.resize(0, op.native))).toBe(outcome(() => spec.resize(0, op.native)));
              }
            } else if ('js' in op) {
              expect(outcome(() => withCredit.resize(0, op.js))).toBe(outcome(() => spec.resize(0, op.js)));
            } else if ('shrink' in op) {
              const b = Math.min(op.shrink, spec.bytes);
              withCredit.release(b);
              spec.release(b);
            } else if ('reclaim' in op) {
              withCredit.reclaimBytes();
            } else {
              withCredit.setLimits({ ...limits, maxHomeBytes: op.budget });
              spec.setLimits({ ...limits, maxHomeBytes: op.budget });
            }
            expect(withCredit.bytes).toBe(spec.bytes);
            // never promised more than the budget has room for
            const max = withCredit.limits.maxHomeBytes;
            if (max > 0 && withCredit.reservedBytes > 0) expect(withCredit.bytes + withCredit.reservedBytes).toBeLessThanOrEqual(Math.max(max, withCredit.bytes));
          }
        },
      ),
    );
  });
});

describe('Ledger: soft limits', () => {
  function watched(limits: Limits, initial = { bytes: 0, inodes: 0 }, pending: BigInt64Array | null = null) {
    const l = new Ledger(limits, initial, null, pending);
    const heard: SoftCrossing[] = [];
    l.onSoftCrossed = (e) => heard.push(e);
    return { l, heard };
  }

  it('effectiveSoft: off stays off, never above a hard limit that is on', () => {
    expect(effectiveSoft(undefined, 100)).toBe(0);
    expect(effectiveSoft(0, 100)).toBe(0);
    expect(effectiveSoft(80, 100)).toBe(80);
    expect(effectiveSoft(150, 100)).toBe(100);
    expect(effectiveSoft(150, 0)).toBe(150);
  });

  it('tells once per upward crossing of the byte limit, again after going back under', () => {
    const { l, heard } = watched({ maxHomeBytes: 100, maxInodes: 0, maxFileBytes: 0, softHomeBytes: 80 });
    l.resize(0, 80); // at the limit: not above
    expect(heard).toEqual([]);
    expect(l.soft().bytes).toEqual({ soft: 80, over: false });
    l.resize(80, 81);
    expect(heard).toEqual([{ what: 'bytes', used: 81, soft: 80, hard: 100 }]);
    l.resize(81, 90);
    l.resize(90, 100);
    expect(heard).toHaveLength(1);
    expect(l.soft().bytes).toEqual({ soft: 80, over: true });
    l.resize(100, 50);
    expect(l.soft().bytes.over).toBe(false);
    expect(heard).toHaveLength(1);
    l.resize(50, 95);
    expect(heard).toHaveLength(2);
    expect(heard[1]).toEqual({ what: 'bytes', used: 95, soft: 80, hard: 100 });
  });

  it('a refused growth crosses nothing; an undone one goes back under', () => {
    const { l, heard } = watched({ maxHomeBytes: 100, maxInodes: 0, maxFileBytes: 0, softHomeBytes: 50 });
    l.resize(0, 40);
    expect(refusal(() => l.resize(40, 101)).code).toBe('QUOTA_EXCEEDED');
    expect(heard).toEqual([]);
    expect(l.checkResize(40, 60)).toBe(20);
    expect(heard).toEqual([]);
    expect(l.bytes).toBe(40);
    const undo = l.resize(40, 60);
    expect(heard).toHaveLength(1);
    undo();
    expect(l.soft().bytes.over).toBe(false);
  });

  it('inodes: addInode and committed reservations cross; removal goes back under', () => {
    const { l, heard } = watched({ maxHomeBytes: 0, maxInodes: 10, maxFileBytes: 0, softInodes: 2 });
    l.addInode();
    l.addInode();
    expect(heard).toEqual([]);
    l.reserveInode();
    expect(heard).toEqual([]);
    l.commitReservedInodes(1);
    expect(heard).toEqual([{ what: 'inodes', used: 3, soft: 2, hard: 10 }]);
    l.addInode();
    expect(heard).toHaveLength(1);
    l.removeInode();
    l.removeInode();
    expect(l.soft().inodes).toEqual({ soft: 2, over: false });
    l.addInode();
    expect(heard).toHaveLength(2);
  });

  it('a batch of names the binding made crosses at the count that crossed, as one create at a time would', () => {
    const { l, heard } = watched({ maxHomeBytes: 0, maxInodes: 10, maxFileBytes: 0, softInodes: 5 }, { bytes: 0, inodes: 5 });
    for (let i = 0; i < 3; i++) l.reserveInode();
    l.commitReservedInodes(3);
    expect(heard).toEqual([{ what: 'inodes', used: 6, soft: 5, hard: 10 }]);
    expect(l.inodes).toBe(8);
  });

  it('built above, or a soft limit lowered under usage: over, without a crossing', () => {
    const { l, heard } = watched({ maxHomeBytes: 1000, maxInodes: 0, maxFileBytes: 0, softHomeBytes: 100 }, { bytes: 500, inodes: 0 });
    expect(l.soft().bytes.over).toBe(true);
    l.resize(0, 10);
    expect(heard).toEqual([]);
    const b = watched({ maxHomeBytes: 1000, maxInodes: 0, maxFileBytes: 0, softHomeBytes: 900 }, { bytes: 500, inodes: 0 });
    b.l.setLimits({ maxHomeBytes: 1000, maxInodes: 0, maxFileBytes: 0, softHomeBytes: 400 });
    expect(b.l.soft().bytes.over).toBe(true);
    expect(b.heard).toEqual([]);
    b.l.setLimits({ maxHomeBytes: 1000, maxInodes: 0, maxFileBytes: 0 });
    expect(b.l.soft().bytes).toEqual({ soft: 0, over: false });
  });

  it('a budget lowered under the soft limit warns at the budget', () => {
    const { l, heard } = watched({ maxHomeBytes: 50, maxInodes: 0, maxFileBytes: 0, softHomeBytes: 80 });
    expect(l.soft().bytes.soft).toBe(50);
    l.setLimits({ maxHomeBytes: 0, maxInodes: 0, maxFileBytes: 0, softHomeBytes: 80 });
    l.resize(0, 81);
    expect(heard).toEqual([{ what: 'bytes', used: 81, soft: 80, hard: 0 }]);
  });

  it("growth and releases the binding made reach the state at the ledger's next answer", () => {
    const pending = new BigInt64Array(ACCT_LEN);
    const { l, heard } = watched({ maxHomeBytes: 1000, maxInodes: 0, maxFileBytes: 0, softHomeBytes: 100 }, { bytes: 90, inodes: 0 }, pending);
    l.reserveBytes(50);
    Atomics.sub(pending, ACCT_CREDIT_BYTES, 20n);
    Atomics.add(pending, ACCT_GROWN, 20n);
    expect(l.soft().bytes.over).toBe(true);
    expect(heard).toEqual([{ what: 'bytes', used: 110, soft: 100, hard: 1000 }]);
    Atomics.add(pending, ACCT_RELEASED_BYTES, 30n);
    expect(l.soft().bytes.over).toBe(false);
  });

  it('property: one crossing heard per under-to-over transition of usage, whatever the sequence', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 200 }),
        fc.array(fc.oneof(fc.record({ grow: fc.integer({ min: 0, max: 60 }) }), fc.record({ shrink: fc.integer({ min: 0, max: 60 }) })), { maxLength: 60 }),
        (soft, ops) => {
          const { l, heard } = watched({ maxHomeBytes: 300, maxInodes: 0, maxFileBytes: 0, softHomeBytes: soft });
          let over = false;
          let crossings = 0;
          for (const op of ops) {
            if ('grow' in op) {
              try {
                l.resize(0, op.grow);
              } catch {
                // refused: nothing changed
              }
            } else l.release(Math.min(op.shrink, l.bytes));
            const now = l.bytes > soft;
            if (now && !over) crossings++;
            over = now;
            expect(l.soft().bytes.over).toBe(now);
          }
          expect(heard).toHaveLength(crossings);
        },
      ),
    );
  });
});
