import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, runAs, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';

/**
 * POSIX conformance in the style of go-fuse's posixtest: one table of small
 * named cases, each a syscall sequence run by a real python3 process as the
 * home's owner, and its expected result. Every case runs twice, in a `posix`
 * home and in a plain directory on the backing filesystem, so any difference
 * between homesfs and a local filesystem shows up by name.
 */

if (!canMount) console.warn(`posix conformance suite skipped: ${skipReason}`);

/** this file's own owner ids (helpers/owner-ids.ts) */
const BASE = ownerRange(import.meta.filename).from;
const U = { uid: BASE, gid: BASE };
const OTHER = BASE + 1;
const T = 't';
const RUNNER = resolve(import.meta.dirname, 'fixtures/syscalls.py');

interface Case {
  name: string;
  /** Python source that assigns its result to `r` (helpers: test/integration/fixtures/syscalls.py) */
  code: string;
  expect: unknown;
}

/** Cases that must behave exactly as on a local filesystem in a `posix` home. */
const CASES: Case[] = [
  // --- inode identity -------------------------------------------------------
  {
    name: 'hard links are one file: samefile, sameopenfile, st_ino, st_nlink',
    code: `
touch('a', b'x')
os.link('a', 'b')
fa, fb = os.open('a', os.O_RDONLY), os.open('b', os.O_RDONLY)
r = [os.path.samefile('a', 'b'), os.path.sameopenfile(fa, fb), os.stat('a').st_ino == os.stat('b').st_ino,
     os.stat('a').st_nlink, os.fstat(fb).st_nlink]`,
    expect: [true, true, true, 2, 2],
  },
  {
    name: "readdir's d_ino is stat's st_ino for every kind of entry",
    code: `
touch('f'); os.mkdir('d'); os.symlink('f', 'l'); os.link('f', 'h')
r = sorted((e.name, e.inode() == os.lstat(e.name).st_ino) for e in os.scandir('.'))`,
    expect: [
      ['d', true],
      ['f', true],
      ['h', true],
      ['l', true],
    ],
  },
  {
    name: 'fstat and stat give the same st_ino',
    code: `
touch('f'); fd = os.open('f', os.O_RDONLY)
r = os.fstat(fd).st_ino == os.stat('f').st_ino`,
    expect: true,
  },
  {
    name: 'rename keeps the inode number',
    code: `
touch('f'); before = os.stat('f').st_ino; os.rename('f', 'g')
r = os.stat('g').st_ino == before`,
    expect: true,
  },
  {
    name: 'st_nlink follows link and unlink',
    code: `
touch('a'); os.link('a', 'b'); os.link('a', 'c'); n3 = os.stat('c').st_nlink
os.unlink('b'); n2 = os.stat('c').st_nlink
r = [n3, n2]`,
    expect: [3, 2],
  },
  {
    name: 'a directory has 2 + subdirectories links',
    code: `
os.mkdir('d'); os.mkdir('d/e'); os.mkdir('d/f')
r = os.stat('d').st_nlink`,
    expect: 4,
  },
  {
    name: 'a hard link to a directory is EPERM',
    code: `
os.mkdir('d')
r = E(os.link, 'd', 'e')`,
    expect: 'EPERM',
  },
  {
    name: 'a hard link to a symlink links the symlink itself',
    code: `
os.symlink('nowhere', 's'); os.link('s', 't', follow_symlinks=False)
r = [os.readlink('t'), os.lstat('s').st_ino == os.lstat('t').st_ino, os.lstat('s').st_nlink]`,
    expect: ['nowhere', true, 2],
  },
  // --- special files ----------------------------------------------------------
  {
    name: 'a FIFO carries bytes between two processes',
    code: `
os.mkfifo('f', 0o600)
p = spawn("fd = os.open('f', os.O_WRONLY); os.write(fd, b'ping'); os.close(fd); r = 'sent'")
fd = os.open('f', os.O_RDONLY); data = os.read(fd, 16); os.close(fd)
r = [data.decode(), result_of(p), stat.S_ISFIFO(os.stat('f').st_mode), stat.S_IMODE(os.stat('f').st_mode)]`,
    expect: ['ping', 'sent', true, 0o600],
  },
  {
    name: 'a Unix socket server and client talk through the bound name',
    code: `
srv = socket.socket(socket.AF_UNIX); srv.bind('s'); srv.listen(1)
p = spawn("c = socket.socket(socket.AF_UNIX); c.connect('s'); c.sendall(b'hello'); r = c.recv(16).decode()")
conn, _ = srv.accept(); m = conn.recv(16); conn.sendall(m.upper()); conn.close()
r = [m.decode(), result_of(p), stat.S_ISSOCK(os.stat('s').st_mode)]`,
    expect: ['hello', 'HELLO', true],
  },
  {
    name: 'mknod of FIFO and socket nodes; unlink removes them',
    code: `
os.mknod('p', stat.S_IFIFO | 0o640); os.mknod('s', stat.S_IFSOCK | 0o600)
kinds = [stat.S_ISFIFO(os.lstat('p').st_mode), stat.S_ISSOCK(os.lstat('s').st_mode), stat.S_IMODE(os.lstat('p').st_mode)]
os.unlink('p'); os.unlink('s')
r = kinds + [sorted(os.listdir('.'))]`,
    expect: [true, true, 0o640, []],
  },
  {
    name: 'a device node needs CAP_MKNOD: EPERM for the owner',
    code: `r = [E(os.mknod, 'c', stat.S_IFCHR | 0o600, os.makedev(1, 3)), E(os.mknod, 'b', stat.S_IFBLK | 0o600, os.makedev(7, 0))]`,
    expect: ['EPERM', 'EPERM'],
  },
  {
    name: 'a hard link to a FIFO is the same FIFO',
    code: `
os.mkfifo('f'); os.link('f', 'g')
r = [os.stat('f').st_ino == os.stat('g').st_ino, os.stat('g').st_nlink, stat.S_ISFIFO(os.stat('g').st_mode)]`,
    expect: [true, 2, true],
  },
  // --- mode bits ----------------------------------------------------------------
  {
    name: 'chmod keeps setuid, setgid and sticky bits',
    code: `
touch('f'); os.chmod('f', 0o6755); os.mkdir('d'); os.chmod('d', 0o1777); os.mkdir('g'); os.chmod('g', 0o2750)
r = [oct(stat.S_IMODE(os.stat(n).st_mode)) for n in ('f', 'd', 'g')]`,
    expect: ['0o6755', '0o1777', '0o2750'],
  },
  {
    name: 'create and mkdir keep the special bits they ask for',
    code: `
os.umask(0o022)
os.close(os.open('f', os.O_CREAT | os.O_WRONLY, 0o4755)); os.mkdir('d', 0o1777)
r = [oct(stat.S_IMODE(os.stat('f').st_mode)), oct(stat.S_IMODE(os.stat('d').st_mode))]`,
    expect: ['0o4755', '0o1755'],
  },
  {
    name: 'a write by the owner clears setuid and setgid (kernel rule)',
    code: `
touch('f'); os.chmod('f', 0o6755)
fd = os.open('f', os.O_WRONLY); os.write(fd, b'x'); os.close(fd)
r = oct(stat.S_IMODE(os.stat('f').st_mode))`,
    expect: '0o755',
  },
  {
    name: 'a setgid directory passes on its setgid bit to new subdirectories',
    code: `
os.mkdir('g'); os.chmod('g', 0o2775); os.mkdir('g/sub'); touch('g/f')
r = [bool(os.stat('g/sub').st_mode & stat.S_ISGID), bool(os.stat('g/f').st_mode & stat.S_ISGID)]`,
    expect: [true, false],
  },
  // --- errnos -----------------------------------------------------------------
  {
    name: 'ENAMETOOLONG for a 256-byte component in every lookup',
    code: `
n = 'a' * 256; touch('x'); os.mkdir('dd')
r = [E(os.stat, n), E(os.lstat, 'dd/' + n), E(os.chmod, n, 0o600), E(os.chown, n, -1, -1), E(os.truncate, n, 0),
     E(os.utime, n), E(os.open, n, os.O_CREAT | os.O_WRONLY), E(os.mkdir, n), E(os.unlink, n), E(os.rmdir, n),
     E(os.rename, 'x', n), E(os.link, 'x', n), E(os.symlink, 'x', n), E(os.mkfifo, n), E(os.readlink, n)]`,
    expect: Array(15).fill('ENAMETOOLONG'),
  },
  {
    name: 'a 255-byte component works; a path over PATH_MAX is ENAMETOOLONG',
    code: `
n = 'b' * 255; touch(n); os.chmod(n, 0o600)
r = [os.stat(n).st_size, E(os.stat, 'x/' * 2100)]`,
    expect: [0, 'ENAMETOOLONG'],
  },
  {
    name: 'truncate(2) by path shrinks and extends',
    code: `
touch('f', b'hello world'); os.truncate('f', 5); a = open('f', 'rb').read(); os.truncate('f', 7)
r = [a.decode(), open('f', 'rb').read().decode(), os.stat('f').st_size]`,
    expect: ['hello', 'hello\u0000\u0000', 7],
  },
  {
    name: 'fstat, fchmod and ftruncate of a file unlinked while open answer from the handle',
    code: `
fd = os.open('f', os.O_CREAT | os.O_RDWR, 0o640); os.write(fd, b'abc'); os.unlink('f')
st = os.fstat(fd); os.fchmod(fd, 0o600); st2 = os.fstat(fd); os.ftruncate(fd, 10)
r = [st.st_size, st.st_nlink, oct(stat.S_IMODE(st2.st_mode)), os.fstat(fd).st_size, os.pread(fd, 3, 0).decode(), os.listdir('.')]
os.close(fd)`,
    expect: [3, 0, '0o600', 10, 'abc', []],
  },
  {
    name: 'a directory whose open file was unlinked can be removed; rename over an open file',
    code: `
os.mkdir('d'); fd = os.open('d/f', os.O_CREAT | os.O_RDWR); os.unlink('d/f'); a = E(os.rmdir, 'd'); os.close(fd)
touch('old', b'old'); touch('new', b'new'); fo = os.open('old', os.O_RDONLY); os.rename('new', 'old')
r = [a, os.fstat(fo).st_nlink, os.pread(fo, 3, 0).decode(), open('old').read(), sorted(os.listdir('.'))]
os.close(fo)`,
    expect: ['OK', 0, 'old', 'new', ['old']],
  },
];

