import { describe, expect, it } from 'vitest';
import { INLINE_FREE_MAX_BYTES, SlowFrees, slowToFree } from '../../src/backing/freeing.js';

/**
 * SlowFrees during a handover (takeover.ts): the callers of the closes in
 * flight or waiting for their turn are answered at once, those of closes
 * issued meanwhile too, the closes themselves end when they end, and
 * `finished` waits for them; after `awaitAgain` a caller waits for its close.
 */

/** A close that ends when the test says so. */
function closes() {
  const ends = new Map<number, () => void>();
  const close = (fd: number) => new Promise<void>((r) => ends.set(fd, r));
  return { close, end: (fd: number) => ends.get(fd)!() };
}

const tick = () => new Promise((r) => setImmediate(r));

describe('SlowFrees: answered early while a handover lets go', () => {
  it('a caller waits for its close; letGo answers it, and every caller from then on, before the closes end', async () => {
    const c = closes();
    const f = new SlowFrees(c.close);
    const answered: number[] = [];
    void f.close('a', 1).then(() => answered.push(1));
    // the same home: waiting for its turn
    void f.close('a', 2).then(() => answered.push(2));
    await tick();
    expect(answered).toEqual([]);
    expect(f.unfinished).toBe(2);
    f.letGo();
    await tick();
    expect(answered).toEqual([1, 2]);
    void f.close('b', 3).then(() => answered.push(3));
    await tick();
    expect(answered).toEqual([1, 2, 3]);
    // the closes go on: still in turns, none ended
    expect(f.inFlight).toBe(2);
    expect(f.waiting).toBe(1);
    let finished = false;
    void f.finished().then(() => (finished = true));
    c.end(1);
    await tick();
    c.end(2);
    c.end(3);
    await tick();
    await tick();
    expect(finished).toBe(true);
    expect(f.unfinished).toBe(0);
    expect(f.done).toBe(3);
  });

  it('after awaitAgain a caller waits for its close again', async () => {
    const c = closes();
    const f = new SlowFrees(c.close);
    f.letGo();
    f.awaitAgain();
    let answered = false;
    void f.close('a', 1).then(() => (answered = true));
    await tick();
    expect(answered).toBe(false);
    c.end(1);
    await tick();
    expect(answered).toBe(true);
  });

  it('a close that fails after its caller was answered is counted, not thrown', async () => {
    const f = new SlowFrees(() => Promise.reject(new Error('EIO')));
    f.letGo();
    await f.close('a', 1);
    await f.finished();
    await tick();
    expect(f.failedUnawaited).toBe(1);
  });
});

describe('which files are slow to free', () => {
  const file = (blocks: bigint) => ({ blocks, isFile: () => true });
  it('counts allocated bytes (512-byte blocks), not blocks, against INLINE_FREE_MAX_BYTES', () => {
    const limitBlocks = BigInt(INLINE_FREE_MAX_BYTES / 512);
    expect(slowToFree(file(limitBlocks))).toBe(false);
    expect(slowToFree(file(limitBlocks + 1n))).toBe(true);
    // 1 MiB allocated: far past the limit in bytes, though 2,048 blocks is below it as a number.
    expect(slowToFree(file(2048n))).toBe(true);
    expect(slowToFree({ blocks: 1n << 30n, isFile: () => false })).toBe(false);
  });
});
