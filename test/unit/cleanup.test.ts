import { describe, expect, it } from 'vitest';
import { Cleanup } from '../../src/cleanup.js';

function logger() {
  const lines: Array<{ fields: Record<string, unknown>; msg: string }> = [];
  return { lines, log: { warn: (fields: Record<string, unknown>, msg: string) => void lines.push({ fields, msg }) } as never };
}

describe('Cleanup: a disposal stack', () => {
  it('runs the clean-ups in reverse order, each awaited before the next', async () => {
    const { log } = logger();
    const c = new Cleanup(log);
    const order: string[] = [];
    c.defer('locks', () => void order.push('locks'));
    c.defer('store', async () => {
      await new Promise((r) => setTimeout(r, 10));
      order.push('store');
    });
    c.defer('context', () => void order.push('context'));
    expect(c.size).toBe(3);
    await c.disposeAll();
    expect(order).toEqual(['context', 'store', 'locks']);
    expect(c.size).toBe(0);
  });

  it('logs a failing clean-up, runs the rest and never throws', async () => {
    const { log, lines } = logger();
    const c = new Cleanup(log);
    const order: string[] = [];
    c.defer('first', () => void order.push('first'));
    c.defer('sync throw', () => {
      throw new Error('boom');
    });
    c.defer('rejects', () => Promise.reject(new Error('bang')));
    c.defer('last', () => void order.push('last'));
    await expect(c.disposeAll()).resolves.toBeUndefined();
    expect(order).toEqual(['last', 'first']);
    expect(c.errors.map((e) => [e.what, (e.error as Error).message])).toEqual([
      ['rejects', 'bang'],
      ['sync throw', 'boom'],
    ]);
    expect(lines.map((l) => l.fields)).toEqual([
      { cleanup: 'rejects', err: 'bang' },
      { cleanup: 'sync throw', err: 'boom' },
    ]);
  });

  it('disposes once: a second call waits for the first and runs nothing again; no registration after', async () => {
    const { log } = logger();
    const c = new Cleanup(log);
    let runs = 0;
    c.defer('once', async () => {
      await new Promise((r) => setTimeout(r, 5));
      runs++;
    });
    const a = c.disposeAll();
    const b = c.disposeAll();
    await Promise.all([a, b]);
    await c.disposeAll();
    expect(runs).toBe(1);
    expect(() => c.defer('late', () => undefined)).toThrow(/after disposal began/);
  });

  it('with nothing registered resolves at once', async () => {
    const { log, lines } = logger();
    await new Cleanup(log).disposeAll();
    expect(lines).toEqual([]);
  });
});
