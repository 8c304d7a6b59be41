#!/usr/bin/env node
// homesfs benchmark: the same workloads on the raw backing filesystem, on the
// homesfs mount (`home` and `posix` profiles) and on bindfs twice, as
// `bindfs` (-o big_writes: single-threaded, its default) and `bindfs-mt`
// (-o big_writes,multithreaded: requests served in parallel), in one run; homesfs is compared
// with each. Prints a workload table (medians, min–max spread, time ratios,
// each daemon's CPU seconds) and a per-op micro table (µs), and writes
// bench/results/latest.json.
//
// Usage (as root, /dev/fuse present):  npm run bench
//   (= tsc -p tsconfig.json && node bench/run.mjs)
//   BENCH_QUICK=1 npm run bench      a few minutes: smaller sizes, 3 reps
//
// Environment:
//   BENCH_QUICK=1      smaller defaults (64 MiB, 1000 files, 1500-file tree, 3 reps, 1000 micro ops)
//   BENCH_MB           size of the sequential file in MiB          (default 256)
//   BENCH_FILES        small files created / stat'ed / removed     (default 3000)
//   BENCH_TREE_FILES   files in the generated tree (tar, find, git) (default 4400)
//   BENCH_MICRO        ops per micro-benchmark loop                (default 3000)
//   BENCH_RAND         random 4 KiB pwrites over a 32 MiB file      (default 16000)
//   BENCH_REPS         repetitions per workload; medians are kept  (default 5)
//   BENCH_FS           where every backing lives:
//                        auto  (default) a journaled ext4 loop file when the scratch
//                              filesystem is ext4 without a journal, else the scratch fs
//                        loop  always the ext4 loop file;  here  always the scratch fs
//   BENCH_DIR          parent of the scratch directory             (default os.tmpdir())
//   BENCH_NO_BINDFS=1  skip both bindfs targets (otherwise installed with apt-get when missing)
//   BENCH_METRICS=1    serve the metrics endpoint (per-op counting on) to measure its cost
//   BENCH_ONLY         comma-separated workloads to run: seq, rand, small, tree, micro (default all
//                        of these), and scale (opt-in, never in the default set; see below)
//   BENCH_SCALE_FILES  scale: files in the home whose start-up scan is timed (default 1000000)
//   BENCH_SCALE_RSS_FILES  scale: files in the home that holds the handles   (default 100000)
//   BENCH_SCALE_HANDLES    scale: files held open through the mount at once  (default 10000)
//   BENCH_SCALE_WARM=0 scale: skip the second (warm-cache) scan
//   BENCH_SCALE_PROBE=0 scale: no probe in the other home (the scan alone, for comparison)
//   BENCH_CONFIG       JSON merged into the daemon's configuration, e.g.
//                        '{"fuse":{"nativeRead":false}}' to measure a switch off and on
//
// Fairness rules: every backing (raw, homesfs, each bindfs) is a directory of
// the same filesystem; targets are visited in an order rotated on every rep;
// metadata phases are measured cold (dentry/inode/page caches dropped) and
// warm (straight after); both bindfs get -o big_writes (without it every write
// is a 4 KiB request and "faster than bindfs" is an artifact). Single-threaded
// bindfs is the one a careful admin runs (its multithreaded mode has a race
// in its owner/permission rewriting, see bindfs(1) BUGS); multithreaded serves
// requests in parallel as homesfs does (libfuse's mt loop), so both are shown.
// Neither wins every row: the ratios against each are printed.
//
// The scale workload (BENCH_ONLY=scale; issue 13's "1M-file scan in under 20 s
// while other homes are served" and "RSS under 200 MB with 100k files and 10k open
// handles") runs its own daemon on its own backing and mount, several times:
//   1. idle: homes empty; the daemon's VmRSS once mounted and scanned;
//   2. BENCH_SCALE_FILES empty files (1000 a directory) are written straight into
//      one posix home's backing by bench/scale.c; caches dropped; the daemon is
//      started and timed until that home's 'home ledger built' log line (the
//      daemon's own ms, the wall time from spawn, its CPU seconds by thread),
//      while bench/scale.c probes another home (create, statx FORCE_SYNC, unlink
//      in a loop: latency during the scan and for 5 s after); VmRSS/VmHWM after;
//   3. the same without dropping caches (warm), unless BENCH_SCALE_WARM=0;
//   4. the big home moved out; a posix home with BENCH_SCALE_RSS_FILES files:
//      VmRSS after its scan, after `find -printf %s` over it through the mount,
//      and with BENCH_SCALE_HANDLES of them held open (bench/scale.c hold, root,
//      so limits.openFilesPerUid does not count them; posix allows 16384).
// The loop file (BENCH_FS loop/auto) is made with enough inodes for it (mkfs -N).
//
// Performance numbers live here, never in tests. Every workload runs in a
// child process (dd, tar, find, git, node, the C micro program): this process
// never touches a FUSE mount synchronously, so a stuck daemon cannot wedge it.

import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, chmodSync, accessSync, constants } from 'node:fs';
import { availableParallelism, release, tmpdir, cpus, totalmem } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const HOMESFS = join(ROOT, 'dist/cli/homesfs.js');
const HOMESCTL = join(ROOT, 'dist/cli/homesctl.js');

const QUICK = Boolean(process.env.BENCH_QUICK && process.env.BENCH_QUICK !== '0');
const envInt = (name, dflt) => {
  const v = process.env[name];
  if (v === undefined || v === '') return dflt;
  const n = Number.parseInt(v, 10);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`${name} must be a positive integer, got ${JSON.stringify(v)}`);
  return n;
};
const MB = envInt('BENCH_MB', QUICK ? 64 : 256);
const FILES = envInt('BENCH_FILES', QUICK ? 1000 : 3000);
const TREE_FILES = envInt('BENCH_TREE_FILES', QUICK ? 1500 : 4400);
const MICRO_N = envInt('BENCH_MICRO', QUICK ? 1000 : 3000);
const RAND_N = envInt('BENCH_RAND', QUICK ? 4000 : 16000);
const REPS = envInt('BENCH_REPS', QUICK ? 3 : 5);
const ONLY = process.env.BENCH_ONLY ? new Set(process.env.BENCH_ONLY.split(',').map((s) => s.trim())) : null;
const SCALE = ONLY?.has('scale') ?? false; // opt-in only: never part of the default set
const SCALE_FILES = envInt('BENCH_SCALE_FILES', 1_000_000);
const SCALE_RSS_FILES = envInt('BENCH_SCALE_RSS_FILES', 100_000);
const SCALE_HANDLES = envInt('BENCH_SCALE_HANDLES', 10_000);
const SCALE_WARM = process.env.BENCH_SCALE_WARM !== '0';
const SCALE_PROBE = process.env.BENCH_SCALE_PROBE !== '0';
const SCALE_PER_DIR = 1000;
if (SCALE_HANDLES > SCALE_RSS_FILES) throw new Error('BENCH_SCALE_HANDLES must not exceed BENCH_SCALE_RSS_FILES (the handles are of those files)');
/** inodes the scale workload writes (files and their directories), plus room for the rest */
const SCALE_INODES = SCALE ? Math.ceil((SCALE_FILES + SCALE_RSS_FILES) * (1 + 1 / SCALE_PER_DIR)) + 262_144 : 0;
const EXTRA_CONFIG = process.env.BENCH_CONFIG ? JSON.parse(process.env.BENCH_CONFIG) : {};
const FS_MODE = process.env.BENCH_FS || 'auto';
if (!['auto', 'loop', 'here'].includes(FS_MODE)) throw new Error(`BENCH_FS must be auto, loop or here, got ${FS_MODE}`);
const SMALL_DIRS = 20;
const SMALL_SIZE = 4096;
const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

const log = (...a) => process.stderr.write(`[bench] ${a.join(' ')}\n`);

// ---------------------------------------------------------------- helpers --

/** Run a program asynchronously; resolves with code, output and wall time in seconds. */
function run(cmd, args, { cwd, timeoutMs = 300_000, env } = {}) {
  return new Promise((res) => {
    const t0 = process.hrtime.bigint();
    const p = spawn(cmd, args, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      p.kill('SIGKILL');
    }, timeoutMs);
    p.on('error', (e) => (stderr += String(e)));
    p.on('close', (code, signal) => {
      const secs = Number(process.hrtime.bigint() - t0) / 1e9;
      clearTimeout(timer);
      res({ code: timedOut ? 'timeout' : (code ?? signal), stdout, stderr, secs });
    });
  });
}
const sh = (script, opts) => run('sh', ['-c', script], opts);

