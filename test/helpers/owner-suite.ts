import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { HOMESCTL, runAsync, startDaemon, SYSTEM_PATH, type RunningDaemon, type StartOptions } from './daemon.js';

export interface OwnerSuite {
  /** the daemon of this describe block (set once beforeAll ran) */
  readonly d: RunningDaemon;
  /** a python script run as the owner (its stdout, trimmed; a non-zero exit throws with its stderr) */
  py(script: string, ...args: string[]): Promise<string>;
  /** homesctl against the daemon, as root (its stdout; a non-zero exit throws) */
  ctl(...args: string[]): Promise<string>;
  usage(home: string): Promise<{ bytes: number; inodes: number }>;
}

/**
 * One daemon for a describe block, started with `homes` created and their
 * ledgers built, stopped after; and the tools its tests use: scripts run as
 * the homes' owner, homesctl as root.
 */
export function ownerSuite(owner: { uid: number; gid: number }, opts: Pick<StartOptions, 'config'> & { homes: NonNullable<StartOptions['homes']> }): OwnerSuite {
  let daemon: RunningDaemon | undefined;
  let tmp = '';

  beforeAll(async () => {
    // Scripts live here; the owner must be able to read them.
    tmp = mkdtempSync(join(tmpdir(), 'homesfs-owner-'));
    chmodSync(tmp, 0o755);
    daemon = await startDaemon({ homes: opts.homes, create: Object.keys(opts.homes), ...(opts.config ? { config: opts.config } : {}) });
    for (const id of Object.keys(opts.homes)) await daemon.waitForLog((l) => l.msg === 'home ledger built' && l.home === id);
  }, 60_000);

  afterAll(async () => {
    await daemon?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  const ctl = async (...args: string[]): Promise<string> => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', daemon!.socket, ...args]);
    if (r.code !== 0) throw new Error(`homesctl ${args.join(' ')}: ${r.stderr}${r.stdout}`);
    return r.stdout;
  };
  return {
    get d() {
      return daemon!;
    },
    py: async (script, ...args) => {
      const file = join(tmp, `s${Math.random().toString(36).slice(2)}.py`);
      writeFileSync(file, script, { mode: 0o644 });
      const r = await runAsync('setpriv', [`--reuid=${owner.uid}`, `--regid=${owner.gid}`, '--clear-groups', 'python3', file, ...args], { env: { PATH: SYSTEM_PATH }, timeoutMs: 120_000 });
      if (r.code !== 0) throw new Error(`python failed (${r.code}): ${r.stderr}`);
      return r.stdout.trim();
    },
    ctl,
    usage: async (home) => JSON.parse(await ctl('--json', 'usage', home)) as { bytes: number; inodes: number },
  };
}
