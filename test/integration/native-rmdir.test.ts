import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ABI } from '../../src/abi.js';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { canMount, runAsync, skipReason, SYSTEM_PATH } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { ownerSuite, type Owner } from '../helpers/owner-suite.js';

/**
 * RMDIR done in the binding (fuse.nativeRmdir) where it unlinks: the
 * directory removed and its inode given back to the ledger before the
 * ledger's next answer. What must hold: `rm -rf` of a tree removes every
 * directory natively and leaves the ledger equal to the disk (a rescan finds
 * no drift); a directory that is not empty is refused with ENOTEMPTY as the
 * daemon refuses it, nothing changed; and a directory whose backing path the
 * daemon's directory cache trusts by generation (4000 bytes and longer) is
 * the daemon's to remove.
 *
 * NATIVE_RMDIR_OFF=1 runs it with the switch off: its "native" counts then
 * fail, which shows this file tests the binding's rmdirs.
 */

const OWNERS = ownerRange(import.meta.filename);
const BASE = OWNERS.from;
const ownerNo = (i: number): Owner => ({ uid: BASE + 5 + i, gid: BASE + 5 + i });
const T = 'nr';
const FORCE_OFF = process.env.NATIVE_RMDIR_OFF === '1';

if (!canMount) console.warn(`native-rmdir integration suite skipped: ${skipReason}`);

const deepHome = { ...BUILTIN_PROFILES.posix, maxDepth: 0 };

type Native = { rmdirAnswered: number; rmdirFallbacks: number };

async function shAs(who: Owner, script: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return runAsync('setpriv', [`--reuid=${who.uid}`, `--regid=${who.gid}`, '--clear-groups', 'sh', '-c', script], { env: { PATH: SYSTEM_PATH } });
}

describe.skipIf(!canMount)('native rmdir (fuse.nativeRmdir): removed in the binding, its inode back in the ledger', () => {
  const HOMES = {
    [`${T}/tree`]: { owner: ownerNo(0), profile: 'home' },
    [`${T}/full`]: { owner: ownerNo(1), profile: 'home' },
    [`${T}/deep`]: { owner: ownerNo(2), profile: 'deep' },
  };
  const s = ownerSuite({ homes: HOMES, config: { owners: OWNERS, profiles: { deep: deepHome }, fuse: { nativeRmdir: !FORCE_OFF } } });
  const native = async (): Promise<Native> => ((await s.d.status()) as { native: { fastPath: Native } }).native.fastPath;
  const drift = async (home: string) => (JSON.parse(await s.ctl('--json', 'rescan', home)) as { drift: { bytes: number; inodes: number } }).drift;

  it('rm -rf of a tree: every directory removed natively, the ledger back to nothing, a rescan finds no drift', async () => {
    const home = s.d.home(T, 'tree');
    const U = s.owner(`${T}/tree`);
    const made = await shAs(U, `cd ${home} && for i in 0 1 2 3 4 5; do for j in 0 1 2 3 4; do mkdir -p t/p$i/q$j/r && echo x > t/p$i/q$j/f; done; done`);
    expect(made.code, made.stderr).toBe(0);
    // t, 6 p's, 30 q's, 30 r's; 30 files
    expect(await s.usage(`${T}/tree`)).toMatchObject({ inodes: 1 + 6 + 30 + 30 + 30, bytes: 60 });
    const n0 = await native();
    const rm = await shAs(U, `rm -rf ${home}/t`);
    expect(rm.code, rm.stderr).toBe(0);
    const n1 = await native();
    expect(n1.rmdirAnswered - n0.rmdirAnswered).toBe(1 + 6 + 30 + 30);
    expect(n1.rmdirFallbacks - n0.rmdirFallbacks).toBe(0);
    expect(existsSync(join(s.d.backingOf(T, 'tree'), 't'))).toBe(false);
    expect(await s.usage(`${T}/tree`)).toMatchObject({ inodes: 0, bytes: 0 });
    expect(await drift(`${T}/tree`)).toEqual({ bytes: 0, inodes: 0 });
  });

  it('a directory that is not empty: ENOTEMPTY, as the daemon answers it, and nothing changed', async () => {
    const home = s.d.home(T, 'full');
    const U = s.owner(`${T}/full`);
    expect((await shAs(U, `mkdir -p ${home}/a/b && echo y > ${home}/a/f`)).code).toBe(0);
    const before = await s.usage(`${T}/full`);
    const n0 = await native();
    const r = await shAs(U, `rmdir ${home}/a`);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/Directory not empty/);
    const n1 = await native();
    // Tried natively, then the daemon's, which answers and logs the errno.
    expect(n1.rmdirFallbacks - n0.rmdirFallbacks).toBe(1);
    expect(n1.rmdirAnswered).toBe(n0.rmdirAnswered);
    expect(await s.usage(`${T}/full`)).toEqual(before);
    expect(s.d.logs.some((l) => l.op === 'rmdir' && typeof l.errno === 'string' && l.errno === 'ENOTEMPTY')).toBe(true);
    // The home itself is the daemon's too (and refused).
    const self = await shAs(U, `rmdir ${home}`);
    expect(self.code).not.toBe(0);
    expect((await native()).rmdirAnswered).toBe(n0.rmdirAnswered);
  });

  it("a directory the daemon's cache trusts by generation (a backing path of 4000 bytes or longer) is the daemon's to remove", async () => {
    const home = s.d.home(T, 'deep');
    const backing = s.d.backingOf(T, 'deep');
    const name = 'n'.repeat(200);
    const levels = Math.ceil((ABI.DIRCACHE_READLINK_MAX + 400 - backing.length) / (name.length + 1));
    const rels = Array.from({ length: levels }, (_, i) => Array(i + 1).fill(name).join('/'));
    // One level at a time from the one above (a whole path that long is over PATH_MAX).
    const mk = await s.py(`import os,sys\nos.chdir(sys.argv[1])\nfor i in range(${levels}):\n  os.mkdir('${name}')\n  os.chdir('${name}')`, home);
    expect(mk).toBe('');
    const deep = rels.filter((r) => Buffer.byteLength(`${backing}/${r}`) >= ABI.DIRCACHE_READLINK_MAX).length;
    expect(deep).toBeGreaterThan(0);
    expect(deep).toBeLessThan(levels);
    const n0 = await native();
    // From the deepest up, each rmdir a name of its own level.
    const rm = await s.py(`import os,sys\nos.chdir(sys.argv[1])\nfor i in range(${levels} - 1):\n  os.chdir('${name}')\nfor i in range(${levels}):\n  os.rmdir('${name}')\n  os.chdir('..')`, home);
    expect(rm).toBe('');
    const n1 = await native();
    expect(n1.rmdirFallbacks - n0.rmdirFallbacks).toBe(deep);
    expect(n1.rmdirAnswered - n0.rmdirAnswered).toBe(levels - deep);
    expect(await s.usage(`${T}/deep`)).toMatchObject({ inodes: 0 });
    expect(await drift(`${T}/deep`)).toEqual({ bytes: 0, inodes: 0 });
  });
});