function mustOk(r, what) {
  if (r.code !== 0) throw new Error(`${what} failed (${r.code}): ${r.stderr.trim().slice(0, 400)}`);
  return r;
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

function isMounted(path) {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((l) => l.split(' ')[4] === path);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let canDropCaches = false;
try {
  accessSync('/proc/sys/vm/drop_caches', constants.W_OK);
  canDropCaches = true;
} catch {
  canDropCaches = false;
}
/** sync + drop page cache, dentries and inodes (FUSE ones too) when allowed. */
async function dropCaches() {
  if (!canDropCaches) return false;
  const r = await sh('sync && echo 3 > /proc/sys/vm/drop_caches');
  if (r.code !== 0) canDropCaches = false;
  return r.code === 0;
}

function which(cmd) {
  return spawnSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' }).stdout.trim() || null;
}

/** user+system CPU seconds of a process and all its threads so far (/proc/<pid>/stat fields 14, 15). */
function cpuSeconds(pid) {
  if (!pid) return null;
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / CLK_TCK;
  } catch {
    return null;
  }
}

/** A markdown table, the first `leftCols` columns left-aligned. */
function tableLines(header, rows, leftCols) {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells) => '| ' + cells.map((c, i) => (i < leftCols ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join(' | ') + ' |';
  const sep = '|' + widths.map((w, i) => (i < leftCols ? ':' + '-'.repeat(w + 1) : '-'.repeat(w + 1) + ':')).join('|') + '|';
  return [line(header), sep, ...rows.map(line)];
}

const loadAvg1 = () => Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);

/** mount source and fstype of the filesystem holding `path`, and whether ext4 has a jbd2 journal. */
function fsOf(path) {
  const r = spawnSync('findmnt', ['-n', '-o', 'SOURCE,FSTYPE,TARGET', '-T', path], { encoding: 'utf8' });
  const [source = '?', fstype = '?', target = '?'] = r.stdout.trim().split(/\s+/);
  let journal = null;
  if (fstype === 'ext4' || fstype === 'ext3') {
    const dev = basename(source);
    try {
      journal = readFileSync('/proc/fs/jbd2/' + dev + '-8/info', 'utf8').length > 0;
    } catch {
      journal = existsSync('/proc/fs/jbd2') && spawnSync('sh', ['-c', `ls /proc/fs/jbd2 | grep -q '^${dev}-'`]).status === 0;
    }
  }
  return { source, fstype, target, journal };
}

// ---------------------------------------------------------------- setup ----

const scratch = mkdtempSync(join(process.env.BENCH_DIR || tmpdir(), 'homesfs-bench-'));
chmodSync(scratch, 0o755);
const fsRoot = join(scratch, 'fs'); // every backing lives below here
const loopImg = join(scratch, 'fs.img');
let loopMounted = false;
let backing, mount, socket, rawDir, treeSrc, tarball, gitRepo;
/** The bindfs targets: each its own backing directory (beside the others), mount and process. */
const BINDFS_VARIANTS = [
  { id: 'bindfs', key: 'Bindfs', opts: 'big_writes', note: 'single-threaded (its default)', raw: '', mnt: '', proc: null },
  { id: 'bindfs-mt', key: 'BindfsMt', opts: 'big_writes,multithreaded', note: "multithreaded (libfuse's mt loop, as homesfs)", raw: '', mnt: '', proc: null },
];
function layout() {
  backing = join(fsRoot, 'backing');
  rawDir = join(fsRoot, 'raw');
  for (const v of BINDFS_VARIANTS) v.raw = join(fsRoot, `${v.id}-raw`);
  treeSrc = join(fsRoot, 'tree-src');
  tarball = join(fsRoot, 'tree.tar');
  gitRepo = join(fsRoot, 'tree-repo');
  mount = join(scratch, 'mnt');
  for (const v of BINDFS_VARIANTS) v.mnt = join(scratch, `${v.id}-mnt`);
  socket = join(scratch, 'run', 'admin.sock');
}

let daemon = null;
let daemonStderr = '';
/** daemon log lines by kind -> count */
const daemonLogKinds = new Map();
let cleanedUp = false;

async function stopChild(proc, mnt, what) {
  if (!proc) return;
  if (proc.exitCode === null && proc.signalCode === null) {
    const exited = new Promise((r) => proc.once('exit', () => r('exit')));
    if (what.startsWith('bindfs')) spawnSync('umount', [mnt]);
    else proc.kill('SIGTERM');
    const r = await Promise.race([exited, sleep(15_000).then(() => 'timeout')]);
    if (r === 'timeout') {
      log(`${what} did not exit within 15 s: umount -l and SIGKILL`);
      spawnSync('umount', ['-l', mnt]);
      proc.kill('SIGKILL');
    }
  }
  if (isMounted(mnt)) spawnSync('umount', ['-l', mnt]);
}

async function cleanup() {
  if (cleanedUp) return;
  cleanedUp = true;
  for (const k of scaleKids) k.kill('SIGKILL');
  if (scaleDaemon) await stopChild(scaleDaemon, scaleMount, 'homesfs');
  scaleDaemon = null;
  const d = daemon;
  daemon = null;
  await stopChild(d, mount, 'homesfs');
  for (const v of BINDFS_VARIANTS) {
    const b = v.proc;
    v.proc = null;
    await stopChild(b, v.mnt, v.id);
  }
  const left = [mount, ...BINDFS_VARIANTS.map((v) => v.mnt), scaleMount].filter((p) => p && isMounted(p));
  if (left.length) {
    log(`still mounted, scratch kept: ${left.join(', ')}`);
    return;
  }
  if (loopMounted) {
    const r = spawnSync('umount', [fsRoot], { encoding: 'utf8' });
    if (r.status !== 0) spawnSync('umount', ['-l', fsRoot]);
    loopMounted = false;
  }
  rmSync(scratch, { recursive: true, force: true });
}

for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => {
    log(`${sig}: cleaning up`);
    void cleanup().finally(() => process.exit(130));
  });
}

/** Put every backing on one filesystem; a journaled ext4 loop file when the scratch fs would distort creates. */
async function prepareFs() {
  mkdirSync(fsRoot, { mode: 0o755 });
  const here = fsOf(scratch);
  const journalLess = here.fstype === 'ext4' && here.journal === false;
  const useLoop = FS_MODE === 'loop' || (FS_MODE === 'auto' && journalLess);
  if (!useLoop) {
    if (SCALE_INODES) {
      const free = Number(spawnSync('stat', ['-f', '-c', '%d', scratch], { encoding: 'utf8' }).stdout.trim());
      if (!(free >= SCALE_INODES)) throw new Error(`the scale workload needs ${SCALE_INODES} free inodes on ${here.target}, it has ${free} (df -i): use BENCH_FS=loop`);
    }
    layout();
    return `${here.fstype} ${here.source} (scratch fs${here.journal === false ? ', no journal' : here.journal ? ', journaled' : ''})`;
  }
  // The scale workload's million files need more inodes than ext4's default of one per
  // 16 KiB gives: -N, and room for the inode tables (256 bytes each).
  const gib = Math.ceil((MB * 3 + 1536) / 1024) + (SCALE_INODES ? Math.ceil((SCALE_INODES * 256) / 1024 ** 3) + 1 : 0);
  const inodeArgs = SCALE_INODES ? ['-N', String(Math.max(SCALE_INODES, Math.floor((gib * 1024 ** 3) / 16384)))] : [];
  mustOk(await run('truncate', ['-s', `${gib}G`, loopImg]), 'truncate the loop image');
  mustOk(await run('mkfs.ext4', ['-q', '-F', ...inodeArgs, '-E', 'lazy_itable_init=0,lazy_journal_init=0', loopImg], { timeoutMs: 600_000 }), 'mkfs.ext4');
  mustOk(await run('mount', ['-o', 'loop', loopImg, fsRoot]), 'mount the loop image');
  loopMounted = true;
  chmodSync(fsRoot, 0o755);
  layout();
  const f = fsOf(fsRoot);
  const inodes = spawnSync('stat', ['-f', '-c', '%c', fsRoot], { encoding: 'utf8' }).stdout.trim();
  return `ext4 (journaled: ${f.journal}, ${inodes} inodes) on loop ${f.source}, a ${gib} GiB file on the ${here.fstype} scratch fs${journalLess ? ' (which has no journal)' : ''}`;
}

