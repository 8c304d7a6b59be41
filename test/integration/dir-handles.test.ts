import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, HOMESCTL, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { pyAs } from '../helpers/neighbour.js';

/**
 * Open directory handles cost the daemon memory in proportion to what was read
 * from them, not to the directory: listings are streamed by offset, so libfuse
 * keeps one request's worth per handle instead of a copy of the whole listing
 * (before: 300 handles on a 20,000-entry directory of 250-byte names took the
 * daemon from 114 MB to 1.76 GB). The home root is streamed the same way, and
 * so are the big directories JavaScript lists (below ~/.homesfs).
 */

const BASE = 700_000 + Math.floor(Math.random() * 60) * 10_000;
const U = { uid: BASE + 1, gid: BASE + 1 };
const T = 'dh';
const HOMES = { [`${T}/many`]: { owner: U, profile: 'home' } };
const ENTRIES = 20_000;
const HANDLES = 300;
/** what the daemon's RSS may grow by while the handles are held: whole listings took +1,300 to +1,600 MiB */
const BOUND_MIB = 200;

if (!canMount) console.warn(`dir-handles integration suite skipped: ${skipReason}`);

const rssMiB = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;

describe.skipIf(!canMount)('held directory handles cost what was read, not the directory', () => {
  let d: RunningDaemon;
  let tmp = '';

  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'homesfs-dh-'));
    chmodSync(tmp, 0o755);
    d = await startDaemon({ homes: HOMES, create: Object.keys(HOMES), config: { owners: { from: BASE, to: BASE + 9_999 } } });
    for (const id of Object.keys(HOMES)) await d.waitForLog((l) => l.msg === 'home ledger built' && l.home === id);
    // Made on the backing (fast), in a directory and in the home root, then taken into the ledger by a rescan.
    const home = d.backingOf(T, 'many');
    mkdirSync(join(home, 'big'));
    mkdirSync(join(home, '.homesfs', 'big'), { recursive: true });
    const made = spawnSync('python3', [
      '-c',
      `import os,sys\nfor d in (os.path.join(sys.argv[1], 'big'), sys.argv[1], os.path.join(sys.argv[1], '.homesfs', 'big')):\n  for i in range(${ENTRIES}): os.close(os.open(os.path.join(d, '%06d-' % i + 'n' * 243), os.O_CREAT | os.O_WRONLY, 0o600))\nos.system('chown -R ${U.uid}:${U.gid} ' + sys.argv[1])`,
      home,
    ]);
    expect(made.status, String(made.stderr)).toBe(0);
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, 'rescan', `${T}/many`], { timeoutMs: 120_000 });
    expect(r.code, r.stderr).toBe(0);
  }, 180_000);

  afterAll(async () => {
    await d?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  /** HANDLES open handles on `dir`, each having read one batch of entries, all held while the daemon's RSS is read. */
  const holdHandles = async (dir: string) => {
    const before = rssMiB(d.proc.pid!);
    const marks = mkdtempSync(join(tmp, 'marks-'));
    chmodSync(marks, 0o1777);
    const held = pyAs(
      tmp,
      U,
      `import os, sys, time
its = []
names = set()
for i in range(${HANDLES}):
    it = os.scandir(sys.argv[1])
    names.add(next(it).name)
    its.append(it)
open(os.path.join(sys.argv[2], 'held'), 'w').close()
while not os.path.exists(os.path.join(sys.argv[2], 'done')): time.sleep(0.02)
# and one listing read to its end: every entry, once
all = [e.name for e in os.scandir(sys.argv[1])]
print(len(its), len(all), len(set(all)))`,
      dir,
      marks,
    );
    for (let i = 0; i < 6000 && !existsSync(join(marks, 'held')); i++) {
      await Promise.race([held, new Promise((r) => setTimeout(r, 20))]);
    }
    expect(existsSync(join(marks, 'held'))).toBe(true);
    const during = rssMiB(d.proc.pid!);
    writeFileSync(join(marks, 'done'), '');
    const out = await held;
    return { before, during, out };
  };

  it(`${HANDLES} handles on a ${ENTRIES}-entry directory, each read a little: the daemon's RSS grows by a few MiB, not by listings`, async () => {
    const { before, during, out } = await holdHandles(join(d.home(T, 'many'), 'big'));
    console.log(`daemon RSS ${before.toFixed(0)} MiB before, ${during.toFixed(0)} MiB with ${HANDLES} handles held on ${ENTRIES} entries`);
    expect(out).toBe(`${HANDLES} ${ENTRIES} ${ENTRIES}`);
    // A whole listing copy per handle would be ~5.5 MiB each (1.3-1.6 GiB in all); what is left is
    // the daemon's transient garbage (JavaScript's listings re-read the directory per request).
    expect(during - before).toBeLessThan(BOUND_MIB);
  }, 300_000);

  it('the same on the home root', async () => {
    const { before, during, out } = await holdHandles(d.home(T, 'many'));
    console.log(`home root: daemon RSS ${before.toFixed(0)} MiB before, ${during.toFixed(0)} MiB with ${HANDLES} handles held`);
    // the root also lists "big" and ".homesfs", each name once
    const [, n, unique] = out.split(' ').map(Number);
    expect(n).toBe(ENTRIES + 2);
    expect(unique).toBe(n);
    expect(during - before).toBeLessThan(BOUND_MIB);
  }, 300_000);

  it('the same where JavaScript lists (below ~/.homesfs): streamed by offset too', async () => {
    const { before, during, out } = await holdHandles(join(d.home(T, 'many'), '.homesfs', 'big'));
    console.log(`~/.homesfs/big: daemon RSS ${before.toFixed(0)} MiB before, ${during.toFixed(0)} MiB with ${HANDLES} handles held`);
    expect(out).toBe(`${HANDLES} ${ENTRIES} ${ENTRIES}`);
    expect(during - before).toBeLessThan(BOUND_MIB);
  }, 300_000);
});

