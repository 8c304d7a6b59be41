import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HOMESCTL, HOMESFS, SYSTEM_PATH, canMount, runAs, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';

/**
 * Issue 8, items 3 (owner uids of deleted homes are never reused) and 5 (the
 * backing tree cannot be reached around the mount). Attacks run as the
 * homes' unprivileged owners.
 */

if (!canMount) console.warn(`owners/backing integration suite skipped: ${skipReason}`);

/** this file's own owner ids (helpers/owner-ids.ts) */
const OWNERS = ownerRange(import.meta.filename);

describe.skipIf(!canMount)('item 3: owner uids are never reused', () => {
  let d: RunningDaemon;
  const holders: ChildProcess[] = [];

  const ctl = (...args: string[]) => runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', ...args]);
  const ctlJson = async (...args: string[]) => {
    const r = await ctl(...args);
    if (r.code !== 0) throw new Error(`homesctl ${args.join(' ')} failed (${r.code}): ${r.stderr}`);
    return JSON.parse(r.stdout) as Record<string, any>;
  };

  beforeAll(async () => {
    d = await startDaemon({ config: { owners: OWNERS } });
  });

  afterAll(async () => {
    for (const h of holders) h.kill('SIGKILL');
    await d?.stop();
  });

  it('a process of a deleted home cannot read the next home; delete reports it; ids stay retired across a restart', async () => {
    const t2 = await ctlJson('create', 'acme/t2');
    const old = t2.owner as { uid: number; gid: number };
    // A process running as the home's uid outside the mount, waiting.
    const waiter = spawn('setpriv', [`--reuid=${old.uid}`, `--regid=${old.gid}`, '--clear-groups', 'sleep', '120'], { stdio: 'ignore', env: { PATH: SYSTEM_PATH } });
    holders.push(waiter);
    await new Promise((r) => waiter.once('spawn', r));
    // setpriv execs sleep: wait until the pid runs as the uid.
    for (let i = 0; i < 100 && !/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${waiter.pid}/status`, 'utf8'))?.[1]?.startsWith(String(old.uid)); i++) {
      await new Promise((r) => setTimeout(r, 20));
    }

    const del = await ctlJson('delete-project', '--tenant', 'acme', 't2');
    expect(del.deleted).toBe('acme/t2');
    expect(del.ownerUid).toBe(old.uid);
    expect((del.ownerProcesses as Array<{ pid: number }>).map((p) => p.pid)).toContain(waiter.pid);
    await d.waitForLog((l) => l.level === 'warn' && l.ownerUid === old.uid && l.home === 'acme/t2');

    const v2 = await ctlJson('create', 'globex/v2');
    expect(v2.owner.uid).not.toBe(old.uid);
    expect(v2.owner.uid).toBeGreaterThan(old.uid);
    const w = await runAs(v2.owner.uid, v2.owner.gid, `echo top-secret > ${d.home('globex', 'v2')}/secret.txt && echo ok`);
    expect(w.stdout.trim()).toBe('ok');
    // The old uid (what the waiting process runs as) is refused by the kernel.
    const r = await runAs(old.uid, old.gid, `cat ${d.home('globex', 'v2')}/secret.txt 2>&1; echo "rc=$?"`);
    expect(r.stdout).not.toContain('top-secret');
    expect(r.stdout).toContain('rc=1');

    // The tombstone survives a restart; an explicit --owner cannot bring the id back either.
    d = await d.restart();
    const state = JSON.parse(readFileSync(join(d.dir, 'state.json'), 'utf8')) as { owners: { highWater: number; retired: number[] } };
    expect(state.owners.retired).toContain(old.uid);
    expect(state.owners.highWater).toBe(v2.owner.uid);
    const x = await ctlJson('create', 'acme/x');
    expect(x.owner.uid).toBe(v2.owner.uid + 1);
    const again = await ctl('create', 'acme/y', '--owner', `${old.uid}:${old.gid}`);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('INVALID_ARGUMENT');
  }, 60_000);

  it('a range whose ids were all handed out is exhausted even after deletes', async () => {
    const small = await startDaemon({ config: { owners: { from: OWNERS.to - 1, to: OWNERS.to } } });
    try {
      const c = (...a: string[]) => runAsync(process.execPath, [HOMESCTL, '--socket', small.socket, '--json', ...a]);
      expect((await c('create', 'a/p1')).code).toBe(0);
      expect((await c('create', 'a/p2')).code).toBe(0);
      expect((await c('delete-project', '--tenant', 'a', 'p1')).code).toBe(0);
      const full = await c('create', 'a/p3');
      expect(full.code).toBe(1);
      expect(full.stderr).toMatch(/INVALID_ARGUMENT.*no free owner uid left/);
    } finally {
      await small.stop();
    }
  }, 60_000);
});

describe.skipIf(!canMount)('item 5: the backing tree is reachable only through the mount', () => {
  /** Start the daemon on a prepared directory and wait for it to exit (or to serve). */
  const serve = (config: Record<string, unknown>): Promise<{ code: number | null; stderr: string }> =>
    new Promise((resolve) => {
      const p = spawn(process.execPath, [HOMESFS, 'serve', '--config', config.path as string], { stdio: ['ignore', 'pipe', 'pipe'] });
      let stderr = '';
      let stdout = '';
      p.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
      p.stdout.on('data', (b: Buffer) => {
        stdout += b.toString();
        if (stdout.includes('"msg":"serving"')) p.kill('SIGTERM');
      });
      p.on('exit', (code) => resolve({ code: stdout.includes('"msg":"serving"') ? -1 : code, stderr }));
    });

  const prepare = (rootMode: number, tenantMode: number, extra: Record<string, unknown> = {}) => {
    const dir = mkdtempSync(join(tmpdir(), 'homesfs-open-'));
    chmodSync(dir, 0o755);
    const backing = join(dir, 'backing');
    mkdirSync(backing);
    chmodSync(backing, rootMode);
    mkdirSync(join(backing, 'acme'));
    chmodSync(join(backing, 'acme'), tenantMode);
    mkdirSync(join(backing, 'acme', 'c'), { mode: 0o700 });
    const path = join(dir, 'config.json');
    writeFileSync(
      path,
      JSON.stringify({
        backing,
        mount: join(dir, 'mnt'),
        socket: join(dir, 'run', 'admin.sock'),
        platformSocket: join(dir, 'platform', 'platform.sock'),
        stateFile: join(dir, 'state.json'),
        ...extra,
      }),
    );
    return { dir, path };
  };

  it('refuses to start (exit 11) on a backing root or tenant directory others can reach, unless allowOpenBacking', async () => {
    const cases = [
      prepare(0o755, 0o700),
      prepare(0o700, 0o711),
      prepare(0o701, 0o700),
    ];
    try {
      for (const c of cases) {
        const r = await serve({ path: c.path });
        expect(r.code).toBe(11);
        expect(r.stderr).toMatch(/backing tree can be reached without the mount.*(backing root|tenant directory).*allowOpenBacking/);
      }
      const allowed = prepare(0o755, 0o711, { allowOpenBacking: true });
      cases.push(allowed);
      expect((await serve({ path: allowed.path })).code).toBe(-1);
    } finally {
      for (const c of cases) rmSync(c.dir, { recursive: true, force: true });
    }
  }, 60_000);

  it("a home's owner cannot reach its backing directory: tenants are made root-only 0700", async () => {
    const d = await startDaemon({ config: { owners: OWNERS } });
    try {
      const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'create', 'acme/c']);
      const owner = (JSON.parse(r.stdout) as { owner: { uid: number; gid: number } }).owner;
      const b = d.backingOf('acme', 'c');
      expect(statSync(join(d.backing, 'acme')).mode & 0o7777).toBe(0o700);
      expect(statSync(d.backing).mode & 0o7777).toBe(0o700);
      const attack = await runAs(owner.uid, owner.gid, `head -c 1000000 /dev/zero > ${b}/big 2>&1; ln -s /etc/shadow ${b}/sh 2>&1; ls ${b} 2>&1; echo done`);
      expect(attack.stdout).toContain('Permission denied');
      expect(existsSync(join(b, 'big'))).toBe(false);
      expect(existsSync(join(b, 'sh'))).toBe(false);
      // Through the mount the owner works as always.
      const ok = await runAs(owner.uid, owner.gid, `echo hi > ${d.home('acme', 'c')}/f && cat ${d.home('acme', 'c')}/f`);
      expect(ok.stdout).toBe('hi\n');
      // And the daemon starts again on the tree it made.
      await d.restart().then((again) => again.stop());
    } finally {
      if (existsSync(d.dir)) await d.stop();
    }
  }, 60_000);
});