async function startDaemon() {
  if (!existsSync(HOMESFS)) throw new Error(`${HOMESFS} is missing: run "npx tsc -p tsconfig.json" first`);
  // The daemon refuses a backing root or tenant directory that other uids can reach (exit 11).
  mkdirSync(join(backing, 'bench/_tenant'), { recursive: true, mode: 0o700 });
  mkdirSync(join(backing, 'bench/proj'), { recursive: true, mode: 0o700 });
  for (const d of [backing, join(backing, 'bench')]) chmodSync(d, 0o700);
  const configPath = join(scratch, 'config.json');
  writeFileSync(
    configPath,
    JSON.stringify(
      {
        backing,
        mount,
        socket,
        platformSocket: join(scratch, 'platform', 'platform.sock'),
        stateFile: join(scratch, 'state.json'),
        logLevel: 'warn',
        homes: { 'bench/_tenant': { profile: 'posix' }, 'bench/proj': {} },
        ...(process.env.BENCH_METRICS ? { metrics: { socket: join(scratch, 'metrics', 'metrics.sock') } } : {}),
        ...EXTRA_CONFIG,
      },
      null,
      2,
    ),
  );
  const proc = spawn(process.execPath, [HOMESFS, 'serve', '--config', configPath], { stdio: ['ignore', 'pipe', 'pipe'] });
  daemon = proc;
  let partial = '';
  proc.stdout.on('data', (d) => {
    // JSON log lines (warnings and errors at logLevel 'warn'): count them by
    // op and message for the report, echo only the first few of each kind.
    const lines = (partial + d).split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) {
      if (!line.trim()) continue;
      let kind = line.slice(0, 80);
      try {
        const j = JSON.parse(line);
        kind = `${j.level} ${j.op ?? j.component ?? ''} ${j.home ?? ''}: ${j.code ?? ''} ${j.errno ?? ''} ${j.msg}`.replace(/\s+/g, ' ');
      } catch {
        /* not JSON */
      }
      const n = (daemonLogKinds.get(kind) ?? 0) + 1;
      daemonLogKinds.set(kind, n);
      if (n <= 2) log(`daemon: ${line.slice(0, 300)}`);
    }
  });
  proc.stderr.on('data', (d) => (daemonStderr += d));
  const deadline = Date.now() + 30_000;
  let last = '';
  while (Date.now() < deadline) {
    if (proc.exitCode !== null || proc.signalCode !== null) {
      throw new Error(`daemon exited (${proc.exitCode ?? proc.signalCode}) before mounting; stderr: ${daemonStderr}`);
    }
    const r = await run(process.execPath, [HOMESCTL, '--socket', socket, '--json', 'status'], { timeoutMs: 5_000 });
    if (r.code === 0) {
      try {
        const st = JSON.parse(r.stdout);
        const scansDone = (st.homes ?? []).every((h) => h.scan === 'done' || h.scan === 'failed');
        if (st.mount?.mounted === true && scansDone) return st;
        last = `mounted=${st.mount?.mounted} scans=${(st.homes ?? []).map((h) => h.scan).join(',')}`;
      } catch {
        last = `unparsable status: ${r.stdout.slice(0, 200)}`;
      }
    } else {
      last = r.stderr.trim().slice(0, 200);
    }
    await sleep(100);
  }
  throw new Error(`daemon not mounted after 30 s (${last}); stderr: ${daemonStderr}`);
}

async function ensureBindfs() {
  if (process.env.BENCH_NO_BINDFS) return { bin: null, note: 'bindfs skipped (BENCH_NO_BINDFS)' };
  let bin = which('bindfs');
  if (!bin) {
    log('bindfs is missing: apt-get install -y bindfs');
    const r = await run('apt-get', ['install', '-y', 'bindfs'], { env: { DEBIAN_FRONTEND: 'noninteractive' }, timeoutMs: 600_000 });
    if (r.code !== 0) return { bin: null, note: `bindfs is not installed and apt-get install failed: ${r.stderr.trim().slice(0, 200)}` };
    bin = which('bindfs');
  }
  return { bin, note: '' };
}

/**
 * One bindfs variant in the foreground as our child, so its pid (for CPU seconds,
 * all its threads: /proc/<pid>/stat and task/*) is known; -o big_writes for 128 KiB writes.
 */
async function startBindfs(bin, v) {
  mkdirSync(v.raw, { mode: 0o755 });
  mkdirSync(v.mnt, { mode: 0o755 });
  const proc = spawn(bin, ['-f', '--no-allow-other', '-o', v.opts, v.raw, v.mnt], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  proc.stderr.on('data', (d) => (err += d));
  v.proc = proc;
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    if (isMounted(v.mnt)) {
      const ver = spawnSync(bin, ['--version'], { encoding: 'utf8' }).stdout.trim().split('\n')[0];
      return `${ver}, -o ${v.opts}, ${v.note}`;
    }
    if (proc.exitCode !== null) break;
    await sleep(50);
  }
  v.proc = null;
  proc.kill('SIGKILL');
  if (isMounted(v.mnt)) spawnSync('umount', ['-l', v.mnt]);
  log(`${v.id} did not mount: ${err.trim().slice(0, 300)}`);
  return null;
}

/** A deterministic tree of small text files (source-like): a tarball and a git repository, both outside any mount. */
async function makeTree() {
  const script = `
    const fs = require('node:fs'), path = require('node:path');
    const root = ${JSON.stringify(treeSrc)}, n = ${TREE_FILES};
    let seed = 42; const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
    const words = 'const let function return import export from if else for while class new this await async type interface'.split(' ');
    for (let i = 0; i < n; i++) {
      const d = path.join(root, 'pkg' + (i % 12), 'dir' + ((i >> 2) % 25), 'sub' + (i % 3));
      fs.mkdirSync(d, { recursive: true });
      const size = 200 + Math.floor(rnd() * rnd() * 16000);
      let s = '';
      while (s.length < size) s += words[Math.floor(rnd() * words.length)] + (rnd() < 0.1 ? '\\n' : ' ');
      fs.writeFileSync(path.join(d, 'file' + i + '.ts'), s.slice(0, size) + '\\n');
    }`;
  mustOk(await run(process.execPath, ['-e', script]), 'generating the tree');
  mustOk(await run('tar', ['-cf', tarball, '-C', treeSrc, '.']), 'creating the tarball');
  mustOk(await run('git', ['init', '-q', gitRepo], { env: gitEnv() }), 'git init');
  mustOk(await run('tar', ['-xf', tarball, '-C', gitRepo]), 'filling the repo');
  mustOk(await run('git', ['add', '-A'], { cwd: gitRepo, env: gitEnv() }), 'git add');
  mustOk(await run('git', ['commit', '-q', '-m', 'tree'], { cwd: gitRepo, env: gitEnv() }), 'git commit');
  rmSync(treeSrc, { recursive: true, force: true });
}

function gitEnv() {
  return {
    GIT_AUTHOR_NAME: 'bench',
    GIT_AUTHOR_EMAIL: 'bench@example.invalid',
    GIT_COMMITTER_NAME: 'bench',
    GIT_COMMITTER_EMAIL: 'bench@example.invalid',
    GIT_CONFIG_NOSYSTEM: '1',
    HOME: scratch, // no user config, no safe.directory surprises from $HOME
  };
}

let microBin = null;
async function buildMicro() {
  const out = join(scratch, 'micro');
  const r = await run('cc', ['-O2', '-Wall', '-o', out, join(ROOT, 'bench/micro.c')]);
  if (r.code !== 0) {
    log(`micro table skipped: cc failed: ${r.stderr.trim().slice(0, 300)}`);
    return null;
  }
  return out;
}

// ---------------------------------------------------------------- workloads --

