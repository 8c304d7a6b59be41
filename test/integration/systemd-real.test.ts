import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { canMount, skipReason } from '../helpers/daemon.js';
import { STORED_FDS } from '../../src/holder/fdstore.js';

/**
 * homesfs under a real systemd: scripts/test-systemd.sh starts Debian 12's
 * systemd 252 as PID 1 in a podman container (the image is built once by
 * scripts/install.sh and kept by name), installs this build and another build
 * of it there, and runs test/systemd/scenario.mjs with the shipped unit file
 * as it is (no drop-in): start (READY), an intruder in the unit's cgroup
 * refused, kill -9 of the main process resumed by Restart= from the fd store,
 * a live upgrade by systemctl reload, kill -9 again (the successor's stored
 * session, not its predecessor's), a writer and a reader in the home through
 * all of it, stop, restart, a crash whose restart exits 3 (no loop, the store
 * dropped, the dead mount cleared by the next start), and a start on a
 * non-empty mount point (exit 5, no loop). Each step
 * prints one JSON line; the scenario checks each itself and exits 1 on the
 * first that fails. Here: the steps, and what they measured.
 */

if (!canMount) console.warn(`real systemd suite skipped: ${skipReason}`);

interface Step {
  step: string;
  [k: string]: unknown;
}

describe.skipIf(!canMount)('under a real systemd (PID 1 in a container)', () => {
  it('start, crash, live upgrade, crash, stop, restart: the fd store keeps the session through the crashes and the upgrade, agents see no error', async () => {
    const script = join(import.meta.dirname, '../../scripts/test-systemd.sh');
    const p = spawn(script, [], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((r) => p.on('exit', (c) => r(c)));
    const steps = out
      .split('\n')
      .filter((l) => l.startsWith('{"t":'))
      .map((l) => JSON.parse(l) as Step);
    const at = (name: string) => steps.find((s) => s.step === name);
    expect(code, `${out.slice(-6000)}\n${err.slice(-2000)}`).toBe(0);
    expect(at('started')).toMatchObject({ nFdStore: String(STORED_FDS), generation: 1 });
    expect(at('intruder')).toMatchObject({ refused: 2, nFdStore: String(STORED_FDS) });
    expect(at('kill -9: resumed')).toMatchObject({ startMode: 'resumed', keeper: 'systemd', registered: true, generation: 2 });
    expect(at('reload: upgraded')).toMatchObject({ startMode: 'taken over', version: 'systemd-upgrade', registered: true, generation: 3 });
    expect(at('kill -9 after the upgrade: resumed')).toMatchObject({ startMode: 'resumed', generation: 4 });
    const agents = at('agents') as unknown as { writer: { errors: number; lines: number }; reader: { errors: number }; inOrder: boolean; linesOnDisk: number };
    expect(agents.writer.errors + agents.reader.errors).toBe(0);
    expect(agents.inOrder).toBe(true);
    expect(agents.linesOnDisk).toBeGreaterThanOrEqual(agents.writer.lines);
    expect(at('stopped')).toMatchObject({ mounted: false, nFdStore: '0', result: 'success' });
    expect(at('started again')).toMatchObject({ startMode: 'fresh', generation: 1 });
    expect((at('restart') as unknown as { reader: { lastError: string } }).reader.lastError).toMatch(/ENOTCONN|ECONNABORTED/);
    expect(at('crash, then exit 3')).toMatchObject({ active: 'failed', status: '3', restarts: 1, nFdStore: '0' });
    expect(at('dead mount cleared by the start')).toMatchObject({ startMode: 'fresh' });
    expect(at('not empty')).toMatchObject({ active: 'failed', status: '5', restarts: 0 });
    expect(at('passed')).toBeDefined();
  }, 600_000);
});
