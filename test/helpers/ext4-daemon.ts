import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { smallExt4Backing } from './backing.js';
import { runAsync, startDaemon, SYSTEM_PATH, type RunningDaemon, type StartOptions } from './daemon.js';
import { ownerAt } from './owner-suite.js';

type Homes = NonNullable<StartOptions['homes']>;

/** A daemon on a small ext4 of its own (a filesystem that fsfreeze can freeze, unlike tmpfs). */
export interface Ext4Daemon {
  d: RunningDaemon;
  /** a 0755 scratch directory (scripts; the image) */
  tmp: string;
  /** the backing's mount point */
  fs: string;
  /** fsfreeze -f / -u of the backing (stop() thaws a frozen one) */
  freeze(): void;
  thaw(): void;
  /** a python script run as the owner of the home its first argument lies in: its stdout, trimmed (throws on a failure) */
  py(script: string, timeoutMs: number, at: string, ...rest: string[]): Promise<string>;
  /** thaw, stop the daemon, unmount the backing and remove both directories */
  stop(): Promise<void>;
}

/** Serve `homes` (created, each owner's uid in owners) from a 64 MiB ext4 mounted noatime, every home's ledger built. */
export async function startOnExt4(label: string, homes: Homes, owners: { from: number; to: number }): Promise<Ext4Daemon> {
  const tmp = mkdtempSync(join(tmpdir(), `homesfs-${label}-`));
  chmodSync(tmp, 0o755);
  const dir = mkdtempSync(join(tmpdir(), 'homesfs-it-'));
  const fs = smallExt4Backing(dir, tmp, '64M');
  const d = await startDaemon({ dir, fresh: true, homes, create: Object.keys(homes), config: { owners } });
  for (const id of Object.keys(homes)) await d.waitForLog((l) => l.msg === 'home ledger built' && l.home === id);
  let frozen = false;
  const fsfreeze = (flag: string) => {
    const r = spawnSync('fsfreeze', [flag, fs], { env: { PATH: SYSTEM_PATH } });
    if (r.status !== 0) throw new Error(`fsfreeze ${flag} ${fs}: ${r.stderr}`);
  };
  return {
    d,
    tmp,
    fs,
    freeze() {
      fsfreeze('-f');
      frozen = true;
    },
    thaw() {
      fsfreeze('-u');
      frozen = false;
    },
    async py(script, timeoutMs, at, ...rest) {
      const o = ownerAt(d, homes, at);
      const file = join(tmp, `s${Math.random().toString(36).slice(2)}.py`);
      writeFileSync(file, script, { mode: 0o644 });
      const r = await runAsync('setpriv', [`--reuid=${o.uid}`, `--regid=${o.gid}`, '--clear-groups', 'python3', file, at, ...rest], { env: { PATH: SYSTEM_PATH }, timeoutMs });
      if (r.code !== 0) throw new Error(`python failed (${r.code}): ${r.stderr}`);
      return r.stdout.trim();
    },
    async stop() {
      if (frozen) spawnSync('fsfreeze', ['-u', fs], { env: { PATH: SYSTEM_PATH } });
      await d.stopKeep();
      if (existsSync(fs)) spawnSync('umount', ['-l', fs]);
      rmSync(dir, { recursive: true, force: true });
      rmSync(tmp, { recursive: true, force: true });
    },
  };
}
