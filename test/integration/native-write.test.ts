import { spawn, spawnSync } from 'node:child_process';
import { metricSample, scrapeMetrics } from '../helpers/metrics.js';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { canMount, HOMESCTL, runAs, runAsync, skipReason, startDaemon, SYSTEM_PATH, type RunningDaemon } from '../helpers/daemon.js';
import { pyAs } from '../helpers/neighbour.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { ownerAt, ownersFrom } from '../helpers/owner-suite.js';
import { regularBytes } from '../helpers/backing.js';

/**
 * Issue 13, the data path: WRITEs of handles in binary-content homes are
 * decided in JavaScript from (fh, offset, length) alone (the same ledger code
 * as a write JavaScript performs) and written by the binding on a session
 * worker thread (fuse.nativeWrite, on by default). The ledger rules do not change:
 * a refused write changes nothing, no write is acknowledged and then dropped,
 * budgets are exact at write time. The metrics endpoint says which path served.
 */

const KiB = 1024;
const MiB = 1024 * KiB;
/** this file's own owner ids (helpers/owner-ids.ts) */
const OWNERS = ownerRange(import.meta.filename);
const BASE = OWNERS.from;
/** each home's owner (an owner belongs to one home) */
const U = ownersFrom(BASE + 43, ['cap', 'flip', 'full']);
const T = 'nw';

if (!canMount) console.warn(`native-write integration suite skipped: ${skipReason}`);

const capped = { ...BUILTIN_PROFILES.home, maxHomeBytes: 1 * MiB, maxFileBytes: 0 };
const roomy = { ...BUILTIN_PROFILES.home, maxHomeBytes: 0, maxFileBytes: 0 };
const rawtext = { ...BUILTIN_PROFILES.scratch, maxHomeBytes: 0, maxFileBytes: 0, maxEntriesPerDir: 0 };
const HOMES = {
  [`${T}/cap`]: { owner: U.cap, profile: 'capped' },
  [`${T}/flip`]: { owner: U.flip, profile: 'roomy' },
  [`${T}/full`]: { owner: U.full, profile: 'roomy' },
};

