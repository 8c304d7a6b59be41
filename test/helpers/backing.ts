import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { isOrphanName } from '../../src/paths/hidden-names.js';
import { startDaemon, SYSTEM_PATH, type RunningDaemon, type StartOptions } from './daemon.js';

/**
 * A directory's entries by raw name, orphans left out: a file unlinked while
 * open keeps an orphan (a name that is not UTF-8, fs/hidden.ts) which the
 * ledger counts as no name, its bytes charged while it is open.
 */
function rawEntries(dir: string | Buffer): Array<{ path: Buffer; isDirectory(): boolean; isFile(): boolean }> {
  const base = Buffer.isBuffer(dir) ? dir : Buffer.from(dir);
  return readdirSync(base, { withFileTypes: true, encoding: 'buffer' })
    .filter((e) => !isOrphanName(e.name))
    .map((e) => Object.assign(e, { path: Buffer.concat([base, Buffer.from('/'), e.name]) }));
}

/** Sum of the logical sizes of the regular files below dir, each inode once (what the ledger counts; a local git clone hard-links). */
export function regularBytes(dir: string | Buffer, seen = new Set<number>()): number {
  let total = 0;
  for (const e of rawEntries(dir)) {
    const p = e.path;
    if (e.isDirectory()) total += regularBytes(p, seen);
    else if (e.isFile()) {
      const st = lstatSync(p);
      if (seen.has(st.ino)) continue;
      seen.add(st.ino);
      total += st.size;
    }
  }
  return total;
}

/** Every name below dir, as the ledger counts inodes (a hard link is one more). */
export function namesBelow(dir: string | Buffer): number {
  let n = 0;
  for (const e of rawEntries(dir)) {
    n++;
    if (e.isDirectory()) n += namesBelow(e.path);
  }
  return n;
}

/**
 * A small ext4 of its own mounted (loop, noatime) at `<dir>/backing`, root-owned
 * 0700 and empty, its image in `imgDir`: for tests that freeze it or fill it.
 * Returns the mount point; `umount -l` it in teardown.
 */
export function smallExt4Backing(dir: string, imgDir: string, size: string): string {
  const img = join(imgDir, 'fs.img');
  const fs = join(dir, 'backing');
  mkdirSync(fs, { mode: 0o700 });
  const steps: string[][] = [
    ['truncate', '-s', size, img],
    ['mkfs.ext4', '-q', '-F', img],
    ['mount', '-o', 'loop,noatime', img, fs],
    ['chmod', '0700', fs],
  ];
  for (const [cmd, ...args] of steps) {
    const r = spawnSync(cmd!, args, { env: { PATH: SYSTEM_PATH } });
    if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.stderr}`);
  }
  rmSync(join(fs, 'lost+found'), { recursive: true, force: true });
  return fs;
}

/** Whether every command is on the system PATH (a suite that needs one says so and skips without it). */
export function haveCommands(...names: string[]): boolean {
  return names.every((t) => spawnSync('sh', ['-c', `command -v ${t}`], { env: { PATH: SYSTEM_PATH } }).status === 0);
}

export interface Ext4Suite {
  /** the daemon of this describe block (set once beforeAll ran) */
  readonly d: RunningDaemon;
  /** a directory of the test's that every uid can read (scripts, sources) */
  readonly tmp: string;
  /** the ext4 the daemon serves from (its backing) */
  readonly fs: string;
}

/**
 * One daemon for a describe block whose backing is a small ext4 of its own
 * (smallExt4Backing, `size`), started with `homes` created and their ledgers
 * built; stopped, unmounted and removed after. `beforeStop` runs first in
 * teardown (a test that froze the backing thaws it there).
 */
export function ext4Suite(opts: { size: string; homes: NonNullable<StartOptions['homes']>; config?: Record<string, unknown>; beforeStop?: () => void }): Ext4Suite {
  let d: RunningDaemon | undefined;
  let tmp = '';
  let dir = '';
  let fs = '';

  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'homesfs-ext4-'));
    chmodSync(tmp, 0o755);
    dir = mkdtempSync(join(tmpdir(), 'homesfs-it-'));
    fs = smallExt4Backing(dir, tmp, opts.size);
    d = await startDaemon({ dir, fresh: true, awaitLedgers: true, homes: opts.homes, create: Object.keys(opts.homes), ...(opts.config ? { config: opts.config } : {}) });
  }, 60_000);

  afterAll(async () => {
    opts.beforeStop?.();
    await d?.stopKeep();
    if (fs && existsSync(fs)) spawnSync('umount', ['-l', fs]);
    if (dir) rmSync(dir, { recursive: true, force: true });
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  return {
    get d() {
      return d!;
    },
    get tmp() {
      return tmp;
    },
    get fs() {
      return fs;
    },
  };
}
