import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { request } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { HOMESCTL, SYSTEM_PATH, canMount, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { metricSample, scrapeMetrics } from '../helpers/metrics.js';

if (!canMount) console.warn(`admin names (config lookup, busy holders, forwards, tenants, health) integration suite skipped: ${skipReason}`);

/** this file's own owner ids (helpers/owner-ids.ts) */
const BASE = ownerRange(import.meta.filename).from;
const OWNERS = { from: BASE, to: BASE + 99 };

/** GET a path of the metrics socket: status and body. */
function get(socketPath: string, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    request({ socketPath, path }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    })
      .on('error', reject)
      .end();
  });
}

describe.skipIf(!canMount)('homesctl against a real daemon: configuration, busy holders, forwards, tenants, health', () => {
  let d: RunningDaemon;
  let config: string;
  let metricsSock: string;
  const children: ChildProcess[] = [];

  /** homesctl with no --socket and no HOMESFS_SOCKET: it must find the daemon through its configuration. */
  const ctl = (...args: string[]) =>
    runAsync(process.execPath, [HOMESCTL, ...args], { env: { HOMESFS_SOCKET: '', HOMESFS_PLATFORM_SOCKET: '', HOMESFS_CONFIG: config } });
  const ctlJson = async <T = Record<string, any>>(...args: string[]): Promise<T> => {
    const r = await ctl('--json', ...args);
    if (r.code !== 0) throw new Error(`homesctl ${args.join(' ')} failed (${r.code}): ${r.stderr}`);
    return JSON.parse(r.stdout) as T;
  };
  /** A process as `uid`, started in `cwd`; it runs until the suite kills it. */
  const holdAs = (uid: number, cwd: string, argv: string[]): ChildProcess => {
    const p = spawn('setpriv', [`--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', ...argv], { cwd, stdio: 'ignore', env: { PATH: SYSTEM_PATH } });
    children.push(p);
    return p;
  };
  const waitFor = async (what: string, ok: () => boolean): Promise<void> => {
    for (let i = 0; i < 200 && !ok(); i++) await new Promise((r) => setTimeout(r, 25));
    if (!ok()) throw new Error(`timed out waiting for ${what}`);
  };
  /** the process runs its own program now (setpriv has exec'ed) */
  const running = (p: ChildProcess, comm: string) => waitFor(`${comm} in pid ${p.pid}`, () => {
    try {
      return readFileSync(`/proc/${p.pid}/comm`, 'utf8').trim() === comm;
    } catch {
      return false;
    }
  });

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'homesfs-it-'));
    metricsSock = join(dir, 'metrics', 'metrics.sock');
    d = await startDaemon({ dir, fresh: true, config: { owners: OWNERS, metrics: { socket: metricsSock } } });
    config = join(d.dir, 'config.json');
  });

  afterAll(async () => {
    for (const c of children) c.kill('SIGKILL');
    await d?.stop();
  });

  it('finds the admin socket and, for exec, the platform socket in the configuration; --socket still wins', async () => {
    const st = await ctlJson('status');
    expect(st.mount).toMatchObject({ path: d.mount, mounted: true });
    const viaFlag = await runAsync(process.execPath, [HOMESCTL, '--config', config, 'resolve', '--tenant', 'cfg', '--project', 'p']);
    expect(viaFlag.code).toBe(0);
    const owner = (await ctlJson('usage', 'cfg/p')).owner as { uid: number };
    // exec resolves over the platform socket the configuration names, and runs as the owner
    const ex = await runAsync(process.execPath, [HOMESCTL, '--config', config, 'exec', '--tenant', 'cfg', '--project', 'p', '--', 'sh', '-c', 'id -u; pwd'], {
      env: { HOMESFS_SOCKET: '', HOMESFS_PLATFORM_SOCKET: '', HOMESFS_CONFIG: '', PATH: SYSTEM_PATH },
    });
    expect(ex.stderr).toBe('');
    expect(ex.stdout).toBe(`${owner.uid}\n${d.home('cfg', 'p')}\n`);
    // precedence: HOMESFS_SOCKET beats the configuration, --socket beats both
    const wrong = join(d.dir, 'run', 'other.sock');
    const env = await runAsync(process.execPath, [HOMESCTL, '--config', config, 'status'], { env: { HOMESFS_SOCKET: wrong } });
    expect(env.code).toBe(3);
    expect(env.stderr).toContain(`cannot connect to ${wrong}`);
    const flag = await runAsync(process.execPath, [HOMESCTL, '--config', config, '--socket', d.socket, 'status'], { env: { HOMESFS_SOCKET: wrong } });
    expect(flag.code).toBe(0);
    const missing = await runAsync(process.execPath, [HOMESCTL, '--config', join(d.dir, 'nope.json'), 'status']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/nope\.json: no such file/);
  });

  it('a process in another mount namespace working in a bind mount of a home (a pod) keeps the home busy', async () => {
    await ctlJson('resolve', '--tenant', 'acme', '--project', 'podded');
    const home = d.home('acme', 'podded');
    const sub = join(home, 'src');
    await runAsync('mkdir', [sub]);
    // Where the pod sees its home: a directory of its own, the home bind-mounted there in a private mount namespace.
    const at = mkdtempSync(join(tmpdir(), 'homesfs-pod-'));
    onTestFinished(() => rmSync(at, { recursive: true, force: true }));
    const pod = spawn('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', 'mount --bind "$1" "$2" && cd "$2/src" && exec sleep 600', 'sh', home, at], {
      stdio: 'ignore',
      env: { PATH: SYSTEM_PATH },
    });
    children.push(pod);
    await running(pod, 'sleep');
    // The pod's working directory reads as its own path, not the mount's: only its namespace's mountinfo tells.
    expect(await import('node:fs/promises').then((f) => f.readlink(`/proc/${pod.pid}/cwd`))).toBe(join(at, 'src'));
    // And one that only holds a descriptor on a file of the home, its working directory elsewhere.
    writeFileSync(join(sub, 'f'), 'x');
    const at2 = mkdtempSync(join(tmpdir(), 'homesfs-pod-'));
    onTestFinished(() => rmSync(at2, { recursive: true, force: true }));
    const reader = spawn('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', 'mount --bind "$1" "$2" && exec 3<"$2/src/f" && cd / && exec sleep 600', 'sh', home, at2], {
      stdio: 'ignore',
      env: { PATH: SYSTEM_PATH },
    });
    children.push(reader);
    await running(reader, 'sleep');
    expect(await import('node:fs/promises').then((f) => f.readlink(`/proc/${reader.pid}/fd/3`))).toBe(join(at2, 'src', 'f'));
    const r = await ctl('--json', 'delete-home', 'acme/podded');
    expect(r.code).toBe(1);
    const reply = JSON.parse(r.stdout) as { code: string; details: { processes: Array<{ pid: number; cwd: boolean; openFiles: number }> } };
    expect(reply.code).toBe('BUSY');
    expect(reply.details.processes).toContainEqual(expect.objectContaining({ pid: pod.pid, cwd: true }));
    expect(reply.details.processes).toContainEqual(expect.objectContaining({ pid: reader.pid, cwd: false, openFiles: 1 }));
    for (const p of [pod, reader]) {
      p.kill('SIGKILL');
      await new Promise((resolve) => p.once('exit', resolve));
    }
    expect((await ctl('delete-home', 'acme/podded')).code).toBe(0);
  });

  it('a BUSY refusal names the processes holding the home: pid, uid, what they hold, command', async () => {
    const owner = (await ctlJson('resolve', '--tenant', 'acme', '--project', 'held')).owner as { uid: number };
    writeFileSync(join(d.home('acme', 'held'), 'f'), 'x');
    const sh = holdAs(owner.uid, d.home('acme', 'held'), ['sleep', '600']);
    await running(sh, 'sleep');
    const r = await ctl('delete-home', 'acme/held');
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`^homesctl: BUSY: home acme/held is in use \\(0 open files, 1 processes working inside; held by pid ${sh.pid} \\(uid ${owner.uid}, sleep\\)\\)`));
    expect(r.stderr).toMatch(new RegExp(`^ +${sh.pid} {2}${owner.uid} {2}working directory +sleep 600$`, 'm'));
    expect(r.stderr).toContain('(--force goes ahead anyway)');
    const rename = await ctl('--json', 'rename-project', '--tenant', 'acme', 'held', 'held2');
    expect(JSON.parse(rename.stdout)).toMatchObject({
      code: 'BUSY',
      details: { cwdProcesses: 1, processes: [{ pid: sh.pid, uid: owner.uid, comm: 'sleep', command: 'sleep 600', cwd: true, openFiles: 0 }] },
    });
    sh.kill('SIGKILL');
    await waitFor('the holder to go', () => !existsSync(`/proc/${sh.pid}`));
  });

  it('a delete names the processes still running as the retired owner uid', async () => {
    const owner = (await ctlJson('resolve', '--tenant', 'acme', '--project', 'gone')).owner as { uid: number };
    const bg = holdAs(owner.uid, '/', ['sleep', '601']);
    await running(bg, 'sleep');
    const r = await ctl('delete-home', 'acme/gone');
    expect(r.code).toBe(0);
    const lines = r.stdout.split('\n');
    expect(lines[0]).toMatch(/^Deleted acme\/gone \(0 B freed\)\.$/);
    expect(lines[1]).toBe(`1 process still runs as its owner uid ${owner.uid} (they keep running; the uid is retired, never given to a home again):`);
    expect(lines[2]).toMatch(/^ +PID {2}UID +COMMAND$/);
    expect(lines[3]).toMatch(new RegExp(`^ +${bg.pid} {2}${owner.uid} {2}sleep 601$`));
    bg.kill('SIGKILL');
  });

  it('deleting a home releases every old name that forwarded to it (chains too): nothing forwards into the void', async () => {
    await ctlJson('resolve', '--tenant', 'acme', '--project', 'busy');
    await ctlJson('rename-project', '--tenant', 'acme', 'busy', 'busy2');
    await ctlJson('rename-project', '--tenant', 'acme', 'busy2', 'busy3');
    expect((await ctlJson<Array<{ from: string; to: string }>>('forwards')).map((f) => [f.from, f.to])).toEqual([
      ['acme/busy', 'acme/busy3'],
      ['acme/busy2', 'acme/busy3'],
    ]);
    const del = await ctl('delete-project', '--tenant', 'acme', 'busy3');
    expect(del.code).toBe(0);
    expect(del.stdout).toMatch(/^Released the old names that forwarded to it: acme\/busy, acme\/busy2\.$/m);
    expect(await ctlJson('forwards')).toEqual([]);
    const log = await d.waitForLog((l) => l.msg === 'home deleted' && l.home === 'acme/busy3');
    expect(log.releasedNames).toEqual(['acme/busy', 'acme/busy2']);
    // the old name is free again: never "the home now lives at …/busy3"
    const r = await ctl('resolve', '--tenant', 'acme', '--project', 'busy');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^Created:\s+yes$/m);
  });

  it('every command given a renamed-away name answers RENAMED with the new name and path', async () => {
    await ctlJson('resolve', '--tenant', 'acme', '--project', 'website');
    await ctlJson('rename-project', '--tenant', 'acme', 'website', 'site');
    await ctlJson('resolve', '--tenant', 'acme', '--project', 'p', '--user', 'ann');
    await ctlJson('settings', 'set', '--tenant', 'acme', '--user', 'ann', 'user');
    await ctlJson('resolve', '--tenant', 'acme', '--project', 'p', '--user', 'ann');
    await ctlJson('rename-user', '--tenant', 'acme', 'ann', 'anne');
    const cases: Array<[string[], string, string]> = [
      [['delete-project', '--tenant', 'acme', 'website'], 'acme/website', 'acme/site'],
      [['usage', 'acme/website'], 'acme/website', 'acme/site'],
      [['set-limits', 'acme/website', '--inodes', '10'], 'acme/website', 'acme/site'],
      [['set-profile', 'acme/website', 'home'], 'acme/website', 'acme/site'],
      [['rescan', 'acme/website'], 'acme/website', 'acme/site'],
      [['delete-home', 'acme/website'], 'acme/website', 'acme/site'],
      [['create', 'acme/website'], 'acme/website', 'acme/site'],
      [['rename-project', '--tenant', 'acme', 'website', 'w2'], 'acme/website', 'acme/site'],
      [['resolve', '--tenant', 'acme', '--project', 'website'], 'acme/website', 'acme/site'],
      [['delete-user', '--tenant', 'acme', 'ann'], 'acme/_user_ann', 'acme/_user_anne'],
      [['rename-user', '--tenant', 'acme', 'ann', 'x'], 'acme/_user_ann', 'acme/_user_anne'],
    ];
    for (const [argv, from, to] of cases) {
      const r = await ctl(...argv);
      expect(r.code, argv.join(' ')).toBe(1);
      expect(r.stderr, argv.join(' ')).toMatch(new RegExp(`^homesctl: RENAMED: home ${from} was renamed to ${to} \\(.*\\), now at ${d.mount}/${to}`));
      expect(r.stderr, argv.join(' ')).toContain(`the home now lives at ${to} (${d.mount}/${to})`);
    }
    const j = await ctl('--json', 'delete-project', '--tenant', 'acme', 'website');
    expect(JSON.parse(j.stdout)).toMatchObject({ ok: false, code: 'RENAMED', details: { from: 'acme/website', to: 'acme/site', path: `${d.mount}/acme/site` } });
    expect(existsSync(d.backingOf('acme', 'site'))).toBe(true);
  });

  it('delete-tenant removes an empty tenant (directory and state), refuses one with homes (NOT_EMPTY) or a process inside (BUSY)', async () => {
    await ctlJson('resolve', '--tenant', 'gamma', '--project', 'one');
    await ctlJson('settings', 'set', '--tenant', 'gamma', '--project', 'two', 'project');
    await ctlJson('set-tenant-budget', 'gamma', '10M');
    const full = await ctl('delete-tenant', 'gamma');
    expect(full.code).toBe(1);
    expect(full.stderr).toMatch(/^homesctl: NOT_EMPTY: tenant gamma still has 1 home \(gamma\/one\): delete them first \(delete-home\)/);
    expect(existsSync(d.backingOf('gamma', 'one'))).toBe(true);
    expect((await ctl('delete-home', 'gamma/one')).code).toBe(0);
    // rmdir on the mount is refused (the daemon's level): delete-tenant is the way
    expect((await runAsync('rmdir', [join(d.mount, 'gamma')])).stderr).toMatch(/Operation not permitted/);
    const sh = holdAs(65534, join(d.mount, 'gamma'), ['sleep', '602']);
    await running(sh, 'sleep');
    const busy = await ctl('delete-tenant', 'gamma');
    expect(busy.code).toBe(1);
    expect(busy.stderr).toMatch(new RegExp(`^homesctl: BUSY: tenant gamma is in use \\(pid ${sh.pid} \\(uid 65534, sleep\\)`));
    sh.kill('SIGKILL');
    await waitFor('the holder to go', () => !existsSync(`/proc/${sh.pid}`));
    const ok = await ctl('delete-tenant', 'gamma');
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    expect(ok.stdout).toBe('Deleted tenant gamma, with its home-scope settings, its budget override.\n');
    expect(existsSync(join(d.backing, 'gamma'))).toBe(false);
    expect(readdirSync(d.mount)).not.toContain('gamma');
    const state = JSON.parse(readFileSync(join(d.dir, 'state.json'), 'utf8')) as { settings: Record<string, unknown>; tenants?: Record<string, unknown> };
    expect(state.settings.gamma).toBeUndefined();
    expect(state.tenants?.gamma).toBeUndefined();
    expect((await ctl('tenant-usage', 'gamma')).stderr).toMatch(/^homesctl: NOT_FOUND:/);
    expect((await ctl('delete-tenant', 'gamma')).stderr).toMatch(/^homesctl: NOT_FOUND: tenant gamma does not exist/);
    // the tenant comes back with its next home, with no leftover budget
    expect(await ctlJson('resolve', '--tenant', 'gamma', '--project', 'one')).toMatchObject({ created: true });
    expect(await ctlJson('tenant-usage', 'gamma')).toMatchObject({ budget: 0, budgetSource: 'off' });
  });

  it('homesfs_mount_up and /healthz say the mount is served', async () => {
    const body = await scrapeMetrics(metricsSock);
    expect(body).toContain('# TYPE homesfs_mount_up gauge');
    expect(metricSample(body, 'homesfs_mount_up')).toBe(1);
    expect(await get(metricsSock, '/healthz')).toEqual({ status: 200, body: 'ok\n' });
  });

  it('a forward whose home is gone (removed behind the daemon) is released at the next start', async () => {
    await d.stopKeep();
    const file = join(d.dir, 'state.json');
    const state = JSON.parse(readFileSync(file, 'utf8')) as { forwards?: Record<string, { to: string; at: string }> };
    state.forwards = { ...state.forwards, 'acme/ghost-old': { to: 'acme/ghost', at: new Date().toISOString() } };
    writeFileSync(file, JSON.stringify(state));
    d = await d.restart();
    const log = await d.waitForLog((l) => l.msg === 'reserved names whose home is gone were released');
    expect(log.released).toEqual(['acme/ghost-old']);
    expect((await ctlJson<Array<{ from: string }>>('forwards')).map((f) => f.from)).not.toContain('acme/ghost-old');
    expect((await ctlJson<Array<{ from: string }>>('forwards')).map((f) => f.from)).toContain('acme/website');
  });
});