/** The metrics, in table order. `cold`: caches dropped first; `warm`: run again straight after. */
const METRICS = [
  { key: 'seqWrite', workload: 'seq', label: `seq write ${MB} MiB (dd bs=1M conv=fsync)`, unit: 'MiB/s', higher: true },
  { key: 'seqReadCold', workload: 'seq', label: `seq read ${MB} MiB, cold`, unit: 'MiB/s', higher: true },
  { key: 'seqReadWarm', workload: 'seq', label: `seq re-read ${MB} MiB, warm`, unit: 'MiB/s', higher: true },
  { key: 'randWrite4k', workload: 'rand', label: `random 4 KiB writes x ${RAND_N} (pwrite)`, unit: 'writes/s', higher: true },
  { key: 'smallCreate', workload: 'small', label: `create ${FILES} x 4 KiB (node)`, unit: 'files/s', higher: true },
  { key: 'smallStatCold', workload: 'small', label: `stat ${FILES} (find -printf %s), cold`, unit: 'files/s', higher: true },
  { key: 'smallStatWarm', workload: 'small', label: `stat ${FILES} (find -printf %s), warm`, unit: 'files/s', higher: true },
  { key: 'smallRm', workload: 'small', label: `delete ${FILES} (rm -rf)`, unit: 'files/s', higher: true },
  { key: 'tarX', workload: 'tree', label: `tar -x ${TREE_FILES} files`, unit: 's', higher: false },
  { key: 'findCold', workload: 'tree', label: `find -type f (tree), cold`, unit: 's', higher: false },
  { key: 'findWarm', workload: 'tree', label: `find -type f (tree), warm`, unit: 's', higher: false },
  { key: 'gitClone', workload: 'tree', label: `git clone ${TREE_FILES} files`, unit: 's', higher: false },
  { key: 'rmTree', workload: 'tree', label: `rm -rf tree`, unit: 's', higher: false },
];
const MICRO_OPS = [
  { key: 'lookup', label: 'lookup (first stat of a name)' },
  { key: 'getattr', label: 'getattr (statx FORCE_SYNC)' },
  { key: 'createClose', label: 'create+close' },
  { key: 'openClose', label: 'open+close' },
  { key: 'unlink', label: 'unlink' },
  { key: 'mkdir', label: 'mkdir' },
  { key: 'rmdir', label: 'rmdir' },
  { key: 'symlink', label: 'symlink (relative target)' },
  { key: 'link', label: 'link' },
];

const RAND_SCRIPT = `
import os, sys, time, random
f, n = sys.argv[1], int(sys.argv[2])
span = 32 << 20
fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.ftruncate(fd, span)
buf = os.urandom(4096)
random.seed(1)
offs = [random.randrange(0, span // 4096) * 4096 for _ in range(n)]
t0 = time.perf_counter()
for o in offs:
    os.pwrite(fd, buf, o)
t = time.perf_counter() - t0
os.close(fd)
print(t)
`;

function createScript(dir) {
  return `
    const fs = require('node:fs'), path = require('node:path');
    const buf = Buffer.alloc(${SMALL_SIZE}, 97);
    for (let d = 0; d < ${SMALL_DIRS}; d++) fs.mkdirSync(path.join(${JSON.stringify(join(dir, 'small'))}, 'd' + d), { recursive: true });
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < ${FILES}; i++) fs.writeFileSync(path.join(${JSON.stringify(join(dir, 'small'))}, 'd' + (i % ${SMALL_DIRS}), 'f' + i), buf);
    process.stdout.write(String(Number(process.hrtime.bigint() - t0) / 1e9));`;
}


const WORKLOADS = [
  {
    id: 'seq',
    async rep(t, phase) {
      const f = join(t.dir, 'seq.bin');
      const w = await phase('seqWrite', () => run('dd', ['if=/dev/zero', `of=${f}`, 'bs=1M', `count=${MB}`, 'conv=fsync']));
      mustOk(w, 'dd write');
      w.value = MB / w.secs;
      await dropCaches();
      for (const key of ['seqReadCold', 'seqReadWarm']) {
        const r = await phase(key, () => run('dd', [`if=${f}`, 'of=/dev/null', 'bs=1M']));
        mustOk(r, 'dd read');
        if (!new RegExp(`^${MB}\\+0 records in`, 'm').test(r.stderr)) throw new Error(`dd read short: ${r.stderr.trim()}`);
        r.value = MB / r.secs;
      }
      mustOk(await run('rm', ['-f', f]), 'rm seq file');
    },
  },
  {
    id: 'rand',
    async rep(t, phase) {
      // fio-like: one request per write(2) (no writeback cache in libfuse 2.9), so this is
      // the per-request cost of the write path; timed inside the child.
      const f = join(t.dir, 'rand.bin');
      const w = await phase('randWrite4k', () => run('python3', ['-c', RAND_SCRIPT, f, String(RAND_N)]));
      mustOk(w, 'random 4 KiB writes');
      w.value = RAND_N / Number(w.stdout);
      mustOk(await run('rm', ['-f', f]), 'rm rand file');
    },
  },
  {
    id: 'small',
    async rep(t, phase) {
      const c = await phase('smallCreate', () => run(process.execPath, ['-e', createScript(t.dir)]));
      mustOk(c, 'create small files');
      // timed inside the child: node's start-up varies too much on a loaded machine to subtract
      c.value = FILES / Number(c.stdout);
      await dropCaches();
      for (const key of ['smallStatCold', 'smallStatWarm']) {
        // -printf %s needs an lstat per file (plain -type f can be answered from d_type).
        const s = await phase(key, () => sh(`find . -type f -printf '%s\\n' | wc -l`, { cwd: join(t.dir, 'small') }));
        mustOk(s, 'stat small files');
        if (Number(s.stdout.trim()) !== FILES) throw new Error(`stat phase saw ${s.stdout.trim()} files, expected ${FILES}`);
        s.value = FILES / s.secs;
      }
      const r = await phase('smallRm', () => run('rm', ['-rf', join(t.dir, 'small')]));
      mustOk(r, 'rm small files');
      r.value = FILES / r.secs;
    },
  },
  {
    id: 'tree',
    async rep(t, phase) {
      const tree = join(t.dir, 'tree');
      mustOk(await run('mkdir', ['-p', tree]), 'mkdir tree');
      const x = await phase('tarX', () => run('tar', ['-xf', tarball, '-C', tree]));
      mustOk(x, 'tar -xf');
      await dropCaches();
      for (const key of ['findCold', 'findWarm']) {
        const w = await phase(key, () => sh('find . -type f | wc -l', { cwd: tree }));
        mustOk(w, 'find walk');
        if (Number(w.stdout.trim()) !== TREE_FILES) throw new Error(`walk saw ${w.stdout.trim()} files, expected ${TREE_FILES}`);
      }
      const r = await phase('rmTree', () => run('rm', ['-rf', tree]));
      mustOk(r, 'rm tree');
      const clone = join(t.dir, 'clone');
      // --no-local: the pack protocol, as for a remote, and no hard links into the source.
      const g = await phase('gitClone', () => run('git', ['clone', '-q', '--no-local', gitRepo, clone], { env: gitEnv() }));
      mustOk(g, 'git clone');
      mustOk(await run('rm', ['-rf', clone]), 'rm clone');
    },
  },
  {
    id: 'micro',
    async rep(t, phase) {
      if (!microBin) return;
      const d = join(t.dir, 'micro');
      mustOk(await run('mkdir', ['-p', d]), 'mkdir micro');
      const pid = t.pid();
      const r = await phase('micro', () => run(microBin, [d, join(t.warmDir, 'micro'), String(MICRO_N), ...(pid ? [String(pid)] : [])]));
      mustOk(r, 'micro');
      r.micro = JSON.parse(r.stdout);
      mustOk(await run('rmdir', [d]), 'rmdir micro');
    },
  },
];

// ---------------------------------------------------------------- scale ----
// Issue 13's two scale targets (see the header): its own daemon, backing and mount.

let scaleDaemon = null;
let scaleMount = null;
const scaleKids = new Set(); // probe and holder, killed on cleanup

/** VmRSS and VmHWM of a process in MiB (null when gone). */
function memOf(pid) {
  try {
    const s = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (k) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(s)?.[1] ?? NaN);
    return { rssMiB: kb('VmRSS') / 1024, hwmMiB: kb('VmHWM') / 1024 };
  } catch {
    return null;
  }
}

/** CPU seconds of every thread of a process, busiest first ({ tid, comm, cpu, user, sys }). */
function threadCpu(pid) {
  const out = [];
  let tids = [];
  try {
    tids = spawnSync('ls', [`/proc/${pid}/task`], { encoding: 'utf8' }).stdout.trim().split('\n');
  } catch {
    return out;
  }
  for (const tid of tids) {
    try {
      const s = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const comm = s.slice(s.indexOf('(') + 1, s.lastIndexOf(')'));
      const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
      out.push({ tid: Number(tid), comm, cpu: (Number(f[11]) + Number(f[12])) / CLK_TCK, user: Number(f[11]) / CLK_TCK, sys: Number(f[12]) / CLK_TCK });
    } catch {
      /* thread gone */
    }
  }
  return out.sort((a, b) => b.cpu - a.cpu);
}

