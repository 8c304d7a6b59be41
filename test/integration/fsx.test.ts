import { spawnSync } from 'node:child_process';
import { chownSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, HOMESCTL, runAs, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';

/**
 * Data integrity under random operations (fsx style): reads, writes, truncates
 * by descriptor and by path, mmap reads and writes, fallocate and reopens,
 * checked against an in-memory model of the file (fixtures/fsx.py), in a
 * `posix` and a `home` home. Seeded (the seed is in the failure) and bounded
 * in operations and seconds.
 */

if (!canMount) console.warn(`fsx suite skipped: ${skipReason}`);

/** this file's own owner ids (helpers/owner-ids.ts) */
const BASE = ownerRange(import.meta.filename).from;
/** each home's owner (an owner belongs to one home) */
const U = { posix: { uid: BASE, gid: BASE }, home: { uid: BASE + 1, gid: BASE + 1 } };
const FSX = resolve(import.meta.dirname, 'fixtures/fsx.py');
const T = 't';
// Fixed seeds reproduce; one more per run widens coverage over time (printed on failure).
const SEEDS = [1, 2, Date.now() % 1_000_000];

describe.skipIf(!canMount)('fsx: random operations against a model of the file', () => {
  let d: RunningDaemon;

  beforeAll(async () => {
    d = await startDaemon({
      homes: { [`${T}/posix`]: { owner: U.posix, profile: 'posix' }, [`${T}/home`]: { owner: U.home, profile: 'home' } },
      create: [`${T}/posix`, `${T}/home`],
    });
    for (const k of ['posix', 'home'] as const) chownSync(d.backingOf(T, k), U[k].uid, U[k].gid);
  });

  afterAll(async () => {
    await d?.stop();
  });

  for (const profile of ['posix', 'home'] as const) {
    for (const seed of SEEDS) {
      it(`${profile} home, seed ${seed}`, async () => {
        const file = join(d.home(T, profile), `fsx-${seed}`);
        const r = await runAs(U[profile].uid, U[profile].gid, `exec python3 ${FSX} ${file} ${seed} 1500 6`, { timeoutMs: 60_000 });
        expect(r.stderr).toBe('');
        expect(r.code, r.stdout).toBe(0);
        const out = JSON.parse(r.stdout) as { ops: number; counts: Record<string, number> };
        expect(out.ops).toBeGreaterThan(100);
        // The backing file holds exactly what the mount shows.
        const backing = join(d.backingOf(T, profile), `fsx-${seed}`);
        expect(spawnSync('cmp', [file, backing]).status).toBe(0);
        // The ledger charged exactly the file's size (home: the only file being written now).
        const u = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'usage', `${T}/${profile}`]);
        const files = spawnSync('sh', ['-c', `find . -type f -printf '%s\\n'`], { cwd: d.backingOf(T, profile), encoding: 'utf8' })
          .stdout.split('\n')
          .filter(Boolean)
          .reduce((a, b) => a + Number(b), 0);
        expect((JSON.parse(u.stdout) as { bytes: number }).bytes).toBe(files);
        expect(statSync(backing).size).toBeLessThanOrEqual(256 * 1024 + 64 * 1024);
      });
    }
  }
});
