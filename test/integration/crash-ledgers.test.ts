import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, HOMESCTL, HOMESFS, runAsync, skipReason, startDaemon, SYSTEM_PATH, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { serving, startSuccessor, waitFor, type Successor } from '../helpers/takeover.js';

/**
 * A crash keeps the homes' ledgers (src/fs/ledger-area.ts): the resumed
 * daemon starts each home whose counts were exact at the kill with them,
 * without walking its tree, so a big home's writer waits for the restart
 * only. A home with a change in flight in JavaScript at the kill (here an
 * `rm` whose free of a fragmented file takes seconds) is scanned as at any
 * start. Every ledger equals the disk afterwards.
 */

const OWNERS = ownerRange(import.meta.filename);
const BIG = { uid: OWNERS.from + 1, gid: OWNERS.from + 1 };
const BUSY = { uid: OWNERS.from + 2, gid: OWNERS.from + 2 };
const OTHER = { uid: OWNERS.from + 3, gid: OWNERS.from + 3 };
const T = 'tcl';
const FILES = 200_000;
/** 384 MiB written one byte every 8 KiB: a free of seconds, which the kill lands in */
const FRAGMENTED_MIB = 384;

if (!canMount) console.warn(`crash-ledgers integration suite skipped: ${skipReason}`);

/** Made on the backing tree before the daemon starts (its start-up scan counts them). */
function populate(dir: string): void {
  const backing = join(dir, 'backing');
  const big = join(backing, T, 'big');
  const busy = join(backing, T, 'busy');
  const other = join(backing, T, 'other');
  for (const d of [big, busy, other]) mkdirSync(d, { recursive: true, mode: 0o700 });
  execFileSync(
    'python3',
    [
      '-c',
      `import os, sys
big, busy, n, mib = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for i in range(n // 100):
    p = os.path.join(big, 'd%d' % i)
    os.mkdir(p, 0o700)
    for j in range(100):
        with open(os.path.join(p, 'f%d' % j), 'w') as f:
            f.write('x' * (j % 7))
fd = os.open(os.path.join(busy, 'frag.bin'), os.O_CREAT | os.O_WRONLY, 0o600)
for off in range(0, mib << 20, 8192):
    os.pwrite(fd, b'x', off)
os.fsync(fd)
os.close(fd)
`,
      big,
      busy,
      String(FILES),
      String(FRAGMENTED_MIB),
    ],
    { stdio: 'inherit' },
  );
  for (const [d, o] of [
    [big, BIG],
    [busy, BUSY],
    [other, OTHER],
  ] as const) {
    execFileSync('chown', ['-R', `${o.uid}:${o.gid}`, d]);
  }
}