function spawnKid(cmd, args, opts = {}) {
  const p = spawn(cmd, args, { stdio: [opts.stdin ?? 'ignore', 'pipe', 'pipe'] });
  p.out = '';
  p.err = '';
  p.stdout.on('data', (d) => (p.out += d));
  p.stderr.on('data', (d) => (p.err += d));
  p.closed = new Promise((r) => p.on('close', (code, sig) => r(code ?? sig)));
  scaleKids.add(p);
  p.closed.then(() => scaleKids.delete(p));
  return p;
}

async function buildScaleBin() {
  const out = join(scratch, 'scale');
  mustOk(await run('cc', ['-O2', '-Wall', '-o', out, join(ROOT, 'bench/scale.c')]), 'cc bench/scale.c');
  return out;
}

/**
 * Start the scale daemon with the homes present in its backing; resolves at once with a
 * handle whose `at` map records, by log message and home, when (s since spawn) the
 * daemon logged 'mounted' and each 'home ledger built', with its CPU then.
 */
function spawnScaleDaemon(sc, homes) {
  const configPath = join(scratch, 'scale-config.json');
  writeFileSync(
    configPath,
    JSON.stringify(
      {
        backing: sc.backing,
        mount: sc.mount,
        socket: sc.socket,
        platformSocket: join(scratch, 'scale-platform', 'platform.sock'),
        stateFile: join(scratch, 'scale-state.json'),
        logLevel: 'info', // for 'mounted' and 'home ledger built' (info is quiet per request)
        userdb: { enabled: false },
        homes,
        ...EXTRA_CONFIG,
      },
      null,
      2,
    ),
  );
  const t0 = process.hrtime.bigint();
  const since = () => Number(process.hrtime.bigint() - t0) / 1e9;
  const proc = spawn(process.execPath, [HOMESFS, 'serve', '--config', configPath], { stdio: ['ignore', 'pipe', 'pipe'] });
  scaleDaemon = proc;
  scaleMount = sc.mount;
  const d = { proc, since, mounted: null, built: new Map(), stderr: '', wake: null, failed: [] };
  let partial = '';
  proc.stdout.on('data', (chunk) => {
    const lines = (partial + chunk).split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) {
      if (!line.trim()) continue;
      let j;
      try {
        j = JSON.parse(line);
      } catch {
        continue;
      }
      if (j.msg === 'mounted') d.mounted = since();
      else if (j.msg === 'home ledger built') {
        // sampled here, as the line arrives: the daemon's CPU at the end of the scan
        d.built.set(j.home, { at: since(), ms: j.ms, inodes: j.inodes, bytes: j.bytes, cpu: cpuSeconds(proc.pid), threads: threadCpu(proc.pid), mem: memOf(proc.pid) });
      } else if (j.msg !== 'scan progress' && j.level !== 30 && j.level !== 'info') {
        const kind = `scale ${j.level} ${j.op ?? j.component ?? ''} ${j.home ?? ''}: ${j.code ?? ''} ${j.msg}`.replace(/\s+/g, ' ');
        const n = (daemonLogKinds.get(kind) ?? 0) + 1;
        daemonLogKinds.set(kind, n);
        if (n <= 2) log(`daemon: ${line.slice(0, 300)}`);
        if (/scan failed/.test(j.msg ?? '')) d.failed.push(j.home);
      }
      d.wake?.();
    }
  });
  proc.stderr.on('data', (c) => (d.stderr += c));
  d.until = async (pred, what, timeoutMs = 600_000) => {
    const deadline = Date.now() + timeoutMs;
    while (!pred()) {
      if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`scale daemon exited (${proc.exitCode ?? proc.signalCode}) waiting for ${what}; stderr: ${d.stderr.slice(0, 400)}`);
      if (d.failed.length) throw new Error(`scan failed in ${d.failed.join(', ')} waiting for ${what}`);
      if (Date.now() > deadline) throw new Error(`scale daemon: no ${what} after ${timeoutMs / 1000} s`);
      await Promise.race([new Promise((r) => (d.wake = r)), sleep(250)]);
    }
  };
  d.status = async () => {
    const r = await run(process.execPath, [HOMESCTL, '--socket', sc.socket, '--json', 'status'], { timeoutMs: 30_000 });
    mustOk(r, 'homesctl status (scale daemon)');
    return JSON.parse(r.stdout);
  };
  d.stop = async () => {
    await stopChild(proc, sc.mount, 'homesfs');
    scaleDaemon = null;
  };
  return d;
}

