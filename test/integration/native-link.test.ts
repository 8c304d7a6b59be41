import { existsSync, lstatSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { canMount, runAsync, skipReason, SYSTEM_PATH } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { ownersFrom, ownerSuite } from '../helpers/owner-suite.js';

/**
 * LINK made in the binding (fuse.nativeLink) with the inode of a create
 * slot, counted by the daemon before it serves anything else. What must
 * hold: the links are native (counted in status), every name is an inode
 * (the inode cap stays exact at EDQUOT, unlinks give them back, the bytes
 * stay the file's until its last name goes, a rescan finds no drift), a link
 * between homes is EXDEV, a profile that denies hard links refuses them
 * (EPERM, logged) however the binding is set, a symlink is linked by the
 * daemon (not followed), a directory never is, and a file open while it is
 * linked is the same file under both names.
 *
 * NATIVE_LINK_OFF=1 runs the file with the switch off: its "native" counts
 * then fail, which shows this file tests the binding's links.
 */

const OWNERS = ownerRange(import.meta.filename);
const U = ownersFrom(OWNERS.from + 1, ['twenty', 'a', 'b', 'deny', 'kinds', 'open']);
const T = 'nl';
const FORCE_OFF = process.env.NATIVE_LINK_OFF === '1';

if (!canMount) console.warn(`native-link integration suite skipped: ${skipReason}`);

const twenty = { ...BUILTIN_PROFILES.home, maxInodes: 20, maxHomeBytes: 1024 * 1024 };
const nolinks = { ...BUILTIN_PROFILES.home, hardLinks: 'deny' };
const PROFILES = { twenty, nolinks };

type Native = { linkAnswered: number; linkFallbacks: number; createAnswered: number };

describe.skipIf(!canMount)('native link (fuse.nativeLink): hard links made in the binding with a create slot\'s inode', () => {
  const HOMES = {
    [`${T}/twenty`]: { owner: U.twenty, profile: 'twenty' },
    [`${T}/a`]: { owner: U.a, profile: 'home' },
    [`${T}/b`]: { owner: U.b, profile: 'home' },
    [`${T}/deny`]: { owner: U.deny, profile: 'nolinks' },
    [`${T}/kinds`]: { owner: U.kinds, profile: 'home' },
    [`${T}/open`]: { owner: U.open, profile: 'home' },
  };
  const s = ownerSuite({ homes: HOMES, config: { owners: OWNERS, profiles: PROFILES, fuse: { nativeLink: !FORCE_OFF } } });
  const native = async (): Promise<Native> => ((await s.d.status()) as { native: { fastPath: Native } }).native.fastPath;
  const drift = async (home: string) => (JSON.parse(await s.ctl('--json', 'rescan', home)) as { drift: { bytes: number; inodes: number } }).drift;

  it('a home of 20 inodes: every name is one, links stop at exactly 20 (EDQUOT), unlinks give them back, the bytes go with the last name; no drift', async () => {
    const home = s.d.home(T, 'twenty');
    const n0 = await native();
    const out = await s.py(
      `import os,sys,errno,time
h=sys.argv[1]
open(os.path.join(h, 'f'), 'w').write('0123456789')
# the first create gets this caller create slots: the pause lets the daemon grant them, whatever the load
time.sleep(0.5)
res=[]
for i in range(30):
  try:
    os.link(os.path.join(h, 'f'), os.path.join(h, 'l%02d' % i)); res.append('ok')
  except OSError as e: res.append(errno.errorcode[e.errno])
st=os.stat(os.path.join(h, 'f'))
print(' '.join(res), st.st_nlink, os.stat(os.path.join(h, 'l05')).st_ino == st.st_ino)`,
      home,
    );
    expect(out).toBe(`${[...Array(19).fill('ok'), ...Array(11).fill('EDQUOT')].join(' ')} 20 True`);
    const n1 = await native();
    expect(n1.linkAnswered - n0.linkAnswered).toBeGreaterThan(5);
    expect(await s.usage(`${T}/twenty`)).toMatchObject({ inodes: 20, bytes: 10 });
    // Five names removed (natively or not): five links fit again, the sixth is refused.
    const again = await s.py(
      `import os,sys,errno,time
h=sys.argv[1]
for i in range(5): os.unlink(os.path.join(h, 'l%02d' % i))
time.sleep(0.3)
res=[]
for i in range(6):
  try:
    os.link(os.path.join(h, 'l10'), os.path.join(h, 'm%d' % i)); res.append('ok')
  except OSError as e: res.append(errno.errorcode[e.errno])
print(' '.join(res))`,
      home,
    );
    expect(again).toBe('ok ok ok ok ok EDQUOT');
    expect(await s.usage(`${T}/twenty`)).toMatchObject({ inodes: 20, bytes: 10 });
    expect(await drift(`${T}/twenty`)).toEqual({ bytes: 0, inodes: 0 });
    // Every name but one removed: one inode and the bytes; the last one too: nothing.
    await s.py(
      `import os,sys
h=sys.argv[1]
for n in os.listdir(h):
  if n != 'l18': os.unlink(os.path.join(h, n))`,
      home,
    );
    expect(await s.usage(`${T}/twenty`)).toMatchObject({ inodes: 1, bytes: 10 });
    await s.py(`import os,sys\nos.unlink(os.path.join(sys.argv[1], 'l18'))`, home);
    expect(await s.usage(`${T}/twenty`)).toMatchObject({ inodes: 0, bytes: 0 });
    expect(await drift(`${T}/twenty`)).toEqual({ bytes: 0, inodes: 0 });
  });

  it('between two homes: EXDEV (the daemon\'s), nothing made', async () => {
    const a = s.d.home(T, 'a');
    const b = s.d.home(T, 'b');
    await s.py(`import os,sys,time\nopen(os.path.join(sys.argv[1], 'f'), 'w').write('x')\ntime.sleep(0.3)`, a);
    // No owner reaches two homes: root links between them, as in policy.test.ts. Root makes a file in b first, so
    // that it has create slots there (a link the binding took for b's would find b's own f under the same name).
    const py = `import errno, os, sys, time
a, b = sys.argv[1:]
open(os.path.join(b, 'f'), 'w').write('yy')
time.sleep(0.5)
try:
  os.link(os.path.join(a, 'f'), os.path.join(b, 'g')); print("ok")
except OSError as e:
  print(errno.errorcode[e.errno])`;
    const r = await runAsync('python3', ['-c', py, a, b], { env: { PATH: SYSTEM_PATH } });
    expect(r.stdout).toBe('EXDEV\n');
    expect(existsSync(join(s.d.backingOf(T, 'b'), 'g'))).toBe(false);
    expect(statSync(join(s.d.backingOf(T, 'a'), 'f')).nlink).toBe(1);
    expect(statSync(join(s.d.backingOf(T, 'b'), 'f')).nlink).toBe(1);
    expect(await s.usage(`${T}/b`)).toMatchObject({ inodes: 1, bytes: 2 });
  });

  it('a profile that denies hard links refuses them (EPERM, logged) while the binding makes its files', async () => {
    const home = s.d.home(T, 'deny');
    const n0 = await native();
    const out = await s.py(
      `import os,sys,errno,time
h=sys.argv[1]
open(os.path.join(h, 'f'), 'w').write('x')
time.sleep(0.5)
open(os.path.join(h, 'g'), 'w').write('y')
res=[]
for i in range(3):
  try:
    os.link(os.path.join(h, 'f'), os.path.join(h, 'l%d' % i)); res.append('ok')
  except OSError as e: res.append(errno.errorcode[e.errno])
print(' '.join(res))`,
      home,
    );
    expect(out).toBe('EPERM EPERM EPERM');
    const n1 = await native();
    // The home is the binding's for creates (so a link there could have been too): it made g.
    expect(n1.createAnswered - n0.createAnswered).toBeGreaterThanOrEqual(FORCE_OFF ? 0 : 1);
    expect(n1.linkAnswered).toBe(n0.linkAnswered);
    for (let i = 0; i < 3; i++) expect(existsSync(join(s.d.backingOf(T, 'deny'), `l${i}`))).toBe(false);
    expect(await s.usage(`${T}/deny`)).toMatchObject({ inodes: 2, bytes: 2 });
    await s.d.waitForLog((l) => l.level === 'warn' && l.code === 'OP_REFUSED' && l.op === 'link' && l.home === `${T}/deny`, 10_000);
  });

  it('a symlink is linked by the daemon, not followed; a directory never is; a missing source or an existing name: ENOENT, EEXIST', async () => {
    const home = s.d.home(T, 'kinds');
    const n0 = await native();
    const out = await s.py(
      `import os,sys,errno,time
h=sys.argv[1]
j=lambda n: os.path.join(h, n)
open(j('f'), 'w').write('abc')
time.sleep(0.5)
os.mkdir(j('d'))
os.symlink('f', j('s'))
def go(a, b, follow):
  try:
    os.link(j(a), j(b), follow_symlinks=follow); return 'ok'
  except OSError as e: return errno.errorcode[e.errno]
print(go('f', 'd/f', False), go('s', 's2', False), go('d', 'd2', False), go('nope', 'x', False), go('f', 's', False))`,
      home,
    );
    expect(out).toBe('ok ok EPERM ENOENT EEXIST');
    // The regular file's link is the binding's, the symlink's the daemon's. The kernel answers the directory, the
    // missing source and the existing name itself (its lookups and its own rule): no LINK reaches the daemon for them.
    const n1 = await native();
    expect(n1.linkAnswered - n0.linkAnswered).toBe(1);
    expect(n1.linkFallbacks - n0.linkFallbacks).toBe(1);
    const b = s.d.backingOf(T, 'kinds');
    expect(lstatSync(join(b, 's2')).isSymbolicLink()).toBe(true);
    expect(lstatSync(join(b, 's')).nlink).toBe(2);
    expect(lstatSync(join(b, 'f')).nlink).toBe(2);
    expect(existsSync(join(b, 'd2'))).toBe(false);
    expect(existsSync(join(b, 'x'))).toBe(false);
    // f, d/f, d, s, s2
    expect(await s.usage(`${T}/kinds`)).toMatchObject({ inodes: 5, bytes: 3 });
    expect(await drift(`${T}/kinds`)).toEqual({ bytes: 0, inodes: 0 });
  });

  it('a file open while it is linked is the same file under both names: the bytes written through either, counted once', async () => {
    const home = s.d.home(T, 'open');
    const n0 = await native();
    const out = await s.py(
      `import os,sys,time
h=sys.argv[1]
j=lambda n: os.path.join(h, n)
open(j('warm'), 'w').write('w')
time.sleep(0.5)
fd=os.open(j('f'), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
os.write(fd, b'hello')
os.link(j('f'), j('g'))
a=open(j('g'), 'rb').read()
os.write(fd, b' world')
b=open(j('g'), 'rb').read()
with open(j('g'), 'ab') as w: w.write(b'!')
os.lseek(fd, 0, 0)
c=os.read(fd, 100)
os.close(fd)
print(a.decode(), '|', b.decode(), '|', c.decode(), '|', os.stat(j('f')).st_nlink, os.stat(j('g')).st_ino == os.stat(j('f')).st_ino)`,
      home,
    );
    expect(out).toBe('hello | hello world | hello world! | 2 True');
    const n1 = await native();
    expect(n1.linkAnswered - n0.linkAnswered).toBe(1);
    // warm, f and g: three names, the bytes of two files.
    expect(await s.usage(`${T}/open`)).toMatchObject({ inodes: 3, bytes: 1 + 12 });
    expect(await drift(`${T}/open`)).toEqual({ bytes: 0, inodes: 0 });
  });
});