/** Cases run as root (uid 0 may create device nodes). `expect` per side where they differ on purpose. */
const ROOT_CASES: Array<Omit<Case, 'expect'> & { expect: { posix: unknown; plain: unknown } }> = [
  {
    name: 'root creates a character device; the mount is nodev, so it opens nothing',
    code: `
os.mknod('null', stat.S_IFCHR | 0o666, os.makedev(1, 3))
st = os.stat('null')
r = [stat.S_ISCHR(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev), E(os.open, 'null', os.O_WRONLY)]`,
    // The plain side sits on the test machine's /tmp, which is not nodev.
    // The plain side opens it unless the test machine's own filesystem is nodev.
    expect: { posix: [true, 1, 3, 'EACCES'], plain: [true, 1, 3, 'PLAIN_DEV_OPEN'] },
  },
  {
    name: 'new nodes in a setgid directory take its group; the creator owns them',
    code: `
os.mkdir('g'); os.chown('g', 0, 4242); os.chmod('g', 0o2777)
r = other("touch('g/f'); os.mkdir('g/d'); r = [os.stat('g/f').st_gid, os.stat('g/d').st_gid, bool(os.stat('g/d').st_mode & stat.S_ISGID), os.stat('g/f').st_uid == int(OTHER)]")`,
    expect: { posix: [4242, 4242, true, true], plain: [4242, 4242, true, true] },
  },
  {
    name: 'sticky directory: a second uid (not root, not the owner) may not unlink, rmdir or rename what it does not own',
    code: `
owner("os.mkdir('t'); os.chmod('t', 0o1777); touch('t/mine'); os.chmod('t/mine', 0o666); os.mkdir('t/dmine', 0o777)")
r = other("touch('t/theirs'); r = [E(os.unlink, 't/mine'), E(os.rmdir, 't/dmine'), E(os.rename, 't/mine', 't/x'), E(os.rename, 't/theirs', 't/mine'), E(os.unlink, 't/theirs')]")
r.append(sorted(os.listdir('t')))`,
    expect: { posix: ['EPERM', 'EPERM', 'EPERM', 'EPERM', 'OK', ['dmine', 'mine']], plain: ['EPERM', 'EPERM', 'EPERM', 'EPERM', 'OK', ['dmine', 'mine']] },
  },
  {
    name: 'without the sticky bit the second uid may unlink in a world-writable directory',
    code: `
owner("os.mkdir('n'); os.chmod('n', 0o777); touch('n/mine')")
r = other("r = [E(os.unlink, 'n/mine'), E(os.chmod, '.', 0o777)]")`,
    expect: { posix: ['OK', 'EPERM'], plain: ['OK', 'EPERM'] },
  },
  {
    name: 'root creates a block device node',
    code: `
os.mknod('loop', stat.S_IFBLK | 0o600, os.makedev(7, 200))
st = os.stat('loop')
r = [stat.S_ISBLK(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev)]`,
    expect: { posix: [true, 7, 200], plain: [true, 7, 200] },
  },
];