describe.skipIf(!canMount)('directory handles count against caps of their own: per uid and in all', () => {
  const U2 = { uid: BASE + 2, gid: BASE + 2 };
  let d: RunningDaemon;
  let tmp = '';
  const status = async () => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'status']);
    return (JSON.parse(r.stdout) as { limits: { dirHandles: { open: number; refused: number; perUidCap: number; cap: number } } }).limits.dirHandles;
  };
  /** `n` handles opened on `dir` as `who`: how many opened before EMFILE (and the errno name), then all closed. */
  const openMany = (who: { uid: number; gid: number }, dir: string, n: number, holdFor = '') =>
    pyAs(
      tmp,
      who,
      `import os, sys, errno, time
fds = []
err = '-'
for i in range(${n}):
    try:
        fds.append(os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY))
    except OSError as e:
        err = errno.errorcode[e.errno]
        break
print(len(fds), err, flush=True)
${holdFor ? `while not os.path.exists(${JSON.stringify(holdFor)}): time.sleep(0.02)` : ''}
for fd in fds: os.close(fd)`,
      dir,
    );

  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'homesfs-dh2-'));
    chmodSync(tmp, 0o755);
    const homes = { [`${T}/a`]: { owner: U, profile: 'home' }, [`${T}/b`]: { owner: U2, profile: 'home' } };
    d = await startDaemon({ homes, create: Object.keys(homes), config: { owners: { from: BASE, to: BASE + 9_999 }, limits: { dirHandlesPerUid: 50, dirHandles: 80 }, probe: { intervalMs: 500, timeoutMs: 5000 } } });
    for (const id of Object.keys(homes)) await d.waitForLog((l) => l.msg === 'home ledger built' && l.home === id);
  }, 60_000);

  afterAll(async () => {
    await d?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it('a uid past its cap gets EMFILE, and gets its handles back when it closes them', async () => {
    expect(await openMany(U, d.home(T, 'a'), 60)).toBe('50 EMFILE');
    expect(await openMany(U, d.home(T, 'a'), 60)).toBe('50 EMFILE');
    const s = await status();
    expect(s).toMatchObject({ open: 0, perUidCap: 50, cap: 80 });
    expect(s.refused).toBeGreaterThanOrEqual(2);
    // answered on libfuse's threads; the daemon logs them at its next probe
    const line = await d.waitForLog((l) => l.msg.startsWith('directory opens refused'), 10_000);
    expect(line).toMatchObject({ op: 'opendir', errno: 'EMFILE' });
  });

  it('all uids together stop at the daemon-wide cap', async () => {
    const marks = mkdtempSync(join(tmp, 'marks-'));
    chmodSync(marks, 0o1777);
    const release = join(marks, 'release');
    const holding = openMany(U, d.home(T, 'a'), 50, release);
    for (let i = 0; i < 500 && (await status()).open < 50; i++) await new Promise((r) => setTimeout(r, 20));
    expect((await status()).open).toBe(50);
    // the second uid has 30 left of the 80 in all, not its own 50
    expect(await openMany(U2, d.home(T, 'b'), 50)).toBe('30 EMFILE');
    writeFileSync(release, '');
    expect(await holding).toBe('50 -');
    expect((await status()).open).toBe(0);
  });
});
