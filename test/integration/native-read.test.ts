import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { metricSample, scrapeMetrics } from '../helpers/metrics.js';
import { chmodSync, chownSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { canMount, HOMESCTL, runAs, runAsync, skipReason, startDaemon, SYSTEM_PATH, type RunningDaemon } from '../helpers/daemon.js';
import { pyAs } from '../helpers/neighbour.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { ownerAt, ownersFrom } from '../helpers/owner-suite.js';

/**
 * Issue 13, the data path: READs of handles whose reads need no policy are
 * answered in the binding (fuse.nativeRead, on by default). Every test reads
 * through the mount with real processes and compares with the backing bytes,
 * and the metrics endpoint says which side answered (JS counts its reads,
 * the binding its own), so a test cannot pass by falling back silently.
 */

const KiB = 1024;
const MiB = 1024 * KiB;
/** this file's own owner ids (helpers/owner-ids.ts) */
const OWNERS = ownerRange(import.meta.filename);
const BASE = OWNERS.from;
/** each home's owner (an owner belongs to one home) */
const U = ownersFrom(BASE + 31, ['bin', 'raw', 'txt', 'flip']);
const T = 'nr';

if (!canMount) console.warn(`native-read integration suite skipped: ${skipReason}`);

const roomy = { ...BUILTIN_PROFILES.home, maxHomeBytes: 256 * MiB, maxFileBytes: 0 };
// direct_io: every read(2) becomes a READ request (no page cache), so each one is counted.
const rawdirect = { ...roomy, directIo: true };
const rawtext = { ...BUILTIN_PROFILES.scratch, maxHomeBytes: 256 * MiB, maxFileBytes: 0, maxEntriesPerDir: 0, directIo: true };
const HOMES = {
  [`${T}/bin`]: { owner: U.bin, profile: 'roomy' },
  [`${T}/raw`]: { owner: U.raw, profile: 'rawdirect' },
  [`${T}/txt`]: { owner: U.txt, profile: 'scratch' },
  [`${T}/flip`]: { owner: U.flip, profile: 'rawdirect' },
};

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** Byte i of file k: distinct files differ at every offset, and no byte is 0. */
function pattern(k: number, size: number): Buffer {
  const b = Buffer.alloc(size);
  for (let i = 0; i < size; i++) b[i] = ((i + k * 37) % 251) + 1;
  return b;
}

describe.skipIf(!canMount)('native reads (fuse.nativeRead): the same bytes, without JavaScript', () => {
  let d: RunningDaemon;
  let tmp: string;
  let metricsSocket: string;

  const counts = async () => {
    const body = await scrapeMetrics(metricsSocket);
    return { js: metricSample(body, 'homesfs_fuse_requests_total{op="read"}'), native: metricSample(body, 'homesfs_native_reads_total'), fallbacks: metricSample(body, 'homesfs_native_read_fallbacks_total') };
  };
  /** a shell script run as the owner of the home `at` lies in */
  const sh = (at: string, script: string) => {
    const o = ownerAt(d, HOMES, at);
    return runAs(o.uid, o.gid, script, { timeoutMs: 120_000 });
  };
  /** a python script run as the owner of the home its first argument lies in */
  const py = (script: string, at: string, ...rest: string[]) => pyAs(tmp, ownerAt(d, HOMES, at), script, at, ...rest);
  const ctl = async (...args: string[]) => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, ...args]);
    if (r.code !== 0) throw new Error(`homesctl ${args.join(' ')}: ${r.stderr}${r.stdout}`);
  };
  /** Put bytes into a home through the mount (the ledger sees them), as its owner. */
  const put = async (home: string, name: string, data: Buffer) => {
    const src = join(tmp, `src-${name}`);
    writeFileSync(src, data, { mode: 0o644 });
    const r = await sh(d.home(T, home), `cp ${src} ${join(d.home(T, home), name)}`);
    expect(r.code, r.stderr).toBe(0);
  };

  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'homesfs-nr-'));
    chmodSync(tmp, 0o755);
    // Its own directory: the daemon makes the socket's directory 0700.
    metricsSocket = join(mkdtempSync(join(tmp, 'm-')), 'metrics.sock');
    d = await startDaemon({
      awaitLedgers: true,
      create: Object.keys(HOMES),
      homes: HOMES,
      // Read-only opens come to the binding's reads only without passthrough (passthrough.test.ts has it on).
      config: { owners: OWNERS, profiles: { roomy, rawdirect, rawtext }, metrics: { socket: metricsSocket }, fuse: { passthrough: false } },
    });
  }, 60_000);

  afterAll(async () => {
    await d?.stop();
    rmSync(tmp, { recursive: true, force: true });
  });

  it('cat, dd, pread at odd offsets and mmap return the backing bytes, none of the READs reaching JS', async () => {
    const data = randomBytes(3 * MiB + 12_345);
    await put('bin', 'data.bin', data);
    const backing = readFileSync(join(d.backingOf(T, 'bin'), 'data.bin'));
    expect(backing.equals(data)).toBe(true);
    const before = await counts();

    const f = join(d.home(T, 'bin'), 'data.bin');
    const cat = await sh(f, `cat ${f} | sha256sum`);
    expect(cat.stdout.split(' ')[0]).toBe(sha(data));
    const dd = await sh(f, `dd if=${f} bs=4096 skip=7 count=100 status=none | sha256sum`);
    expect(dd.stdout.split(' ')[0]).toBe(sha(data.subarray(7 * 4096, 107 * 4096)));

    const ranges: Array<[number, number]> = [[0, 1], [1, 4095], [4097, 131_073], [data.length - 3, 100], [data.length, 10], [data.length + 5000, 7], [777_777, 262_145]];
    for (let i = 0; i < 40; i++) ranges.push([Math.floor(Math.random() * data.length), 1 + Math.floor(Math.random() * 300_000)]);
    const out = await py(
      `import os, sys, json, hashlib, mmap
ranges = json.loads(sys.argv[2])
res = []
fd = os.open(sys.argv[1], os.O_RDONLY)
for off, n in ranges:
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    b = os.pread(fd, n, off)
    res.append([len(b), hashlib.sha256(b).hexdigest()])
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
res.append([len(m), hashlib.sha256(m[:]).hexdigest(), hashlib.sha256(m[1000003:1300007]).hexdigest()])
m.close()
os.close(fd)
print(json.dumps(res))
`,
      f,
      JSON.stringify(ranges),
    );
    const got = JSON.parse(out) as Array<[number, string, string?]>;
    ranges.forEach(([off, n], i) => {
      const want = data.subarray(Math.min(off, data.length), Math.min(off + n, data.length));
      expect(got[i], `pread(${n}, ${off})`).toEqual([want.length, sha(want)]);
    });
    expect(got[ranges.length]).toEqual([data.length, sha(data), sha(data.subarray(1_000_003, 1_300_007))]);

    const after = await counts();
    expect(after.js - before.js).toBe(0);
    expect(after.native - before.native).toBeGreaterThanOrEqual(ranges.length);
    expect(after.fallbacks).toBe(before.fallbacks);
  });

  it('a scratch home keeps its reads in JavaScript, and still refuses a file ending inside a character', async () => {
    await put('txt', 'ok.txt', Buffer.from('héllo wörld\n'.repeat(1000)));
    // Placed behind the daemon's back: a file cut inside "é".
    writeFileSync(join(d.backingOf(T, 'txt'), 'cut.txt'), Buffer.from([0x61, 0xc3]));
    chownSync(join(d.backingOf(T, 'txt'), 'cut.txt'), U.txt.uid, U.txt.gid);
    const before = await counts();
    const ok = await sh(d.home(T, 'txt'), `cat ${join(d.home(T, 'txt'), 'ok.txt')} | sha256sum`);
    expect(ok.stdout.split(' ')[0]).toBe(sha(Buffer.from('héllo wörld\n'.repeat(1000))));
    const cut = await sh(d.home(T, 'txt'), `cat ${join(d.home(T, 'txt'), 'cut.txt')}`);
    expect(cut.code).not.toBe(0);
    expect(cut.stderr).toMatch(/Invalid or incomplete multibyte|Illegal byte sequence/);
    const after = await counts();
    expect(after.native - before.native).toBe(0);
    expect(after.js - before.js).toBeGreaterThan(0);
  });

  it('a profile change moves an open handle between JavaScript and the binding (text then binary again)', async () => {
    await put('flip', 'f.txt', Buffer.from('a'.repeat(200_000)));
    const f = join(d.home(T, 'flip'), 'f.txt');
    // One process keeps the file open across the profile changes; each line on stdin is one read.
    const p = spawn('setpriv', [`--reuid=${U.flip.uid}`, `--regid=${U.flip.gid}`, '--clear-groups', 'python3', '-u', '-c', `
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
print('open', flush=True)
for line in sys.stdin:
    b = os.pread(fd, 65536, int(line))
    print(len(b), b.count(b'a'), flush=True)
`, f], { env: { PATH: SYSTEM_PATH }, stdio: ['pipe', 'pipe', 'inherit'] });
    const lines = createInterface({ input: p.stdout! })[Symbol.asyncIterator]();
    const next = async () => String((await lines.next()).value);
    const readAt = async (off: number) => {
      p.stdin!.write(`${off}\n`);
      return next();
    };
    try {
      expect(await next()).toBe('open');
      let c0 = await counts();
      expect(await readAt(1)).toBe('65536 65536');
      let c1 = await counts();
      expect([c1.native - c0.native, c1.js - c0.js]).toEqual([1, 0]);

      await ctl('set-profile', `${T}/flip`, 'rawtext');
      c0 = await counts();
      expect(await readAt(150_000)).toBe('50000 50000');
      c1 = await counts();
      expect([c1.native - c0.native, c1.js - c0.js]).toEqual([0, 1]);

      await ctl('set-profile', `${T}/flip`, 'rawdirect');
      c0 = await counts();
      expect(await readAt(3)).toBe('65536 65536');
      c1 = await counts();
      expect([c1.native - c0.native, c1.js - c0.js]).toEqual([1, 0]);
    } finally {
      p.stdin!.end();
      await new Promise((r) => p.on('close', r));
    }
  });

  it('a file unlinked while open reads on, natively, from its descriptor', async () => {
    const data = pattern(5, 300_001);
    await put('raw', 'gone.bin', data);
    const before = await counts();
    const out = await py(
      `import os, sys, hashlib
fd = os.open(sys.argv[1], os.O_RDONLY)
os.unlink(sys.argv[1])
print(os.path.exists(sys.argv[1]), hashlib.sha256(os.pread(fd, 400000, 0)).hexdigest(), hashlib.sha256(os.pread(fd, 1000, 299999)).hexdigest())
`,
      join(d.home(T, 'raw'), 'gone.bin'),
    );
    expect(out.trim().split(' ')).toEqual(['False', sha(data), sha(data.subarray(299_999))]);
    const after = await counts();
    expect(after.native - before.native).toBeGreaterThanOrEqual(2);
    expect(after.js).toBe(before.js);
  });

  it('writes answered by JavaScript are seen at once by reads answered natively (one descriptor and two)', async () => {
    await put('raw', 'rw.bin', pattern(1, 1 * MiB));
    const before = await counts();
    const out = await py(
      `import os, sys, random
random.seed(7)
a = os.open(sys.argv[1], os.O_RDWR)
b = os.open(sys.argv[1], os.O_RDONLY)
bad = 0
size = 1 << 20
for i in range(300):
    off = random.randrange(0, size + 5000)
    n = random.randrange(1, 140000)
    data = os.urandom(n)
    assert os.pwrite(a, data, off) == n
    size = max(size, off + n)
    if os.pread(a, n, off) != data: bad += 1
    if os.pread(b, n, off) != data: bad += 1
    if os.pread(b, 10, size) != b'': bad += 1
print(bad, size)
`,
      join(d.home(T, 'raw'), 'rw.bin'),
    );
    const [bad, size] = out.trim().split(' ').map(Number);
    expect(bad).toBe(0);
    expect(readFileSync(join(d.backingOf(T, 'raw'), 'rw.bin')).length).toBe(size);
    const after = await counts();
    expect(after.native - before.native).toBeGreaterThanOrEqual(900);
    expect(after.js).toBe(before.js);
  });

  it('readers racing truncates and reopening descriptors never see another file’s bytes', async () => {
    const N = 6;
    const SIZE = 256 * KiB;
    for (let k = 0; k < N; k++) await put('raw', `p${k}`, pattern(k, SIZE));
    const before = await counts();
    // One truncating writer per file (through the mount: JS), and readers that
    // open, read and close any file over and over (descriptor numbers in the
    // daemon are reused all the time). Every byte read must be its own file's
    // (or 0: a read racing a truncate sees zeros on the backing itself).
    const out = await py(
      `import os, sys, time, random
d, N, SIZE = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def pat(k, off, n):
    return bytes(((i + k * 37) % 251) + 1 for i in range(off, off + n))
PAT = [pat(k, 0, SIZE) for k in range(N)]
pids = []
end = time.time() + 4
for k in range(N):
    pid = os.fork()
    if pid == 0:
        fd = os.open(f'{d}/p{k}', os.O_WRONLY)
        while time.time() < end:
            cut = random.randrange(0, SIZE)
            os.ftruncate(fd, cut)
            os.pwrite(fd, PAT[k][cut:], cut)
        os._exit(0)
    pids.append(pid)
bad = reads = 0
for r in range(3):
    pid = os.fork()
    if pid == 0:
        bad = reads = 0
        while time.time() < end:
            k = random.randrange(N)
            fd = os.open(f'{d}/p{k}', os.O_RDONLY)
            off = random.randrange(0, SIZE)
            b = os.pread(fd, 65536, off)
            os.close(fd)
            reads += 1
            # Zeros are what the backing filesystem itself shows a read racing a
            # truncate (measured on plain ext4 with this very script, no FUSE);
            # any other byte that is not this file's would be another file's.
            if any(x != 0 and x != y for x, y in zip(b, PAT[k][off:off + len(b)])):
                bad += 1
                i = next(j for j in range(len(b)) if b[j] != 0 and b[j] != PAT[k][off + j])
                sys.stderr.write(f'bad read: file {k} off {off} len {len(b)} first diff at +{i}: {b[i]} want {PAT[k][off + i]}; {[kk for kk in range(N) if b[i] == PAT[kk][off + i]]}\\n')
        os._exit(min(bad, 100))
    pids.append(pid)
codes = [os.waitpid(p, 0)[1] >> 8 for p in pids]
print(sum(codes))
`,
      d.home(T, 'raw'),
      String(N),
      String(SIZE),
    );
    expect(out.trim()).toBe('0');
    const after = await counts();
    expect(after.native - before.native).toBeGreaterThan(50);
    expect(after.js).toBe(before.js);
    for (let k = 0; k < N; k++) expect(readFileSync(join(d.backingOf(T, 'raw'), `p${k}`)).equals(pattern(k, SIZE))).toBe(true);
  });
});