interface Side {
  root: string;
  results: Record<string, unknown>;
}

/** `cases` run in `root` as `as`, by default the home's `owner` (whom root's cases take for the owner) */
async function runTable(root: string, cases: Array<{ name: string; code: string }>, scripts: string, tag: string, as = U, owner = as): Promise<Record<string, unknown>> {
  const file = join(scripts, `${tag}.json`);
  writeFileSync(file, JSON.stringify(cases.map((c) => ({ name: c.name, code: c.code }))), { mode: 0o644 });
  const env: Record<string, string> = { OTHER_UID: String(OTHER) };
  if (as.uid === 0) env.OWNER_UID = String(owner.uid);
  const r = await runAs(as.uid, as.gid, `exec python3 ${RUNNER} ${root} ${file}`, { env, timeoutMs: 120_000 });
  if (r.code !== 0) throw new Error(`case runner failed (${r.code}): ${r.stderr}`);
  return JSON.parse(r.stdout) as Record<string, unknown>;
}

describe.skipIf(!canMount)('posix conformance: a posix home side by side with a plain directory', () => {
  let d: RunningDaemon;
  let scripts: string;
  const sides: Record<'posix' | 'plain', Side> = { posix: { root: '', results: {} }, plain: { root: '', results: {} } };

  beforeAll(async () => {
    d = await startDaemon({
      homes: { [`${T}/p`]: { owner: U, profile: 'posix' } },
      create: [`${T}/p`],
      // libfuse 2.9 gives every name of a hard-linked file its own kernel inode:
      // st_nlink seen through another name is exact only without attribute caching.
      config: { fuse: { attrTimeout: 0 } },
    });
    scripts = join(d.dir, 'scripts');
    mkdirSync(scripts, { mode: 0o755 });
    // The plain side: a directory on the backing filesystem, owned and moded like the home.
    const plain = join(d.dir, 'plain');
    mkdirSync(plain, { mode: 0o700 });
    chownSync(plain, U.uid, U.gid);
    chmodSync(d.dir, 0o755);
    sides.plain.root = plain;
    sides.posix.root = d.home(T, 'p');
    chownSync(d.backingOf(T, 'p'), U.uid, U.gid);
    sides.posix.results = await runTable(sides.posix.root, CASES, scripts, 'posix');
    sides.plain.results = await runTable(sides.plain.root, CASES, scripts, 'plain');
    for (const side of ['posix', 'plain'] as const) {
      const root = join(sides[side].root, 'as-root');
      mkdirSync(root);
      Object.assign(sides[side].results, await runTable(root, ROOT_CASES, scripts, `${side}-root`, { uid: 0, gid: 0 }));
    }
  });

  afterAll(async () => {
    await d?.stop();
  });

  for (const c of CASES) {
    it(c.name, () => {
      expect({ plain: sides.plain.results[c.name], posix: sides.posix.results[c.name] }).toEqual({ plain: c.expect, posix: c.expect });
    });
  }
  for (const c of ROOT_CASES) {
    it(`as root: ${c.name}`, () => {
      const plainNodev = spawnSync('findmnt', ['-n', '-o', 'OPTIONS', '-T', sides.plain.root], { encoding: 'utf8' }).stdout.split(',').includes('nodev');
      const want = JSON.parse(JSON.stringify(c.expect).replace('"PLAIN_DEV_OPEN"', plainNodev ? '"EACCES"' : '"OK"')) as unknown;
      expect({ plain: sides.plain.results[c.name], posix: sides.posix.results[c.name] }).toEqual(want);
    });
  }

  it("a size past the backing filesystem's largest file: its own errno (EFBIG on ext4) by path and by descriptor, as in the plain directory", async () => {
    const big = [
      {
        name: 'truncate past the largest file',
        code: `
touch('big', b'abc'); fd = os.open('big', os.O_RDWR)
r = [E(os.truncate, 'big', 2 ** 50), E(os.ftruncate, fd, 2 ** 50), os.stat('big').st_size]
os.close(fd)`,
      },
    ];
    const roots = { posix: join(sides.posix.root, 'big'), plain: join(sides.plain.root, 'big') };
    expect((await runAs(U.uid, U.gid, `mkdir ${roots.posix} ${roots.plain}`)).code).toBe(0);
    const posix = (await runTable(roots.posix, big, scripts, 'posix-big'))[big[0]!.name];
    const plain = (await runTable(roots.plain, big, scripts, 'plain-big'))[big[0]!.name];
    expect(posix).toEqual(plain);
  });

  it("no failure the table's callers got is logged as the daemon's error: each is the caller's (a refusal is a warning, anything else debug)", () => {
    const errors = d.logs.filter((l) => l.level === 'error' || l.level === 'fatal' || (l.level as unknown) === 50 || (l.level as unknown) === 60);
    expect(errors).toEqual([]);
  });

  it('the mount is nodev and nosuid (/proc/mounts)', () => {
    const line = readFileSync('/proc/mounts', 'utf8')
      .split('\n')
      .find((l) => l.split(' ')[1] === d.mount);
    expect(line?.split(' ')[3]?.split(',')).toEqual(expect.arrayContaining(['nodev', 'nosuid']));
  });
});

