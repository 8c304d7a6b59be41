import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { controlRequest } from '../../src/control/client.js';
import type { HomeInfo } from '../../src/control/api.js';
import { HOMESCTL, canMount, runAs, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';

if (!canMount) console.warn(`admin (homesctl budgets, views, forwards) integration suite skipped: ${skipReason}`);

/** this file's own owner ids (helpers/owner-ids.ts) */
const BASE = ownerRange(import.meta.filename).from;
const OWNERS = { from: BASE, to: BASE + 99 };
const MiB = 1024 * 1024;

describe.skipIf(!canMount)('homesctl as an admin types it, against a real daemon', () => {
  let d: RunningDaemon;
  const holders: ChildProcess[] = [];

  const ctl = (...args: string[]) => runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, ...args]);
  const ctlJson = async <T = Record<string, any>>(...args: string[]): Promise<T> => {
    const r = await ctl('--json', ...args);
    if (r.code !== 0) throw new Error(`homesctl ${args.join(' ')} failed (${r.code}): ${r.stderr}`);
    return JSON.parse(r.stdout) as T;
  };
  /** One request on the socket, as a platform or a script would send it. */
  const wire = (cmd: string, args: Record<string, unknown>) => controlRequest(d.socket, { cmd, args } as never, { timeoutMs: 20_000 });

  let web: { uid: number; gid: number };

  beforeAll(async () => {
    d = await startDaemon({ config: { owners: OWNERS } });
    web = (await ctlJson<{ owner: { uid: number; gid: number } }>('resolve', '--tenant', 'acme', '--project', 'web')).owner;
    const fill = await runAs(web.uid, web.gid, `head -c ${3 * MiB} /dev/zero > ${d.home('acme', 'web')}/blob && echo ok`);
    expect(fill.stdout).toBe('ok\n');
  });

  afterAll(async () => {
    for (const h of holders) h.kill('SIGKILL');
    await d?.stop();
  });

  it('set-budget SIZE lowers below usage: OVER, refused growth, and the override is named; default goes back; off lifts it', async () => {
    const set = await ctl('set-budget', 'acme/web', '1M');
    expect(set.code).toBe(0);
    expect(set.stdout).toBe(
      'Budget of acme/web: 1.0 MiB (override; profile home: 2.0 GiB); used 3.0 MiB (300%).\nOver budget: nothing was deleted; the home cannot grow until it is back under.\n',
    );
    const grow = await runAs(web.uid, web.gid, `(env printf more >> ${d.home("acme", "web")}/blob) 2>&1; echo rc=$?`);
    expect(grow.stdout).toMatch(/Disk quota exceeded/);
    const row = (await ctl('list')).stdout.split('\n').find((l) => l.startsWith('acme/web '))!;
    expect(row.split(/\s{2,}/)).toEqual(['acme/web', `${web.uid}:${web.gid}`, 'home', '3.0 MiB', '1.0 MiB*', '-', '300.0%', '1/1000000', 'OVER']);
    const log = await d.waitForLog((l) => l.msg === 'budget set' && l.home === 'acme/web');
    expect(log.before).toMatchObject({ budget: { bytes: 2 * 1024 ** 3, source: 'profile' } });
    expect(log.after).toMatchObject({ budget: { bytes: MiB, source: 'override' } });
    expect(log.path).toBe(d.home('acme', 'web'));

    const back = await ctlJson<HomeInfo>('set-budget', 'acme/web', 'default');
    expect(back).toMatchObject({ budget: 2 * 1024 ** 3, limitSources: { budget: 'profile' }, flags: [] });
    const dropped = await d.waitForLog((l) => l.msg === 'budget override dropped');
    expect(dropped.before).toMatchObject({ budget: { bytes: MiB, source: 'override' } });
    expect(dropped.after).toMatchObject({ budget: { bytes: 2 * 1024 ** 3, source: 'profile' } });

    const off = await ctl('set-budget', 'acme/web', 'off');
    expect(off.stdout).toBe('Budget of acme/web: off (override; profile home: 2.0 GiB); used 3.0 MiB.\n');
    // over the socket: null drops the override, as `default` does
    const r = await wire('set-budget', { home: 'acme/web', bytes: null });
    expect(r).toMatchObject({ ok: true, data: { budget: 2 * 1024 ** 3, limitSources: { budget: 'profile' } } });
  });

  it('set-limits changes the inode and per-file caps live, survives a restart, and goes back with default', async () => {
    const r = await ctl('set-limits', 'acme/web', '--inodes', '4', '--file-size', '10K');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^Inodes:\s+1 used; cap 4 \(override; profile home: 1000000\)$/m);
    expect(r.stdout).toMatch(/^File cap:\s+10\.0 KiB \(override; profile home: off\)$/m);
    const home = d.home('acme', 'web');
    const big = await runAs(web.uid, web.gid, `(head -c 20000 /dev/zero > ${home}/big) 2>&1; echo rc=$?`);
    expect(big.stdout).toMatch(/File too large/);
    const many = await runAs(web.uid, web.gid, `for i in 1 2 3 4; do (touch ${home}/f$i) 2>&1; done; ls ${home} | wc -l`);
    expect(many.stdout).toMatch(/Disk quota exceeded/);
    expect(many.stdout.trim().split('\n').at(-1)).toBe('4');
    const log = await d.waitForLog((l) => l.msg === 'limits set' && l.home === 'acme/web');
    expect(log.before).toMatchObject({ inodes: { count: 1000000, source: 'profile' }, fileBytes: { bytes: 0, source: 'profile' } });
    expect(log.after).toMatchObject({ inodes: { count: 4, source: 'override' }, fileBytes: { bytes: 10240, source: 'override' } });

    d = await d.restart();
    const after = await ctlJson<HomeInfo>('usage', 'acme/web');
    expect(after).toMatchObject({ inodeCap: 4, fileCap: 10240, limitSources: { inodeCap: 'override', fileCap: 'override', budget: 'profile' } });
    const again = await runAs(web.uid, web.gid, `(touch ${home}/f9) 2>&1; echo rc=$?`);
    expect(again.stdout).toMatch(/Disk quota exceeded/);

    const viaWire = await wire('set-limits', { home: 'acme/web', inodes: null });
    expect(viaWire).toMatchObject({ ok: true, data: { inodeCap: 1000000, fileCap: 10240, limitSources: { inodeCap: 'profile', fileCap: 'override' } } });
    await ctlJson('set-limits', 'acme/web', '--file-size', 'default');
    expect(await ctlJson('usage', 'acme/web')).toMatchObject({ fileCap: 0, limitSources: { fileCap: 'profile' } });
    const bad = await ctl('set-limits', 'acme/web', '--inodes', '-3');
    expect(bad.code).toBe(2);
  });

  it('list --tenant, --sort and BUSY with a process working inside', async () => {
    await ctlJson('resolve', '--tenant', 'beta', '--project', 'small');
    const shell = spawn('sh', ['-c', 'read x'], { cwd: d.home('beta', 'small'), stdio: ['pipe', 'ignore', 'ignore'] });
    holders.push(shell);
    const beta = await ctlJson<HomeInfo[]>('list', '--tenant', 'beta');
    expect(beta.map((h) => [h.key, h.flags, h.cwdProcesses])).toEqual([['small', ['BUSY'], 1]]);
    const used = await ctlJson<HomeInfo[]>('list', '--sort', 'used');
    expect(used[0]).toMatchObject({ tenant: 'acme', key: 'web' });
    expect(used.map((h) => h.bytes)).toEqual([...used.map((h) => h.bytes)].sort((a, b) => b - a));
    const top = await ctl('top', '--count', '1');
    expect(top.code).toBe(0);
    expect(top.stdout.split('\n').filter((l) => /^(acme|beta)\//.test(l))[0]).toMatch(/^beta\/small\s.*BUSY$/);
    shell.stdin!.end('\n');
  });

  it('settings set that would orphan homes lists them and needs --yes; list --orphans and delete-home clean up', async () => {
    await ctlJson('resolve', '--tenant', 'beta', '--project', 'big');
    const o = (await ctlJson<{ owner: { uid: number; gid: number } }>('usage', 'beta/big')).owner;
    await runAs(o.uid, o.gid, `head -c ${2 * MiB} /dev/zero > ${d.home('beta', 'big')}/data`);
    const refused = await ctl('settings', 'set', '--tenant', 'beta', 'tenant');
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^homesctl: CONFIRM_REQUIRED: this change leaves 2 project homes unused/);
    expect(refused.stderr).toContain('(2.0 MiB in all)');
    expect(refused.stderr).toMatch(/^ {4}beta\/big {2}2\.0 MiB$/m);
    expect(refused.stderr).toMatch(/^ {4}beta\/small {2}0 B$/m);
    expect((await ctlJson('settings', 'get', '--tenant', 'beta')).tenantDefault).toBeNull();
    const viaWire = await wire('settings-set', { tenant: 'beta', homeScope: 'tenant' });
    expect(viaWire).toMatchObject({ ok: false, code: 'CONFIRM_REQUIRED', details: { homes: [{ home: 'beta/big', bytes: 2 * MiB }, { home: 'beta/small', bytes: 0 }], bytes: 2 * MiB } });
    const dry = await ctl('settings', 'set', '--tenant', 'beta', 'tenant', '--dry-run');
    expect(dry.stdout).toMatch(/^Dry run: .* nothing changed\.\nWould leave 2 project homes unused \(2\.0 MiB\)/);
    expect((await ctlJson<HomeInfo[]>('list', '--orphans')).length).toBe(0);
    const yes = await ctl('settings', 'set', '--tenant', 'beta', 'tenant', '--yes');
    expect(yes.code).toBe(0);
    expect(yes.stdout).toMatch(/^Left 2 project homes unused \(2\.0 MiB\)/m);
    const log = await d.waitForLog((l) => l.msg === 'home-scope setting changed' && l.tenant === 'beta');
    expect(log).toMatchObject({ level: 'tenant default', before: null, after: 'tenant' });
    const orphans = await ctlJson<HomeInfo[]>('list', '--orphans');
    expect(orphans.map((h) => [`${h.tenant}/${h.key}`, h.flags.includes('ORPHAN')])).toEqual([
      ['beta/big', true],
      ['beta/small', true],
    ]);
    const del = await ctl('delete-home', 'beta/big');
    expect(del.stdout).toBe('Deleted beta/big (2.0 MiB freed).\n');
    expect(existsSync(d.backingOf('beta', 'big'))).toBe(false);
    expect((await ctlJson<HomeInfo[]>('list', '--orphans')).map((h) => h.key)).toEqual(['small']);
  });

  it('settings get takes resolve\'s arguments and shows the cascade that decided', async () => {
    await ctlJson('settings', 'set', '--tenant', 'acme', '--project', 'api', 'user');
    const g = await ctl('settings', 'get', '--tenant', 'acme', '--project', 'api', '--user', 'alice');
    expect(g.code).toBe(0);
    expect(g.stdout).toMatch(/^Resolves to:\s+user \(from project\), key _user_alice$/m);
    expect(g.stdout).toMatch(/^ {2}1\. user alice\s+\(unset\)$/m);
    expect(g.stdout).toMatch(/^ {2}2\. project api\s+user\s+<- decides$/m);
    const j = await ctlJson('settings', 'get', '--tenant', 'acme', '--project', 'api', '--user', 'alice');
    expect(j.resolved).toEqual({ scope: 'user', source: 'project', key: '_user_alice' });
    expect(j.cascade).toEqual([
      { level: 'user', value: null, decides: false },
      { level: 'project', value: 'user', decides: true },
      { level: 'tenant', value: null, decides: false },
      { level: 'default', value: 'project', decides: false },
    ]);
  });

  it('after a rename the old name answers RENAMED with the new name, never a fresh home, until release-name', async () => {
    await ctlJson('resolve', '--tenant', 'acme', '--project', 'shop');
    const ren = await ctl('rename-project', '--tenant', 'acme', 'shop', 'store');
    expect(ren.stdout).toMatch(/^Renamed acme\/shop to acme\/store\.\nacme\/shop stays reserved: .*homesctl release-name acme\/shop\n$/);
    const r = await ctl('resolve', '--tenant', 'acme', '--project', 'shop');
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^homesctl: RENAMED: home acme\/shop was renamed to acme\/store/);
    expect(r.stderr).toMatch(/homesctl release-name acme\/shop/);
    expect(existsSync(d.backingOf('acme', 'shop'))).toBe(false);
    const w = await wire('resolve', { tenant: 'acme', project: 'shop' });
    expect(w).toMatchObject({ ok: false, code: 'RENAMED', details: { from: 'acme/shop', to: 'acme/store' } });
    expect((await ctl('create', 'acme/shop')).stderr).toMatch(/^homesctl: RENAMED:/);
    // every command that names the old home says where it went
    for (const argv of [['usage', 'acme/shop'], ['set-budget', 'acme/shop', '1G'], ['delete-home', 'acme/shop'], ['rename-project', '--tenant', 'acme', 'shop', 'x']]) {
      const u = await ctl(...argv);
      expect(u.code, argv.join(' ')).toBe(1);
      expect(u.stderr, argv.join(' ')).toMatch(/^homesctl: RENAMED: home acme\/shop was renamed to acme\/store/);
    }
    expect(await ctlJson('forwards')).toEqual([{ from: 'acme/shop', to: 'acme/store', at: expect.any(String) }]);
    // a second rename: the old forward follows the home
    await ctlJson('rename-project', '--tenant', 'acme', 'store', 'market');
    expect((await ctlJson<Array<{ from: string; to: string }>>('forwards')).map((f) => [f.from, f.to])).toEqual([
      ['acme/shop', 'acme/market'],
      ['acme/store', 'acme/market'],
    ]);
    // the forwards survive a restart (state file)
    d = await d.restart();
    expect((await wire('resolve', { tenant: 'acme', project: 'store' })) as unknown).toMatchObject({ ok: false, code: 'RENAMED' });
    const rel = await ctl('release-name', 'acme/shop');
    expect(rel.stdout).toMatch(/^Released acme\/shop \(it forwarded to acme\/market\)/);
    const fresh = await ctlJson('resolve', '--tenant', 'acme', '--project', 'shop');
    expect(fresh).toMatchObject({ key: 'shop', created: true });
    expect((await ctl('release-name', 'acme/shop')).stderr).toMatch(/^homesctl: NOT_FOUND:/);
    // renaming back onto a reserved name is allowed only for the home it forwards to
    expect((await ctlJson('rename-project', '--tenant', 'acme', 'market', 'store')).to).toBe('acme/store');
    expect((await ctlJson<Array<{ from: string }>>('forwards')).map((f) => f.from)).toEqual(['acme/market']);
  });

  it('rescan reports in human sizes with the drift', async () => {
    const r = await ctl('rescan', 'acme/web');
    expect(r.code).toBe(0);
    const exact = (await ctlJson<HomeInfo>('usage', 'acme/web')).bytes;
    expect(r.stdout).toMatch(new RegExp(`^Bytes:\\s+3\\.0 MiB -> 3\\.0 MiB \\(drift 0 B; exact: ${exact} -> ${exact}\\)$`, 'm'));
    expect(r.stdout).toMatch(/^Ledger:\s+matched the disk$/m);
  });

  it('connection errors name the socket and the way out', async () => {
    const gone = join(d.dir, 'run', 'missing.sock');
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', gone, '--json', 'status']);
    expect(r.code).toBe(3);
    expect(JSON.parse(r.stdout)).toMatchObject({ ok: false, code: 'UNREACHABLE', socket: gone });
    expect(r.stderr).toMatch(/ENOENT: no socket there\n {2}is the homesfs daemon running\?/);
  });
});
