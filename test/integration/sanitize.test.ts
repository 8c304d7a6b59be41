import { spawnSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricSample, scrapeMetrics } from '../helpers/metrics.js';
import { canMount, copyDaemonTree, HOMESCTL, ROOT, runAs, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';

/**
 * The native layer under AddressSanitizer and UndefinedBehaviorSanitizer,
 * through a real mount: the addon is built with both (HOMESFS_SANITIZE=1
 * node scripts/build-native.mjs, into native/build-sanitize, never installed)
 * and placed in a copy of the binding beside a copy of dist/; the daemon runs
 * on that copy with the ASan runtime preloaded (Node itself is not built with
 * it). A workload of racing opens, creates, writes, appends, truncates,
 * unlinks, hard links, renames (within a home and across the two), listings
 * and invalid names runs in two homes (each home's owner in its own, root
 * across both) while an admin loop
 * switches their profiles and limits. Clean: the workload ends, the daemon
 * stops with 0 and its stderr holds no sanitizer report.
 *
 * `npm run test:sanitize` runs this file alone; HOMESFS_SANITIZE_SECONDS
 * sets the workload's length (default 40).
 */

// one owner per home: an owner uid belongs to one home
/** this file's own owner ids (helpers/owner-ids.ts) */
const BASE = ownerRange(import.meta.filename).from;
const UA = { uid: BASE + 93, gid: BASE + 93 };
const UB = { uid: BASE + 94, gid: BASE + 94 };
const T = 'san';
const SECONDS = Number(process.env.HOMESFS_SANITIZE_SECONDS ?? 40);
const REPORT = /ERROR: AddressSanitizer|runtime error:|SUMMARY: (Address|UndefinedBehavior)Sanitizer|ERROR: LeakSanitizer/;

if (!canMount) console.warn(`sanitizer suite skipped: ${skipReason}`);

const WORKLOAD = String.raw`
import os, sys, random, threading, json, errno
a, b, seconds, seed = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
homes = [a, b]
ops = {}
errs = {}
lock = threading.Lock()
import time
deadline = time.time() + seconds

def work(tid):
    rnd = random.Random(seed * 100 + tid)
    held = []
    while time.time() < deadline:
        h = rnd.choice(homes)
        o = b if h == a else a
        n = lambda d=h: os.path.join(d, 'n%d' % rnd.randrange(24))
        sub = lambda d=h: os.path.join(d, 'd%d' % rnd.randrange(3))
        k = rnd.randrange(19)
        try:
            if k == 0:
                fd = os.open(n(), os.O_RDONLY); os.read(fd, rnd.choice([100, 70000])); os.close(fd)
            elif k == 1:
                fd = os.open(n(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.write(fd, rnd.choice([b'text\n', b'\xff\xfe', os.urandom(rnd.choice([1, 4096, 40000, 150000]))]))
                os.close(fd)
            elif k == 2:
                os.unlink(n())
            elif k == 3:
                os.link(n(), n())
            elif k == 4:
                os.link(n(), n(o))
            elif k == 5:
                os.rename(n(), n())
            elif k == 6:
                os.rename(n(), n(o))
            elif k == 7:
                fd = os.open(n(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                os.write(fd, b'x' * rnd.randrange(1, 70000))
                if rnd.random() < 0.2: os.fsync(fd)
                os.close(fd)
            elif k == 8:
                os.truncate(n(), rnd.randrange(0, 100000))
            elif k == 9:
                os.listdir(h); os.stat(n())
            elif k == 10:
                os.mkdir(sub(), 0o700)
            elif k == 11:
                os.rename(n(), os.path.join(sub(), 'm%d' % rnd.randrange(4)))
            elif k == 12:
                d = sub()
                for e in os.listdir(d): os.unlink(os.path.join(d, e))
                os.rmdir(d)
            elif k == 13:
                # a handle kept open across an unlink and a rename of its name
                p = n()
                fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
                os.pwrite(fd, b'y' * 5000, rnd.randrange(0, 10000))
                held.append(fd)
                if rnd.random() < 0.5: os.unlink(p)
                else: os.rename(p, n())
            elif k == 14:
                if held:
                    fd = held.pop(rnd.randrange(len(held)))
                    try:
                        os.pread(fd, 8192, 0); os.fstat(fd); os.ftruncate(fd, rnd.randrange(0, 3000))
                    finally:
                        os.close(fd)
            elif k == 15:
                os.chmod(n(), rnd.choice([0o600, 0o755, 0o4755])); os.utime(n(), None)
            elif k == 16:
                os.open(os.path.join(h.encode(), b'bad\xffname'), os.O_WRONLY | os.O_CREAT, 0o600)
            elif k == 17:
                fd = os.open(n(), os.O_RDONLY)
                os.pread(fd, 65536, rnd.randrange(0, 200000)); os.close(fd)
            else:
                ds = os.open(h, os.O_RDONLY | os.O_DIRECTORY)
                os.listdir(ds); os.close(ds)
            with lock: ops[k] = ops.get(k, 0) + 1
        except OSError as e:
            with lock: errs[errno.errorcode.get(e.errno, str(e.errno))] = errs.get(errno.errorcode.get(e.errno, str(e.errno)), 0) + 1
    for fd in held: os.close(fd)

ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in ts: t.start()
for t in ts: t.join()
print(json.dumps({'ops': sum(ops.values()), 'kinds': len(ops), 'errors': errs}))
`;

/** A copy of dist/ beside the sanitized addons. */
function sanitizedTree(dir: string): string {
  const build = spawnSync(process.execPath, [join(ROOT, 'scripts', 'build-native.mjs')], {
    env: { ...process.env, HOMESFS_SANITIZE: '1' },
    encoding: 'utf8',
    timeout: 300_000,
  });
  if (build.status !== 0) throw new Error(`the sanitized build failed:\n${build.stdout}${build.stderr}`);
  const root = join(dir, 'tree');
  const addons = copyDaemonTree(root);
  for (const name of ['homesfs.node', 'scandir.node']) {
    cpSync(join(ROOT, 'native', 'build-sanitize', 'build', 'Release', name), join(addons, name));
  }
  return root;
}

function asanRuntime(): string {
  const r = spawnSync('gcc', ['-print-file-name=libasan.so'], { encoding: 'utf8' });
  const lib = r.stdout.trim();
  if (r.status !== 0 || !lib.startsWith('/') || !existsSync(lib)) throw new Error(`no ASan runtime (gcc -print-file-name=libasan.so said ${JSON.stringify(lib)})`);
  return lib;
}

describe.skipIf(!canMount)('the native layer under ASan and UBSan, through a real mount', () => {
  let dir: string;
  let tree: string;
  let d: RunningDaemon | undefined;

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'homesfs-san-'));
    chmodSync(dir, 0o755);
    tree = sanitizedTree(dir);
    writeFileSync(join(dir, 'workload.py'), WORKLOAD, { mode: 0o644 });
  }, 300_000);

  afterAll(async () => {
    await d?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it(`a ${SECONDS} s workload of racing file operations and admin changes leaves no sanitizer report`, async () => {
    const homes = { [`${T}/a`]: { owner: UA, profile: 'home' }, [`${T}/b`]: { owner: UB, profile: 'posix' } };
    d = await startDaemon({
      bin: join(tree, 'dist', 'cli', 'homesfs.js'),
      create: Object.keys(homes),
      homes,
      config: { logLevel: 'info', metrics: { socket: join(dir, 'metrics', 'metrics.sock') } },
      env: {
        LD_PRELOAD: asanRuntime(),
        // Node's own allocations are not ours to judge; every error report goes to stderr.
        ASAN_OPTIONS: 'detect_leaks=0:abort_on_error=0:print_summary=1',
        UBSAN_OPTIONS: 'print_stacktrace=1',
      },
    });
    const daemon = d;
    // The daemon runs the sanitized addon: the ASan runtime and the tree's homesfs.node are mapped.
    const maps = readFileSync(`/proc/${daemon.proc.pid}/maps`, 'utf8');
    expect(maps).toMatch(/libasan\.so/);
    expect(maps).toContain(join(tree, 'native', 'addon', 'homesfs.node'));

    const a = daemon.home(T, 'a');
    const b = daemon.home(T, 'b');
    let admin = true;
    const ctl = (...args: string[]) => runAsync(process.execPath, [HOMESCTL, '--socket', daemon.socket, ...args], { timeoutMs: 20_000 });
    const adminLoop = (async () => {
      const profiles = ['home', 'scratch', 'posix'];
      let turns = 0;
      let failures = 0;
      while (admin) {
        const home = turns % 2 === 0 ? `${T}/a` : `${T}/b`;
        const steps: string[][] = [
          ['set-profile', home, profiles[turns % 3]!],
          ['set-limits', home, '--inodes', String(20 + (turns % 5) * 10), '--file-size', turns % 2 === 0 ? '64K' : 'off'],
          ['set-limits', home, '--inodes', 'default', '--file-size', 'default'],
          ['set-profile', home, '--clear'],
        ];
        for (const step of steps) {
          const r = await ctl(...step);
          if (r.code !== 0) failures++;
        }
        turns++;
      }
      return { turns, failures };
    })();
    const racers = await Promise.all(
      // Each owner in its home; root across both (renames between them: EXDEV).
      [[UA, a, a], [UB, b, b], [{ uid: 0, gid: 0 }, a, b]].map(([who, x, y], i) => {
        const o = who as { uid: number; gid: number };
        return runAs(o.uid, o.gid, `python3 ${join(dir, 'workload.py')} ${x as string} ${y as string} ${SECONDS} ${i + 1}`, { timeoutMs: (SECONDS + 60) * 1000 });
      }),
    );
    admin = false;
    const adm = await adminLoop;
    // A report first: a sanitizer that stopped the daemon fails the workload too.
    expect(daemon.stderr().match(REPORT)?.[0] ?? null, daemon.stderr()).toBeNull();

    let ops = 0;
    const errors: Record<string, number> = {};
    for (const r of racers) {
      expect(r.stderr, `workload: ${r.stderr}\ndaemon stderr:\n${daemon.stderr()}`).toBe('');
      const out = JSON.parse(r.stdout) as { ops: number; kinds: number; errors: Record<string, number> };
      ops += out.ops;
      for (const [k, v] of Object.entries(out.errors)) errors[k] = (errors[k] ?? 0) + v;
      expect(out.kinds).toBeGreaterThan(15);
    }
    console.log(`sanitize: ${ops} operations (refused: ${JSON.stringify(errors)}), ${adm.turns} admin rounds`);
    expect(ops).toBeGreaterThan(1000);
    expect(adm.turns).toBeGreaterThan(2);
    expect(adm.failures).toBe(0);
    // The C data plane served reads and writes under the sanitizers.
    const metrics = await scrapeMetrics(join(dir, 'metrics', 'metrics.sock'));
    const native = { reads: metricSample(metrics, 'homesfs_native_reads_total'), writes: metricSample(metrics, 'homesfs_native_writes_total') };
    console.log(`sanitize: native ${JSON.stringify(native)}`);
    expect(native.reads).toBeGreaterThan(100);
    expect(native.writes).toBeGreaterThan(100);
    // The mount still answers, then the daemon stops cleanly.
    expect((await daemon.status()).homes).toBeDefined();
    const code = await daemon.stopKeep();
    const stderr = daemon.stderr();
    expect(stderr.match(REPORT)?.[0] ?? null, stderr).toBeNull();
    expect(code, stderr).toBe(0);
  }, (SECONDS + 240) * 1000);
});
