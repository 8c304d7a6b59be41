import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, HOMESCTL, HOMESFS, runAsync, skipReason, startDaemon, SYSTEM_PATH, type RunningDaemon } from '../helpers/daemon.js';
import { pyAs } from '../helpers/neighbour.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { serving, startSuccessor, type Successor } from '../helpers/takeover.js';

/**
 * A live upgrade hands every home's ledger over (fs/home-registry.ts adoptLedgers):
 * the successor scans no home it was handed, so a big home's writers do not
 * wait for a tree walk after the pause. Its ledger stays equal to the disk.
 */

const OWNERS = ownerRange(import.meta.filename);
const OWNER = { uid: OWNERS.from + 1, gid: OWNERS.from + 1 };
const T = 'tlg';
const FILES = 20_000;

if (!canMount) console.warn(`takeover-ledgers integration suite skipped: ${skipReason}`);

describe.skipIf(!canMount)("a live upgrade hands the homes' ledgers over", () => {
  let d: RunningDaemon | null = null;
  let next: Successor | null = null;

  beforeAll(async () => {
    d = await startDaemon({ awaitLedgers: true, homes: { [`${T}/big`]: { owner: OWNER, profile: 'home' } }, create: [`${T}/big`], config: { owners: OWNERS } });
  }, 60_000);

  afterAll(async () => {
    if (next && next.proc.exitCode === null && next.proc.signalCode === null) {
      next.proc.kill('SIGTERM');
      await next.exited;
    }
    await d?.stop();
  });

  it(`a home of ${FILES} files: the successor takes its ledger, scans nothing, and a writer's fsyncs go on; no drift`, async () => {
    const home = d!.home(T, 'big');
    await pyAs(d!.dir, OWNER, `import os, sys\nfor i in range(${FILES / 100}):\n  p = os.path.join(sys.argv[1], 'd%d' % i)\n  os.mkdir(p)\n  for j in range(100):\n    open(os.path.join(p, 'f%d' % j), 'w').write('x' * (j % 7))\n`, home);
    const stop = join(d!.dir, 'stop');
    const script = join(d!.dir, 'writer.py');
    writeFileSync(
      script,
      `import os, sys, time, json\nhome, stop = sys.argv[1], sys.argv[2]\nfd = os.open(os.path.join(home, 'log'), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)\nerrors, n, worst = 0, 0, 0.0\n` +
        `while not os.path.exists(stop):\n  t = time.monotonic()\n  try:\n    os.write(fd, b'line %08d\\n' % n)\n    os.fsync(fd)\n    n += 1\n  except OSError:\n    errors += 1\n  worst = max(worst, time.monotonic() - t)\n  time.sleep(0.01)\nos.close(fd)\nprint(json.dumps({'errors': errors, 'written': n, 'worstMs': round(worst * 1000, 1)}))\n`,
      { mode: 0o644 },
    );
    const writer = runAsync('setpriv', [`--reuid=${OWNER.uid}`, `--regid=${OWNER.gid}`, '--clear-groups', 'python3', script, home, stop], { env: { PATH: SYSTEM_PATH }, timeoutMs: 120_000 });
    await new Promise((r) => setTimeout(r, 300));

    next = startSuccessor(HOMESFS, join(d!.dir, 'config.json'), true);
    expect(await serving(next)).toBe(true);
    expect(await d!.exited).toBe(0);
    await new Promise((r) => setTimeout(r, 500));
    writeFileSync(stop, '');
    const w = JSON.parse((await writer).stdout.trim().split('\n').pop()!) as { errors: number; written: number; worstMs: number };
    console.log(`writer across the upgrade: ${JSON.stringify(w)}`);
    expect(w.errors).toBe(0);

    // The successor took the home's ledger and walked no tree for it.
    expect(next.logs.some((l) => l.msg === 'home ledger handed over' && l.home === `${T}/big`)).toBe(true);
    expect(next.logs.some((l) => l.msg === 'home ledger built' && l.home === `${T}/big`)).toBe(false);
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d!.socket, '--json', 'rescan', `${T}/big`]);
    expect(r.code, r.stderr).toBe(0);
    expect((JSON.parse(r.stdout) as { drift: unknown }).drift).toEqual({ bytes: 0, inodes: 0 });
  }, 240_000);
});
