// Fuse.umount2 and Fuse.nofile (src/fuse/addon.ts over native/src/sys/calls.c): the
// daemon unmounts without a child process and without a descriptor, and sets
// its own RLIMIT_NOFILE. Each case runs in a child node process: the limits
// it changes are that process's own.
import { execFile, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

// the daemon's loader (dist/: built first), which attaches homesfs' exports to the binding
const binding = path.join(import.meta.dirname, '../../dist/fuse/binding.js');
const execFileP = promisify(execFile);
const canMount = process.getuid?.() === 0 && existsSync('/dev/fuse');

function mountedAt(p: string): boolean {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((l) => l.split(' ')[4] === p);
}

async function node(script: string): Promise<unknown> {
  const { stdout } = await execFileP(process.execPath, ['-e', script], { env: { ...process.env, FUSE_NATIVE: binding }, timeout: 20_000 });
  return JSON.parse(stdout.trim().split('\n').pop()!);
}

describe('Fuse.nofile', () => {
  it('reads and sets RLIMIT_NOFILE, and reports a refused value', async () => {
    const r = (await node(`
      const F = require(process.env.FUSE_NATIVE).loadFuse();
      const before = F.nofile();
      const lowered = F.nofile(300, 0);
      const fs = require('fs');
      let opened = 0, code = '';
      try { for (;;) { fs.openSync('/dev/null', 'r'); opened++; } } catch (e) { code = e.code; }
      const tooHigh = F.nofile(before.hard + 1e12, 0);
      console.log(JSON.stringify({ before, lowered, code, opened, tooHigh }));
    `)) as { before: { res: number; soft: number; hard: number }; lowered: { res: number; soft: number; hard: number }; code: string; opened: number; tooHigh: { res: number; soft: number } };
    expect(r.before.res).toBe(0);
    expect(r.lowered).toEqual({ res: 0, soft: 300, hard: r.before.hard });
    // The new soft limit is the one the kernel enforces.
    expect(r.code).toBe('EMFILE');
    expect(r.opened).toBeLessThan(300);
    expect(r.opened).toBeGreaterThan(250);
    expect(r.tooHigh.res).toBeLessThan(0);
    expect(r.tooHigh.soft).toBe(300);
  });
});

describe.skipIf(!canMount)('Fuse.umount2', () => {
  let work = '';
  beforeAll(() => {
    work = mkdtempSync(path.join(tmpdir(), 'homesfs-umount2-'));
  });
  afterAll(() => {
    for (const d of ['a', 'b']) if (mountedAt(path.join(work, d))) spawnSync('umount', ['-l', path.join(work, d)]);
    rmSync(work, { recursive: true, force: true });
  });

  it('unmounts with every descriptor of the process in use, and answers -errno', async () => {
    const mnt = path.join(work, 'a');
    mkdirSync(mnt);
    expect(spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', mnt]).status).toBe(0);
    const r = (await node(`
      const F = require(process.env.FUSE_NATIVE).loadFuse();
      const fs = require('fs');
      F.nofile(200, 0);
      let code = '';
      try { for (;;) fs.openSync('/dev/null', 'r'); } catch (e) { code = e.code; }
      F.umount2(${JSON.stringify(mnt)}, 0, (res) => {
        F.umount2(${JSON.stringify(mnt)}, 0, (again) => console.log(JSON.stringify({ code, res, again })));
      });
    `)) as { code: string; res: number; again: number };
    expect(r.code).toBe('EMFILE');
    expect(r.res).toBe(0);
    expect(r.again).toBe(-22); // EINVAL: not a mount point any more
    expect(mountedAt(mnt)).toBe(false);
  });

  it('a busy mount answers EBUSY to a plain unmount and goes with MNT_DETACH', async () => {
    const mnt = path.join(work, 'b');
    mkdirSync(mnt);
    expect(spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', mnt]).status).toBe(0);
    const r = (await node(`
      const F = require(process.env.FUSE_NATIVE).loadFuse();
      process.chdir(${JSON.stringify(mnt)});
      F.umount2(${JSON.stringify(mnt)}, 0, (busy) => F.umount2(${JSON.stringify(mnt)}, 2, (lazy) => console.log(JSON.stringify({ busy, lazy }))));
    `)) as { busy: number; lazy: number };
    expect(r).toEqual({ busy: -16, lazy: 0 });
    expect(mountedAt(mnt)).toBe(false);
  });
});
