// Integration tests of homesfs' FUSE session and native layer (native/src)
// through a tiny passthrough filesystem that runs in a CHILD process
// (fixtures/passthrough.cjs): the session hands ops to its JS thread, so this
// process must never mount.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, chmodSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { readdirTypesScript } from '../helpers/dirent.js';
import { ABI, abiMismatches } from '../../src/abi.js';
import { loadFuse } from '../../src/fuse/binding.js';
import { sessionOptions } from '../../src/fuse/session.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const fixture = path.join(here, 'fixtures', 'passthrough.cjs');
const execFileP = promisify(execFile);

const PY = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
const O_APPEND = 0o2000;
const O_ACCMODE = 3;
const O_WRONLY = 1;
const O_RDWR = 2;

const skipReason =
  typeof process.getuid !== 'function' || process.getuid() !== 0
    ? 'not running as root'
    : !existsSync('/dev/fuse')
      ? '/dev/fuse is absent'
      : null;
if (skipReason) console.warn(`[test/addon] skipping the native binding suite: ${skipReason}`);

interface OpEvent {
  op?: string;
  path?: string | null;
  caller?: { uid: number; gid: number; pid: number };
  [k: string]: unknown;
}

const ENV = { ...process.env, TZ: 'UTC', LC_ALL: 'C' };

async function run(cmd: string, args: string[], opts: { timeout?: number } = {}) {
  // Always asynchronous: a synchronous child would stop us from draining the
  // fixture's stdout, which could block the fixture and deadlock the mount.
  const { stdout, stderr } = await execFileP(cmd, args, { timeout: opts.timeout ?? 20_000, env: ENV, encoding: 'utf8' });
  return { stdout, stderr };
}

async function py(code: string, opts: { timeout?: number } = {}) {
  return run(PY, ['-c', code], opts);
}

