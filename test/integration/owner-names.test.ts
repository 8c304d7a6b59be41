import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ownerUserName } from '../../src/users/names.js';
import { HOMESCTL, SYSTEM_PATH, canMount, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { withUserDb } from '../helpers/nss.js';
import { ownerRange } from '../helpers/owner-ids.js';

if (!canMount) console.warn(`owner names integration suite skipped: ${skipReason} (it also needs unshare for its mount namespaces)`);

/**
 * The daemon publishes into a directory of this run (the helper's `userdb.dir`);
 * every program that must resolve the names (getent, homesctl exec and what it
 * runs) runs where that directory is /run/userdb (see helpers/nss.ts). The
 * host's /run/userdb is never touched, and the host's NSS never hears of them.
 */
const TENANT = 'nss';

describe.skipIf(!canMount)('owner names for NSS (systemd userdb drop-ins)', () => {
  let d: RunningDaemon;
  const ctl = (...args: string[]) => runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, ...args]);
  const exec = (project: string, ...cmd: string[]) =>
    runAsync(...withUserDb(d.userdb, process.execPath, [HOMESCTL, '--socket', join(d.dir, 'platform', 'platform.sock'), 'exec', '--tenant', TENANT, '--project', project, '--create', '--', ...cmd]), {
      env: { PATH: SYSTEM_PATH },
    });
  /** getent where the daemon's directory is /run/userdb */
  const getent = (db: string, key: string | number) => spawnSync(...withUserDb(d.userdb, 'getent', [db, String(key)]), { encoding: 'utf8' });
  /** getent as the host sees it */
  const hostGetent = (db: string, key: string | number) => spawnSync('getent', [db, String(key)], { encoding: 'utf8' });

  /** the records the daemon has published */
  const published = () => (existsSync(d.userdb) ? readdirSync(d.userdb) : []);

  beforeAll(async () => {
    d = await startDaemon();
    expect(d.userdb.startsWith(`${d.dir}/`)).toBe(true);
  });

  afterAll(async () => {
    await d?.stop();
  });

  it('getent, whoami and getpass.getuser() know the owner of a new home', async () => {
    const r = await ctl('--json', 'resolve', '--tenant', TENANT, '--project', 'web');
    expect(r.code, r.stderr).toBe(0);
    const { owner, home, userName } = JSON.parse(r.stdout) as { owner: { uid: number; gid: number }; home: string; userName: string };
    const name = ownerUserName(TENANT, 'web');
    expect(userName).toBe(name);
    // an id of this file's own (startDaemon's default owners)
    const ids = ownerRange(import.meta.filename);
    expect([owner.uid, owner.gid].every((id) => id >= ids.from && id <= ids.to), `${owner.uid}:${owner.gid}`).toBe(true);
    const pw = getent('passwd', owner.uid);
    expect(pw.status, pw.stderr).toBe(0);
    expect(pw.stdout.trim()).toBe(`${name}:x:${owner.uid}:${owner.gid}:homesfs ${TENANT}/web:${home}:/usr/sbin/nologin`);
    expect(getent('passwd', name).stdout.trim()).toBe(pw.stdout.trim());
    expect(getent('group', owner.gid).stdout.trim()).toBe(`${name}:x:${owner.gid}:`);
    // ...from the records in the daemon's own directory; the host knows nothing of them
    expect(published().sort()).toEqual([`${name}.group`, `${name}.user`, `${owner.gid}.group`, `${owner.uid}.user`].sort());
    expect(readFileSync(join(d.userdb, `${name}.user`), 'utf8')).toContain(`"homeDirectory":"${home}"`);
    expect(hostGetent('passwd', name).status).toBe(2);
    expect(hostGetent('passwd', owner.uid).status).toBe(2);

    const who = await exec('web', 'sh', '-c', 'whoami; id -un; id -gn; python3 -c "import getpass, os; print(getpass.getuser()); print(os.path.expanduser(\'~\'))"');
    expect(who.code, who.stderr).toBe(0);
    expect(who.stdout.trim().split('\n')).toEqual([name, name, name, name, home]);

    // homesctl exec takes the identity from the record: the name, no login shell (so exec.shell),
    // and no GIT_*_NAME, since git finds the real name in the record by itself.
    const env = await exec('web', 'sh', '-c', 'echo "$USER|$LOGNAME|$SHELL|$EMAIL|${GIT_AUTHOR_NAME-unset}|${GIT_COMMITTER_NAME-unset}"');
    expect(env.stdout.trim()).toBe(`${name}|${name}|/bin/bash|${name}@homes.invalid|unset|unset`);
    const commit = await exec('web', 'sh', '-c', 'export GIT_CONFIG_NOSYSTEM=1; git init -q repo && cd repo && echo hi > f && git add f && git commit -q -m first && git log -1 --format="%an|%ae|%cn|%ce"');
    expect(commit.code, commit.stderr).toBe(0);
    expect(commit.stdout.trim()).toBe(`homesfs ${TENANT}/web|${name}@homes.invalid|homesfs ${TENANT}/web|${name}@homes.invalid`);
  });

  it('homesctl passwd prints the lines a container needs', async () => {
    await ctl('resolve', '--tenant', TENANT, '--project', 'api');
    const web = ownerUserName(TENANT, 'web');
    const api = ownerUserName(TENANT, 'api');
    const one = await ctl('passwd', '--home-dir', '/home/user', `${TENANT}/web`);
    expect(one.code, one.stderr).toBe(0);
    expect(one.stdout).toMatch(new RegExp(`^${web}:x:[0-9]+:[0-9]+:homesfs ${TENANT}/web:/home/user:/usr/sbin/nologin\\n$`));
    const all = await ctl('passwd', '--tenant', TENANT);
    expect(all.stdout.split('\n').filter(Boolean).map((l) => l.split(':')[0]).sort()).toEqual([api, web].sort());
    const groups = await ctl('passwd', '--group', `${TENANT}/api`);
    expect(groups.stdout).toMatch(new RegExp(`^${api}:x:[0-9]+:\\n$`));
    const missing = await ctl('passwd', `${TENANT}/nope`);
    expect(missing.code).toBe(1);
  });

  it('follows a rename, goes with a delete, and a restart after a crash drops stale names', async () => {
    const uid = (JSON.parse((await ctl('--json', 'usage', `${TENANT}/api`)).stdout) as { owner: { uid: number } }).owner.uid;
    expect((await ctl('rename-project', '--tenant', TENANT, 'api', 'api2')).code).toBe(0);
    expect(getent('passwd', ownerUserName(TENANT, 'api')).status).toBe(2);
    expect(getent('passwd', uid).stdout.split(':')[0]).toBe(ownerUserName(TENANT, 'api2'));
    expect((await ctl('delete-project', '--tenant', TENANT, 'api2')).code).toBe(0);
    expect(getent('passwd', uid).status).toBe(2);
    expect(getent('passwd', ownerUserName(TENANT, 'api2')).status).toBe(2);

    // Crash: the names stay behind. A home removed meanwhile loses its name at the next start.
    await ctl('resolve', '--tenant', TENANT, '--project', 'gone');
    const goneUid = getent('passwd', ownerUserName(TENANT, 'gone')).stdout.split(':')[2];
    expect(goneUid).toBeDefined();
    d.proc.kill('SIGKILL');
    await d.exited;
    spawnSync('umount', ['-l', d.mount]);
    rmSync(d.backingOf(TENANT, 'gone'), { recursive: true, force: true });
    expect(getent('passwd', ownerUserName(TENANT, 'gone')).status).toBe(0);
    d = await d.restart();
    await d.waitForLog((l) => l.msg === 'stale owner name removed' && l.name === ownerUserName(TENANT, 'gone'));
    await d.waitForLog((l) => l.msg === 'owner name published' && l.name === ownerUserName(TENANT, 'web'));
    expect(getent('passwd', ownerUserName(TENANT, 'gone')).status).toBe(2);
    expect(getent('passwd', Number(goneUid)).status).toBe(2);
    expect(getent('passwd', ownerUserName(TENANT, 'web')).status).toBe(0);

    // A clean stop takes the names with the mount.
    await d.stopKeep();
    expect(getent('passwd', ownerUserName(TENANT, 'web')).status).toBe(2);
    expect(published()).toEqual([]);
  });
});
