// The binding's native getattr fast path (native/src/fastpath_*.c) through a
// fixture whose JS getattr marks its answers (uid 55555): what C answers, what
// it hands to JS, and that it never follows a symlink or leaves the home.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const here = path.dirname(fileURLToPath(import.meta.url));
const repoRoot = path.resolve(here, '../..');
const execFileP = promisify(execFile);
const skip = typeof process.getuid !== 'function' || process.getuid() !== 0 || !existsSync('/dev/fuse');

describe.skipIf(skip)('native getattr fast path', () => {
  let work = '';
  let backing = '';
  let mnt = '';
  let child: ChildProcess;
  const lines: Array<Record<string, unknown>> = [];
  const mounts: string[] = [];

  const next = async (pred: (l: Record<string, unknown>) => boolean, from: number) => {
    const end = Date.now() + 10_000;
    for (;;) {
      const hit = lines.slice(from).find(pred);
      if (hit) return hit;
      if (Date.now() > end) throw new Error('fixture did not answer');
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  const cmd = async (m: Record<string, unknown>) => {
    const from = lines.length;
    child.stdin!.write(JSON.stringify(m) + '\n');
    return next((l) => l.done === m.cmd, from);
  };
  /** `uid gid mode type` as the mount answers, and whether the getattr of that path reached JS. */
  const look = async (rel: string) => {
    const from = lines.length;
    const r = await execFileP('stat', ['-c', '%u %g %a %F', path.join(mnt, rel)]).then(
      (o) => o.stdout.trim(),
      (e: { stderr: string }) => (/No such file/.test(e.stderr) ? 'ENOENT' : e.stderr.trim()),
    );
    // the JS getattr logs before it answers: the line is there once stat returned
    const js = lines.slice(from).some((l) => l.getattr === `/${rel}`);
    return { r, js };
  };

  /**
   * A process sitting in `cwd` inside the mount: ask(name) answers what python prints for
   * `name` (relative to its cwd), one line per question; a directory swapped behind it keeps
   * its kernel inode, so later lookups come from below the old path.
   */
  const inside = (cwd: string, perLine: string) => {
    const code = `import os,sys,errno\nfor l in sys.stdin:\n  n=l.rstrip('\\n')\n  try: ${perLine}\n  except OSError as e: print(errno.errorcode[e.errno], flush=True)`;
    const py = spawn('python3', ['-c', code], { cwd, stdio: ['pipe', 'pipe', 'inherit'] });
    const answers = createInterface({ input: py.stdout! });
    return {
      ask: (n = '') =>
        new Promise<string>((resolve) => {
          answers.once('line', (l) => resolve(l.trim()));
          py.stdin!.write(n + '\n');
        }),
      stop: () => py.kill('SIGKILL'),
    };
  };

  beforeAll(async () => {
    work = mkdtempSync(path.join(tmpdir(), 'homesfs-fastpath-'));
    chmodSync(work, 0o755);
    backing = path.join(work, 'b');
    mnt = path.join(work, 'm');
    mkdirSync(path.join(backing, 't', 'k', 'sub', 'deep'), { recursive: true });
    mkdirSync(mnt);
    const k = (p: string) => path.join(backing, 't', 'k', p);
    writeFileSync(k('f'), 'hello');
    chmodSync(k('f'), 0o4755);
    writeFileSync(k('sub/deep/g'), 'x');
    chmodSync(k('sub/deep/g'), 0o640);
    symlinkSync('sub', k('link'));
    mkdirSync(k('.homesfs'));
    writeFileSync(k('.fuse_hidden0000000100000002'), '');
    writeFileSync(k('longname12'), '');
    mkdirSync(k('sub2'));
    writeFileSync(k('sub2/passwd'), 'inside');
    mkdirSync(k('mnt'));
    execFile('mkfifo', [k('fifo')]);
    child = spawn(process.execPath, [path.join(here, 'fixtures', 'fastpath.cjs'), backing, mnt], {
      stdio: ['pipe', 'pipe', 'inherit'],
      env: process.env,
    });
    createInterface({ input: child.stdout! }).on('line', (l) => lines.push(JSON.parse(l) as Record<string, unknown>));
    const ready = await next((l) => 'ready' in l, 0);
    expect(ready.ready, String(ready.err)).toBe(true);
  }, 30_000);

  afterAll(async () => {
    for (const m of mounts.reverse()) await execFileP('umount', ['-l', m]).catch(() => undefined);
    if (child && child.exitCode === null) {
      const exited = new Promise<void>((r) => child.once('exit', () => r()));
      child.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
      if (child.exitCode === null) child.kill('SIGKILL');
    }
    if (mnt && readFileSync('/proc/mounts', 'utf8').includes(` ${mnt} `)) await execFileP('umount', ['-l', mnt]).catch(() => undefined);
    if (work && !readFileSync('/proc/mounts', 'utf8').includes(work)) rmSync(work, { recursive: true, force: true });
  }, 30_000);

  it('answers nodes below a published home in C: published owner, mode through the keep/or masks', async () => {
    expect(await look('t/k/f')).toEqual({ r: '1111 2222 700 regular file', js: false });
    expect(await look('t/k/sub/deep/g')).toEqual({ r: '1111 2222 600 regular file', js: false });
    expect(await look('t/k/sub')).toEqual({ r: '1111 2222 755 directory', js: false });
    expect(await look('t/k/link')).toEqual({ r: '1111 2222 777 symbolic link', js: false });
    const { stats } = (await cmd({ cmd: 'stats' })) as { stats: { enabled: boolean; answered: number; homes: number } };
    expect(stats).toMatchObject({ enabled: true, homes: 1 });
    expect(stats.answered).toBeGreaterThan(4);
  });

  it('hands to JS: the root, a tenant, the home itself, reserved names, types without masks', async () => {
    for (const rel of ['t', 't/k', 't/k/.homesfs', 't/k/.fuse_hidden0000000100000002', 't/k/fifo', 'u']) {
      const { r, js } = await look(rel);
      expect(js, rel).toBe(true);
      expect(r.startsWith('ENOENT') || r.startsWith('55555'), `${rel}: ${r}`).toBe(true);
    }
  });

  it('answers ENOENT and ENOTDIR of ordinary names in C; missing reserved names, tenants and homes go to JS', async () => {
    const negative = async () => ((await cmd({ cmd: 'stats' })) as { stats: { negative: number } }).stats.negative;
    const before = await negative();
    expect(await look('t/k/nope')).toEqual({ r: 'ENOENT', js: false });
    // the kernel stops at the missing directory: one request
    expect(await look('t/k/nodir/nope')).toEqual({ r: 'ENOENT', js: false });
    expect(await look('t/k/sub/deep/nope')).toEqual({ r: 'ENOENT', js: false });
    expect((await negative()) - before).toBe(3);
    // ENOTDIR reaches the daemon only from a directory replaced by a file under a process that sits in it.
    const k = (p: string) => path.join(backing, 't', 'k', p);
    mkdirSync(k('swap'));
    const { ask, stop } = inside(path.join(mnt, 't', 'k', 'swap'), 'os.lstat(n); print("ok", flush=True)');
    try {
      expect(await ask('x')).toBe('ENOENT');
      renameSync(k('swap'), k('swap-old'));
      writeFileSync(k('swap'), 'now a file');
      const from = lines.length;
      const mid = await negative();
      expect(await ask('x')).toBe('ENOTDIR');
      expect(lines.slice(from).some((l) => l.getattr === '/t/k/swap/x')).toBe(false);
      expect((await negative()) - mid).toBe(1);
    } finally {
      stop();
    }
    // Names only JS presents (or whose absence only JS may state): never answered by C, present or not.
    // (t/other exists but is not published: nothing below it is C's to answer)
    mkdirSync(path.join(backing, 't', 'other'), { recursive: true });
    for (const rel of ['t/k/.homesfs/status', 't/k/.homesfs/nope', 't/k/.fuse_hidden00000009ffffffff', 't/k/sub/.fuse_hiddenx', 't/nohome', 't/other/nope']) {
      expect((await look(rel)).js, rel).toBe(true);
    }
  });

  /** [name, d_ino, d_type letter] of every entry as the mount lists it, and whether the readdir reached JS. */
  const list = async (rel: string) => {
    const from = lines.length;
    const code = `import os,json,sys\nout=[]\nfor e in os.scandir(sys.argv[1]):\n  t='d' if e.is_dir(follow_symlinks=False) else 'l' if e.is_symlink() else 'f' if e.is_file(follow_symlinks=False) else 'o'\n  out.append([e.name, e.inode(), t])\nprint(json.dumps(out))`;
    const r = await execFileP('python3', ['-c', code, path.join(mnt, rel)]);
    const entries = JSON.parse(r.stdout) as Array<[string, number, string]>;
    // A listing JS gave carries the fixture's marker; C's never can (the backing has no such name).
    const js = entries.some((e) => e[0] === 'from-js');
    if (js) await next((l) => l.readdir === `/${rel}`, from);
    return { entries: entries.filter((e) => e[0] !== 'from-js'), js };
  };

  it('answers readdir of a published home and below it in C: backing inode numbers and types, UTF-8 names only, no mount points, in the directory\'s order', async () => {
    const k = (p: string) => path.join(backing, 't', 'k', p);
    mkdirSync(k('lst/b'), { recursive: true });
    writeFileSync(k('lst/z'), 'z');
    writeFileSync(k('lst/a'), 'a');
    symlinkSync('/etc', k('lst/c'));
    await execFileP('mkfifo', [k('lst/fifo')]);
    // a name that is not UTF-8: JS leaves it out (it could never be looked up again), so does C
    writeFileSync(Buffer.concat([Buffer.from(k('lst/')), Buffer.from([0x62, 0xff, 0x78])]), '');
    mkdirSync(k('lst/m'));
    await execFileP('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'homesfs-fastpath-list', k('lst/m')]);
    mounts.push(k('lst/m'));
    const ino = (p: string) => Number(statSync(k(p), { bigint: true }).ino);
    const before = ((await cmd({ cmd: 'stats' })) as { stats: { readdirAnswered: number } }).stats.readdirAnswered;
    const { entries, js } = await list('t/k/lst');
    expect(js).toBe(false);
    // streamed from the directory at the kernel's offsets: in its order, not sorted
    entries.sort((x, y) => (x[0] < y[0] ? -1 : 1));
    expect(entries).toEqual([
      ['a', ino('lst/a'), 'f'],
      ['b', ino('lst/b'), 'd'],
      ['c', Number(lstatSync(k('lst/c'), { bigint: true }).ino), 'l'],
      ['fifo', ino('lst/fifo'), 'o'],
      ['z', ino('lst/z'), 'f'],
    ]);
    // "." and ".." carry the directory's and its parent's inode numbers (ls -ai shows them)
    const dots = (await execFileP('ls', ['-ai', path.join(mnt, 't/k/lst/b')])).stdout.trim().split('\n').map((l) => l.trim().split(/\s+/));
    expect(dots).toEqual([
      [String(ino('lst/b')), '.'],
      [String(ino('lst')), '..'],
    ]);
    expect((await list('t/k/sub')).entries.map((e) => e[0])).toEqual(['deep']);
    // the home itself too
    const home = await list('t/k');
    expect(home.js).toBe(false);
    expect(home.entries.map((e) => e[0]).sort()).toEqual(readdirSync(path.join(backing, 't', 'k')).sort());
    // every READDIR request is one answer (a listing takes at least one, and one more at its end)
    const { stats } = (await cmd({ cmd: 'stats' })) as { stats: { readdirAnswered: number } };
    expect(stats.readdirAnswered - before).toBeGreaterThanOrEqual(4);
  });

  it('hands readdir to JS: tenants, reserved directories, a directory swapped for a symlink, unpublished homes', async () => {
    for (const rel of ['t', 't/k/.homesfs', 't/other']) {
      mkdirSync(path.join(backing, rel), { recursive: true });
      expect((await list(rel)).js, rel).toBe(true);
    }
    const k = (p: string) => path.join(backing, 't', 'k', p);
    // The process sits in swapd/in; swapd (the parent: its own revalidation would see a
    // symlink and the kernel answer EIO) becomes a symlink to a tree that also has "in".
    mkdirSync(k('swapd/in/q'), { recursive: true });
    const { ask, stop } = inside(path.join(mnt, 't', 'k', 'swapd', 'in'), 'print(sorted(os.listdir(".")), flush=True)');
    try {
      expect(await ask()).toBe("['q']");
      renameSync(k('swapd'), k('swapd-old'));
      mkdirSync(k('elsewhere/in/x'), { recursive: true });
      symlinkSync('elsewhere', k('swapd'));
      const from = lines.length;
      // C refuses the walk (a symlink in the path); the careless fixture JS follows it
      expect(await ask()).toBe("['from-js', 'x']");
      await next((l) => l.readdir === '/t/k/swapd/in', from);
    } finally {
      stop();
    }
  });

  it('answers an inode JS holds open once JS published its charged size: the larger of that and the disk', async () => {
    const k = (p: string) => path.join(backing, 't', 'k', p);
    writeFileSync(k('sized'), 'x'.repeat(100));
    const size = async () => {
      const from = lines.length;
      const r = await execFileP('stat', ['-c', '%s', path.join(mnt, 't/k/sized')]);
      return { size: Number(r.stdout.trim()), js: lines.slice(from).some((l) => l.getattr === '/t/k/sized') };
    };
    await cmd({ cmd: 'inode', path: 't/k/sized', delta: 1 });
    // tracked, no size yet: only JS knows
    expect((await size()).js).toBe(true);
    await cmd({ cmd: 'inodeSize', path: 't/k/sized', size: 5000 });
    expect(await size()).toEqual({ size: 5000, js: false });
    // the disk holds more than is charged (a write landing): the disk's
    writeFileSync(k('sized'), 'y'.repeat(7000));
    expect(await size()).toEqual({ size: 7000, js: false });
    await cmd({ cmd: 'inodeSize', path: 't/k/sized', size: 9000 });
    expect(await size()).toEqual({ size: 9000, js: false });
    await cmd({ cmd: 'inode', path: 't/k/sized', delta: -1 });
    // no longer tracked: the disk's size, natively
    expect(await size()).toEqual({ size: 7000, js: false });
    // a new record starts without a size again
    await cmd({ cmd: 'inode', path: 't/k/sized', delta: 1 });
    expect((await size()).js).toBe(true);
    await cmd({ cmd: 'inode', path: 't/k/sized', delta: -1 });
  });

  it('hands to JS: an inode JS holds open, until JS lets it go', async () => {
    await cmd({ cmd: 'inode', path: 't/k/f', delta: 1 });
    await cmd({ cmd: 'inode', path: 't/k/f', delta: 1 });
    expect((await look('t/k/f')).js).toBe(true);
    await cmd({ cmd: 'inode', path: 't/k/f', delta: -1 });
    expect((await look('t/k/f')).js).toBe(true);
    await cmd({ cmd: 'inode', path: 't/k/f', delta: -1 });
    expect(await look('t/k/f')).toEqual({ r: '1111 2222 700 regular file', js: false });
  });

  it('never follows a symlink swapped in below the home, and never crosses a mount', async () => {
    const k = (p: string) => path.join(backing, 't', 'k', p);
    // A process sits in sub2; sub2 then becomes a symlink to /etc behind everyone's back.
    const { ask, stop } = inside(path.join(mnt, 't', 'k', 'sub2'), 'st=os.lstat(n); print(st.st_uid, st.st_size, flush=True)');
    try {
      expect(await ask('passwd')).toBe(`1111 ${'inside'.length}`);
      renameSync(k('sub2'), k('sub2-old'));
      symlinkSync('/etc', k('sub2'));
      // C refuses the walk (RESOLVE_NO_SYMLINKS) and JS answers: the careless fixture follows it (uid 55555).
      expect(await ask('passwd')).toBe(`55555 ${readFileSync('/etc/passwd').length}`);
      // A missing name behind the symlink is not C's to deny either (ELOOP there): JS answers it.
      const from = lines.length;
      expect(await ask('homesfs-no-such-name')).toBe('ENOENT');
      // the fixture's line comes down another pipe than the answer: wait for it
      await next((l) => l.getattr === '/t/k/sub2/homesfs-no-such-name', from);
    } finally {
      stop();
    }
    // another filesystem mounted inside the home
    await execFileP('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'homesfs-fastpath-test', k('mnt')]);
    mounts.push(k('mnt'));
    writeFileSync(k('mnt/x'), 'y');
    expect((await look('t/k/mnt')).js).toBe(true);
    expect((await look('t/k/mnt/x')).js).toBe(true);
  });

  it('answers fgetattr of a published handle in C (fstat of its descriptor, masked), and leaves the rest to JS', async () => {
    const k = (p: string) => path.join(backing, 't', 'k', p);
    writeFileSync(k('h1'), 'abc');
    chmodSync(k('h1'), 0o644);
    writeFileSync(k('js-h2'), 'abcd');
    // lseek(SEEK_END) refreshes the size with a GETATTR that carries the handle (libfuse's
    // fgetattr; fstat never does); statx AT_STATX_DONT_SYNC then reads what it answered.
    const tree = path.join(repoRoot, 'test/integration/fixtures/fastpath_tree.py');
    const fstat = async (name: string) => {
      const from = lines.length;
      const code = `import importlib.util,os\ns=importlib.util.spec_from_file_location('t', ${JSON.stringify(tree)}); t=importlib.util.module_from_spec(s); s.loader.exec_module(t)\nfd=os.open(${JSON.stringify(path.join(mnt, 't', 'k', name))}, os.O_RDONLY)\nf=t.by_handle(fd)\nprint(f[1], f[2], oct(f[0] & 0o7777), f[3])\nos.close(fd)`;
      const r = await execFileP('python3', ['-c', code]);
      return { r: r.stdout.trim(), js: lines.slice(from).some((l) => l.fgetattr === `/t/k/${name}`) };
    };
    expect(await fstat('h1')).toEqual({ r: '3333 4444 0o600 3', js: false });
    expect(await fstat('js-h2')).toEqual({ r: '55555 55555 0o644 4', js: true });
    await cmd({ cmd: 'handleTypes', types: 1 << 0o04 });
    expect(await fstat('h1')).toEqual({ r: '55555 55555 0o644 3', js: true });
    await cmd({ cmd: 'handleTypes', types: 1 << 0o10 });
    const { stats } = (await cmd({ cmd: 'stats' })) as { stats: { fgetattrAnswered: number; handles: number } };
    expect(stats.fgetattrAnswered).toBeGreaterThan(0);
    expect(stats.handles).toBe(0);
  });

  it('follows what JS publishes: a longer-name limit, owner from the stat, fewer types, removal', async () => {
    await cmd({ cmd: 'publish', maxName: 8 });
    expect((await look('t/k/longname12')).js).toBe(true);
    // past the home's name limit JS answers (ENAMETOOLONG there), not C's ENOENT
    expect((await look('t/k/missing-long')).js).toBe(true);
    expect((await look('t/k/f')).js).toBe(false);
    await cmd({ cmd: 'publish', ownerFromStat: true, types: 1 << 0o10 });
    expect(await look('t/k/f')).toEqual({ r: '0 0 700 regular file', js: false });
    expect((await look('t/k/sub')).js).toBe(true);
    expect(await cmd({ cmd: 'remove', token: 1 })).toMatchObject({ removed: false });
    expect((await look('t/k/f')).js).toBe(false);
    expect(await cmd({ cmd: 'remove', token: 2 })).toMatchObject({ removed: true });
    expect((await look('t/k/f')).js).toBe(true);
    expect((await cmd({ cmd: 'bad' })).err).toMatch(/bad arguments/);
    const { stats } = (await cmd({ cmd: 'stats' })) as { stats: { homes: number; fallbacks: number } };
    expect(stats.homes).toBe(0);
    expect(stats.fallbacks).toBeGreaterThan(5);
  });
});