describe.skipIf(!!skipReason)("homesfs' FUSE session and native layer, through a passthrough fixture", () => {
  let work = '';
  let backing = '';
  let mnt = '';
  let child: ChildProcess | null = null;
  const events: OpEvent[] = [];
  let stderrBuf = '';

  const since = (mark: number) => events.slice(mark);
  async function waitFor(pred: (e: OpEvent) => boolean, from = 0, timeout = 5_000): Promise<OpEvent> {
    const end = Date.now() + timeout;
    for (;;) {
      const hit = events.slice(from).find(pred);
      if (hit) return hit;
      if (Date.now() > end) throw new Error(`timed out waiting for fixture event; stderr: ${stderrBuf}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  // Events are written before an op completes; give the pipe a moment to drain.
  const settle = () => new Promise((r) => setTimeout(r, 150));
  const M = (p: string) => path.join(mnt, p);
  const B = (p: string) => path.join(backing, p);

  beforeAll(async () => {
    work = mkdtempSync(path.join(tmpdir(), 'homesfs-native-'));
    chmodSync(work, 0o755);
    backing = path.join(work, 'backing');
    mnt = path.join(work, 'mnt');
    mkdirSync(backing, { mode: 0o755 });
    mkdirSync(mnt, { mode: 0o755 });
    chmodSync(backing, 0o755);

    child = spawn(process.execPath, [fixture, backing, mnt], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: process.env,
    });
    child.stderr!.on('data', (d: Buffer) => {
      stderrBuf += d.toString();
    });
    const rl = createInterface({ input: child.stdout! });
    rl.on('line', (line) => {
      try {
        events.push(JSON.parse(line) as OpEvent);
      } catch {
        events.push({ op: 'unparsable', line });
      }
    });
    const ready = await waitFor((e) => 'ready' in e, 0, 15_000);
    expect(ready.ready, `fixture failed to mount: ${JSON.stringify(ready)} ${stderrBuf}`).toBe(true);
    expect(readFileSync('/proc/mounts', 'utf8')).toContain(` ${mnt} fuse`);
  }, 30_000);

  afterAll(async () => {
    if (child && child.exitCode === null) {
      const exited = new Promise<void>((r) => child!.once('exit', () => r()));
      child.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
      if (child.exitCode === null) child.kill('SIGKILL');
    }
    if (mnt && readFileSync('/proc/mounts', 'utf8').includes(` ${mnt} `)) {
      await execFileP('umount', ['-l', mnt]).catch(() => undefined);
    }
    if (work && !readFileSync('/proc/mounts', 'utf8').includes(work)) rmSync(work, { recursive: true, force: true });
  }, 30_000);

  it('Fuse.mknod creates FIFOs, sockets and devices on the threadpool and answers -errno', async () => {
    const Fuse = loadFuse() as any;
    const dir = mkdtempSync(path.join(tmpdir(), 'homesfs-mknod-'));
    const mknod = (p: string, mode: number, dev: number) => new Promise<number>((r) => Fuse.mknod(p, mode, dev, r));
    try {
      expect(await mknod(path.join(dir, 'fifo'), 0o010640, 0)).toBe(0);
      expect(await mknod(path.join(dir, 'sock'), 0o140600, 0)).toBe(0);
      expect(await mknod(path.join(dir, 'null'), 0o020600, (1 << 8) | 3)).toBe(0);
      const { stdout } = await run('stat', ['-c', '%n %F %a %t:%T', ...['fifo', 'sock', 'null'].map((n) => path.join(dir, n))]);
      expect(stdout.replaceAll(dir + '/', '')).toBe('fifo fifo 640 0:0\nsock socket 600 0:0\nnull character special file 600 1:3\n');
      expect(await mknod(path.join(dir, 'fifo'), 0o010600, 0)).toBe(-17); // EEXIST, never replaced
      expect(await mknod(path.join(dir, 'no/such'), 0o010600, 0)).toBe(-2); // ENOENT
      expect(await mknod(path.join(dir, 'a\0b'), 0o010600, 0)).toBe(-22); // EINVAL before reaching C
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('passes nodev and nosuid to the kernel mount, big_writes and max_write to the session', () => {
    const o = sessionOptions({ nodev: true, nosuid: true, allowOther: true, bigWrites: true, maxWrite: 65536, fsname: 'homesfs' });
    expect(o.mount.split(',')).toEqual(expect.arrayContaining(['nodev', 'nosuid', 'allow_other', 'fsname=homesfs']));
    expect(o.lowlevel.split(',')).toEqual(['big_writes', 'max_write=65536']);
  });

  it('loads our build of the binding (its ABI is ours) in this process without mounting', () => {
    const Fuse = loadFuse() as any;
    expect(abiMismatches(Fuse.native.ABI)).toEqual([]);
    expect(existsSync(Fuse.BINDING_PATH)).toBe(true);
    expect(events[0]).toMatchObject({ ready: true, abi: ABI.VERSION, loopState: 1 });
    // The C UTF-8 validator agrees with a fatal TextDecoder on edge cases.
    const cases = [
      [0x61], [0xc3, 0xa9], [0xc0, 0x80], [0xc1, 0xbf], [0xe0, 0x80, 0x80], [0xe0, 0xa0, 0x80],
      [0xed, 0x9f, 0xbf], [0xed, 0xa0, 0x80], [0xed, 0xbf, 0xbf], [0xee, 0x80, 0x80],
      [0xf0, 0x8f, 0xbf, 0xbf], [0xf0, 0x90, 0x80, 0x80], [0xf4, 0x8f, 0xbf, 0xbf], [0xf4, 0x90, 0x80, 0x80],
      [0xf5, 0x80, 0x80, 0x80], [0xff], [0x80], [0xe2, 0x82], [0x61, 0xe2, 0x82, 0xac],
    ];
    for (const c of cases) {
      const buf = Buffer.from(c);
      let ref = true;
      try {
        new TextDecoder('utf-8', { fatal: true }).decode(buf);
      } catch {
        ref = false;
      }
      expect(Fuse._isValidUtf8(buf), buf.toString('hex')).toBe(ref);
    }
  });

  it('touch -d @1000000000.123456789 round-trips to the nanosecond', async () => {
    await run('touch', ['-d', '@1000000000.123456789', M('t-ns')]);
    const { stdout } = await run('stat', ['-c', '%y|%x', M('t-ns')]);
    expect(stdout.trim()).toBe('2001-09-09 01:46:40.123456789 +0000|2001-09-09 01:46:40.123456789 +0000');
    const { stdout: ns } = await py(`import os; s=os.stat(${JSON.stringify(M('t-ns'))}); print(s.st_mtime_ns, s.st_atime_ns)`);
    expect(ns.trim()).toBe('1000000000123456789 1000000000123456789');
    const { stdout: bns } = await py(`import os; s=os.stat(${JSON.stringify(B('t-ns'))}); print(s.st_mtime_ns)`);
    expect(bns.trim()).toBe('1000000000123456789');
  }, 30_000);

  it('touch -m changes only mtime, touch -a only atime (UTIME_OMIT reaches utimens)', async () => {
    const f = M('t-ma');
    await run('touch', [f]);
    await py(`import os; os.utime(${JSON.stringify(f)}, ns=(1100000000000000001, 1200000000000000002))`);
    const read = async () => (await py(`import os; s=os.stat(${JSON.stringify(f)}); print(s.st_atime_ns, s.st_mtime_ns)`)).stdout.trim();

    let mark = events.length;
    await run('touch', ['-m', '-d', '@1300000000.000000003', f]);
    expect(await read()).toBe('1100000000000000001 1300000000000000003');
    await settle();
    const u1 = since(mark).find((e) => e.op === 'utimens');
    expect(u1).toMatchObject({ atime: 'omit', mtime: { sec: 1300000000, nsec: 3 } });

    mark = events.length;
    await run('touch', ['-a', '-d', '@1400000000.000000004', f]);
    expect(await read()).toBe('1400000000000000004 1300000000000000003');
    await settle();
    expect(since(mark).find((e) => e.op === 'utimens')).toMatchObject({ atime: { sec: 1400000000, nsec: 4 }, mtime: 'omit' });

    // plain `touch -m` = UTIME_NOW for mtime, atime untouched
    mark = events.length;
    const before = Date.now();
    await run('touch', ['-m', f]);
    const [a, m] = (await read()).split(' ').map((x) => BigInt(x));
    expect(a).toBe(1400000000000000004n);
    expect(Number(m! / 1_000_000n)).toBeGreaterThanOrEqual(before - 2_000);
    await settle();
    expect(since(mark).find((e) => e.op === 'utimens')).toMatchObject({ atime: 'omit', mtime: 'now' });
  }, 30_000);

  it('os.utime(ns=(a, m)) with distinct values reads back exactly', async () => {
    const f = M('t-utime');
    await run('touch', [f]);
    const { stdout } = await py(
      `import os; p=${JSON.stringify(f)}; os.utime(p, ns=(1111111111222333444, 1234567890987654321)); s=os.stat(p); print(s.st_atime_ns, s.st_mtime_ns)`,
    );
    expect(stdout.trim()).toBe('1111111111222333444 1234567890987654321');
  }, 30_000);

  it('tar -x restores every mtime exactly (files, dirs, symlinks)', async () => {
    const src = path.join(work, 'tarsrc');
    mkdirSync(path.join(src, 'a/b'), { recursive: true });
    writeFileSync(path.join(src, 'a/one.txt'), 'one');
    writeFileSync(path.join(src, 'a/b/two.txt'), 'two');
    writeFileSync(path.join(src, 'three.bin'), Buffer.alloc(300_000, 7));
    await run('ln', ['-s', 'a/one.txt', path.join(src, 'link')]);
    // Old, distinct, nanosecond mtimes (set bottom-up so dirs keep theirs).
    const stamps: Record<string, string> = {
      'a/b/two.txt': '@946684800.111111111',
      'a/one.txt': '@978307200.222222222',
      'three.bin': '@1009843200.333333333',
      link: '@1041379200.444444444',
      'a/b': '@1072915200.555555555',
      a: '@1104537600.666666666',
    };
    for (const [rel, stamp] of Object.entries(stamps)) await run('touch', ['-h', '-d', stamp, path.join(src, rel)]);
    const tarball = path.join(work, 'tree.tar');
    await run('tar', ['--format=posix', '-cf', tarball, '-C', src, '.']);
    mkdirSync(M('tarout'));
    await run('tar', ['-xf', tarball, '-C', M('tarout')]);
    const statNs = async (root: string) =>
      JSON.parse(
        (
          await py(
            `import os,json; r=${JSON.stringify(root)}; print(json.dumps({k: os.lstat(os.path.join(r,k)).st_mtime_ns for k in ${JSON.stringify(Object.keys(stamps))}}))`,
          )
        ).stdout,
      ) as Record<string, number>;
    const expected = await statNs(src);
    expect(await statNs(M('tarout'))).toEqual(expected);
    expect(await statNs(B('tarout'))).toEqual(expected);
    expect(readFileSync(M('tarout/three.bin')).equals(readFileSync(path.join(src, 'three.bin')))).toBe(true);
  }, 30_000);

  it('O_CREAT|O_EXCL: two racing processes, exactly one wins each of 50 rounds', async () => {
    const { stdout } = await py(
      `
import os, json, errno
p = ${JSON.stringify(M('excl'))}
res = []
for r in range(50):
    rd, wr = os.pipe()
    kids = []
    for k in range(2):
        pid = os.fork()
        if pid == 0:
            os.close(wr)
            os.read(rd, 1)
            try:
                fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                os.close(fd)
                os._exit(0)
            except OSError as e:
                os._exit(1 if e.errno == errno.EEXIST else 2)
        kids.append(pid)
    os.close(rd)
    os.close(wr)
    codes = [os.WEXITSTATUS(os.waitpid(pid, 0)[1]) for pid in kids]
    res.append(sorted(codes))
    os.unlink(p)
print(json.dumps(res))
`,
      { timeout: 60_000 },
    );
    const rounds = JSON.parse(stdout) as number[][];
    expect(rounds).toHaveLength(50);
    for (const r of rounds) expect(r).toEqual([0, 1]);
  }, 90_000);

  it('create receives the open flags (O_APPEND and the access mode)', async () => {
    const mark = events.length;
    await py(
      `import os; fd=os.open(${JSON.stringify(M('c-app'))}, os.O_CREAT|os.O_WRONLY|os.O_APPEND, 0o640); os.close(fd); fd=os.open(${JSON.stringify(M('c-rdwr'))}, os.O_CREAT|os.O_RDWR, 0o600); os.close(fd)`,
    );
    const app = await waitFor((e) => e.op === 'create' && e.path === '/c-app', mark);
    const flags = app.flags as number;
    expect(flags & O_APPEND).toBe(O_APPEND);
    expect(flags & O_ACCMODE).toBe(O_WRONLY);
    expect((app.mode as number) & 0o777).toBe(0o640);
    const rdwr = await waitFor((e) => e.op === 'create' && e.path === '/c-rdwr', mark);
    expect((rdwr.flags as number) & O_ACCMODE).toBe(O_RDWR);
    expect((rdwr.flags as number) & O_APPEND).toBe(0);
  }, 30_000);

  it('fsync / fdatasync reach the right fh with the right datasync flag; fallocate reaches its fh', async () => {
    const mark = events.length;
    await py(
      `import os; fd=os.open(${JSON.stringify(M('sync'))}, os.O_CREAT|os.O_RDWR, 0o644); os.write(fd, b'x'*10); os.fsync(fd); os.fdatasync(fd); os.posix_fallocate(fd, 0, 100000); os.close(fd)`,
    );
    const created = await waitFor((e) => e.op === 'create' && e.path === '/sync', mark);
    const fh = created.fh as number;
    expect(fh).toBeGreaterThan(0);
    await waitFor((e) => e.op === 'release' && e.fh === fh, mark);
    const syncs = since(mark).filter((e) => e.op === 'fsync');
    expect(syncs.map((e) => [e.fh, e.datasync])).toEqual([
      [fh, false],
      [fh, true],
    ]);
    const fa = since(mark).find((e) => e.op === 'fallocate');
    expect(fa).toMatchObject({ fh, mode: 0, offset: 0, length: 100000 });
    const { stdout } = await run('stat', ['-c', '%s', M('sync')]);
    expect(stdout.trim()).toBe('100000');
  }, 30_000);

  it('a file unlinked while open stays readable/writable; no .fuse_hidden; dir removable after close', async () => {
    mkdirSync(M('ul'));
    const mark = events.length;
    const { stdout } = await py(`
import os, subprocess, json
d = ${JSON.stringify(M('ul'))}
fd = os.open(d + '/f', os.O_CREAT | os.O_RDWR, 0o644)
os.write(fd, b'hello')
os.unlink(d + '/f')
ls = subprocess.run(['ls', '-a', d], capture_output=True, text=True).stdout.split()
os.lseek(fd, 0, 0)
r1 = os.read(fd, 100).decode()
os.write(fd, b' world')
os.lseek(fd, 0, 0)
r2 = os.read(fd, 100).decode()
os.close(fd)
os.rmdir(d)
print(json.dumps({'ls': ls, 'r1': r1, 'r2': r2, 'exists': os.path.exists(d)}))
`);
    const out = JSON.parse(stdout);
    expect(out).toEqual({ ls: ['.', '..'], r1: 'hello', r2: 'hello world', exists: false });
    expect(readdirSync(backing).filter((n) => n.startsWith('.fuse_hidden'))).toEqual([]);
    await settle();
    // After the unlink, handle-based ops get path === null (flag_nullpath_ok).
    const nullPathOps = since(mark).filter((e) => e.path === null).map((e) => e.op);
    expect(nullPathOps).toContain('read');
    expect(nullPathOps).toContain('write');
    expect(nullPathOps).toContain('release');
  }, 30_000);

  it('dd bs=1M writes arrive as one 1 MiB request (FUSE_MAX_PAGES, asked at INIT: session/proto.c)', async () => {
    const mark = events.length;
    await run('dd', ['if=/dev/zero', `of=${M('dd.bin')}`, 'bs=1M', 'count=1', 'status=none']);
    await waitFor((e) => e.op === 'release' && e.path === '/dd.bin', mark);
    const writes = since(mark).filter((e) => e.op === 'write' && e.path === '/dd.bin');
    // libfuse 2.9 alone answered INIT at 7.19: eight of 128 KiB.
    expect(writes.map((e) => e.len)).toEqual([1048576]);
  }, 30_000);

  it('readdir carries d_type from a mode-only stat (file, dir, symlink, fifo)', async () => {
    mkdirSync(B('dt'));
    writeFileSync(B('dt/f'), 'x');
    mkdirSync(B('dt/d'));
    await run('ln', ['-s', 'f', B('dt/l')]);
    await run('mkfifo', [B('dt/p')]);
    const { stdout } = await py(readdirTypesScript(M('dt')));
    // DT_DIR 4, DT_REG 8, DT_LNK 10, DT_FIFO 1
    expect(JSON.parse(stdout)).toEqual({ '.': 4, '..': 4, d: 4, f: 8, l: 10, p: 1 });
  }, 30_000);

  it('FLUSH reaches JS only for handles whose flush-gate slot is raised', async () => {
    const mark = events.length;
    await py(`
for name, data in (('gate-js-1', b'a'), ('plain-1', b'b')):
    with open(${JSON.stringify(mnt)} + '/' + name, 'wb') as f: f.write(data)
    with open(${JSON.stringify(mnt)} + '/' + name, 'rb') as f: f.read()
`);
    await waitFor((e) => e.op === 'release' && e.path === '/plain-1', mark);
    await waitFor((e) => e.op === 'release' && e.path === '/gate-js-1', mark);
    await settle();
    const flushes = since(mark).filter((e) => e.op === 'flush').map((e) => e.path);
    // one close each for the write and the read of gate-js-1; none for plain-1
    expect(flushes).toEqual(['/gate-js-1', '/gate-js-1']);
    expect(readFileSync(B('plain-1'), 'utf8')).toBe('b');
  }, 30_000);

  it('READs of a published handle are answered in the binding (pread on libfuse\'s thread), others in JS', async () => {
    const data = randomBytes(300_001);
    writeFileSync(B('native-1'), data);
    writeFileSync(B('plain-read'), data);
    const mark = events.length;
    const { stdout } = await py(`
import os, json, hashlib, mmap
out = []
for name in ('native-1', 'plain-read'):
    fd = os.open(${JSON.stringify(mnt)} + '/' + name, os.O_RDONLY)
    for off, n in ((0, 1), (1, 131073), (4095, 2), (299999, 100), (300001, 5), (123457, 77777)):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        out.append(hashlib.sha256(os.pread(fd, n, off)).hexdigest())
    m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    out.append(hashlib.sha256(m[:]).hexdigest())
    m.close()
    os.close(fd)
print(json.dumps(out))
`);
    const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
    const want = [[0, 1], [1, 131073], [4095, 2], [299999, 100], [300001, 5], [123457, 77777]].map(([o, n]) => sha(data.subarray(o!, o! + n!)));
    want.push(sha(data));
    expect(JSON.parse(stdout)).toEqual([...want, ...want]);
    const unpub = await waitFor((e) => e.op === 'unpublish' && e.path === '/native-1', mark);
    await waitFor((e) => e.op === 'release' && e.path === '/plain-read', mark);
    await settle();
    const reads = since(mark).filter((e) => e.op === 'read');
    expect(reads.filter((e) => e.path === '/native-1')).toEqual([]);
    expect(reads.filter((e) => e.path === '/plain-read').length).toBeGreaterThanOrEqual(6);
    expect(unpub.was).toBe(true);
    const stats = unpub.stats as { reads: number; fallbacks: number; published: number };
    expect(stats.reads).toBeGreaterThanOrEqual(6);
    expect(stats.fallbacks).toBe(0);
    expect(stats.published).toBe(0);
  }, 30_000);

  it('a libfuse worker started while the JS thread is busy answers a native read without waiting for it', async () => {
    // An fsync holds the JS thread for 3 s and 23 fstats of other open files
    // wait for it (GETATTRs of different inodes are not serialised by the
    // kernel, as lookups in one directory are), so every worker libfuse had is busy and
    // the READ goes to a new one. Its thread locals come ready-made from a
    // pool; before, a new worker asked the JS thread to make them and waited,
    // so the native read came only after the block.
    writeFileSync(B('native-while-blocked'), Buffer.alloc(8192, 0x6e));
    for (let i = 0; i < 24; i++) writeFileSync(B(`jsblock-${i}`), 'x');
    const mark = events.length;
    const { stdout } = await py(`
import os, threading, time
m = ${JSON.stringify(mnt)}
fd = os.open(m + '/native-while-blocked', os.O_RDONLY)
fds = [os.open(m + '/jsblock-%d' % i, os.O_RDONLY) for i in range(24)]
def stat(i):
    try: os.fsync(fds[0]) if i == 0 else os.fstat(fds[i])
    except OSError: pass
ts = [threading.Thread(target=stat, args=(i,)) for i in range(24)]
ts[0].start(); time.sleep(0.3)
for t in ts[1:]: t.start()
time.sleep(0.5)
b = os.pread(fd, 8192, 0)
done = time.time() * 1000
for t in ts: t.join()
print(len(b), b.count(b'n'), int(done))
`);
    const [len, ns, done] = stdout.trim().split(' ').map(Number);
    expect([len, ns]).toEqual([8192, 8192]);
    const start = await waitFor((e) => e.op === 'jsblock' && e.phase === 'start', mark);
    const end = await waitFor((e) => e.op === 'jsblock' && e.phase === 'end', mark);
    // The read was answered while JavaScript was still blocked.
    expect(done).toBeGreaterThan(start.at as number);
    expect(done).toBeLessThan(end.at as number);
    expect(since(mark).filter((e) => e.op === 'read' && e.path === '/native-while-blocked')).toEqual([]);
  }, 30_000);

  it('unpublish waits for a native read in flight before it returns (the descriptor is then free to close)', async () => {
    // indirect-1 is published with a descriptor of slow-target on this mount:
    // its native pread becomes a READ of slow-target that JS answers after 300 ms,
    // while a worker thread unpublishes indirect-1 (see the fixture).
    const target = Buffer.alloc(5000, 0x74);
    writeFileSync(B('slow-target'), target);
    writeFileSync(B('indirect-1'), Buffer.alloc(5000, 0x69));
    const mark = events.length;
    const { stdout } = await py(`
import os
fd = os.open(${JSON.stringify(mnt)} + '/indirect-1', os.O_RDONLY)
b = os.pread(fd, 5000, 0)
print(len(b), b.count(b't'))
os.close(fd)
`);
    expect(stdout.trim()).toBe('5000 5000');
    const answered = await waitFor((e) => e.op === 'slow-answered', mark);
    const unpublished = await waitFor((e) => e.op === 'unpublished', mark);
    expect(unpublished.was).toBe(true);
    // Without the in-flight count the worker's unpublish returns at once, long before the answer.
    expect(events.indexOf(unpublished)).toBeGreaterThan(events.indexOf(answered));
    await waitFor((e) => e.op === 'release' && e.path === '/indirect-1', mark);
    // already taken out by the worker: release finds nothing to unpublish
    expect(since(mark).filter((e) => e.op === 'unpublish' && e.path === '/indirect-1')).toEqual([]);
  }, 30_000);

  it('WRITEs of a published handle are decided without their data and written in the binding', async () => {
    const a = randomBytes(100_000);
    const b = randomBytes(5_000);
    writeFileSync(path.join(work, 'wa.bin'), a);
    writeFileSync(path.join(work, 'wb.bin'), b);
    const mark = events.length;
    const { stdout } = await py(`
import os, errno
w = ${JSON.stringify(work)}
fd = os.open(${JSON.stringify(mnt)} + '/wnative-1', os.O_RDWR | os.O_CREAT, 0o644)
print(os.pwrite(fd, open(w + '/wa.bin', 'rb').read(), 0), os.pwrite(fd, open(w + '/wb.bin', 'rb').read(), 774144))
try:
    os.pwrite(fd, b'0123456789', (1 << 20) + 100)
    print('written')
except OSError as e:
    print(errno.errorcode[e.errno])
print(os.fstat(fd).st_size)
os.close(fd)
`);
    expect(stdout.trim().split('\n')).toEqual(['100000 5000', 'EDQUOT', '779144']);
    const onDisk = readFileSync(B('wnative-1'));
    expect(onDisk.length).toBe(779_144);
    expect(onDisk.subarray(0, 100_000).equals(a)).toBe(true);
    expect(onDisk.subarray(774_144).equals(b)).toBe(true);
    expect(onDisk.subarray(100_000, 774_144).every((x) => x === 0)).toBe(true);
    await waitFor((e) => e.op === 'release' && e.path === '/wnative-1', mark);
    const mine = since(mark).filter((e) => e.path === '/wnative-1' || e.op === 'wreport');
    const decided = mine.filter((e) => e.op === 'wdecide').map((e) => [e.offset, e.len]);
    expect(decided).toEqual([[0, 100_000], [774_144, 5_000], [(1 << 20) + 100, 10]]);
    expect(mine.filter((e) => e.op === 'wreport').map((e) => e.result)).toEqual([100_000, 5_000]);
    expect(mine.filter((e) => e.op === 'write')).toEqual([]);
    const caller = mine.find((e) => e.op === 'wdecide')!.caller!;
    expect(caller.uid).toBe(0);
    expect(caller.pid).toBeGreaterThan(0);
  }, 30_000);

  it('a write the handler sends back reaches ops.write with its data; a failed pwrite gets the handler\'s answer', async () => {
    const mark = events.length;
    const { stdout } = await py(`
import os, errno
m = ${JSON.stringify(mnt)}
with open(m + '/wfall-1', 'wb') as f: f.write(b'hello')
fd = os.open(m + '/wbad-1', os.O_WRONLY | os.O_CREAT, 0o644)
try:
    os.write(fd, b'x' * 10)
    print('written')
except OSError as e:
    print(errno.errorcode[e.errno])
os.close(fd)
`);
    expect(stdout.trim()).toBe('EIO');
    expect(readFileSync(B('wfall-1'), 'utf8')).toBe('hello');
    expect(readFileSync(B('wbad-1')).length).toBe(0);
    await waitFor((e) => e.op === 'release' && e.path === '/wbad-1', mark);
    const ev = since(mark);
    expect(ev.filter((e) => e.op === 'write').map((e) => e.path)).toEqual(['/wfall-1']);
    expect(ev.filter((e) => e.op === 'wdecide').map((e) => e.path)).toEqual(['/wfall-1', '/wbad-1']);
    expect(ev.filter((e) => e.op === 'wreport').map((e) => e.result)).toEqual([-9]); // EBADF from the read-only descriptor
  }, 30_000);

  it('a name with invalid UTF-8 fails with EILSEQ and creates nothing', async () => {
    const mark = events.length;
    const target = Buffer.concat([Buffer.from(M('bad-')), Buffer.from([0xff])]);
    const { stdout } = await py(`
import os, errno
try:
    open(bytes.fromhex(${JSON.stringify(target.toString('hex'))}), 'w')
    print('created')
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))
`);
    expect(stdout.trim()).toBe('EILSEQ');
    const names = readdirSync(backing, { encoding: 'buffer' }).map((n) => n.toString('latin1'));
    expect(names.filter((n) => n.startsWith('bad-'))).toEqual([]);
    await settle();
    expect(since(mark).filter((e) => typeof e.path === 'string' && e.path.startsWith('/bad-'))).toEqual([]);
  }, 30_000);

  it('passes the caller (uid/gid/pid) of a process running as 65534', async () => {
    mkdirSync(M('shared'));
    chmodSync(M('shared'), 0o777);
    const mark = events.length;
    const { stdout } = await run('setpriv', [
      '--reuid=65534',
      '--regid=65534',
      '--clear-groups',
      'sh',
      '-c',
      `echo $$; exec touch ${M('shared/by-nobody')}`,
    ]);
    const pid = Number(stdout.trim());
    const create = await waitFor((e) => e.op === 'create' && e.path === '/shared/by-nobody', mark);
    expect(create.caller).toEqual({ uid: 65534, gid: 65534, pid });
    // every op issued by that process carries the same caller
    await settle();
    const fromPid = since(mark).filter((e) => e.caller?.pid === pid);
    expect(fromPid.length).toBeGreaterThan(0);
    for (const e of fromPid) expect(e.caller).toEqual({ uid: 65534, gid: 65534, pid });
    // and root's ops are reported as root
    const mark2 = events.length;
    await run('stat', [M('shared')]);
    await settle();
    expect(since(mark2).find((e) => e.op === 'getattr')?.caller?.uid).toBe(0);
  }, 30_000);

  it('loopState() becomes 2 after an external umount -l', async () => {
    const mark = events.length;
    await run('umount', ['-l', mnt]);
    const ev = await waitFor((e) => 'loopState' in e && !('ready' in e), mark, 10_000);
    expect(ev.loopState).toBe(2);
    expect(readFileSync('/proc/mounts', 'utf8')).not.toContain(` ${mnt} `);
  }, 30_000);
});
