import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, HOMESCTL, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { pyAs } from '../helpers/neighbour.js';

/**
 * Open directory handles cost the daemon memory in proportion to what was read
 * from them, not to the directory: listings are streamed by offset, so libfuse
 * keeps one request's worth per handle instead of a copy of the whole listing
 * (before: 300 handles on a 20,000-entry directory of 250-byte names took the
 * daemon from 114 MB to 1.76 GB). The home root is streamed the same way, and
 * so are the big directories JavaScript lists (below ~/.homesfs).
 */

/** this file's own owner ids (helpers/owner-ids.ts) */
const OWNERS = ownerRange(import.meta.filename);
const BASE = OWNERS.from;
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
    d = await startDaemon({ awaitLedgers: true, homes: HOMES, create: Object.keys(HOMES), config: { owners: OWNERS } });
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
    d = await startDaemon({ awaitLedgers: true, homes, create: Object.keys(homes), config: { owners: OWNERS, limits: { dirHandlesPerUid: 50, dirHandles: 80 }, probe: { intervalMs: 500, timeoutMs: 5000 } } });
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
    // answered on the session's worker threads; the daemon logs them at its next probe
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

describe.skipIf(!canMount)('a directory handle is an open file too: of its caller uid, its home and the daemon', () => {
  const PER_UID = 25;
  const TIGHT = 15;
  const ROOMY = 100;
  const W = { uid: BASE + 3, gid: BASE + 3 };
  const X = { uid: BASE + 4, gid: BASE + 4 };
  const Y = { uid: BASE + 5, gid: BASE + 5 };
  const Z = { uid: BASE + 6, gid: BASE + 6 };
  const R = { uid: BASE + 7, gid: BASE + 7 };
  const homes = {
    [`${T}/w`]: { owner: W, profile: 'home' },
    [`${T}/x`]: { owner: X, profile: 'tight' },
    [`${T}/y`]: { owner: Y, profile: 'tight' },
    [`${T}/z`]: { owner: Z, profile: 'home' },
    [`${T}/r`]: { owner: R, profile: 'roomy' },
  };
  let d: RunningDaemon;
  let tmp = '';
  /**
   * One process of `who` runs a plan over a file `f` of its home, a directory
   * `d` and another directory `r` (the mount's root and tenant directories
   * are no owner's to list: only root opens them, counted in no home and in
   * no uid's, see native/test/test_dirhandles.c): "o<kind><n>" opens up to n (stopping at the
   * first error: how many and the errno name), "w<kind><n>" opens n, retrying
   * EMFILE for up to 10 s (closes just made reach the daemon after close(2)
   * returns: how many), "c<kind><n>" closes n. Everything is held to the end.
   */
  const plan = (who: { uid: number; gid: number }, steps: string, f: string, dir: string, other = dir) =>
    pyAs(
      tmp,
      who,
      `import os, sys, errno, time
paths = {'f': (sys.argv[1], os.O_RDONLY), 'd': (sys.argv[2], os.O_RDONLY | os.O_DIRECTORY), 'r': (sys.argv[3], os.O_RDONLY | os.O_DIRECTORY)}
fds = {k: [] for k in paths}
out = []
for step in sys.argv[4].split(','):
    op, kind, n = step[0], step[1], int(step[2:])
    if op == 'o':
        got, err = 0, '-'
        for i in range(n):
            try:
                fds[kind].append(os.open(*paths[kind])); got += 1
            except OSError as e:
                err = errno.errorcode[e.errno]; break
        out.append('%d %s' % (got, err))
    elif op == 'w':
        got, deadline = 0, time.time() + 10
        while got < n and time.time() < deadline:
            try:
                fds[kind].append(os.open(*paths[kind])); got += 1
            except OSError as e:
                if e.errno != errno.EMFILE: raise
                time.sleep(0.05)
        out.append(str(got))
    else:
        for i in range(n): os.close(fds[kind].pop())
print(' | '.join(out))
for k in fds:
    for fd in fds[k]: os.close(fd)`,
      f,
      dir,
      other,
      steps,
    );
  const dirStatus = async () => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'status']);
    return JSON.parse(r.stdout) as { limits: { openFiles: number; dirHandles: { open: number } } };
  };
  /** Until every handle of the plans before is given back (RELEASEs are queued, not awaited, by close). */
  const settled = async () => {
    let s = await dirStatus();
    for (let i = 0; i < 100 && (s.limits.openFiles !== 0 || s.limits.dirHandles.open !== 0); i++) {
      await new Promise((r) => setTimeout(r, 50));
      s = await dirStatus();
    }
    expect({ files: s.limits.openFiles, dirs: s.limits.dirHandles.open }).toEqual({ files: 0, dirs: 0 });
  };

  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'homesfs-dh3-'));
    chmodSync(tmp, 0o755);
    d = await startDaemon({
      awaitLedgers: true,
      homes,
      create: Object.keys(homes),
      config: {
        owners: OWNERS,
        limits: { openFilesPerUid: PER_UID },
        profiles: { tight: { extends: 'home', maxOpenFiles: TIGHT }, roomy: { extends: 'home', maxOpenFiles: ROOMY } },
      },
    });
    for (const [who, key] of [[W, 'w'], [X, 'x'], [Y, 'y'], [Z, 'z'], [R, 'r']] as const) {
      await pyAs(tmp, who, 'import sys\nopen(sys.argv[1], "w").write("x")', join(d.home(T, key), 'f'));
      mkdirSync(join(d.backingOf(T, key), 'sub'));
      spawnSync('chown', [`${who.uid}:${who.gid}`, join(d.backingOf(T, key), 'sub')]);
    }
  }, 60_000);

  afterAll(async () => {
    await d?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it(`a uid holding 20 files of its ${PER_UID} (limits.openFilesPerUid) opens 5 directories, then EMFILE; 10 files closed, 10 more, then EMFILE again`, async () => {
    await settled();
    const home = d.home(T, 'w');
    const out = await plan(W, 'of20,od100,cf10,wd10,od100', join(home, 'f'), join(home, 'sub'));
    expect(out).toBe('20 - | 5 EMFILE | 10 | 0 EMFILE');
  });

  it(`a home with maxOpenFiles ${TIGHT}: its files and directory handles together stop there (EMFILE), another home is not held`, async () => {
    await settled();
    const home = d.home(T, 'x');
    // the home root is in the home as its subdirectories are; the last file open is refused though a slot
    // granted ahead to the binding may still be there (its room went to the directories)
    const out = await plan(X, 'of10,od3,or100,of5', join(home, 'f'), join(home, 'sub'), home);
    expect(out).toBe('10 - | 3 - | 2 EMFILE | 0 EMFILE');
    // The kernel sends the RELEASEs of those closes after the process exits: until they arrived,
    // X's home is still full (a hold of all TIGHT at once met EMFILE when started before them).
    await settled();
    // while X holds its home full, Y (the same profile) has all of its own
    const marks = mkdtempSync(join(tmp, 'marks-'));
    chmodSync(marks, 0o1777);
    const full = join(marks, 'full');
    const holding = pyAs(
      tmp,
      X,
      `import os, sys, time
fds = [os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY) for i in range(${TIGHT})]
open(sys.argv[2], 'w').close()
while not os.path.exists(sys.argv[2] + '.done'): time.sleep(0.02)
for fd in fds: os.close(fd)
print(len(fds))`,
      join(home, 'sub'),
      full,
    );
    for (let i = 0; i < 500 && !existsSync(full); i++) await Promise.race([holding, new Promise((r) => setTimeout(r, 20))]);
    expect(existsSync(full)).toBe(true);
    try {
      const other = d.home(T, 'y');
      expect(await plan(Y, 'od10,of100', join(other, 'f'), join(other, 'sub'))).toBe(`10 - | ${TIGHT - 10} EMFILE`);
      // X's home is full of directories: a file of its owner's is refused there
      expect(await plan(X, 'of1', join(home, 'f'), home)).toBe('0 EMFILE');
    } finally {
      writeFileSync(`${full}.done`, '');
    }
    expect(await holding).toBe(String(TIGHT));
  });

  it(`directory handles held by a uid make its file opens meet EMFILE at the per-uid cap (${PER_UID})`, async () => {
    await settled();
    const home = d.home(T, 'z');
    const out = await plan(Z, 'od20,of100,cd5,wf5,of100', join(home, 'f'), join(home, 'sub'));
    expect(out).toBe('20 - | 5 EMFILE | 5 | 0 EMFILE');
  });

  it(`files the binding opened and the daemon has not taken in yet hold their room: ${ROOMY} in all, at once`, async () => {
    await settled();
    const home = d.home(T, 'r');
    // root (no per-uid cap) opens 60 files, most of them in the binding on slots granted ahead, then at once directories
    const out = await plan({ uid: 0, gid: 0 }, 'of60,od200,of10', join(home, 'f'), join(home, 'sub'));
    expect(out).toBe(`60 - | ${ROOMY - 60} EMFILE | 0 EMFILE`);
  });
});
