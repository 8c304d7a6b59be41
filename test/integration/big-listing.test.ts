import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, HOMESCTL, runAsync, skipReason, startDaemon, SYSTEM_PATH, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { neighbourProbe } from '../helpers/neighbour.js';

/**
 * The binding streams listings itself; JavaScript lists what it does not
 * serve (~/.homesfs, a home not published, a binding without the fast path),
 * one lstat per entry. This suite runs with the fast path off, so every
 * listing is JavaScript's, and with names not kept the kernel keeps no
 * listing either: each reaches the daemon. Four
 * parallel `ls -f` loops of a 50,000-entry home must not starve another home:
 * big listings are read on the threadpool, yield between batches, and take
 * turns per home. The assertion is relative: the other home's p99 stays under
 * a quarter of one lone listing's time (before, every listing held the JS
 * thread for its whole length, and the other home's p99 was about one).
 */

/** this file's own owner ids (helpers/owner-ids.ts) */
const OWNERS = ownerRange(import.meta.filename);
const BASE = OWNERS.from;
const A = { uid: BASE + 1, gid: BASE + 1 };
const B = { uid: BASE + 2, gid: BASE + 2 };
const T = 'bl';
const HOMES = { [`${T}/huge`]: { owner: A, profile: 'home' }, [`${T}/other`]: { owner: B, profile: 'home' } };
const ENTRIES = 50_000;

if (!canMount) console.warn(`big-listing integration suite skipped: ${skipReason}`);

describe.skipIf(!canMount)('listing a 50,000-entry home root from many processes starves no other home', () => {
  let d: RunningDaemon;
  let tmp = '';

  const lsLoop = (n: number) =>
    runAsync('setpriv', [`--reuid=${A.uid}`, `--regid=${A.gid}`, '--clear-groups', 'sh', '-c', `for i in $(seq ${n}); do ls -f "$1" > /dev/null || exit 1; done`, 'sh', d.home(T, 'huge')], {
      env: { PATH: SYSTEM_PATH },
      timeoutMs: 300_000,
    });

  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'homesfs-bl-'));
    chmodSync(tmp, 0o755);
    // entryTimeout 0: the kernel keeps no listing (ops_dirs.c), so every ls -f reaches the daemon.
    d = await startDaemon({ awaitLedgers: true, homes: HOMES, create: Object.keys(HOMES), config: { owners: OWNERS, fuse: { nativeFastPath: false, entryTimeout: 0 } } });
    // Made on the backing (fast), then taken into the ledger by a rescan.
    const made = spawnSync('python3', ['-c', `import os,sys\nfor i in range(${ENTRIES}): os.close(os.open(os.path.join(sys.argv[1], 'entry-%06d-' % i + 'x' * 90), os.O_CREAT | os.O_WRONLY, 0o600))`, d.backingOf(T, 'huge')]);
    expect(made.status, String(made.stderr)).toBe(0);
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, 'rescan', `${T}/huge`], { timeoutMs: 120_000 });
    expect(r.code, r.stderr).toBe(0);
  }, 180_000);

  afterAll(async () => {
    await d?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it('four ls -f loops of the big root leave the other home a p99 under a quarter of one listing', async () => {
    // One listing alone, after a warm-up: the yardstick.
    await lsLoop(1);
    const t0 = performance.now();
    const one = await lsLoop(1);
    const lone = performance.now() - t0;
    expect(one.code, one.stderr).toBe(0);

    const probe = await neighbourProbe(tmp, B, d.home(T, 'other'));
    const loops = await Promise.all([lsLoop(3), lsLoop(3), lsLoop(3), lsLoop(3)]);
    const { p99, max, n } = await probe.stop();
    for (const l of loops) expect(l.code, l.stderr).toBe(0);
    console.log(`one ls -f of ${ENTRIES} entries alone: ${lone.toFixed(0)} ms; during 4 loops the other home's p99 ${p99.toFixed(1)} ms, max ${max.toFixed(1)} ms over ${n} probes`);
    expect(p99).toBeLessThan(lone / 4);
  }, 300_000);
});
