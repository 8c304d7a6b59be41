import { existsSync, lstatSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { canMount, runAsync, skipReason, SYSTEM_PATH } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { ownersFrom, ownerSuite } from '../helpers/owner-suite.js';

/**
 * renameat2(2) through the mount: the kernel sends FUSE_RENAME2 (protocol
 * 7.38), the session carries the flags to JavaScript (src/fs/dir.ts), the
 * backing rename is one renameat2, and the node table follows (an exchange
 * swaps the two names' nodes). Called from real python3 processes through
 * ctypes, as the home's owner (root where only root reaches: two homes, and
 * RENAME_WHITEOUT, which needs CAP_MKNOD before the kernel passes it on).
 */

/** this file's own owner ids (helpers/owner-ids.ts) */
const OWNERS = ownerRange(import.meta.filename);
const U = ownersFrom(OWNERS.from + 1, ['main', 'other', 'shallow', 'race']);
const T = 'rf';
/** a depth cap that a small tree reaches */
const shallow = { ...BUILTIN_PROFILES.home, maxDepth: 3 };

const NOREPLACE = 1;
const EXCHANGE = 2;
const WHITEOUT = 4;

/** python3: renameat2 of argv[1] to argv[2] with flags argv[3]; prints "ok" or the errno's name. */
const R2 = `import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
if libc.renameat2(AT_FDCWD, os.fsencode(sys.argv[1]), AT_FDCWD, os.fsencode(sys.argv[2]), int(sys.argv[3])) == 0:
    print('ok')
else:
    print(errno.errorcode[ctypes.get_errno()])`;

if (!canMount) console.warn(`rename-flags integration suite skipped: ${skipReason}`);

describe.skipIf(!canMount)('renameat2 flags: RENAME_NOREPLACE and RENAME_EXCHANGE through the mount', () => {
  const s = ownerSuite({
    homes: {
      [`${T}/main`]: { owner: U.main },
      [`${T}/other`]: { owner: U.other },
      [`${T}/shallow`]: { owner: U.shallow, profile: 'shallow' },
    },
    config: { owners: OWNERS, profiles: { shallow } },
  });
  const home = (k: string): string => s.d.home(T, k);
  const backing = (k: string): string => s.d.backingOf(T, k);
  /** renameat2 as the owner of from's home */
  const r2 = (from: string, to: string, flags: number): Promise<string> => s.py(R2, from, to, String(flags));
  /** renameat2 as root (reaches every home; has CAP_MKNOD) */
  const r2root = async (from: string, to: string, flags: number): Promise<string> => {
    const r = await runAsync('python3', ['-c', R2, from, to, String(flags)], { env: { PATH: SYSTEM_PATH } });
    if (r.code !== 0) throw new Error(`python failed (${r.code}): ${r.stderr}`);
    return r.stdout.trim();
  };
  /** files made as the owner (charged to the home as any write) */
  const make = (at: string, script: string): Promise<string> => s.py(`import os, sys\nos.chdir(sys.argv[1])\n${script}`, at);

  it('NOREPLACE onto an existing file: EEXIST, both unchanged; onto a free name: renamed', async () => {
    const h = home('main');
    await make(h, `open('nr-a', 'w').write('aaa')\nopen('nr-b', 'w').write('bbbbb')`);
    const before = await s.usage(`${T}/main`);
    expect(await r2(join(h, 'nr-a'), join(h, 'nr-b'), NOREPLACE)).toBe('EEXIST');
    expect(readFileSync(join(h, 'nr-a'), 'utf8')).toBe('aaa');
    expect(readFileSync(join(h, 'nr-b'), 'utf8')).toBe('bbbbb');
    expect(readFileSync(join(backing('main'), 'nr-b'), 'utf8')).toBe('bbbbb');
    expect(await s.usage(`${T}/main`)).toEqual(before);
    expect(await r2(join(h, 'nr-a'), join(h, 'nr-c'), NOREPLACE)).toBe('ok');
    expect(existsSync(join(h, 'nr-a'))).toBe(false);
    expect(readFileSync(join(h, 'nr-c'), 'utf8')).toBe('aaa');
    expect(await s.usage(`${T}/main`)).toEqual(before);
  });

  it('EXCHANGE file<->file: contents swap, the ledger stays; a hard-linked file keeps its other name', async () => {
    const h = home('main');
    await make(h, `open('x1', 'w').write('one')\nopen('x2', 'w').write('second file')\nos.link('x1', 'x1-link')`);
    const ino1 = lstatSync(join(h, 'x1')).ino;
    const ino2 = lstatSync(join(h, 'x2')).ino;
    const before = await s.usage(`${T}/main`);
    expect(await r2(join(h, 'x1'), join(h, 'x2'), EXCHANGE)).toBe('ok');
    expect(readFileSync(join(h, 'x1'), 'utf8')).toBe('second file');
    expect(readFileSync(join(h, 'x2'), 'utf8')).toBe('one');
    expect(lstatSync(join(h, 'x1')).ino).toBe(ino2);
    expect(lstatSync(join(h, 'x2')).ino).toBe(ino1);
    // The hard link still names the first file, now also named x2.
    expect(readFileSync(join(h, 'x1-link'), 'utf8')).toBe('one');
    expect(await s.usage(`${T}/main`)).toEqual(before);
    // Read through the owner's own process too (the kernel's view, not root's cache).
    expect(await make(h, `print(open('x1').read(), open('x2').read(), open('x1-link').read(), sep='|')`)).toBe('second file|one|one');
  });

  it('EXCHANGE dir<->file across two directories: types, inode numbers and the moved tree follow', async () => {
    const h = home('main');
    await make(
      h,
      `os.makedirs('p/d/inner')\nopen('p/d/inner/deep', 'w').write('deep')\nopen('p/d/top', 'w').write('top')\nos.mkdir('q')\nopen('q/f', 'w').write('file')`,
    );
    // Looked up by the kernel first: the node table knows both names before the exchange.
    const dIno = lstatSync(join(h, 'p/d')).ino;
    const fIno = lstatSync(join(h, 'q/f')).ino;
    expect(readFileSync(join(h, 'p/d/top'), 'utf8')).toBe('top');
    const before = await s.usage(`${T}/main`);
    expect(await r2(join(h, 'p/d'), join(h, 'q/f'), EXCHANGE)).toBe('ok');
    const out = await make(
      h,
      `import stat
a, b = os.lstat('p/d'), os.lstat('q/f')
print(stat.S_ISREG(a.st_mode), a.st_ino, stat.S_ISDIR(b.st_mode), b.st_ino)
print({e.name: (e.is_dir(follow_symlinks=False), e.inode()) for e in os.scandir('p')}['d'])
print({e.name: (e.is_dir(follow_symlinks=False), e.inode()) for e in os.scandir('q')}['f'])
print(open('p/d').read(), open('q/f/top').read(), open('q/f/inner/deep').read(), sorted(os.listdir('q/f')))`,
    );
    expect(out.split('\n')).toEqual([
      `True ${fIno} True ${dIno}`,
      `(False, ${fIno})`,
      `(True, ${dIno})`,
      `file top deep ['inner', 'top']`,
    ]);
    // The old paths below the directory are gone.
    expect(existsSync(join(h, 'p/d/top'))).toBe(false);
    expect(lstatSync(join(backing('main'), 'q/f/inner/deep')).isFile()).toBe(true);
    expect(await s.usage(`${T}/main`)).toEqual(before);
    // And back: each name names its first node again.
    expect(await r2(join(h, 'q/f'), join(h, 'p/d'), EXCHANGE)).toBe('ok');
    expect(await make(h, `print(open('p/d/inner/deep').read(), open('q/f').read(), os.lstat('p/d').st_ino, os.lstat('q/f').st_ino)`)).toBe(
      `deep file ${dIno} ${fIno}`,
    );
  });

  it('EXCHANGE with a missing side: ENOENT, nothing moved', async () => {
    const h = home('main');
    await make(h, `open('lonely', 'w').write('x')`);
    const before = await s.usage(`${T}/main`);
    expect(await r2(join(h, 'lonely'), join(h, 'nobody'), EXCHANGE)).toBe('ENOENT');
    expect(await r2(join(h, 'nobody'), join(h, 'lonely'), EXCHANGE)).toBe('ENOENT');
    expect(readFileSync(join(h, 'lonely'), 'utf8')).toBe('x');
    expect(existsSync(join(backing('main'), 'nobody'))).toBe(false);
    expect(await s.usage(`${T}/main`)).toEqual(before);
  });

  it('between two homes: EXDEV for EXCHANGE and NOREPLACE, nothing moved, the refusal logged', async () => {
    const a = home('main');
    const b = home('other');
    await make(a, `open('mine', 'w').write('main')`);
    await make(b, `open('theirs', 'w').write('other')`);
    const ua = await s.usage(`${T}/main`);
    const ub = await s.usage(`${T}/other`);
    expect(await r2root(join(a, 'mine'), join(b, 'theirs'), EXCHANGE)).toBe('EXDEV');
    expect(await r2root(join(a, 'mine'), join(b, 'free'), NOREPLACE)).toBe('EXDEV');
    expect(readFileSync(join(backing('main'), 'mine'), 'utf8')).toBe('main');
    expect(readFileSync(join(backing('other'), 'theirs'), 'utf8')).toBe('other');
    expect(existsSync(join(backing('other'), 'free'))).toBe(false);
    expect(await s.usage(`${T}/main`)).toEqual(ua);
    expect(await s.usage(`${T}/other`)).toEqual(ub);
    const line = await s.d.waitForLog((l) => l.level === 'warn' && l.code === 'CROSS_HOME' && l.op === 'rename exchange', 10_000);
    expect(line.home).toBe(`${T}/main`);
  });

  it('EXCHANGE that would take a subtree past maxDepth: refused (EPERM), nothing moved', async () => {
    const h = home('shallow');
    // a/s: levels 1 and 2; x/y/f: a file at level 3, the cap.
    await make(h, `os.makedirs('a/s')\nos.makedirs('x/y')\nopen('x/y/f', 'w').write('f')`);
    const before = await s.usage(`${T}/shallow`);
    // a at level 3 would put a/s at level 4.
    expect(await r2(join(h, 'a'), join(h, 'x/y/f'), EXCHANGE)).toBe('EPERM');
    // The other direction is checked too: the file's place is deep, the directory's shallow.
    expect(await r2(join(h, 'x/y/f'), join(h, 'a'), EXCHANGE)).toBe('EPERM');
    expect(lstatSync(join(backing('shallow'), 'a/s')).isDirectory()).toBe(true);
    expect(readFileSync(join(backing('shallow'), 'x/y/f'), 'utf8')).toBe('f');
    expect(await s.usage(`${T}/shallow`)).toEqual(before);
    await s.d.waitForLog((l) => l.level === 'warn' && l.code === 'OP_REFUSED' && l.op === 'rename exchange' && l.home === `${T}/shallow`, 10_000);
    // Within the cap it goes: a directory without subdirectories may go to level 3.
    await make(h, `os.mkdir('flat')\nopen('flat/in', 'w').write('in')`);
    expect(await r2(join(h, 'flat'), join(h, 'x/y/f'), EXCHANGE)).toBe('ok');
    expect(readdirSync(join(backing('shallow'), 'x/y/f'))).toEqual(['in']);
  });

  it('an unknown flag (RENAME_WHITEOUT): EINVAL, nothing moved, the refusal logged', async () => {
    const h = home('main');
    await make(h, `open('w-a', 'w').write('a')\nopen('w-b', 'w').write('b')`);
    const before = await s.usage(`${T}/main`);
    // root: the kernel asks for CAP_MKNOD before it passes RENAME_WHITEOUT to the filesystem.
    expect(await r2root(join(h, 'w-a'), join(h, 'w-b'), WHITEOUT)).toBe('EINVAL');
    expect(await r2root(join(h, 'w-a'), join(h, 'w-c'), WHITEOUT | NOREPLACE)).toBe('EINVAL');
    expect(readFileSync(join(backing('main'), 'w-a'), 'utf8')).toBe('a');
    expect(readFileSync(join(backing('main'), 'w-b'), 'utf8')).toBe('b');
    expect(existsSync(join(backing('main'), 'w-c'))).toBe(false);
    expect(await s.usage(`${T}/main`)).toEqual(before);
    await s.d.waitForLog((l) => l.level === 'warn' && l.code === 'INVALID_ARGUMENT' && l.home === `${T}/main`, 10_000);
  });
});

/**
 * The kernel checks NOREPLACE itself against the target it has just looked up
 * again (fuse revalidates every rename target), so the daemon's part is the
 * window after that lookup: a name that appears in the backing meanwhile
 * (here: root making and removing one in a loop behind the daemon's back)
 * must never be replaced. Only an atomic renameat2 in the backing keeps that;
 * a check-then-rename, or a plain rename, loses the race now and then.
 */
describe.skipIf(!canMount)('renameat2 NOREPLACE racing a name that appears in the backing', () => {
  const s = ownerSuite({ homes: { [`${T}/race`]: { owner: U.race } }, config: { owners: OWNERS } });

  it('never replaces the name that appeared: every renameat2 is EEXIST or found the name free', async () => {
    const h = s.d.home(T, 'race');
    const b = s.d.backingOf(T, 'race');
    await s.py(`import os, sys\nos.chdir(sys.argv[1])\nopen('src', 'w').write('mine')`, h);
    // Root, in the backing: makes "late" (O_EXCL), and when no rename took its place, removes it again.
    // A file of its own whose last link went while it held it was replaced by a rename: counted.
    const writer = runAsync(
      'python3',
      [
        '-c',
        `import os, sys, time
d = sys.argv[1]
end = time.time() + 4
made = replaced = 0
while time.time() < end:
    try:
        fd = os.open(os.path.join(d, 'late'), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        continue
    made += 1
    ino = os.fstat(fd).st_ino
    for _ in range(20):
        pass
    if os.fstat(fd).st_nlink == 0:
        replaced += 1
    else:
        try:
            if os.lstat(os.path.join(d, 'late')).st_ino == ino:
                os.unlink(os.path.join(d, 'late'))
        except FileNotFoundError:
            pass
    os.close(fd)
print(made, replaced)`,
        b,
      ],
      { env: { PATH: SYSTEM_PATH }, timeoutMs: 30_000 },
    );
    // The owner, through the mount: src -> late without replacing, and back when it went.
    const renamer = await s.py(
      `${R2.split('\nif ')[0]}
import time
src, late = os.path.join(sys.argv[1], 'src'), os.path.join(sys.argv[1], 'late')
end = time.time() + 3
counts = {}
while time.time() < end:
    if libc.renameat2(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(late), 1) == 0:
        r = 'ok'
        for _ in range(1000):
            if libc.renameat2(AT_FDCWD, os.fsencode(late), AT_FDCWD, os.fsencode(src), 1) == 0:
                break
            time.sleep(0.001)
    else:
        r = errno.errorcode[ctypes.get_errno()]
    counts[r] = counts.get(r, 0) + 1
print(' '.join('%s=%d' % kv for kv in sorted(counts.items())))`,
      h,
    );
    const w = await writer;
    expect(w.stderr).toBe('');
    const [made, replaced] = w.stdout.trim().split(' ').map(Number);
    // Both sides ran: the name came and went, renames found it there and found it free.
    expect(made).toBeGreaterThan(10);
    expect(renamer).toMatch(/EEXIST=\d+/);
    expect(renamer).toMatch(/ok=\d+/);
    expect(replaced, renamer).toBe(0);
    expect(readFileSync(join(b, 'src'), 'utf8')).toBe('mine');
  }, 30_000);
});
