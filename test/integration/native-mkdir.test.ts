import { chmodSync, chownSync, lstatSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { canMount, runAsync, skipReason, SYSTEM_PATH } from '../helpers/daemon.js';
import { fillToInodeCap } from '../helpers/inode-cap.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { ownerSuite, type Owner, type OwnerSuite } from '../helpers/owner-suite.js';

/**
 * MKDIR made in the binding (fuse.nativeMkdir) with the inode of a create
 * slot, counted by the daemon before it serves anything else. What must
 * hold: the mkdirs are native (counted in status), the inode cap stays exact
 * (a mkdir at the cap is refused with EDQUOT, a rescan finds no drift), the
 * new directories' mode and owner are what the daemon gives them with the
 * switch off, a depth past maxDepth is refused as the daemon refuses it, and
 * the answer to each name the binding makes (mkdir, symlink, create, link)
 * is its node as owned, which the kernel then serves to stat.
 *
 * NATIVE_MKDIR_OFF=1 runs the first block with the switch off: its "native"
 * counts then fail, which shows this file tests the binding's mkdirs.
 */

const OWNERS = ownerRange(import.meta.filename);
const BASE = OWNERS.from;
const ownerNo = (i: number): Owner => ({ uid: BASE + 5 + i, gid: BASE + 5 + i });
const T = 'nm';
const FORCE_OFF = process.env.NATIVE_MKDIR_OFF === '1';

if (!canMount) console.warn(`native-mkdir integration suite skipped: ${skipReason}`);

const twenty = { ...BUILTIN_PROFILES.home, maxInodes: 20, maxHomeBytes: 1024 * 1024 };
const shallow = { ...BUILTIN_PROFILES.posix, maxDepth: 5 };
const PROFILES = { twenty, shallow };

type Native = { mkdirAnswered: number; mkdirFallbacks: number; createAnswered: number };

/** What the mode/owner script prints for a home of profile home and one of posix (with a setgid directory). */
const MODES_SCRIPT = `import os,sys,time
h=sys.argv[1]
for i, mode in enumerate([0o755, 0o700, 0o777, 0o750, 0o1777, 0o2755, 0o4700, 0o0]):
  os.mkdir(os.path.join(h, 'm%d' % i), mode)
  # the first mkdir gets this caller create slots: the pause lets the daemon grant them, whatever the load
  if i == 0: time.sleep(0.5)
if os.path.isdir(os.path.join(h, 'sg')):
  for n in ['sg/a', 'sg/b', 'sg/a/c']: os.mkdir(os.path.join(h, n), 0o750)
`;

/** mode (octal), uid and gid of each name in the backing directory. */
function modesOf(backing: string, names: string[]): string[] {
  return names.map((n) => {
    const st = statSync(join(backing, n));
    return `${n} ${(st.mode & 0o7777).toString(8)} ${st.uid} ${st.gid}`;
  });
}

const MODE_NAMES = ['m0', 'm1', 'm2', 'm3', 'm4', 'm5', 'm6', 'm7'];
const SG_NAMES = ['sg', 'sg/a', 'sg/b', 'sg/a/c'];

/** A setgid directory whose group is not the owner's, made in the backing tree (as root). */
function setgidDir(s: OwnerSuite, key: string): void {
  const sg = join(s.d.backingOf(T, key), 'sg');
  const U = s.owner(`${T}/${key}`);
  mkdirSync(sg);
  chownSync(sg, U.uid, U.gid + 500);
  chmodSync(sg, 0o2775);
}

/** Modes and owners, as ids relative to the home's owner (two daemons' homes have different owners). */
function relative(lines: string[], U: Owner): string[] {
  return lines.map((l) => {
    const [n, mode, uid, gid] = l.split(' ');
    return `${n} ${mode} ${Number(uid) - U.uid} ${Number(gid) - U.gid}`;
  });
}

/** The results of the switch-on daemon, which the switch-off one must give too. */
const seen: { home?: string[]; posix?: string[] } = {};

async function shAs(who: Owner, script: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return runAsync('setpriv', [`--reuid=${who.uid}`, `--regid=${who.gid}`, '--clear-groups', 'sh', '-c', script], { env: { PATH: SYSTEM_PATH } });
}

describe.skipIf(!canMount)('native mkdir (fuse.nativeMkdir): made in the binding with a create slot\'s inode', () => {
  const HOMES = {
    [`${T}/twenty`]: { owner: ownerNo(0), profile: 'twenty' },
    [`${T}/modes`]: { owner: ownerNo(1), profile: 'home' },
    [`${T}/px`]: { owner: ownerNo(2), profile: 'posix' },
    [`${T}/deep`]: { owner: ownerNo(3), profile: 'shallow' },
    [`${T}/tar`]: { owner: ownerNo(4), profile: 'home' },
  };
  const s = ownerSuite({ homes: HOMES, config: { owners: OWNERS, profiles: PROFILES, fuse: { nativeMkdir: !FORCE_OFF } } });
  const native = async (): Promise<Native> => ((await s.d.status()) as { native: { fastPath: Native } }).native.fastPath;

  it('a home of 20 inodes: mkdirs made natively and by the daemon stop at exactly 20 (EDQUOT), usage exact, a rescan finds no drift', async () => {
    const n0 = await native();
    await fillToInodeCap(s, `${T}/twenty`, 20, 'os.mkdir(p)', 'os.rmdir(p)');
    expect((await native()).mkdirAnswered - n0.mkdirAnswered).toBeGreaterThan(5);
  });

  it('the new directories\' mode and owner (home and posix, a setgid parent\'s group kept) are counted native', async () => {
    const n0 = await native();
    await s.py(MODES_SCRIPT, s.d.home(T, 'modes'));
    setgidDir(s, 'px');
    await s.py(MODES_SCRIPT, s.d.home(T, 'px'));
    expect((await native()).mkdirAnswered - n0.mkdirAnswered).toBeGreaterThan(8);
    seen.home = relative(modesOf(s.d.backingOf(T, 'modes'), MODE_NAMES), s.owner(`${T}/modes`));
    seen.posix = relative(modesOf(s.d.backingOf(T, 'px'), [...MODE_NAMES, ...SG_NAMES]), s.owner(`${T}/px`));
    // home: 0700 whatever is asked; posix: what is asked (the setuid one is the daemon's to make).
    expect(seen.home).toEqual(MODE_NAMES.map((n) => `${n} 700 0 0`));
    // posix: what is asked, under the caller's umask (022 here: 0o777 comes as 0o755).
    expect(seen.posix.slice(0, 4)).toEqual(['m0 755 0 0', 'm1 700 0 0', 'm2 755 0 0', 'm3 750 0 0']);
    expect(seen.posix.slice(8)).toEqual(['sg 2775 0 500', 'sg/a 2750 0 500', 'sg/b 2750 0 500', 'sg/a/c 2750 0 500']);
    // sg was made in the backing tree, behind the daemon: only what was made through the mount is counted.
    expect(await s.usage(`${T}/px`)).toMatchObject({ inodes: 8 + 3 });
  });

  it('each name made natively is answered with its node as owned (posix: the caller\'s), what a stat of it on disk shows', async () => {
    // The kernel keeps a new name's attributes from the answer to its MKDIR, SYMLINK, CREATE or LINK
    // (300 s here), so a stat right after shows what the binding answered, not a fresh look.
    const home = s.d.home(T, 'px');
    const n0 = ((await s.d.status()) as { native: { fastPath: Native & { symlinkAnswered: number; linkAnswered: number } } }).native.fastPath;
    const out = await s.py(
      `import os,sys,time
h=sys.argv[1]
os.mkdir(os.path.join(h, 'warm'))
time.sleep(0.5)  # the caller's first make gets it create slots
os.mkdir(os.path.join(h, 'am'))
os.symlink('am', os.path.join(h, 'as'))
open(os.path.join(h, 'af'), 'w').close()
st = os.lstat(os.path.join(h, 'af'))  # the CREATE's answer (the LINK's replaces it)
print('af0', st.st_uid, st.st_gid)
os.link(os.path.join(h, 'af'), os.path.join(h, 'al'))
for n in ['am', 'as', 'af', 'al']:
  st = os.lstat(os.path.join(h, n))
  print(n, st.st_uid, st.st_gid, st.st_ctime_ns, st.st_nlink)
`,
      home,
    );
    const n1 = ((await s.d.status()) as { native: { fastPath: Native & { symlinkAnswered: number; linkAnswered: number } } }).native.fastPath;
    expect(n1.mkdirAnswered - n0.mkdirAnswered).toBeGreaterThanOrEqual(1);
    expect(n1.symlinkAnswered - n0.symlinkAnswered).toBe(1);
    expect(n1.createAnswered - n0.createAnswered).toBe(1);
    expect(n1.linkAnswered - n0.linkAnswered).toBe(1);
    const U = s.owner(`${T}/px`);
    const disk = ['am', 'as', 'af', 'al'].map((n) => {
      const st = lstatSync(join(s.d.backingOf(T, 'px'), n), { bigint: true });
      return `${n} ${st.uid} ${st.gid} ${st.ctimeNs} ${st.nlink}`;
    });
    expect(disk[0]!.split(' ').slice(1, 3)).toEqual([String(U.uid), String(U.gid)]);
    expect(out.trim().split('\n')).toEqual([`af0 ${U.uid} ${U.gid}`, ...disk]);
  });

  it('mkdir -p past maxDepth is refused at the level the daemon refuses (EPERM), the levels above made natively', async () => {
    const home = s.d.home(T, 'deep');
    const U = s.owner(`${T}/deep`);
    // A first mkdir gets this caller create slots.
    expect((await shAs(U, `mkdir ${home}/warm && sleep 0.5`)).code).toBe(0);
    const n0 = await native();
    const r = await shAs(U, `mkdir -p ${home}/a/b/c/d/e/f/g`);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/Operation not permitted/);
    expect(statSync(join(s.d.backingOf(T, 'deep'), 'a/b/c/d/e')).isDirectory()).toBe(true);
    expect(() => statSync(join(s.d.backingOf(T, 'deep'), 'a/b/c/d/e/f'))).toThrow();
    const n1 = await native();
    expect(n1.mkdirAnswered - n0.mkdirAnswered).toBe(5);
    expect(n1.mkdirFallbacks - n0.mkdirFallbacks).toBe(1);
    expect(await s.usage(`${T}/deep`)).toMatchObject({ inodes: 6 });
    const rescan = JSON.parse(await s.ctl('--json', 'rescan', `${T}/deep`)) as { drift: { bytes: number; inodes: number } };
    expect(rescan.drift).toEqual({ bytes: 0, inodes: 0 });
  });

  it('tar -x of a tree of directories and files: natively made, the ledger equal to the disk', async () => {
    const src = mkdtempSync(join(tmpdir(), 'homesfs-nm-'));
    try {
      const tree = join(src, 'tree');
      let files = 0;
      let bytes = 0;
      for (let i = 0; i < 6; i++) {
        for (let j = 0; j < 5; j++) {
          const d = join(tree, `p${i}`, `q${j}`);
          mkdirSync(d, { recursive: true });
          writeFileSync(join(d, 'f'), 'x'.repeat(100 + i * 10 + j));
          files++;
          bytes += 100 + i * 10 + j;
        }
      }
      const tarball = join(src, 'tree.tar');
      expect((await runAsync('tar', ['-C', src, '-cf', tarball, 'tree'])).code).toBe(0);
      chmodSync(src, 0o755);
      chmodSync(tarball, 0o644);
      const home = s.d.home(T, 'tar');
      const U = s.owner(`${T}/tar`);
      expect((await shAs(U, `mkdir ${home}/warm && sleep 0.5`)).code).toBe(0);
      const n0 = await native();
      const r = await shAs(U, `tar -C ${home} -xf ${tarball}`);
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      // tree, 6 p's and 30 q's
      expect((await native()).mkdirAnswered - n0.mkdirAnswered).toBeGreaterThan(10);
      expect(await s.usage(`${T}/tar`)).toMatchObject({ inodes: 1 + 1 + 6 + 30 + files, bytes });
      const rescan = JSON.parse(await s.ctl('--json', 'rescan', `${T}/tar`)) as { drift: { bytes: number; inodes: number } };
      expect(rescan.drift).toEqual({ bytes: 0, inodes: 0 });
    } finally {
      rmSync(src, { recursive: true, force: true });
    }
  });
});