type Profile3 = { posix: unknown; home: unknown; scratch: unknown };

/** What the three built-in profiles do with the same syscalls (run as the owner, and as root where `root`). */
const PROFILE_CASES: Array<{ name: string; code: string; expect: Profile3; root?: boolean }> = [
  {
    name: 'mkfifo',
    code: `r = E(os.mkfifo, 'f')`,
    expect: { posix: 'OK', home: 'OK', scratch: 'EPERM' },
  },
  {
    name: 'bind(2) of a Unix socket',
    code: `r = E(socket.socket(socket.AF_UNIX).bind, 's')`,
    expect: { posix: 'OK', home: 'OK', scratch: 'EPERM' },
  },
  {
    // home keeps the owner's bits as asked (issue 9), never group/other or special bits.
    name: 'chmod 01777 of a directory and 06755 of a file: kept in posix, dropped elsewhere',
    code: `
os.mkdir('d'); a = E(os.chmod, 'd', 0o1777); touch('f'); b = E(os.chmod, 'f', 0o6755)
r = [a, b, oct(stat.S_IMODE(os.stat('d').st_mode)), oct(stat.S_IMODE(os.stat('f').st_mode))]`,
    expect: { posix: ['OK', 'OK', '0o1777', '0o6755'], home: ['OK', 'OK', '0o700', '0o700'], scratch: ['EPERM', 'EPERM', '0o700', '0o600'] },
  },
  {
    name: 'ENAMETOOLONG at 256 bytes (and at the profile cap, from stat to create)',
    code: `
r = [E(os.stat, 'a' * 256), E(os.chmod, 'a' * 256, 0o600), E(os.truncate, 'a' * 256, 0), E(touch, 'c' * 129), E(os.stat, 'c' * 129)]`,
    expect: {
      posix: ['ENAMETOOLONG', 'ENAMETOOLONG', 'ENAMETOOLONG', 'OK', 'OK'],
      home: ['ENAMETOOLONG', 'ENAMETOOLONG', 'ENAMETOOLONG', 'OK', 'OK'],
      scratch: ['ENAMETOOLONG', 'ENAMETOOLONG', 'ENAMETOOLONG', 'ENAMETOOLONG', 'ENAMETOOLONG'],
    },
  },
  {
    name: 'truncate(2) by path',
    code: `
touch('f', b'hello world'); os.truncate('f', 5)
r = [os.stat('f').st_size, open('f', 'rb').read().decode()]`,
    expect: { posix: [5, 'hello'], home: [5, 'hello'], scratch: [5, 'hello'] },
  },
  {
    name: 'mknod of a character device by root',
    code: `r = E(os.mknod, 'c', stat.S_IFCHR | 0o600, os.makedev(1, 3))`,
    expect: { posix: 'OK', home: 'EPERM', scratch: 'EPERM' },
    root: true,
  },
];