describe.skipIf(!canMount)("a crash keeps the homes' ledgers", () => {
  let d: RunningDaemon | null = null;
  let resumed: Successor | null = null;
  let holderPid: number | null = null;

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'homesfs-cl-'));
    chmodSync(dir, 0o755);
    mkdirSync(join(dir, 'backing'), { mode: 0o700 });
    populate(dir);
    d = await startDaemon({
      dir,
      fresh: true,
      awaitLedgers: true,
      homes: { [`${T}/big`]: { owner: BIG, profile: 'home' }, [`${T}/busy`]: { owner: BUSY, profile: 'home' }, [`${T}/other`]: { owner: OTHER, profile: 'home' } },
      config: { owners: OWNERS, crashSurvival: true },
    });
  }, 240_000);

  afterAll(async () => {
    if (resumed && resumed.proc.exitCode === null && resumed.proc.signalCode === null) {
      resumed.proc.kill('SIGTERM');
      await resumed.exited;
    }
    if (holderPid !== null) {
      try {
        process.kill(holderPid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    await d?.stop();
  });

  /**
   * The home's ledger against the disk, measured apart from the daemon: a
   * `rescan` of 200,000 files outlasts the control socket's request timeout
   * (its owner repair walks the tree through the threadpool), so the ledger
   * (`usage`) is compared with a walk of the backing directory that counts as
   * the scan does (every name an inode, the logical size of each regular file).
   */
  const drift = async (home: string) => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d!.socket, '--json', 'usage', home]);
    expect(r.code, r.stderr).toBe(0);
    const ledger = JSON.parse(r.stdout) as { bytes: number; inodes: number };
    const walk = await runAsync('python3', [
      '-c',
      `import os, sys, json
b, n = 0, 0
for root, dirs, files in os.walk(sys.argv[1]):
    for name in dirs + files:
        st = os.lstat(os.path.join(root, name))
        n += 1
        if os.path.stat.S_ISREG(st.st_mode):
            b += st.st_size
print(json.dumps({'bytes': b, 'inodes': n}))`,
      join(d!.dir, 'backing', home),
    ]);
    expect(walk.code, walk.stderr).toBe(0);
    const disk = JSON.parse(walk.stdout) as { bytes: number; inodes: number };
    return { bytes: ledger.bytes - disk.bytes, inodes: ledger.inodes - disk.inodes };
  };

  it(`a home of ${FILES} files keeps its ledger, a home with an rm in flight is scanned; no drift`, async () => {
    holderPid = ((await d!.status()) as { holder: { pid: number | null } }).holder.pid;
    const stop = join(d!.dir, 'stop');
    // While `hold` exists the writers change nothing (each times a listing of an empty directory instead,
    // which the kernel asks the daemon for every time, so the pause is still measured) and say so in `sig/<home>`: a kill then finds no change of theirs in flight, which would
    // rightly make their home scanned (ledger-area.ts) and the test a race.
    const sig = join(d!.dir, 'sig');
    mkdirSync(sig, { mode: 0o777 });
    chmodSync(sig, 0o777);
    const hold = join(sig, 'hold');
    const script = join(d!.dir, 'writer.py');
    writeFileSync(
      script,
      `import os, sys, time, json\nhome, stop, hold, ack = sys.argv[1:5]\nfd = os.open(os.path.join(home, 'log'), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)\nprobe = os.path.join(home, 'probe')\nos.makedirs(probe, exist_ok=True)\nerrors, n, slow, acked = 0, 0, [], False\n` +
        `while not os.path.exists(stop):\n  holding = os.path.exists(hold)\n  if holding and not acked:\n    open(ack, 'w').close()\n  acked = holding\n  at, t = time.time(), time.monotonic()\n  try:\n    if holding:\n      os.listdir(probe)\n    else:\n      os.write(fd, b'line %08d\\n' % n)\n      os.fsync(fd)\n      n += 1\n  except OSError:\n    errors += 1\n  took = time.monotonic() - t\n  if took > 0.02:\n    slow.append([round(at * 1000), round(took * 1000, 1)])\n  time.sleep(0.01)\nos.close(fd)\nprint(json.dumps({'errors': errors, 'written': n, 'slow': slow}))\n`,
      { mode: 0o644 },
    );
    const as = (o: { uid: number; gid: number }) => [`--reuid=${o.uid}`, `--regid=${o.gid}`, '--clear-groups'];
    const holdWriters = async () => {
      for (const h of ['big', 'other']) rmSync(join(sig, h), { force: true });
      writeFileSync(hold, '');
      await waitFor('the writers to hold', () => ['big', 'other'].every((h) => existsSync(join(sig, h))) || undefined, 30_000);
    };
    const releaseWriters = () => rmSync(hold, { force: true });
    const writer = runAsync('setpriv', [...as(BIG), 'python3', script, d!.home(T, 'big'), stop, hold, join(sig, 'big')], { env: { PATH: SYSTEM_PATH }, timeoutMs: 300_000 });
    const small = runAsync('setpriv', [...as(OTHER), 'python3', script, d!.home(T, 'other'), stop, hold, join(sig, 'other')], { env: { PATH: SYSTEM_PATH }, timeoutMs: 300_000 });
    await new Promise((r) => setTimeout(r, 500));
    const config = join(d!.dir, 'config.json');
    const statusOf = async (socket: string) => {
      const r = await runAsync(process.execPath, [HOMESCTL, '--socket', socket, '--json', 'status']);
      expect(r.code, r.stderr).toBe(0);
      return JSON.parse(r.stdout) as { background: { slowFrees: { inFlight: number } } };
    };

    // 1. The kill lands while the rm's free runs in JavaScript (on the threadpool, seconds).
    const rm = runAsync('setpriv', [...as(BUSY), 'rm', '-f', join(d!.home(T, 'busy'), 'frag.bin')], { env: { PATH: SYSTEM_PATH }, timeoutMs: 180_000 });
    let inFlight = 0;
    for (let i = 0; i < 3000 && inFlight === 0; i++) {
      inFlight = (await statusOf(d!.socket)).background.slowFrees.inFlight;
      if (inFlight === 0) await new Promise((r) => setTimeout(r, 10));
    }
    expect(inFlight).toBeGreaterThan(0);
    await holdWriters();
    expect((await statusOf(d!.socket)).background.slowFrees.inFlight).toBeGreaterThan(0);
    d!.proc.kill('SIGKILL');
    await d!.exited;
    resumed = startSuccessor(HOMESFS, config, false);
    expect(await serving(resumed)).toBe(true);
    releaseWriters();
    const first = resumed;
    const built = (s: Successor, home: string) => s.logs.some((l) => l.msg === 'home ledger built' && l.home === home);
    const kept = (s: Successor, home: string) => s.logs.some((l) => l.msg === 'home ledger kept across the crash' && l.home === home);
    await waitFor('the busy home scanned', () => built(first, `${T}/busy`) || undefined, 60_000);
    // The exact homes took their ledgers and walked no tree; the one with the rm in flight was scanned.
    expect(kept(first, `${T}/big`)).toBe(true);
    expect(built(first, `${T}/big`)).toBe(false);
    expect(kept(first, `${T}/other`)).toBe(true);
    expect(kept(first, `${T}/busy`)).toBe(false);
    expect(first.logs.find((l) => l.msg === "the dead daemon's home ledgers: the exact ones are taken without a scan")).toMatchObject({ exact: 2, scanned: 1 });
    const r = await rm;
    // The resent unlink cannot be known to have happened or not: EIO (README "Crash survival"); the name is gone.
    expect(r.stderr).toMatch(/Input\/output error|^$/);

    // 2. A crash with no change in flight: how long the big home's owner waits.
    await new Promise((r) => setTimeout(r, 500));
    await holdWriters();
    const killedWall = Date.now();
    const killedAt = performance.now();
    first.proc.kill('SIGKILL');
    await first.exited;
    resumed = startSuccessor(HOMESFS, config, false);
    expect(await serving(resumed)).toBe(true);
    const servingMs = performance.now() - killedAt;
    await new Promise((r) => setTimeout(r, 300));
    releaseWriters();
    await new Promise((r) => setTimeout(r, 500));
    writeFileSync(stop, '');
    type Writer = { errors: number; written: number; slow: [number, number][] };
    const w = JSON.parse((await writer).stdout.trim().split('\n').pop()!) as Writer;
    const o = JSON.parse((await small).stdout.trim().split('\n').pop()!) as Writer;
    // The worst wait of a call (a write, or a listing while held) that ended after the second kill (the first crash had the rm's free in it).
    const worstAfter = (x: Writer) => Math.max(0, ...x.slow.filter(([at, took]) => at + took >= killedWall).map(([, took]) => took));
    console.log(
      `crash under ${FILES} files: serving again ${servingMs.toFixed(0)} ms after the kill; ` +
        `big home's owner: ${w.written} fsynced appends, ${w.errors} errors, worst wait after the second kill ${worstAfter(w)} ms; ` +
        `small home's: ${o.written}, ${o.errors} errors, ${worstAfter(o)} ms; calls over 20 ms: ${JSON.stringify(w.slow)} / ${JSON.stringify(o.slow)}`,
    );
    expect(w.errors).toBe(0);
    expect(o.errors).toBe(0);
    for (const h of ['big', 'busy', 'other']) expect(kept(resumed, `${T}/${h}`), h).toBe(true);
    for (const h of ['big', 'busy', 'other']) expect(built(resumed, `${T}/${h}`), h).toBe(false);

    // Every ledger is the disk's.
    for (const h of ['big', 'busy', 'other']) expect(await drift(`${T}/${h}`), h).toEqual({ bytes: 0, inodes: 0 });
  }, 600_000);
});
