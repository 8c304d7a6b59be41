import { spawnSync } from 'node:child_process';
import { lstatSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { SYSTEM_PATH } from './daemon.js';

/** Sum of the logical sizes of the regular files below dir, each inode once (what the ledger counts; a local git clone hard-links). */
export function regularBytes(dir: string, seen = new Set<number>()): number {
  let total = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
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
export function namesBelow(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    n++;
    if (e.isDirectory()) n += namesBelow(join(dir, e.name));
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