describe.skipIf(!canMount)('posix, home and scratch side by side: what each profile keeps and refuses', () => {
  let d: RunningDaemon;
  const results: Record<string, Record<string, unknown>> = {};
  const profiles = ['posix', 'home', 'scratch'] as const;
  /** each home's owner (an owner belongs to one home) */
  const PO = { posix: U, home: { uid: U.uid + 11, gid: U.gid + 11 }, scratch: { uid: U.uid + 12, gid: U.gid + 12 } };

  beforeAll(async () => {
    d = await startDaemon({
      homes: Object.fromEntries(profiles.map((p) => [`${T}/${p}`, { owner: PO[p], profile: p }])),
      create: profiles.map((p) => `${T}/${p}`),
    });
    const scripts = join(d.dir, 'scripts');
    mkdirSync(scripts, { mode: 0o755 });
    for (const p of profiles) {
      chownSync(d.backingOf(T, p), PO[p].uid, PO[p].gid);
      const owner = PROFILE_CASES.filter((c) => !c.root);
      const root = PROFILE_CASES.filter((c) => c.root);
      results[p] = await runTable(d.home(T, p), owner, scripts, p, PO[p]);
      const rootDir = join(d.home(T, p), 'as-root');
      mkdirSync(rootDir);
      Object.assign(results[p], await runTable(rootDir, root, scripts, `${p}-root`, { uid: 0, gid: 0 }, PO[p]));
    }
  });

  afterAll(async () => {
    await d?.stop();
  });

  for (const c of PROFILE_CASES) {
    it(c.name, () => {
      expect({ posix: results.posix?.[c.name], home: results.home?.[c.name], scratch: results.scratch?.[c.name] }).toEqual(c.expect);
    });
  }
});

