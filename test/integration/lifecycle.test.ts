import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { HOMESCTL, HOMESFS, canMount, runAsync, skipReason, startDaemon } from '../helpers/daemon.js';

if (!canMount) console.warn(`lifecycle integration suite skipped: ${skipReason}`);

const mounted = (p: string) =>
  readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((l) => l.split(' ')[4] === p);

describe.skipIf(!canMount)('daemon lifecycle', () => {
  it('clears a stale mount left by a killed daemon and serves again', async () => {
    let d = await startDaemon({ create: ['t/h'] });
    try {
      writeFileSync(join(d.home('t', 'h'), 'f'), 'kept');
      d.proc.kill('SIGKILL');
      await d.exited;
      expect(mounted(d.mount)).toBe(true);
      // statfs(2) always asks the daemon; stat(2) of the root may be answered from the kernel's attribute cache
      const dead = spawnSync('stat', ['-f', d.mount], { encoding: 'utf8', timeout: 5000 });
      expect(dead.stderr).toMatch(/Transport endpoint is not connected/);
      d = await startDaemon({ dir: d.dir });
      expect(readFileSync(join(d.home('t', 'h'), 'f'), 'utf8')).toBe('kept');
      await d.waitForLog((l) => l.msg === 'clearing a stale FUSE mount');
    } finally {
      await d.stop();
    }
  });

  it('exits with code 6 when the mount is taken away behind its back', async () => {
    const d = await startDaemon({ create: ['t/h'] });
    try {
      const st = JSON.parse((await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'status'])).stdout) as { mount: { mounted: boolean } };
      expect(st.mount.mounted).toBe(true);
      spawnSync('umount', ['-l', d.mount]);
      const code = await Promise.race([d.exited, new Promise((r) => setTimeout(() => r('still running'), 20_000))]);
      expect(code).toBe(6);
      expect(d.logs.some((l) => l.msg === 'mount lost: exiting')).toBe(true);
      // no "unmount failed … not mounted" followed by "unmounted": it was already gone
      expect(d.logs.filter((l) => /unmount/.test(l.msg)).map((l) => l.msg)).toEqual(['already unmounted (by someone else): nothing left to unmount']);
    } finally {
      await d.stop();
    }
  });

  it('refuses to start on an invalid configuration, printing every problem (exit code 3)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'homesfs-badcfg-'));
    const cfg = join(dir, 'bad.json');
    writeFileSync(cfg, JSON.stringify({ backing: 'relative/path', mount: join(dir, 'mnt'), defaultProfile: 'nope', bogus: 1 }));
    const r = await runAsync(process.execPath, [HOMESFS, 'serve', '--config', cfg]);
    rmSync(dir, { recursive: true, force: true });
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/bogus/);
    expect(r.stderr).toMatch(/backing: must be an absolute path/);
    expect(r.stderr).toMatch(/defaultProfile: unknown profile "nope"/);
  });

  it('keeps the /dev/fuse channel out of the processes it spawns (close-on-exec)', async () => {
    const d = await startDaemon({ create: ['t/h'] });
    try {
      const fdDir = `/proc/${d.proc.pid}/fd`;
      const fuseFds = readdirSync(fdDir).filter((fd) => readlinkSync(join(fdDir, fd)) === '/dev/fuse');
      expect(fuseFds.length).toBe(1);
      const flags = /flags:\s+(\d+)/.exec(readFileSync(`/proc/${d.proc.pid}/fdinfo/${fuseFds[0]}`, 'utf8'))![1]!;
      expect(parseInt(flags, 8) & 0o2000000).toBe(0o2000000);
    } finally {
      await d.stop();
    }
  });

  it('follows a home directory replaced behind its back, and lets go of the old one', async () => {
    const d = await startDaemon({ create: ['t/h', 't/gone'] });
    try {
      writeFileSync(join(d.home('t', 'h'), 'old'), 'old');
      writeFileSync(join(d.home('t', 'gone'), 'x'), 'x');
      renameSync(d.backingOf('t', 'h'), `${d.backingOf('t', 'h')}.old`);
      mkdirSync(d.backingOf('t', 'h'));
      writeFileSync(join(d.backingOf('t', 'h'), 'new'), 'new');
      const del = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'delete-project', '--tenant', 't', 'gone']);
      expect(del.code).toBe(0);
      // lookups of a home re-check its backing directory at most once a second
      await new Promise((r) => setTimeout(r, 1100));
      expect(readdirSync(d.home('t', 'h'))).toEqual(['new']);
      const fdDir = `/proc/${d.proc.pid}/fd`;
      const targets = readdirSync(fdDir).map((fd) => {
        try {
          return readlinkSync(join(fdDir, fd));
        } catch {
          return '';
        }
      });
      expect(targets.filter((t) => t.includes('/t/h.old') || t.includes('homesfs-trash') || t.endsWith('(deleted)'))).toEqual([]);
    } finally {
      await d.stop();
    }
  });

  it('answers usage errors with exit code 2', async () => {
    const r = await runAsync(process.execPath, [HOMESFS, 'mount-everything']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/usage: homesfs serve/);
  });
});