/** The scale workload: returns { results, lines } (lines: the report's table). */
async function runScale() {
  const sc = {
    backing: join(fsRoot, 'scale-backing'),
    parked: join(fsRoot, 'scale-parked'),
    mount: join(scratch, 'scale-mnt'),
    socket: join(scratch, 'scale-run', 'admin.sock'),
  };
  const home = (k) => join(sc.backing, 'scale', k);
  for (const d of [sc.backing, join(sc.backing, 'scale'), home('probe')]) mkdirSync(d, { recursive: true, mode: 0o700 });
  for (const d of [sc.backing, join(sc.backing, 'scale')]) chmodSync(d, 0o700);
  mkdirSync(sc.parked, { mode: 0o700 });
  mkdirSync(sc.mount, { recursive: true, mode: 0o755 });
  const bin = await buildScaleBin();
  const res = { params: { files: SCALE_FILES, perDir: SCALE_PER_DIR, rssFiles: SCALE_RSS_FILES, handles: SCALE_HANDLES }, mem: {}, scans: [] };
  const probeHomes = { 'scale/probe': {} }; // the `home` profile: the home that keeps being served

  // 1. idle
  log('scale: idle daemon');
  {
    const d = spawnScaleDaemon(sc, probeHomes);
    await d.until(() => d.mounted !== null && d.built.has('scale/probe'), 'mount and scan', 60_000);
    await sleep(2000);
    res.mem.idle = memOf(d.proc.pid);
    await d.stop();
  }

  // 2. populate the big home straight into its backing
  const big = home('big');
  mkdirSync(big, { mode: 0o700 });
  log(`scale: writing ${SCALE_FILES} files into the backing of scale/big`);
  const pop = mustOk(await run(bin, ['populate', big, String(SCALE_FILES), String(SCALE_PER_DIR)], { timeoutMs: 1_800_000 }), 'populate scale/big');
  mustOk(await run('sync', [], { timeoutMs: 600_000 }), 'sync');
  res.populateSec = Number(pop.stdout.trim());
  log(`scale: ${SCALE_FILES} files in ${res.populateSec.toFixed(1)} s`);
  const bigInodes = SCALE_FILES + Math.ceil(SCALE_FILES / SCALE_PER_DIR);

  // 3. the scan, cold then warm, with the probe in the other home
  for (const mode of SCALE_WARM ? ['cold', 'warm'] : ['cold']) {
    const dropped = mode === 'cold' ? await dropCaches() : false;
    log(`scale: start-up scan of ${SCALE_FILES} files, ${mode}${mode === 'cold' && !dropped ? ' (caches could NOT be dropped)' : ''}`);
    const load0 = loadAvg1();
    const d = spawnScaleDaemon(sc, { ...probeHomes, 'scale/big': { profile: 'posix' } });
    const rss = [];
    const sampler = setInterval(() => {
      const m = memOf(d.proc.pid);
      if (m) rss.push(m.rssMiB);
    }, 250);
    let probe = null;
    try {
      await d.until(() => d.mounted !== null && d.built.has('scale/probe'), 'mount and scan of scale/probe', 120_000);
      const probeStart = d.since();
      const bigDoneBeforeProbe = d.built.has('scale/big');
      if (SCALE_PROBE) probe = spawnKid(bin, ['probe', join(sc.mount, 'scale/probe')]);
      await d.until(() => d.built.has('scale/big'), 'ledger of scale/big', 1_200_000);
      const b = d.built.get('scale/big');
      let phases = null;
      if (probe) {
        probe.kill('SIGUSR1');
        await sleep(5000);
        probe.kill('SIGTERM');
        const pc = await Promise.race([probe.closed, sleep(30_000).then(() => 'timeout')]);
        if (pc !== 0) throw new Error(`probe ended with ${pc}: ${probe.err.slice(0, 300)}`);
        phases = JSON.parse(probe.out);
      }
      const st = await d.status();
      const h = (st.homes ?? []).find((x) => x.tenant === 'scale' && x.key === 'big');
      if (h?.scan !== 'done') throw new Error(`status shows scale/big scan ${h?.scan}`);
      if (h.inodes !== bigInodes) throw new Error(`status shows scale/big with ${h.inodes} inodes, expected ${bigInodes}`);
      const daemonTid = d.proc.pid;
      const main = b.threads.find((t) => t.tid === daemonTid);
      const others = b.threads.filter((t) => t.tid !== daemonTid);
      res.scans.push({
        mode,
        cachesDropped: dropped,
        loadAvgStart: load0,
        loadAvgEnd: loadAvg1(),
        mountedSec: d.mounted,
        wallSec: b.at, // spawn to the log line
        daemonMs: b.ms, // scanHome's own figure: from the scan's start to its ledger
        daemonCpuSec: b.cpu,
        threadCpu: { main: main?.cpu ?? null, busiestOther: others[0] ?? null, others: others.reduce((a, t) => a + t.cpu, 0), top: b.threads.slice(0, 6) },
        inodes: h.inodes,
        probeStartSec: probeStart,
        bigDoneBeforeProbe,
        probe: phases,
        memAtDone: b.mem,
        memAfter: memOf(d.proc.pid),
        rssPeakSampledMiB: rss.length ? Math.max(...rss) : null,
      });
      log(`scale: ${mode} scan ${b.at.toFixed(1)} s wall (daemon ${(b.ms / 1000).toFixed(1)} s), daemon CPU ${b.cpu.toFixed(2)} s`);
    } finally {
      clearInterval(sampler);
      if (probe && probe.exitCode === null) probe.kill('SIGKILL');
      await d.stop();
    }
  }

  // 4. RSS with many files and many handles: the big home out of the way
  spawnSync('mv', [big, join(sc.parked, 'big')]);
  const many = home('many');
  mkdirSync(many, { mode: 0o700 });
  log(`scale: writing ${SCALE_RSS_FILES} files into the backing of scale/many`);
  mustOk(await run(bin, ['populate', many, String(SCALE_RSS_FILES), String(SCALE_PER_DIR)], { timeoutMs: 600_000 }), 'populate scale/many');
  {
    const d = spawnScaleDaemon(sc, { ...probeHomes, 'scale/many': { profile: 'posix' } });
    let holder = null;
    try {
      await d.until(() => d.mounted !== null && d.built.has('scale/probe') && d.built.has('scale/many'), 'mount and scans', 300_000);
      await sleep(1000);
      res.mem.manyScanned = memOf(d.proc.pid);
      const f = await sh(`find . -type f -printf '%s\\n' | wc -l`, { cwd: join(sc.mount, 'scale/many'), timeoutMs: 600_000 });
      mustOk(f, 'find over scale/many');
      if (Number(f.stdout.trim()) !== SCALE_RSS_FILES) throw new Error(`find saw ${f.stdout.trim()} files in scale/many, expected ${SCALE_RSS_FILES}`);
      res.findSec = f.secs;
      res.mem.manyStatted = memOf(d.proc.pid);
      holder = spawnKid(bin, ['hold', join(sc.mount, 'scale/many'), String(SCALE_HANDLES), String(SCALE_PER_DIR)], { stdin: 'pipe' });
      const deadline = Date.now() + 300_000;
      while (!/^ready /m.test(holder.out)) {
        if (holder.exitCode !== null) throw new Error(`holder ended (${holder.exitCode}): ${holder.err.slice(0, 300)}`);
        if (Date.now() > deadline) throw new Error('holder: not ready after 300 s');
        await sleep(100);
      }
      res.holdOpenSec = Number(/^ready (\S+)/m.exec(holder.out)[1]);
      await sleep(1000);
      res.mem.handlesHeld = memOf(d.proc.pid);
      const st = await d.status();
      res.openFilesSeen = st.limits?.openFiles ?? null;
      res.descriptorsInUse = st.limits?.descriptorsInUse ?? null;
      if (res.openFilesSeen !== null && res.openFilesSeen < SCALE_HANDLES) throw new Error(`status shows ${res.openFilesSeen} open files, expected ${SCALE_HANDLES}`);
      holder.kill('SIGTERM');
      await holder.closed;
      await sleep(1000);
      res.mem.handlesClosed = memOf(d.proc.pid);
    } finally {
      if (holder && holder.exitCode === null) holder.kill('SIGKILL');
      await d.stop();
    }
  }

  // ---- the report
  const mib = (m, k) => (m ? m[k].toFixed(0) : '-');
  const lines = ['', `scale (BENCH_ONLY=scale): ${SCALE_FILES} empty files, ${SCALE_PER_DIR} a directory, written in ${res.populateSec.toFixed(1)} s straight into a posix home's backing`];
  const us = (o) => `${o.p50.toFixed(0)} / ${o.p99.toFixed(0)} / ${o.max.toFixed(0)}`;
  const sHeader = ['start-up scan', 'load 1m', 'wall s (spawn→ledger)', 'daemon ms', 'daemon CPU s', 'main thread s', 'busiest other thread s (the scan worker)', 'probe it/s during → after', 'create µs p50/p99/max during', 'stat µs during', 'unlink µs during', 'create µs after', 'VmRSS / VmHWM MiB after'];
  const base = (r) => [
    `${SCALE_FILES} files, ${r.mode}${r.mode === 'cold' && !r.cachesDropped ? ' (not dropped)' : ''}`,
    `${r.loadAvgStart.toFixed(1)}–${r.loadAvgEnd.toFixed(1)}`,
    r.wallSec.toFixed(2),
    String(r.daemonMs),
    r.daemonCpuSec.toFixed(2),
    r.threadCpu.main?.toFixed(2) ?? '-',
    r.threadCpu.busiestOther ? `${r.threadCpu.busiestOther.cpu.toFixed(2)} (${r.threadCpu.busiestOther.user.toFixed(2)} user)` : '-',
  ];
  const sRows = res.scans.map((r) => {
    const [during, after] = r.probe ?? [];
    if (!during) return [...base(r), 'no probe', '-', '-', '-', '-', `${mib(r.memAfter, 'rssMiB')} / ${mib(r.memAfter, 'hwmMiB')}`];
    return [
      ...base(r),
      r.bigDoneBeforeProbe ? 'scan done before probe' : `${during.iterationsPerSec.toFixed(0)} → ${after?.iterationsPerSec.toFixed(0) ?? '-'}`,
      r.bigDoneBeforeProbe ? '-' : us(during.create),
      r.bigDoneBeforeProbe ? '-' : us(during.stat),
      r.bigDoneBeforeProbe ? '-' : us(during.unlink),
      after ? us(after.create) : '-',
      `${mib(r.memAfter, 'rssMiB')} / ${mib(r.memAfter, 'hwmMiB')}`,
    ];
  });
  lines.push('', ...tableLines(sHeader, sRows, 1));
  const mHeader = ['daemon memory', 'VmRSS MiB', 'VmHWM MiB'];
  const mRows = [
    ['idle (one empty home, mounted)', res.mem.idle],
    ...res.scans.map((r) => [`after the ${r.mode} ${SCALE_FILES}-file scan`, r.memAfter]),
    [`posix home of ${SCALE_RSS_FILES} files, scanned`, res.mem.manyScanned],
    [`  after find -printf %s over it through the mount (${res.findSec.toFixed(1)} s)`, res.mem.manyStatted],
    [`  with ${SCALE_HANDLES} of them open through the mount (opened in ${res.holdOpenSec.toFixed(1)} s)`, res.mem.handlesHeld],
    ['  after the holder closed them', res.mem.handlesClosed],
  ].map(([l, m]) => [l, mib(m, 'rssMiB'), mib(m, 'hwmMiB')]);
  lines.push('', ...tableLines(mHeader, mRows, 1));
  lines.push(
    '',
    'probe: create+close, statx(AT_STATX_FORCE_SYNC) and unlink of a new name in another home (scale/probe, `home` profile) in a loop, from the mount and its scan until',
    'scale/big\'s ledger is built ("during"), then 5 s more ("after"); wall from the daemon\'s spawn to its \'home ledger built\' line; daemon ms = that line\'s own figure',
    '(the scan alone); CPU s = all the daemon\'s threads from its spawn (node start-up, mount, the probe\'s requests included), sampled as the line arrives',
  );
  return { results: res, lines };
}

// ---------------------------------------------------------------- main -----