describe.skipIf(!canMount)('the same mkdirs with fuse.nativeMkdir off: the daemon gives the same modes and owners', () => {
  const HOMES = {
    [`${T}/modes`]: { owner: ownerNo(10), profile: 'home' },
    [`${T}/px`]: { owner: ownerNo(11), profile: 'posix' },
  };
  const s = ownerSuite({ homes: HOMES, config: { owners: OWNERS, profiles: PROFILES, fuse: { nativeMkdir: false } } });

  it('mode and owner of every directory equal those made natively', async () => {
    const n0 = ((await s.d.status()) as { native: { fastPath: Native } }).native.fastPath;
    await s.py(MODES_SCRIPT, s.d.home(T, 'modes'));
    setgidDir(s, 'px');
    await s.py(MODES_SCRIPT, s.d.home(T, 'px'));
    const n1 = ((await s.d.status()) as { native: { fastPath: Native } }).native.fastPath;
    expect(n1.mkdirAnswered).toBe(n0.mkdirAnswered);
    const home = relative(modesOf(s.d.backingOf(T, 'modes'), MODE_NAMES), s.owner(`${T}/modes`));
    const posix = relative(modesOf(s.d.backingOf(T, 'px'), [...MODE_NAMES, ...SG_NAMES]), s.owner(`${T}/px`));
    expect(seen.home, 'the switch-on block ran first').toBeDefined();
    expect(home).toEqual(seen.home);
    expect(posix).toEqual(seen.posix);
  });
});
