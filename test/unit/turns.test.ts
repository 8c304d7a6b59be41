import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Turns } from '../../src/policy/turns.js';

/** A task that runs until `finish()` is called. */
function gate() {
  let finish!: () => void;
  const done = new Promise<void>((r) => (finish = r));
  return { done, finish };
}

const tick = () => new Promise((r) => setImmediate(r));

describe('Turns: at most perHome tasks of one home and total in all, in order', () => {
  it('a home over its share waits; another home goes at once', async () => {
    const t = new Turns(1, 4);
    const started: string[] = [];
    const gates = [gate(), gate(), gate()];
    const run = (home: string, i: number) => t.run(home, async () => (started.push(`${home}${i}`), await gates[i]!.done));
    const a0 = run('a', 0);
    const a1 = run('a', 1);
    const b2 = run('b', 2);
    await tick();
    expect(started).toEqual(['a0', 'b2']);
    expect([t.inFlight, t.waiting]).toEqual([2, 1]);
    gates[0]!.finish();
    await a0;
    await tick();
    expect(started).toEqual(['a0', 'b2', 'a1']);
    gates[1]!.finish();
    gates[2]!.finish();
    await Promise.all([a1, b2]);
    expect([t.inFlight, t.waiting]).toEqual([0, 0]);
  });

  it('a task that throws gives its turn back', async () => {
    const t = new Turns(1, 1);
    await expect(t.run('a', async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(await t.run('a', async () => 7)).toBe(7);
  });

  it('random arrivals and finishes never exceed either limit, and every task runs', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 1, max: 5 }),
        fc.array(fc.record({ home: fc.constantFrom('a', 'b', 'c'), ticks: fc.integer({ min: 0, max: 3 }) }), { minLength: 1, maxLength: 25 }),
        async (perHome, total, tasks) => {
          const t = new Turns(perHome, total);
          const running = new Map<string, number>();
          let all = 0;
          let ran = 0;
          await Promise.all(
            tasks.map((task) =>
              t.run(task.home, async () => {
                all++;
                running.set(task.home, (running.get(task.home) ?? 0) + 1);
                expect(all).toBeLessThanOrEqual(total);
                expect(running.get(task.home)).toBeLessThanOrEqual(perHome);
                for (let i = 0; i < task.ticks; i++) await tick();
                running.set(task.home, running.get(task.home)! - 1);
                all--;
                ran++;
              }),
            ),
          );
          expect(ran).toBe(tasks.length);
          expect([t.inFlight, t.waiting]).toEqual([0, 0]);
        },
      ),
      { numRuns: 100 },
    );
  });
});
