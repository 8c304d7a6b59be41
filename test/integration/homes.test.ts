import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HOMESCTL, HOMESFS, SYSTEM_PATH, canMount, runAs, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';

if (!canMount) console.warn(`homes (control socket) integration suite skipped: ${skipReason}`);

/** this file's own owner ids (helpers/owner-ids.ts) */
const BASE = ownerRange(import.meta.filename).from;
const OWNERS = { from: BASE, to: BASE + 99 };

describe.skipIf(!canMount)('the life of a home through homesctl', () => {
  let d: RunningDaemon;
  let stateFile: string;
  const holders: ChildProcess[] = [];

  const ctl = async (...args: string[]) => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, ...args]);
    return { ...r, json: r.code === 0 && args.includes('--json') ? (JSON.parse(r.stdout) as Record<string, any>) : null };
  };
  const ctlJson = async (...args: string[]) => {
    const r = await ctl('--json', ...args);
    if (r.code !== 0) throw new Error(`homesctl ${args.join(' ')} failed (${r.code}): ${r.stderr}`);
    return r.json as Record<string, any>;
  };

  beforeAll(async () => {
    d = await startDaemon({ config: { owners: OWNERS } });
    stateFile = join(d.dir, 'state.json');
  });

  afterAll(async () => {
    for (const h of holders) h.kill('SIGKILL');
    await d?.stop();
  });

  it('resolves a project home, creating it with an owner from the range', async () => {
    const r = await ctlJson('resolve', '--tenant', 'acme', '--project', 'web');
    expect(r).toMatchObject({ tenant: 'acme', scope: 'project', key: 'web', created: true, source: 'default' });
    expect(r.home).toBe(join(d.mount, 'acme', 'web'));
    expect(r.owner).toEqual({ uid: BASE, gid: BASE });
    const st = statSync(r.home as string);
    expect([st.uid, st.mode & 0o777]).toEqual([BASE, 0o700]);
    expect(existsSync(d.backingOf('acme', 'web'))).toBe(true);
    const again = await ctlJson('resolve', '--tenant', 'acme', '--project', 'web');
    expect(again.created).toBe(false);
    expect(again.owner).toEqual(r.owner);
  });

  it('follows the home-scope cascade user → project → tenant, never widened by a bad value', async () => {
    // acme/web would be left unused: nothing changes without --yes, --dry-run previews
    const refused = await ctl('settings', 'set', '--tenant', 'acme', 'tenant');
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^homesctl: CONFIRM_REQUIRED: .*acme\/web/);
    expect(await ctlJson('resolve', '--tenant', 'acme', '--project', 'web')).toMatchObject({ scope: 'project', key: 'web' });
    const dry = await ctlJson('settings', 'set', '--tenant', 'acme', 'tenant', '--dry-run');
    expect(dry).toMatchObject({ dryRun: true, orphaned: [{ home: 'acme/web', bytes: 0 }], tenantDefault: 'tenant' });
    expect((await ctlJson('settings', 'get', '--tenant', 'acme')).tenantDefault).toBeNull();
    const done = await ctlJson('settings', 'set', '--tenant', 'acme', 'tenant', '--yes');
    expect(done).toMatchObject({ tenantDefault: 'tenant', orphaned: [{ home: 'acme/web' }] });
    expect(await ctlJson('resolve', '--tenant', 'acme', '--project', 'web')).toMatchObject({ scope: 'tenant', key: '_tenant', source: 'tenant' });
    await ctlJson('settings', 'set', '--tenant', 'acme', '--project', 'api', 'user');
    expect(await ctlJson('resolve', '--tenant', 'acme', '--project', 'api', '--user', 'alice')).toMatchObject({ scope: 'user', key: '_user_alice' });
    // user scope without a user: the project home, still isolated
    expect(await ctlJson('resolve', '--tenant', 'acme', '--project', 'api')).toMatchObject({ key: 'api' });
    await ctlJson('settings', 'set', '--tenant', 'acme', '--user', 'bob', 'project');
    expect(await ctlJson('resolve', '--tenant', 'acme', '--project', 'api', '--user', 'bob')).toMatchObject({ scope: 'project', key: 'api', source: 'user' });
    const view = await ctlJson('settings', 'get', '--tenant', 'acme', '--project', 'api');
    expect(view).toMatchObject({ tenantDefault: 'tenant', project: { name: 'api', value: 'user' } });
  });

  it('never lets a project name reach a shared or user home', async () => {
    const r = await ctl('resolve', '--tenant', 'acme', '--project', '_user_alice');
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/INVALID_NAME/);
    const bad = await ctl('resolve', '--tenant', '../etc', '--project', 'x');
    expect(bad.code).toBe(1);
    expect(existsSync(join(d.backing, '..', 'etc'))).toBe(false);
  });

  it('lists every home with owner, profile, usage, and orphans left by a scope change', async () => {
    const list = (await ctlJson('list')) as unknown as Array<Record<string, any>>;
    const web = list.find((h) => h.tenant === 'acme' && h.key === 'web');
    expect(web).toMatchObject({ scope: 'project', profile: 'home', orphan: true, owner: { uid: BASE } });
    const tenant = list.find((h) => h.key === '_tenant');
    expect(tenant).toMatchObject({ scope: 'tenant', orphan: false });
    const human = await ctl('list');
    expect(human.stdout).toMatch(/^acme\/web\s.*\bORPHAN\b/m);
    const orphans = (await ctlJson('list', '--orphans')) as unknown as Array<Record<string, any>>;
    expect(orphans.map((h) => `${h.tenant}/${h.key}`)).toEqual(['acme/web']);
  });

  it('keeps one home owner out of another home', async () => {
    const tenantOwner = (await ctlJson('usage', 'acme/_tenant')).owner as { uid: number; gid: number };
    expect(tenantOwner.uid).not.toBe(BASE);
    const r = await runAs(tenantOwner.uid, tenantOwner.gid, `ls ${d.home('acme', 'web')} 2>&1; echo x > ${d.home('acme', 'web')}/intruder 2>&1; echo ok > ${d.home('acme', '_tenant')}/mine && echo own-ok`);
    expect(r.stdout).toMatch(/Permission denied/);
    expect(r.stdout).toContain('own-ok');
    expect(existsSync(join(d.backingOf('acme', 'web'), 'intruder'))).toBe(false);
  });

  it('creates a home with profile, budget and owner, and resizes it live', async () => {
    const info = await ctlJson('create', 'acme/extra', '--profile', 'scratch', '--budget', '64K', '--owner', `${BASE + 50}:${BASE + 50}`);
    expect(info).toMatchObject({ profile: 'scratch', profileSource: 'override', budget: 65536, owner: { uid: BASE + 50, gid: BASE + 50 } });
    const dup = await ctl('create', 'acme/extra');
    expect(dup.code).toBe(1);
    expect(dup.stderr).toMatch(/EXISTS/);
    const home = d.home('acme', 'extra');
    const over = await runAs(BASE + 50, BASE + 50, `(head -c 100000 /dev/zero | tr '\\0' a > ${home}/big) 2>&1; echo rc=$?`);
    expect(over.stdout).toMatch(/Disk quota exceeded/);
    expect(statSync(join(d.backingOf('acme', 'extra'), 'big')).size).toBeLessThanOrEqual(65536);
    await ctlJson('set-budget', 'acme/extra', '1M');
    const ok = await runAs(BASE + 50, BASE + 50, `head -c 100000 /dev/zero | tr '\\0' a > ${home}/big && echo ok`);
    expect(ok.stdout).toBe('ok\n');
    // lowering below usage deletes nothing and refuses growth
    await ctlJson('set-budget', 'acme/extra', '50K');
    const grow = await runAs(BASE + 50, BASE + 50, `(env printf 'more\\n' >> ${home}/big) 2>&1; echo rc=$?`);
    expect(grow.stdout).toMatch(/Disk quota exceeded/);
    expect(statSync(join(d.backingOf('acme', 'extra'), 'big')).size).toBe(100000);
    const usage = await ctlJson('usage', 'acme/extra');
    expect(usage).toMatchObject({ bytes: 100000, budget: 51200 });
  });

  it('switches a profile live and back', async () => {
    const home = d.home('acme', 'web');
    await ctlJson('set-profile', 'acme/web', 'scratch');
    await runAs(BASE, BASE, `echo hi > ${home}/t.txt`);
    const refused = await runAs(BASE, BASE, `chmod +x ${home}/t.txt 2>&1; echo rc=$?`);
    expect(refused.stdout).toMatch(/Operation not permitted/);
    const cleared = await ctlJson('set-profile', 'acme/web', '--clear');
    expect(cleared).toMatchObject({ profile: 'home', profileSource: 'default' });
    const ok = await runAs(BASE, BASE, `chmod +x ${home}/t.txt && echo ok`);
    expect(ok.stdout).toBe('ok\n');
    const unknown = await ctl('set-profile', 'acme/web', 'nope');
    expect(unknown.code).toBe(1);
  });

  it('rescans a home and reports drift from changes made behind the daemon', async () => {
    writeFileSync(join(d.backingOf('acme', 'web'), 'behind-the-back'), Buffer.alloc(12345));
    const r = await ctlJson('rescan', 'acme/web');
    expect(r.drift).toEqual({ bytes: 12345, inodes: 1 });
    expect(r.after.bytes).toBe(r.before.bytes + 12345);
  });

  it('refuses to rename a busy home, then renames it with --force while files are open and a shell sits inside', async () => {
    await ctlJson('settings', 'set', '--tenant', 'acme', '--project', 'mover', 'project');
    const mover = await ctlJson('resolve', '--tenant', 'acme', '--project', 'mover');
    expect(mover.key).toBe('mover');
    const old = d.home('acme', 'mover');
    const owner = mover.owner as { uid: number; gid: number };
    // A writer holding a file open and a shell whose working directory is inside.
    const writer = spawn('setpriv', [`--reuid=${owner.uid}`, `--regid=${owner.gid}`, '--clear-groups', 'python3', '-c', `
import os, sys, time
fd = os.open('${old}/held.txt', os.O_CREAT | os.O_WRONLY, 0o600)
os.write(fd, b'before\\n')
print('ready', flush=True)
sys.stdin.readline()
os.write(fd, b'after\\n')
os.close(fd)
print('done', flush=True)
`], { stdio: ['pipe', 'pipe', 'inherit'], env: { PATH: SYSTEM_PATH } });
    holders.push(writer);
    const shell = spawn('sh', ['-c', 'echo ready; read x; touch created-after-rename && pwd && echo done'], { cwd: old, stdio: ['pipe', 'pipe', 'inherit'] });
    holders.push(shell);
    const lines = (p: ChildProcess) => {
      const got: string[] = [];
      let buf = '';
      p.stdout!.on('data', (x: Buffer) => {
        buf += x.toString();
        const parts = buf.split('\n');
        buf = parts.pop()!;
        got.push(...parts);
      });
      return (want: string) =>
        new Promise<void>((res, rej) => {
          const t0 = Date.now();
          const tick = () => (got.includes(want) ? res() : Date.now() - t0 > 15_000 ? rej(new Error(`no "${want}" in ${JSON.stringify(got)}`)) : setTimeout(tick, 20));
          tick();
        });
    };
    const writerSaw = lines(writer);
    const shellSaw = lines(shell);
    await writerSaw('ready');
    await shellSaw('ready');

    const busy = await ctl('rename-project', '--tenant', 'acme', 'mover', 'moved');
    expect(busy.code).toBe(1);
    expect(busy.stderr).toMatch(/BUSY/);
    expect(existsSync(old)).toBe(true);

    const r = await ctlJson('rename-project', '--tenant', 'acme', 'mover', 'moved', '--force');
    expect(r).toMatchObject({ from: 'acme/mover', to: 'acme/moved' });
    expect(r.openFiles).toBeGreaterThanOrEqual(1);
    expect(r.cwdProcesses).toBeGreaterThanOrEqual(1);
    const now = d.home('acme', 'moved');
    expect(existsSync(old)).toBe(false);
    expect(readFileSync(join(now, 'held.txt'), 'utf8')).toBe('before\n');

    writer.stdin!.write('\n');
    shell.stdin!.write('\n');
    await writerSaw('done');
    await shellSaw('done');
    expect(readFileSync(join(now, 'held.txt'), 'utf8')).toBe('before\nafter\n');
    expect(existsSync(join(now, 'created-after-rename'))).toBe(true);
    expect(existsSync(join(d.backingOf('acme', 'moved'), 'created-after-rename'))).toBe(true);
    expect(existsSync(d.backingOf('acme', 'mover'))).toBe(false);
    const usage = await ctlJson('usage', 'acme/moved');
    expect(usage.owner).toEqual(owner);
    // the project's home-scope setting moved with its name
    expect(await ctlJson('settings', 'get', '--tenant', 'acme', '--project', 'moved')).toMatchObject({ project: { value: 'project' } });
    expect(await ctlJson('settings', 'get', '--tenant', 'acme', '--project', 'mover')).toMatchObject({ project: { value: null } });
    expect(usage.bytes).toBe(statSync(join(d.backingOf('acme', 'moved'), 'held.txt')).size);
  });

  it('blocks a rename onto an existing home instead of merging', async () => {
    for (const p of ['one', 'two']) {
      await ctlJson('settings', 'set', '--tenant', 'acme', '--project', p, 'project');
      expect((await ctlJson('resolve', '--tenant', 'acme', '--project', p)).key).toBe(p);
    }
    writeFileSync(join(d.backingOf('acme', 'two'), 'keep'), 'two');
    const r = await ctl('rename-project', '--tenant', 'acme', 'one', 'two');
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/RENAME_BLOCKED/);
    expect(readFileSync(join(d.backingOf('acme', 'two'), 'keep'), 'utf8')).toBe('two');
    expect(existsSync(d.backingOf('acme', 'one'))).toBe(true);
  });

  it('renames a user home', async () => {
    await ctlJson('resolve', '--tenant', 'acme', '--project', 'api', '--user', 'carol');
    const r = await ctlJson('rename-user', '--tenant', 'acme', 'carol', 'caroline');
    expect(r).toMatchObject({ from: 'acme/_user_carol', to: 'acme/_user_caroline' });
    expect(existsSync(d.home('acme', '_user_caroline'))).toBe(true);
    expect(existsSync(d.backingOf('acme', '_user_carol'))).toBe(false);
  });

  it('deletes exactly the project-scoped home, and keeps a shared one with a deleteNote', async () => {
    // the tenant default is `tenant`: give this project its own scope first
    await ctlJson('settings', 'set', '--tenant', 'acme', '--project', 'gone', 'project');
    await ctlJson('resolve', '--tenant', 'acme', '--project', 'gone');
    writeFileSync(join(d.backingOf('acme', 'gone'), 'f'), 'x');
    const del = await ctlJson('delete-project', '--tenant', 'acme', 'gone');
    expect(del).toMatchObject({ deleted: 'acme/gone' });
    expect(existsSync(d.backingOf('acme', 'gone'))).toBe(false);
    expect(existsSync(d.home('acme', 'gone'))).toBe(false);
    // a project under tenant scope: nothing of its own to delete, the shared home stays
    const shared = await ctlJson('delete-project', '--tenant', 'acme', 'other');
    expect(shared.deleted).toBeNull();
    expect(shared.deleteNote).toMatch(/_tenant/);
    expect(existsSync(d.backingOf('acme', '_tenant'))).toBe(true);
    const user = await ctlJson('delete-user', '--tenant', 'acme', 'alice');
    expect(user).toMatchObject({ deleted: 'acme/_user_alice' });
    expect(existsSync(d.backingOf('acme', '_user_alice'))).toBe(false);
  });

  it('refuses to delete a home a process works in, unless forced', async () => {
    await ctlJson('settings', 'set', '--tenant', 'acme', '--project', 'busyone', 'project');
    await ctlJson('resolve', '--tenant', 'acme', '--project', 'busyone');
    const sh = spawn('sh', ['-c', 'echo ready; read x'], { cwd: d.home('acme', 'busyone'), stdio: ['pipe', 'pipe', 'inherit'] });
    holders.push(sh);
    await new Promise<void>((res) => sh.stdout!.once('data', () => res()));
    const r = await ctl('delete-project', '--tenant', 'acme', 'busyone');
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/BUSY/);
    const forced = await ctlJson('delete-project', '--tenant', 'acme', 'busyone', '--force');
    expect(forced.deleted).toBe('acme/busyone');
    sh.stdin!.end('\n');
  });

  it('keeps settings, owners and overrides across a restart, from the state file', async () => {
    const before = (await ctlJson('list')) as unknown as Array<Record<string, any>>;
    const saved = JSON.parse(readFileSync(stateFile, 'utf8')) as { homes: Record<string, { owner: { uid: number } }> };
    expect(saved.homes['acme/web']?.owner.uid).toBe(BASE);
    expect(statSync(stateFile).mode & 0o777).toBe(0o600);
    d = await d.restart();
    const after = (await ctlJson('list')) as unknown as Array<Record<string, any>>;
    const pick = (l: Array<Record<string, any>>) => l.map((h) => [h.tenant, h.key, h.owner.uid, h.profile, h.budget]).sort();
    expect(pick(after)).toEqual(pick(before));
    expect(await ctlJson('resolve', '--tenant', 'acme', '--project', 'web')).toMatchObject({ scope: 'tenant' });
  });

  it('refuses to start on a corrupt state file (exit code 9) rather than guess owners', async () => {
    await d.stopKeep();
    writeFileSync(stateFile, '{"version": 1, "homes": {"acme/web": {"owner": {"uid": -4}}}');
    const r = await runAsync(process.execPath, [HOMESFS, 'serve', '--config', join(d.dir, 'config.json')], { timeoutMs: 30_000 });
    expect(r.code).toBe(9);
    expect(r.stderr).toMatch(/state/i);
  });
});