describe.skipIf(!canMount)('posix: inode numbers survive a daemon restart', () => {
  let d: RunningDaemon;

  beforeAll(async () => {
    d = await startDaemon({ homes: { [`${T}/p`]: { owner: U, profile: 'posix' } }, create: [`${T}/p`] });
    chownSync(d.backingOf(T, 'p'), U.uid, U.gid);
  });

  afterAll(async () => {
    await d?.stop();
  });

  const FIND = `find . -printf '%i %n %p\\n' | sort -k3`;
  const inodes = async (): Promise<{ find: string; ls: string }> => {
    const r = await runAs(U.uid, U.gid, `cd ${d.home(T, 'p')} && ${FIND} && echo -- && ls -ai sub`);
    expect(r.stderr).toBe('');
    const [find = '', ls = ''] = r.stdout.split('--\n');
    return { find, ls };
  };

  it('stat, readdir and hard links show the same numbers before and after a restart', async () => {
    const setup = await runAs(U.uid, U.gid, `cd ${d.home(T, 'p')} && mkdir sub && echo a > sub/a && ln sub/a sub/b && ln -s a sub/l`);
    expect(setup.code).toBe(0);
    const before = await inodes();
    d = await d.restart();
    expect(await inodes()).toEqual(before);
    // and they are the backing filesystem's own numbers
    expect(spawnSync('sh', ['-c', FIND], { cwd: d.backingOf(T, 'p'), encoding: 'utf8' }).stdout).toBe(before.find);
    expect(before.ls).toMatch(/^(\d+) a\n\1 b\n/m);
  });

  it("the daemon's own levels (mount root, tenant) list the same numbers stat gives", async () => {
    const r = spawnSync('python3', ['-c', `
import os, sys
bad = [(d, e.name) for d in sys.argv[1:] for e in os.scandir(d) if e.inode() != os.lstat(e.path).st_ino]
print(bad)`, d.mount, join(d.mount, T)], { encoding: 'utf8' });
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toBe('[]');
    expect(statSync(d.home(T, 'p')).ino).toBe(statSync(d.backingOf(T, 'p')).ino);
  });

  it('git status after a restart re-reads no file contents', async () => {
    const repo = join(d.home(T, 'p'), 'repo');
    const git = (args: string, extra = ''): Promise<{ code: number | null; stdout: string; stderr: string }> =>
      runAs(U.uid, U.gid, `cd ${repo} && ${extra} git -c user.name=t -c user.email=t@t ${args}`, { env: { HOME: d.home(T, 'p') } });
    const mk = await runAs(U.uid, U.gid, `mkdir ${repo} && cd ${repo} && for i in 1 2 3 4 5; do echo "content $i" > f$i; done && touch -d '2020-01-01' f1 f2 f3 f4 f5`);
    expect(mk.code).toBe(0);
    expect((await git('init -q')).code).toBe(0);
    expect((await git('add -A')).code).toBe(0);
    expect((await git('commit -qm init')).code).toBe(0);
    expect((await git('status --porcelain')).stdout).toBe('');
    d = await d.restart();
    // strace shows every open: git re-hashes a file whose stat data changed by opening it.
    const trace = join(d.dir, 'git.strace');
    writeFileSync(trace, '', { mode: 0o666 });
    chmodSync(trace, 0o666);
    const traced = await git('status --porcelain', `strace -f -qq -e trace=openat -o ${trace}`);
    expect(traced.stdout).toBe('');
    const all = readFileSync(trace, 'utf8');
    expect(all).toContain('.git/index'); // the trace did record git's opens
    const opens = all
      .split('\n')
      .filter((l) => /"f[1-5]"/.test(l));
    expect(opens).toEqual([]);
  });
});