describe.skipIf(!canMount)('native writes (fuse.nativeWrite): decided in JavaScript without the data, written in the binding', () => {
  let d: RunningDaemon;
  let dir: string;
  let tmp: string;
  let metricsSocket: string;
  let tmpfs = '';

  const counts = async () => {
    const body = await scrapeMetrics(metricsSocket);
    return {
      js: metricSample(body, 'homesfs_fuse_requests_total{op="write"}'),
      native: metricSample(body, 'homesfs_native_writes_total'),
      fallbacks: metricSample(body, 'homesfs_native_write_fallbacks_total'),
      decided: metricSample(body, 'homesfs_native_write_decisions_total'),
    };
  };
  const usage = async (home: string) => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'usage', home]);
    if (r.code !== 0) throw new Error(`usage: ${r.stderr}`);
    return JSON.parse(r.stdout) as { bytes: number };
  };
  const ctl = async (...args: string[]) => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, ...args]);
    if (r.code !== 0) throw new Error(`homesctl ${args.join(' ')}: ${r.stderr}${r.stdout}`);
  };
  /** a python script run as the owner of the home its first argument lies in */
  const py = (script: string, at: string, ...rest: string[]) => pyAs(tmp, ownerAt(d, HOMES, at), script, at, ...rest);

  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'homesfs-nw-'));
    chmodSync(tmp, 0o755);
    metricsSocket = join(mkdtempSync(join(tmp, 'm-')), 'metrics.sock');
    // The whole backing is a 6 MiB tmpfs: the `full` home fills the disk before any budget.
    dir = mkdtempSync(join(tmpdir(), 'homesfs-it-'));
    tmpfs = join(dir, 'backing');
    mkdirSync(tmpfs, { mode: 0o700 });
    const m = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=6m,mode=0700', 'tmpfs', tmpfs]);
    if (m.status !== 0) throw new Error(`mount tmpfs: ${m.stderr}`);
    mkdirSync(join(tmpfs, T), { mode: 0o700 });
    for (const k of ['cap', 'flip', 'full']) mkdirSync(join(tmpfs, T, k), { mode: 0o700 });
    d = await startDaemon({
      awaitLedgers: true,
      dir,
      fresh: true,
      homes: HOMES,
      config: { owners: OWNERS, profiles: { capped, roomy, rawtext }, metrics: { socket: metricsSocket } },
    });
  }, 60_000);

  afterAll(async () => {
    await d?.stopKeep();
    if (tmpfs && existsSync(tmpfs)) spawnSync('umount', ['-l', tmpfs]);
    rmSync(dir, { recursive: true, force: true });
    rmSync(tmp, { recursive: true, force: true });
  });

  it('writes up to the budget land natively; the one over it is refused with EDQUOT and changes nothing', async () => {
    const before = await counts();
    const out = await py(
      `import os, sys, errno
f = sys.argv[1]
fd = os.open(f, os.O_WRONLY | os.O_CREAT, 0o600)
res = []
for i in range(10):
    try:
        res.append(os.pwrite(fd, bytes([65 + i]) * 100000, i * 100000))
    except OSError as e:
        res.append(errno.errorcode[e.errno])
# appends, exactly to the byte
fa = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
for n in (48576, 1):
    try:
        res.append(os.write(fa, b'z' * n))
    except OSError as e:
        res.append(errno.errorcode[e.errno])
print(res, os.fstat(fd).st_size, os.fstat(fa).st_size)
`,
      join(d.home(T, 'cap'), 'f'),
      join(d.home(T, 'cap'), 'a'),
    );
    expect(out.trim()).toBe("[100000, 100000, 100000, 100000, 100000, 100000, 100000, 100000, 100000, 100000, 48576, 'EDQUOT'] 1000000 48576");
    const f = readFileSync(join(d.backingOf(T, 'cap'), 'f'));
    expect(f.length).toBe(1_000_000);
    for (let i = 0; i < 10; i++) expect(f.subarray(i * 100_000, (i + 1) * 100_000).every((x) => x === 65 + i)).toBe(true);
    expect(readFileSync(join(d.backingOf(T, 'cap'), 'a')).length).toBe(48_576);
    expect((await usage(`${T}/cap`)).bytes).toBe(1 * MiB);
    expect(regularBytes(d.backingOf(T, 'cap'))).toBe(1 * MiB);
    const after = await counts();
    // All but the refused one were written natively (the kernel may split an
    // unaligned write in two requests, hence no exact count); each came to JS
    // for its decision (counted as a write) unless the binding decided it
    // from the home's byte credit (a quarter of the free room at most, so
    // the last ones before the budget, and the refused one, are JS's).
    expect(after.native - before.native).toBeGreaterThanOrEqual(11);
    expect(after.decided - before.decided).toBeGreaterThan(0);
    expect(after.js - before.js).toBe(after.native - before.native - (after.decided - before.decided) + 1);
    expect(after.fallbacks).toBe(before.fallbacks);
  });

  it('racing writers of one home never pass its budget by a byte, and the ledger matches the disk', async () => {
    await ctl('set-budget', `${T}/cap`, '3M');
    const writers = [0, 1, 2, 3].map((i) =>
      runAs(U.cap.uid, U.cap.gid, `dd if=/dev/zero of=${join(d.home(T, 'cap'), `w${i}`)} bs=100000 count=12 2>&1; echo "rc=$?"`, { timeoutMs: 60_000 }),
    );
    const results = await Promise.all(writers);
    expect(results.filter((r) => r.stdout.includes('Disk quota exceeded')).length).toBeGreaterThan(0);
    const onDisk = regularBytes(d.backingOf(T, 'cap'));
    expect(onDisk).toBeLessThanOrEqual(3 * MiB);
    expect(3 * MiB - onDisk).toBeLessThan(100_000);
    expect((await usage(`${T}/cap`)).bytes).toBe(onDisk);
  });

  it('a home that becomes a text home mid-stream: the open handle\'s next writes carry their data and are checked', async () => {
    const f = join(d.home(T, 'flip'), 'log.txt');
    const p = spawn('setpriv', [`--reuid=${U.flip.uid}`, `--regid=${U.flip.gid}`, '--clear-groups', 'python3', '-u', '-c', `
import os, sys, errno
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
print('open', flush=True)
for line in sys.stdin:
    try:
        print(os.write(fd, bytes.fromhex(line.strip())), flush=True)
    except OSError as e:
        print(errno.errorcode[e.errno], flush=True)
`, f], { env: { PATH: SYSTEM_PATH }, stdio: ['pipe', 'pipe', 'inherit'] });
    const lines = createInterface({ input: p.stdout! })[Symbol.asyncIterator]();
    const next = async () => String((await lines.next()).value);
    const write = async (b: Buffer) => {
      p.stdin!.write(b.toString('hex') + '\n');
      return next();
    };
    try {
      expect(await next()).toBe('open');
      let c0 = await counts();
      expect(await write(Buffer.from('hello\n'))).toBe('6');
      let c1 = await counts();
      expect(c1.native - c0.native).toBe(1);

      await ctl('set-profile', `${T}/flip`, 'rawtext');
      c0 = await counts();
      expect(await write(Buffer.from([0xff, 0x0a]))).toBe('EILSEQ');
      expect(await write(Buffer.from('wörld\n'))).toBe('7');
      c1 = await counts();
      expect(c1.native - c0.native).toBe(0);
      expect(c1.js - c0.js).toBe(2);

      await ctl('set-profile', `${T}/flip`, 'roomy');
      c0 = await counts();
      expect(await write(Buffer.from([0xff]))).toBe('1');
      c1 = await counts();
      expect(c1.native - c0.native).toBe(1);
    } finally {
      p.stdin!.end();
      await new Promise((r) => p.on('close', r));
    }
    expect(readFileSync(join(d.backingOf(T, 'flip'), 'log.txt'))).toEqual(Buffer.concat([Buffer.from('hello\nwörld\n'), Buffer.from([0xff])]));
    expect((await usage(`${T}/flip`)).bytes).toBe(14);
  });

  it('a full disk: the short write is charged only for what landed, the failed one for nothing', async () => {
    const r = await runAs(U.full.uid, U.full.gid, `dd if=/dev/zero of=${join(d.home(T, 'full'), 'big')} bs=1M count=4 2>&1; echo "rc=$?"`, { timeoutMs: 60_000 });
    expect(r.stdout).toMatch(/No space left on device/);
    expect(r.stdout).toMatch(/rc=1/);
    const size = statSync(join(d.backingOf(T, 'full'), 'big')).size;
    expect(size).toBeGreaterThan(0);
    expect(size).toBeLessThan(6 * MiB);
    expect((await usage(`${T}/full`)).bytes).toBe(size);
    // what the writer saw through the mount is what is on the disk
    const seen = await runAs(U.full.uid, U.full.gid, `stat -c %s ${join(d.home(T, 'full'), 'big')}`);
    expect(Number(seen.stdout.trim())).toBe(size);
  });
});
