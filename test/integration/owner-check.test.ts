import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, HOMESCTL, HOMESFS, runAs, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';

/**
 * An owner uid belongs to one home: create --owner, resolve's allocation and
 * the start-up check against the host's real user database (getent). Nothing
 * is added to the host: the accounts used (`daemon` = 1, `nobody` = 65534) are
 * on every Debian, and every other id is checked to be unknown to it.
 */

if (!canMount) console.warn(`owner check integration suite skipped: ${skipReason}`);

/** this file's own owner ids (helpers/owner-ids.ts) */
const BASE = ownerRange(import.meta.filename).from;
const OWNERS = { from: BASE, to: BASE + 99 };

const known = (db: 'passwd' | 'group', id: number) => spawnSync('getent', [db, String(id)]).status === 0;

describe.skipIf(!canMount)('owner check: one home per owner id, never root, nobody or a host account', () => {
  let d: RunningDaemon;
  const ctl = (...args: string[]) => runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, ...args]);
  const ctlJson = async (...args: string[]) => {
    const r = await ctl('--json', ...args);
    if (r.code !== 0) throw new Error(`homesctl ${args.join(' ')} failed (${r.code}): ${r.stdout} ${r.stderr}`);
    return JSON.parse(r.stdout) as Record<string, any>;
  };
  /** A refused create: exit 1, INVALID_ARGUMENT, and the home was not made. */
  const refused = async (home: string, ...args: string[]) => {
    const r = await ctl('--json', 'create', home, ...args);
    expect(r.code).toBe(1);
    const j = JSON.parse(r.stdout) as { code: string; message: string };
    expect(j.code).toBe('INVALID_ARGUMENT');
    const [t, k] = home.split('/') as [string, string];
    expect(spawnSync('test', ['-e', d.backingOf(t, k)]).status).not.toBe(0);
    return j.message;
  };

  beforeAll(async () => {
    expect(known('passwd', 1)).toBe(true); // daemon, on every Debian
    for (let id = BASE; id <= BASE + 99; id++) expect(known('passwd', id) || known('group', id)).toBe(false);
    d = await startDaemon({ config: { owners: OWNERS } });
  });

  afterAll(async () => {
    await d?.stop();
  });

  it("refuses another tenant's home's uid or gid, even with --force; that uid cannot read the home", async () => {
    const victim = await ctlJson('create', 't1/web');
    expect(victim.owner).toEqual({ uid: BASE, gid: BASE });
    await runAs(BASE, BASE, `echo secret > ${d.home('t1', 'web')}/secret`);
    expect(await refused('t2/web', '--owner', `${BASE}:${BASE}`)).toMatch(new RegExp(`uid ${BASE} belongs to the home t1/web`));
    expect(await refused('t2/web', '--owner', `${BASE + 50}:${BASE}`)).toMatch(/gid \d+ belongs to the home t1\/web/);
    expect(await refused('t2/web', '--owner', `${BASE}:${BASE}`, '--force')).toMatch(/belongs to the home t1\/web/);
    await d.waitForLog((l) => l.msg === 'owner refused' && l.home === 't2/web');
    // The tenant that asked gets its own uid, which cannot read the other's secret.
    const own = await ctlJson('create', 't2/web');
    expect(own.owner.uid).not.toBe(BASE);
    const r = await runAs(own.owner.uid, own.owner.gid, `cat ${d.home('t1', 'web')}/secret 2>&1; echo rc=$?`);
    expect(r.stdout).toMatch(/Permission denied/);
  });

  it('refuses root and the overflow id, even with --force', async () => {
    expect(await refused('t3/a', '--owner', '0:0')).toMatch(/uid 0 is root/);
    expect(await refused('t3/a', '--owner', `${BASE + 60}:0`, '--force')).toMatch(/gid 0 is root/);
    expect(await refused('t3/a', '--owner', '65534:65534')).toMatch(/overflow id/);
    expect(await refused('t3/a', '--owner', '65534:65534', '--force')).toMatch(/overflow id/);
  });

  it("refuses a host account (uid 1, daemon) by name, even with --force (a system id)", async () => {
    expect(await refused('t3/a', '--owner', '1:1')).toMatch(/uid 1 is the host's account "daemon"/);
    expect(await refused('t3/a', '--owner', '1:1', '--force')).toMatch(/"daemon" \(a system id\)/);
  });

  it('refuses an id outside the range; --force takes it, logged, recorded, and it survives a restart', async () => {
    const out = BASE + 500;
    expect(known('passwd', out) || known('group', out)).toBe(false);
    expect(await refused('t3/adopt', '--owner', `${out}:${out}`)).toMatch(new RegExp(`uid ${out} is outside the owner range ${BASE}..${BASE + 99}.*--force takes it`));
    const forced = await ctlJson('create', 't3/adopt', '--owner', `${out}:${out}`, '--force');
    expect(forced.owner).toEqual({ uid: out, gid: out });
    await d.waitForLog((l) => l.msg === 'owner taken with --force' && l.home === 't3/adopt');
    const state = JSON.parse(readFileSync(join(d.dir, 'state.json'), 'utf8')) as { homes: Record<string, { owner: unknown; ownerForced?: boolean }> };
    expect(state.homes['t3/adopt']).toMatchObject({ owner: { uid: out, gid: out }, ownerForced: true });
    d = await d.restart();
    expect((await ctlJson('usage', 't3/adopt')).owner).toEqual({ uid: out, gid: out });
  });

  it("a home found in the backing tree keeps its directory's owner through an override and a restart (found, not given)", async () => {
    mkdirSync(d.backingOf('f', 'found'), { recursive: true, mode: 0o700 }); // root's, as an old tree may be
    expect((await ctlJson('set-budget', 'f/found', '1M')).owner).toEqual({ uid: 0, gid: 0 });
    const state = JSON.parse(readFileSync(join(d.dir, 'state.json'), 'utf8')) as { homes: Record<string, unknown> };
    expect(state.homes['f/found']).toMatchObject({ owner: { uid: 0, gid: 0 }, ownerFound: true });
    d = await d.restart();
    expect((await ctlJson('usage', 'f/found')).budget).toBe(1024 * 1024);
  });

  it('refuses to start (exit 9, naming both homes) on a state file that gives one uid to two homes', async () => {
    await d.stopKeep();
    const file = join(d.dir, 'state.json');
    const saved = readFileSync(file, 'utf8');
    const state = JSON.parse(saved) as { homes: Record<string, { owner: { uid: number; gid: number } }> };
    state.homes['t2/web']!.owner = { uid: BASE, gid: BASE };
    writeFileSync(file, JSON.stringify(state));
    const r = await runAsync(process.execPath, [HOMESFS, 'serve', '--config', join(d.dir, 'config.json')], { timeoutMs: 30_000 });
    expect(r.code).toBe(9);
    expect(r.stderr).toMatch(new RegExp(`t2/web \\(state file\\): owner ${BASE}:${BASE}: uid ${BASE} belongs to the home t1/web`));
    expect(r.stderr).toMatch(/t1\/web \(state file\).*belongs to the home t2\/web/);
    writeFileSync(file, saved);
    d = await d.restart();
  });

  it('refuses a reload whose homes entries give a host account or another home\'s uid; the old configuration stays', async () => {
    const file = join(d.dir, 'config.json');
    const saved = readFileSync(file, 'utf8');
    const cfg = JSON.parse(saved) as { homes: Record<string, unknown> };
    cfg.homes = { 'z/x': { owner: { uid: 1, gid: 1 } }, 'z/y': { owner: { uid: BASE, gid: BASE } } };
    writeFileSync(file, JSON.stringify(cfg));
    const r = await ctl('--json', 'reload');
    writeFileSync(file, saved);
    expect(r.code).toBe(1);
    const j = JSON.parse(r.stdout) as { code: string; message: string };
    expect(j.code).toBe('INVALID_ARGUMENT');
    expect(r.stdout).toMatch(/uid 1 is the host's account \\"daemon\\"/);
    expect(r.stdout).toMatch(new RegExp(`z/y .*uid ${BASE} belongs to the home t1/web`));
    expect((await ctlJson('status')).lastReload).toMatchObject({ ok: false });
  });
});

