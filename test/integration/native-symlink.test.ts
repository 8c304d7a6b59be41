import { lstatSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { canMount, skipReason } from '../helpers/daemon.js';
import { fillToInodeCap } from '../helpers/inode-cap.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { ownerSuite, type Owner } from '../helpers/owner-suite.js';

/**
 * SYMLINK made in the binding (fuse.nativeSymlink) with the inode of a create
 * slot, counted by the daemon before it serves anything else. What must
 * hold: the symlinks are native (counted in status), the inode cap stays
 * exact (EDQUOT at the cap, no drift), a target is judged as the daemon
 * judges it (a relative one that climbs out, or climbs after a name, is
 * refused with EPERM and logged; an absolute one is the daemon's to judge),
 * and owners, targets and answers are what the daemon gives with the switch off.
 *
 * NATIVE_SYMLINK_OFF=1 runs the first block with the switch off: its
 * "native" counts then fail, which shows this file tests the binding's symlinks.
 */

const OWNERS = ownerRange(import.meta.filename);
const BASE = OWNERS.from;
const ownerNo = (i: number): Owner => ({ uid: BASE + 5 + i, gid: BASE + 5 + i });
const T = 'ns';
const FORCE_OFF = process.env.NATIVE_SYMLINK_OFF === '1';

if (!canMount) console.warn(`native-symlink integration suite skipped: ${skipReason}`);

const twenty = { ...BUILTIN_PROFILES.home, maxInodes: 20, maxHomeBytes: 1024 * 1024 };
const PROFILES = { twenty };

type Native = { symlinkAnswered: number; symlinkFallbacks: number };

/**
 * Each (directory, target, name) made by the home's owner: the answer of each, printed. The first symlink gets
 * the caller create slots (the pause lets the daemon grant them, whatever the load).
 */
const TARGETS_SCRIPT = `import os,sys,errno,time
h=sys.argv[1]
os.mkdir(os.path.join(h, 'd'))
os.mkdir(os.path.join(h, 'd/e'))
open(os.path.join(h, 'f'), 'w').close()
cases=[('', 'f', 'l0'), ('d', '../f', 'l1'), ('d/e', '../../f', 'l2'), ('d', '../../x', 'l3'), ('d', 'e/../../f', 'l4'),
       ('', '/usr/bin/python3', 'l5'), ('', '/etc/passwd', 'l6'), ('d/e', './g/./h', 'l7'), ('', 'dangling', 'l8'), ('d', '..', 'l9'),
       ('', 'f', 'l0')]
res=[]
for i, (d, t, n) in enumerate(cases):
  try:
    os.symlink(t, os.path.join(h, d, n)); res.append('ok')
  except OSError as e: res.append(errno.errorcode[e.errno])
  if i == 0: time.sleep(0.5)
print(' '.join(res))
for d, t, n in cases[:-1]:
  p=os.path.join(h, d, n)
  if os.path.islink(p): print(os.path.join(d, n), os.readlink(p))
`;

const EXPECTED = 'ok ok ok EPERM EPERM ok EPERM ok ok ok EEXIST';

/** uid and gid of each link in the backing tree, relative to the home's owner, and its target. */
function owners(backing: string, U: Owner): string[] {
  return ['l0', 'd/l1', 'd/e/l2', 'l5', 'd/e/l7', 'l8', 'd/l9'].map((n) => {
    const st = lstatSync(join(backing, n));
    return `${n} ${st.isSymbolicLink()} ${st.uid - U.uid} ${st.gid - U.gid} ${readlinkSync(join(backing, n))}`;
  });
}

const seen: { out?: string; owners?: string[] } = {};

describe.skipIf(!canMount)("native symlink (fuse.nativeSymlink): made in the binding with a create slot's inode", () => {
  const HOMES = {
    [`${T}/twenty`]: { owner: ownerNo(0), profile: 'twenty' },
    [`${T}/targets`]: { owner: ownerNo(1), profile: 'home' },
    [`${T}/npm`]: { owner: ownerNo(2), profile: 'home' },
  };
  const s = ownerSuite({ homes: HOMES, config: { owners: OWNERS, profiles: PROFILES, fuse: { nativeSymlink: !FORCE_OFF } } });
  const native = async (): Promise<Native> => ((await s.d.status()) as { native: { fastPath: Native } }).native.fastPath;

  it('a home of 20 inodes: symlinks made natively and by the daemon stop at exactly 20 (EDQUOT), usage exact, a rescan finds no drift', async () => {
    const n0 = await native();
    await fillToInodeCap(s, `${T}/twenty`, 20, "os.symlink('t', p)", 'os.unlink(p)');
    expect((await native()).symlinkAnswered - n0.symlinkAnswered).toBeGreaterThan(5);
  });

  it('targets judged as the daemon judges them: relative ones made natively, climbing out refused (EPERM, logged), absolute ones the daemon\'s', async () => {
    const home = s.d.home(T, 'targets');
    const n0 = await native();
    seen.out = await s.py(TARGETS_SCRIPT, home);
    const [answers, ...links] = seen.out.split('\n');
    expect(answers).toBe(EXPECTED);
    expect(links).toEqual(['l0 f', 'd/l1 ../f', 'd/e/l2 ../../f', 'l5 /usr/bin/python3', 'd/e/l7 ./g/./h', 'l8 dangling', 'd/l9 ..']);
    const n1 = await native();
    // The mkdirs and the create before got this caller create slots: the 6 relative ones that stay in are native;
    // l5 (absolute) and the 3 refused are the daemon's (the existing name too, where the kernel has not cached it).
    expect(n1.symlinkAnswered - n0.symlinkAnswered).toBe(6);
    expect(n1.symlinkFallbacks - n0.symlinkFallbacks).toBeGreaterThanOrEqual(4);
    // The refusals the daemon answers are logged as any refusal, with the home, the op and the reason.
    const refused = s.d.logs.filter((l) => l.op === 'symlink' && l.home === `${T}/targets` && l.code === 'OP_REFUSED');
    expect(refused.map((l) => l.target).sort()).toEqual(['../../x', '/etc/passwd', 'e/../../f']);
    seen.owners = owners(s.d.backingOf(T, 'targets'), s.owner(`${T}/targets`));
    expect(seen.owners.every((l) => l.includes(' true 0 0 '))).toBe(true);
    expect(await s.usage(`${T}/targets`)).toMatchObject({ inodes: 3 + 7 });
    const r = JSON.parse(await s.ctl('--json', 'rescan', `${T}/targets`)) as { drift: { bytes: number; inodes: number } };
    expect(r.drift).toEqual({ bytes: 0, inodes: 0 });
  });

  it("an npm-style bin directory: ln -s of relative targets, natively made, each followed to its file's bytes", async () => {
    const home = s.d.home(T, 'npm');
    const n0 = await native();
    const out = await s.py(
      `import os,sys,time
h=sys.argv[1]
for d in ['node_modules', 'node_modules/.bin']: os.mkdir(os.path.join(h, d))
for i in range(40):
  p=os.path.join(h, 'node_modules', 'pkg%d' % i)
  os.mkdir(p)
  with open(os.path.join(p, 'cli.js'), 'w') as f: f.write('// %d' % i)
  os.symlink('../pkg%d/cli.js' % i, os.path.join(h, 'node_modules/.bin', 'cli%d' % i))
  if i == 0: time.sleep(0.5)
print(sum(1 for i in range(40) if open(os.path.join(h, 'node_modules/.bin/cli%d' % i)).read() == '// %d' % i))`,
      home,
    );
    expect(out).toBe('40');
    expect((await native()).symlinkAnswered - n0.symlinkAnswered).toBeGreaterThan(30);
  });
});

describe.skipIf(!canMount)('the same symlinks with fuse.nativeSymlink off: the daemon gives the same answers, targets and owners', () => {
  const HOMES = { [`${T}/targets`]: { owner: ownerNo(10), profile: 'home' } };
  const s = ownerSuite({ homes: HOMES, config: { owners: OWNERS, profiles: PROFILES, fuse: { nativeSymlink: false } } });

  it('answers, targets and owners of every link equal those made natively', async () => {
    const n0 = ((await s.d.status()) as { native: { fastPath: Native } }).native.fastPath;
    const out = await s.py(TARGETS_SCRIPT, s.d.home(T, 'targets'));
    const n1 = ((await s.d.status()) as { native: { fastPath: Native } }).native.fastPath;
    expect(n1.symlinkAnswered).toBe(n0.symlinkAnswered);
    expect(seen.out, 'the switch-on block ran first').toBeDefined();
    expect(out).toBe(seen.out);
    expect(owners(s.d.backingOf(T, 'targets'), s.owner(`${T}/targets`))).toEqual(seen.owners);
  });
});
