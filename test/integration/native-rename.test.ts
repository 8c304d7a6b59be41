import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { canMount, runAsync, skipReason, SYSTEM_PATH } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { ownersFrom, ownerSuite, type Owner } from '../helpers/owner-suite.js';

/**
 * RENAME of a regular file within a home done in the binding
 * (fuse.nativeRename, fastpath_unlink.c hs_fastpath_rename). What must hold:
 * the renames are native (counted in status), a rename over a file frees its
 * inode and (its last name) its bytes exactly as the daemon does (usage
 * exact, a rescan finds no drift), a rename of an open file or onto an open
 * file still works (the daemon's) and the open file stays readable, git's
 * lock-file renames work, and a rename between homes is EXDEV.
 *
 * NATIVE_RENAME_OFF=1 runs the file with the switch off: its "native"
 * counts then fail, which shows this file tests the binding's renames.
 */

const OWNERS = ownerRange(import.meta.filename);
const U = ownersFrom(OWNERS.from + 1, ['plain', 'over', 'open', 'git', 'a', 'b', 'deep']);
const T = 'nr';
const FORCE_OFF = process.env.NATIVE_RENAME_OFF === '1';

if (!canMount) console.warn(`native-rename integration suite skipped: ${skipReason}`);

const capped = { ...BUILTIN_PROFILES.home, maxHomeBytes: 4 * 1024 * 1024, maxInodes: 1000 };
const shallow = { ...BUILTIN_PROFILES.home, maxDepth: 2 };
const PROFILES = { capped, shallow };

type Native = { renameAnswered: number; renameFallbacks: number };

async function shAs(who: Owner, script: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return runAsync('setpriv', [`--reuid=${who.uid}`, `--regid=${who.gid}`, '--clear-groups', 'sh', '-c', script], { env: { PATH: SYSTEM_PATH }, timeoutMs: 60_000 });
}