describe.skipIf(!canMount)('owner check at start-up: the configuration', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'homesfs-owners-'));
  });
  afterAll(() => {
    // A daemon that (wrongly) served would have left its mount behind.
    for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
      const at = line.split(' ')[4];
      if (at?.startsWith(dir + '/')) spawnSync('umount', ['-l', at]);
    }
    rmSync(dir, { recursive: true, force: true });
  });

  /** Start a daemon on `homes` and expect it to refuse (it never mounts). */
  const start = async (name: string, homes: Record<string, { owner: { uid: number; gid: number } }>, how: 'serve' | 'check-config' = 'serve') => {
    const root = join(dir, name);
    mkdirSync(join(root, 'backing'), { recursive: true, mode: 0o700 });
    chmodSync(join(root, 'backing'), 0o700);
    const config = join(root, 'config.json');
    writeFileSync(
      config,
      JSON.stringify({
        backing: join(root, 'backing'),
        mount: join(root, 'mnt'),
        socket: join(root, 'run', 'admin.sock'),
        platformSocket: join(root, 'platform', 'platform.sock'),
        stateFile: join(root, 'state.json'),
        owners: OWNERS,
        homes,
        userdb: { dir: join(root, 'userdb') },
      }),
    );
    return runAsync(process.execPath, how === 'serve' ? [HOMESFS, 'serve', '--config', config] : [HOMESFS, 'check-config', config], { timeoutMs: 30_000 });
  };

  it('exit 9 for a host account (uid 1, daemon), root, nobody, one uid in two tenants, and one uid or gid in two homes of one tenant', async () => {
    const host = await start('host', { 'a/x': { owner: { uid: 1, gid: 1 } } });
    expect(host.code).toBe(9);
    expect(host.stderr).toMatch(/a\/x \(configuration homes\["a\/x"\]\.owner\): owner 1:1: uid 1 is the host's account "daemon"/);
    const root = await start('root', { 'a/x': { owner: { uid: 0, gid: 0 } } });
    expect(root.code).toBe(9);
    expect(root.stderr).toMatch(/uid 0 is root/);
    const nobody = await start('nobody', { 'a/x': { owner: { uid: 65534, gid: 65534 } } });
    expect(nobody.code).toBe(9);
    expect(nobody.stderr).toMatch(/overflow id/);
    const U = { uid: BASE + 7, gid: BASE + 7 };
    const cross = await start('cross', { 'a/x': { owner: U }, 'b/y': { owner: U } });
    expect(cross.code).toBe(9);
    expect(cross.stderr).toMatch(/b\/y .*belongs to the home a\/x/);
    const tenant = await start('tenant', { 'a/x': { owner: U }, 'a/y': { owner: U } });
    expect(tenant.code).toBe(9);
    expect(tenant.stderr).toMatch(/a\/x \(configuration homes\["a\/x"\]\.owner\): owner \d+:\d+: uid \d+ belongs to the home a\/y/);
    expect(tenant.stderr).toMatch(/a\/y \(configuration homes\["a\/y"\]\.owner\): owner \d+:\d+: uid \d+ belongs to the home a\/x/);
    const group = await start('group', { 'a/x': { owner: U }, 'a/y': { owner: { uid: BASE + 9, gid: U.gid } } });
    expect(group.code).toBe(9);
    expect(group.stderr).toMatch(/a\/y .*: gid \d+ belongs to the home a\/x/);
  });

  it('check-config names the same problems (exit 3) without mounting, one tenant sharing an owner among them', async () => {
    const U = { uid: BASE + 8, gid: BASE + 8 };
    const bad = await start('check-bad', { 'a/x': { owner: U }, 'b/y': { owner: U }, 'c/z': { owner: { uid: 1, gid: 1 } } }, 'check-config');
    expect(bad.code).toBe(3);
    expect(bad.stderr).toMatch(/b\/y .*belongs to the home a\/x/);
    expect(bad.stderr).toMatch(/c\/z .*uid 1 is the host's account "daemon"/);
    const shared = await start('check-shared', { 'a/x': { owner: U }, 'a/y': { owner: U } }, 'check-config');
    expect(shared.code).toBe(3);
    expect(shared.stderr).toMatch(/a\/y .*belongs to the home a\/x/);
    const ok = await start('check-ok', { 'a/x': { owner: U }, 'a/y': { owner: { uid: U.uid + 10, gid: U.gid + 10 } } }, 'check-config');
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
  });
});

describe.skipIf(!canMount)('allocation skips what the host knows', () => {
  let d: RunningDaemon;
  beforeAll(async () => {
    // A range that begins among the host's system accounts (1 = daemon).
    d = await startDaemon({ config: { owners: { from: 1, to: 2000 } } });
  });
  afterAll(async () => {
    await d?.stop();
  });

  it('resolve gives a new home an id that is neither a host account nor a host group', async () => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'resolve', '--tenant', 'acme', '--project', 'web']);
    expect(r.code).toBe(0);
    const owner = (JSON.parse(r.stdout) as { owner: { uid: number; gid: number } }).owner;
    expect(owner.uid).toBeGreaterThan(1);
    expect(known('passwd', owner.uid)).toBe(false);
    expect(known('group', owner.gid)).toBe(false);
    await d.waitForLog((l) => l.msg === 'owner ids the host already knows were skipped');
  });
});