async function main() {
  if (process.getuid?.() !== 0) log('warning: not root; mounting may fail');
  if (!existsSync('/dev/fuse')) throw new Error('/dev/fuse is missing: cannot mount');
  const started = Date.now();
  const loadStart = readFileSync('/proc/loadavg', 'utf8').trim();

  const fsNote = await prepareFs();
  log(`backings on ${fsNote}`);
  const machine = {
    nproc: availableParallelism(),
    cpu: cpus()[0]?.model ?? 'unknown',
    memGiB: Math.round((totalmem() / 1024 ** 3) * 10) / 10,
    kernel: release(),
    node: process.version,
    backingFs: fsNote,
    date: new Date().toISOString(),
  };

  const selected = (id) => ONLY === null || ONLY.has(id);
  // The scale workload first, on its own daemon: the loop fs is fresh and nothing else runs.
  const scale = SCALE ? await runScale() : null;
  if (!WORKLOADS.some((w) => selected(w.id))) {
    const elapsed = (Date.now() - started) / 1000;
    const loadEnd = readFileSync('/proc/loadavg', 'utf8').trim();
    const out = ['', `homesfs bench — ${machine.date}`];
    out.push(`machine: nproc=${machine.nproc} kernel=${machine.kernel} cpu="${machine.cpu}" mem=${machine.memGiB} GiB node=${machine.node}`);
    out.push(`backing on: ${fsNote}`);
    if (process.env.BENCH_CONFIG) out.push(`daemon configuration += ${process.env.BENCH_CONFIG} (BENCH_CONFIG)`);
    out.push(`/proc/loadavg at start "${loadStart}", at end "${loadEnd}"`);
    out.push(...scale.lines);
    if (daemonLogKinds.size) {
      out.push('', 'daemon log lines (warn and above) during the run (count  kind):');
      for (const [k, n] of [...daemonLogKinds].sort((a, b) => b[1] - a[1])) out.push(`  ${String(n).padStart(6)}  ${k}`);
    }
    out.push('', `total ${elapsed.toFixed(0)} s`);
    process.stdout.write(out.join('\n') + '\n');
    const results = { machine, loadAvg: { start: loadStart, end: loadEnd }, scale: scale.results, daemonLog: Object.fromEntries(daemonLogKinds), elapsedSec: elapsed };
    writeResults(results, out);
    return;
  }
  if (selected('tree')) {
    log('generating the tree (tarball and git repository)');
    await makeTree();
  }
  if (selected('micro')) microBin = await buildMicro();

  log('starting homesfs');
  const status = await startDaemon();
  mkdirSync(rawDir, { mode: 0o755 });

  const targets = [
    { id: 'raw', label: 'raw', dir: rawDir, warmDir: rawDir, pid: () => null },
    { id: 'home', label: 'homesfs(home)', dir: join(mount, 'bench/proj'), warmDir: join(backing, 'bench/proj'), pid: () => daemon?.pid },
    { id: 'posix', label: 'homesfs(posix)', dir: join(mount, 'bench/_tenant'), warmDir: join(backing, 'bench/_tenant'), pid: () => daemon?.pid },
  ];
  const { bin: bindfsBin, note } = await ensureBindfs();
  /** what each bindfs target ran as (version and flags), or why it is missing */
  const bindfsNotes = Object.fromEntries(BINDFS_VARIANTS.map((v) => [v.id, note]));
  if (bindfsBin) {
    for (const v of BINDFS_VARIANTS) {
      const mounted = await startBindfs(bindfsBin, v);
      if (mounted) {
        bindfsNotes[v.id] = mounted;
        targets.push({ id: v.id, label: v.id, dir: v.mnt, warmDir: v.raw, pid: () => v.proc?.pid });
      } else bindfsNotes[v.id] = `${v.id} (-o ${v.opts}) failed to mount`;
    }
  }
  for (const v of BINDFS_VARIANTS) log(`${v.id}: ${bindfsNotes[v.id]}`);

  // samples[target][metric] = number[]; cpu[target][metric] = number[]; micro[target][op] = number[]
  const samples = Object.fromEntries(targets.map((t) => [t.id, Object.fromEntries(METRICS.map((m) => [m.key, []]))]));
  const cpu = Object.fromEntries(targets.map((t) => [t.id, Object.fromEntries([...METRICS.map((m) => [m.key, []]), ['micro', []]])]));
  const micro = Object.fromEntries(targets.map((t) => [t.id, Object.fromEntries(MICRO_OPS.map((o) => [o.key, []]))]));
  const microCpu = Object.fromEntries(targets.map((t) => [t.id, Object.fromEntries(MICRO_OPS.map((o) => [o.key, []]))]));
  const microSwitches = Object.fromEntries(targets.map((t) => [t.id, Object.fromEntries(MICRO_OPS.map((o) => [o.key, []]))]));
  const errors = Object.fromEntries(targets.map((t) => [t.id, {}]));
  const loads = [];

  // Interleave and rotate: rep r visits the targets starting at target r, so
  // no target always runs first (cold host caches) or last (warm, or loaded).
  for (const w of WORKLOADS.filter((x) => selected(x.id))) {
    for (let rep = 0; rep < REPS; rep++) {
      const order = targets.map((_, i) => targets[(i + rep) % targets.length]);
      for (const t of order) {
        if (errors[t.id][w.id]) continue; // failed before: skip
        loads.push(loadAvg1());
        const t0 = Date.now();
        const phase = async (key, fn) => {
          const pid = t.pid();
          const c0 = cpuSeconds(pid);
          const r = await fn();
          const c1 = cpuSeconds(pid);
          if (c0 !== null && c1 !== null) cpu[t.id][key].push(c1 - c0);
          r.key = key;
          phases.push(r);
          return r;
        };
        const phases = [];
        try {
          await w.rep(t, phase);
          for (const r of phases) {
            if (r.micro) {
              for (const o of MICRO_OPS) micro[t.id][o.key].push(r.micro[o.key]);
              if (t.pid()) for (const o of MICRO_OPS) microCpu[t.id][o.key].push(r.micro.cpu[o.key]);
              if (t.pid()) for (const o of MICRO_OPS) microSwitches[t.id][o.key].push(r.micro.switches[o.key]);
            }
            else samples[t.id][r.key].push(r.value ?? r.secs);
          }
        } catch (e) {
          const msg = String(e?.message ?? e).split('\n')[0];
          errors[t.id][w.id] = msg;
          log(`${w.id} on ${t.label} FAILED: ${msg}`);
          await run('sh', ['-c', `rm -rf ${JSON.stringify(t.dir)}/* ${JSON.stringify(t.dir)}/.[!.]*`], { timeoutMs: 120_000 });
        }
        log(`${w.id} rep ${rep + 1}/${REPS} on ${t.label}: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      }
    }
  }

  // ------------------------------------------------------------- report ----
  const has = (id) => targets.some((t) => t.id === id);
  const med = (tab, tid, key) => {
    const xs = tab[tid]?.[key];
    return xs && xs.length ? median(xs) : null;
  };
  const timeRatio = (m, a, b) => {
    const va = med(samples, a, m.key);
    const vb = med(samples, b, m.key);
    if (va === null || vb === null) return null;
    return m.higher ? vb / va : va / vb;
  };
  const num = (v, unit) => {
    if (v === null || v === undefined) return 'FAIL';
    if (unit === 's') return v.toFixed(3);
    return v >= 100 ? v.toFixed(0) : v.toFixed(1);
  };
  const cellWithSpread = (tab, id, key, unit) => {
    const xs = tab[id]?.[key];
    if (!xs || xs.length === 0) return has(id) ? 'FAIL' : 'n/a';
    const lo = Math.min(...xs);
    const hi = Math.max(...xs);
    return `${num(median(xs), unit)} (${num(lo, unit)}–${num(hi, unit)})`;
  };
  const fmtR = (r) => (r === null ? '-' : `${r.toFixed(2)}x`);
  const cpuCell = (id, key) => {
    const v = med(cpu, id, key);
    return v === null ? '-' : v.toFixed(2);
  };
  const table = tableLines;

  // Columns for every bindfs variant, present or not ('n/a'), so tables of runs line up.
  const bIds = BINDFS_VARIANTS.map((v) => v.id);
  const vsB = (f) => bIds.flatMap((b) => ['home', 'posix'].map((h) => f(h, b)));
  const wHeader = ['workload', 'unit', 'raw', 'home', 'posix', ...bIds, ...vsB((h, b) => `${h}/${b}`), 'home/posix', 'CPU s home', 'CPU s posix', ...bIds.map((b) => `CPU s ${b}`)];
  const wRows = METRICS.filter((m) => selected(m.workload)).map((m) => [
    m.label,
    m.unit,
    cellWithSpread(samples, 'raw', m.key, m.unit),
    cellWithSpread(samples, 'home', m.key, m.unit),
    cellWithSpread(samples, 'posix', m.key, m.unit),
    ...bIds.map((b) => cellWithSpread(samples, b, m.key, m.unit)),
    ...vsB((h, b) => (has(b) ? fmtR(timeRatio(m, h, b)) : 'n/a')),
    fmtR(timeRatio(m, 'home', 'posix')),
    cpuCell('home', m.key),
    cpuCell('posix', m.key),
    ...bIds.map((b) => cpuCell(b, m.key)),
  ]);
  const mHeader = ['op (µs, mean of ' + MICRO_N + ')', 'raw', 'home', 'posix', ...bIds, ...vsB((h, b) => `${h}/${b}`), 'CPU µs home', 'CPU µs posix', ...bIds.map((b) => `CPU µs ${b}`), 'switches home', ...bIds.map((b) => `switches ${b}`)];
  const swPerOp = (id, k) => {
    const v = med(microSwitches, id, k);
    return v === null ? '-' : v.toFixed(1);
  };
  const cpuUs = (id, k) => {
    const v = med(microCpu, id, k);
    return v === null ? '-' : v.toFixed(1);
  };
  const mRatio = (a, b, k) => {
    const va = med(micro, a, k);
    const vb = med(micro, b, k);
    return va === null || vb === null ? '-' : fmtR(va / vb);
  };
  const mRows = MICRO_OPS.map((o) => [
    o.label,
    cellWithSpread(micro, 'raw', o.key, 'us'),
    cellWithSpread(micro, 'home', o.key, 'us'),
    cellWithSpread(micro, 'posix', o.key, 'us'),
    ...bIds.map((b) => cellWithSpread(micro, b, o.key, 'us')),
    ...vsB((h, b) => (has(b) ? mRatio(h, b, o.key) : 'n/a')),
    cpuUs('home', o.key),
    cpuUs('posix', o.key),
    ...bIds.map((b) => cpuUs(b, o.key)),
    swPerOp('home', o.key),
    ...bIds.map((b) => swPerOp(b, o.key)),
  ]);

  const elapsed = (Date.now() - started) / 1000;
  const loadEnd = readFileSync('/proc/loadavg', 'utf8').trim();
  const out = [];
  out.push('');
  out.push(`homesfs bench — ${machine.date}${QUICK ? ' (BENCH_QUICK)' : ''}`);
  out.push(`machine: nproc=${machine.nproc} kernel=${machine.kernel} cpu="${machine.cpu}" mem=${machine.memGiB} GiB node=${machine.node}`);
  out.push(`backings (raw, homesfs, ${bIds.join(', ')}) all on: ${fsNote}`);
  if (ONLY) out.push(`workloads: ${[...ONLY].join(', ')} (BENCH_ONLY)`);
  if (process.env.BENCH_CONFIG) out.push(`daemon configuration += ${process.env.BENCH_CONFIG} (BENCH_CONFIG)`);
  const proto = status.native?.protocol;
  out.push(`homesfs: ${proto ? `FUSE 7.${proto.minor} (kernel 7.${proto.kernelMinor}), requests up to ${proto.maxWrite} bytes${proto.flags & (1 << 13) ? ', READDIRPLUS' : ''}` : 'FUSE 7.19 (libfuse 2.9), requests up to 131072 bytes'}; ${bIds.map((b) => `${b}: ${bindfsNotes[b]}`).join('; ')}`);
  out.push(
    `load average (1 min) over the run: min ${Math.min(...loads).toFixed(2)}, median ${median(loads).toFixed(2)}, max ${Math.max(...loads).toFixed(2)}` +
      `; /proc/loadavg at start "${loadStart}", at end "${loadEnd}"`,
  );
  out.push(
    `medians of ${REPS} reps (min–max in brackets), targets in an order rotated each rep; ` +
      (canDropCaches ? '"cold": page/dentry/inode caches dropped first, "warm": run again straight after' : 'caches NOT dropped (/proc/sys/vm/drop_caches not writable): cold = warm') +
      '; create timed inside the node child (its start-up excluded)',
  );
  out.push('ratios are time ratios: >1x means the first takes that many times as long (throughputs inverted); CPU s = the daemon\'s user+system seconds in that phase, all its threads (median)');
  out.push('');
  out.push(...table(wHeader, wRows, 2));
  if (microBin) {
    out.push('');
    out.push(`per-op latency (bench/micro.c; lookup after dropping dentries with the backing re-warmed; getattr forced with AT_STATX_FORCE_SYNC;`);
    out.push(`CPU µs = the daemon's CPU per op, all threads, from /proc/<pid>/task/*/schedstat: robust where wall time is not, on a loaded machine;`);
    out.push(`switches = the daemon's context switches per op, all threads, voluntary and involuntary: a request answered in JavaScript costs at least three, libfuse's thread woken by the kernel, the JS thread woken, libfuse's thread woken with the answer; single-threaded bindfs pays one; bindfs-mt can pay more, libfuse's mt loop keeping every idle worker in read(2) for the kernel to wake):`);
    out.push('');
    out.push(...table(mHeader, mRows, 1));
  }
  const errLines = targets.flatMap((t) => Object.entries(errors[t.id]).map(([k, v]) => `  ${t.label} ${k}: ${v}`));
  if (errLines.length) out.push('', 'failures:', ...errLines);
  if (daemonLogKinds.size) {
    out.push('', 'daemon log lines during the run (count  kind):');
    for (const [k, n] of [...daemonLogKinds].sort((a, b) => b[1] - a[1])) out.push(`  ${String(n).padStart(6)}  ${k}`);
  }
  if (scale) out.push(...scale.lines);
  out.push('', `total ${elapsed.toFixed(0)} s`);
  process.stdout.write(out.join('\n') + '\n');

  const results = {
    machine,
    quick: QUICK,
    params: { mb: MB, files: FILES, smallDirs: SMALL_DIRS, smallSize: SMALL_SIZE, treeFiles: TREE_FILES, microN: MICRO_N, reps: REPS },
    cachesDropped: canDropCaches,
    bindfs: bindfsNotes,
    loadAvg: { samples: loads, start: loadStart, end: loadEnd },
    homesfs: { native: status.native, version: status.version },
    targets: targets.map((t) => t.id),
    metrics: METRICS.map((m) => ({
      ...m,
      median: Object.fromEntries(targets.map((t) => [t.id, med(samples, t.id, m.key)])),
      samples: Object.fromEntries(targets.map((t) => [t.id, samples[t.id][m.key]])),
      cpuSec: Object.fromEntries(targets.map((t) => [t.id, cpu[t.id][m.key]])),
      timeRatio: {
        ...Object.fromEntries(BINDFS_VARIANTS.flatMap((v) => ['home', 'posix'].map((h) => [`${h}${v.key}`, has(v.id) ? timeRatio(m, h, v.id) : null]))),
        homePosix: timeRatio(m, 'home', 'posix'),
      },
    })),
    micro: Object.fromEntries(MICRO_OPS.map((o) => [o.key, Object.fromEntries(targets.map((t) => [t.id, micro[t.id][o.key]]))])),
    microDaemonCpuUs: Object.fromEntries(MICRO_OPS.map((o) => [o.key, Object.fromEntries(targets.map((t) => [t.id, microCpu[t.id][o.key]]))])),
    microDaemonSwitches: Object.fromEntries(MICRO_OPS.map((o) => [o.key, Object.fromEntries(targets.map((t) => [t.id, microSwitches[t.id][o.key]]))])),
    errors,
    daemonLog: Object.fromEntries(daemonLogKinds),
    ...(scale ? { scale: scale.results } : {}),
    elapsedSec: elapsed,
  };
  writeResults(results, out);
}

function writeResults(results, out) {
  const resultsDir = join(ROOT, 'bench/results');
  mkdirSync(resultsDir, { recursive: true });
  writeFileSync(join(resultsDir, 'latest.json'), JSON.stringify(results, null, 2) + '\n');
  writeFileSync(join(resultsDir, 'latest.txt'), out.join('\n') + '\n');
  log(`wrote ${join(resultsDir, 'latest.json')}`);
}

let exitCode = 0;
try {
  await main();
} catch (e) {
  log(`error: ${e?.stack ?? e}`);
  exitCode = 1;
} finally {
  await cleanup();
}
process.exit(exitCode);