describe.skipIf(!canMount)('native rename (fuse.nativeRename): regular files renamed in the binding', () => {
  const HOMES = {
    [`${T}/plain`]: { owner: U.plain, profile: 'home' },
    [`${T}/over`]: { owner: U.over, profile: 'capped' },
    [`${T}/open`]: { owner: U.open, profile: 'capped' },
    [`${T}/git`]: { owner: U.git, profile: 'home' },
    [`${T}/a`]: { owner: U.a, profile: 'home' },
    [`${T}/b`]: { owner: U.b, profile: 'home' },
    [`${T}/deep`]: { owner: U.deep, profile: 'shallow' },
  };
  const s = ownerSuite({ homes: HOMES, config: { owners: OWNERS, profiles: PROFILES, fuse: { nativeRename: !FORCE_OFF } } });
  const native = async (): Promise<Native> => ((await s.d.status()) as { native: { fastPath: Native } }).native.fastPath;
  const drift = async (home: string) => (JSON.parse(await s.ctl('--json', 'rescan', home)) as { drift: { bytes: number; inodes: number } }).drift;

  it('mv of files to new names and into a subdirectory: counted native, the names moved, usage unchanged', async () => {
    const home = s.d.home(T, 'plain');
    const r0 = await shAs(U.plain, `cd ${home} && mkdir sub && for i in 0 1 2 3 4 5 6 7 8 9; do printf "file $i" > f$i; done && sleep 0.5`);
    expect(r0.code).toBe(0);
    const before = await s.usage(`${T}/plain`);
    const n0 = await native();
    const r = await shAs(U.plain, `cd ${home} && for i in 0 1 2 3 4; do mv f$i g$i; done && for i in 5 6 7 8 9; do mv f$i sub/h$i; done && ls . sub | tr '\\n' ' '`);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const n1 = await native();
    expect(n1.renameAnswered - n0.renameAnswered).toBe(10);
    expect(readFileSync(join(s.d.backingOf(T, 'plain'), 'g3'), 'utf8')).toBe('file 3');
    expect(readFileSync(join(s.d.backingOf(T, 'plain'), 'sub/h7'), 'utf8')).toBe('file 7');
    expect(existsSync(join(s.d.backingOf(T, 'plain'), 'f0'))).toBe(false);
    // The kernel sees the names where they went (the session's table followed).
    expect((await shAs(U.plain, `cat ${home}/g0 ${home}/sub/h9; test -e ${home}/f0 || echo gone`)).stdout).toBe('file 0file 9gone\n');
    expect(await s.usage(`${T}/plain`)).toMatchObject({ bytes: before.bytes, inodes: before.inodes });
    expect(await drift(`${T}/plain`)).toMatchObject({ bytes: 0, inodes: 0 });
  });

  it('a rename over an existing file frees its inode and its bytes exactly (a hard-linked one only its name)', async () => {
    const home = s.d.home(T, 'over');
    const r0 = await shAs(
      U.over,
      `cd ${home} && head -c 1000 /dev/zero > a && head -c 50000 /dev/zero > b && head -c 7000 /dev/zero > c && head -c 30000 /dev/zero > d && ln d d2 && sleep 0.5`,
    );
    expect(r0.code).toBe(0);
    expect(await s.usage(`${T}/over`)).toMatchObject({ bytes: 88000, inodes: 5 });
    const n0 = await native();
    // a over b: b's 50000 bytes and its inode go.
    expect((await shAs(U.over, `mv ${home}/a ${home}/b`)).code).toBe(0);
    expect(await s.usage(`${T}/over`)).toMatchObject({ bytes: 38000, inodes: 4 });
    // c over d: d2 keeps the bytes, only the name goes.
    expect((await shAs(U.over, `mv ${home}/c ${home}/d`)).code).toBe(0);
    expect(await s.usage(`${T}/over`)).toMatchObject({ bytes: 38000, inodes: 3 });
    const n1 = await native();
    expect(n1.renameAnswered - n0.renameAnswered).toBe(2);
    expect(statSync(join(s.d.backingOf(T, 'over'), 'b')).size).toBe(1000);
    expect(statSync(join(s.d.backingOf(T, 'over'), 'd')).size).toBe(7000);
    expect(statSync(join(s.d.backingOf(T, 'over'), 'd2')).size).toBe(30000);
    expect(await drift(`${T}/over`)).toMatchObject({ bytes: 0, inodes: 0 });
  });

  it('a rename of an open file (the binding\'s), and onto an open file (the daemon\'s, which hides it): the open files stay readable', async () => {
    const home = s.d.home(T, 'open');
    const n0 = await native();
    const out = await s.py(
      `import os,sys,time
h=sys.argv[1]
p=lambda n: os.path.join(h, n)
for n, data in [('src', b'S'*4000), ('dst', b'D'*9000), ('moved', b'M'*3000)]:
  with open(p(n), 'wb') as f: f.write(data)
time.sleep(0.5)
res=[]
fd=os.open(p('src'), os.O_RDONLY)
os.rename(p('src'), p('src2'))
res.append(os.pread(fd, 10, 0).decode())
os.close(fd)
fd=os.open(p('dst'), os.O_RDONLY)
os.rename(p('moved'), p('dst'))
res.append(os.pread(fd, 10, 8990).decode())
with open(p('dst'), 'rb') as f: res.append(f.read(5).decode())
os.close(fd)
print(' '.join(res))`,
      home,
    );
    expect(out).toBe('SSSSSSSSSS DDDDDDDDDD MMMMM');
    // An open source is renamed in the binding (a rename moves a name); an open target is the daemon's to hide.
    expect((await native()).renameAnswered - n0.renameAnswered).toBe(1);
    // The hidden name of the open target went at its close: its bytes with it.
    await new Promise((r) => setTimeout(r, 300));
    expect(await s.usage(`${T}/open`)).toMatchObject({ bytes: 7000, inodes: 2 });
    expect(await drift(`${T}/open`)).toMatchObject({ bytes: 0, inodes: 0 });
  });

  it('git init, add and commit in a home: works, with native renames (lock files renamed into place)', async () => {
    const home = s.d.home(T, 'git');
    const n0 = await native();
    const g = 'git -c user.name=t -c user.email=t@example.invalid -c init.defaultBranch=main';
    const r = await shAs(
      U.git,
      `export HOME=${home} && cd ${home} && ${g} init -q repo && cd repo && printf 'one\\n' > a && mkdir d && printf 'two\\n' > d/b && ${g} add -A && ${g} commit -qm first && printf 'three\\n' >> a && ${g} commit -qam second && ${g} log --format=%s | tr '\\n' ' ' && ${g} fsck --no-progress && echo fsck-ok`,
    );
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('second first fsck-ok\n');
    const n1 = await native();
    // index.lock -> index, the ref locks, renamed right after their close (whose RELEASE the daemon
    // may not have carried out yet) in the binding; onto a target still open to the daemon (its
    // RELEASE not carried out yet either), the daemon's, which may have to hide it (7 of 10 measured).
    expect(n1.renameAnswered - n0.renameAnswered).toBeGreaterThanOrEqual(4);
    expect(await drift(`${T}/git`)).toMatchObject({ bytes: 0, inodes: 0 });
  });

  it('between two homes: EXDEV (the daemon\'s), nothing moved; past maxDepth refused as the daemon refuses it', async () => {
    const a = s.d.home(T, 'a');
    const b = s.d.home(T, 'b');
    expect((await shAs(U.a, `printf x > ${a}/f && sleep 0.3`)).code).toBe(0);
    // No owner reaches two homes: root moves between them, as in policy.test.ts.
    const r = await runAsync('python3', ['-c', 'import errno, os, sys\ntry:\n  os.rename(*sys.argv[1:]); print("ok")\nexcept OSError as e:\n  print(errno.errorcode[e.errno])', `${a}/f`, `${b}/f`], {
      env: { PATH: SYSTEM_PATH },
    });
    expect(r.stdout).toBe('EXDEV\n');
    expect(existsSync(join(s.d.backingOf(T, 'a'), 'f'))).toBe(true);
    expect(existsSync(join(s.d.backingOf(T, 'b'), 'f'))).toBe(false);

    const deep = s.d.home(T, 'deep');
    expect((await shAs(U.deep, `mkdir -p ${deep}/x/y && printf x > ${deep}/f && sleep 0.3`)).code).toBe(0);
    const n0 = await native();
    const mv = await shAs(U.deep, `mv ${deep}/f ${deep}/x/y/f`);
    expect(mv.code).not.toBe(0);
    expect(mv.stderr).toMatch(/Operation not permitted/);
    expect((await shAs(U.deep, `mv ${deep}/f ${deep}/x/f`)).code).toBe(0);
    const n1 = await native();
    expect(n1.renameAnswered - n0.renameAnswered).toBe(1);
    expect(existsSync(join(s.d.backingOf(T, 'deep'), 'x/f'))).toBe(true);
  });
});
