#!/usr/bin/env node
// homesfs benchmark: the same workloads on the raw backing filesystem, on the
// homesfs mount (`home` and `posix` profiles) and on bindfs (-o big_writes),
// in one run. Prints a workload table (medians, min–max spread, time ratios,
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
//   BENCH_NO_BINDFS=1  skip bindfs (otherwise installed with apt-get when missing)
//   BENCH_METRICS=1    serve the metrics endpoint (per-op counting on) to measure its cost
//   BENCH_ONLY         comma-separated workloads to run: seq, rand, small, tree, micro (default all)
//   BENCH_CONFIG       JSON merged into the daemon's configuration, e.g.
//                        '{"fuse":{"nativeRead":false}}' to measure a switch off and on
//
// Fairness rules: every backing (raw, homesfs, bindfs) is a directory of the
// same filesystem; targets are visited in an order rotated on every rep;
// metadata phases are measured cold (dentry/inode/page caches dropped) and
// warm (straight after); bindfs gets -o big_writes (without it every write is
// a 4 KiB request and "faster than bindfs" is an artifact).
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
let backing, mount, socket, rawDir, bindRaw, bindMnt, treeSrc, tarball, gitRepo;
function layout() {
  backing = join(fsRoot, 'backing');
  rawDir = join(fsRoot, 'raw');
  bindRaw = join(fsRoot, 'bindraw');
  treeSrc = join(fsRoot, 'tree-src');
  tarball = join(fsRoot, 'tree.tar');
  gitRepo = join(fsRoot, 'tree-repo');
  mount = join(scratch, 'mnt');
  bindMnt = join(scratch, 'bindmnt');
  socket = join(scratch, 'run', 'admin.sock');
}

let daemon = null;
let daemonStderr = '';
/** daemon log lines by kind -> count */
const daemonLogKinds = new Map();
let bindfsProc = null;
let cleanedUp = false;

async function stopChild(proc, mnt, what) {
  if (!proc) return;
  if (proc.exitCode === null && proc.signalCode === null) {
    const exited = new Promise((r) => proc.once('exit', () => r('exit')));
    if (what === 'bindfs') spawnSync('umount', [mnt]);
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
  const d = daemon;
  daemon = null;
  await stopChild(d, mount, 'homesfs');
  const b = bindfsProc;
  bindfsProc = null;
  await stopChild(b, bindMnt, 'bindfs');
  const left = [mount, bindMnt].filter((p) => p && isMounted(p));
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
    layout();
    return `${here.fstype} ${here.source} (scratch fs${here.journal === false ? ', no journal' : here.journal ? ', journaled' : ''})`;
  }
  const gib = Math.ceil((MB * 3 + 1536) / 1024);
  mustOk(await run('truncate', ['-s', `${gib}G`, loopImg]), 'truncate the loop image');
  mustOk(await run('mkfs.ext4', ['-q', '-F', '-E', 'lazy_itable_init=0,lazy_journal_init=0', loopImg]), 'mkfs.ext4');
  mustOk(await run('mount', ['-o', 'loop', loopImg, fsRoot]), 'mount the loop image');
  loopMounted = true;
  chmodSync(fsRoot, 0o755);
  layout();
  const f = fsOf(fsRoot);
  return `ext4 (journaled: ${f.journal}) on loop ${f.source}, a ${gib} GiB file on the ${here.fstype} scratch fs${journalLess ? ' (which has no journal)' : ''}`;
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

/** bindfs in the foreground as our child, so its pid (for CPU seconds) is known; -o big_writes for 128 KiB writes. */
async function startBindfs(bin) {
  mkdirSync(bindRaw, { mode: 0o755 });
  mkdirSync(bindMnt, { mode: 0o755 });
  const proc = spawn(bin, ['-f', '--no-allow-other', '-o', 'big_writes', bindRaw, bindMnt], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  proc.stderr.on('data', (d) => (err += d));
  bindfsProc = proc;
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    if (isMounted(bindMnt)) {
      const v = spawnSync(bin, ['--version'], { encoding: 'utf8' }).stdout.trim().split('\n')[0];
      return `${v}, -o big_writes, single-threaded (its default)`;
    }
    if (proc.exitCode !== null) break;
    await sleep(50);
  }
  bindfsProc = null;
  proc.kill('SIGKILL');
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
  let bindfsNote = note;
  if (bindfsBin) {
    const v = await startBindfs(bindfsBin);
    if (v) {
      bindfsNote = v;
      targets.push({ id: 'bindfs', label: 'bindfs', dir: bindMnt, warmDir: bindRaw, pid: () => bindfsProc?.pid });
    } else bindfsNote = 'bindfs failed to mount';
  }
  log(bindfsNote);

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
  const table = (header, rows, leftCols) => {
    const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
    const line = (cells) => '| ' + cells.map((c, i) => (i < leftCols ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join(' | ') + ' |';
    const sep = '|' + widths.map((w, i) => (i < leftCols ? ':' + '-'.repeat(w + 1) : '-'.repeat(w + 1) + ':')).join('|') + '|';
    return [line(header), sep, ...rows.map(line)];
  };

  const wHeader = ['workload', 'unit', 'raw', 'home', 'posix', 'bindfs', 'home/bindfs', 'posix/bindfs', 'home/posix', 'CPU s home', 'CPU s posix', 'CPU s bindfs'];
  const wRows = METRICS.filter((m) => selected(m.workload)).map((m) => [
    m.label,
    m.unit,
    cellWithSpread(samples, 'raw', m.key, m.unit),
    cellWithSpread(samples, 'home', m.key, m.unit),
    cellWithSpread(samples, 'posix', m.key, m.unit),
    cellWithSpread(samples, 'bindfs', m.key, m.unit),
    has('bindfs') ? fmtR(timeRatio(m, 'home', 'bindfs')) : 'n/a',
    has('bindfs') ? fmtR(timeRatio(m, 'posix', 'bindfs')) : 'n/a',
    fmtR(timeRatio(m, 'home', 'posix')),
    cpuCell('home', m.key),
    cpuCell('posix', m.key),
    cpuCell('bindfs', m.key),
  ]);
  const mHeader = ['op (µs, mean of ' + MICRO_N + ')', 'raw', 'home', 'posix', 'bindfs', 'home/bindfs', 'posix/bindfs', 'CPU µs home', 'CPU µs posix', 'CPU µs bindfs', 'switches home', 'switches bindfs'];
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
    cellWithSpread(micro, 'bindfs', o.key, 'us'),
    has('bindfs') ? mRatio('home', 'bindfs', o.key) : 'n/a',
    has('bindfs') ? mRatio('posix', 'bindfs', o.key) : 'n/a',
    cpuUs('home', o.key),
    cpuUs('posix', o.key),
    cpuUs('bindfs', o.key),
    swPerOp('home', o.key),
    swPerOp('bindfs', o.key),
  ]);

  const elapsed = (Date.now() - started) / 1000;
  const loadEnd = readFileSync('/proc/loadavg', 'utf8').trim();
  const out = [];
  out.push('');
  out.push(`homesfs bench — ${machine.date}${QUICK ? ' (BENCH_QUICK)' : ''}`);
  out.push(`machine: nproc=${machine.nproc} kernel=${machine.kernel} cpu="${machine.cpu}" mem=${machine.memGiB} GiB node=${machine.node}`);
  out.push(`backings (raw, homesfs, bindfs) all on: ${fsNote}`);
  if (ONLY) out.push(`workloads: ${[...ONLY].join(', ')} (BENCH_ONLY)`);
  if (process.env.BENCH_CONFIG) out.push(`daemon configuration += ${process.env.BENCH_CONFIG} (BENCH_CONFIG)`);
  out.push(`homesfs: native maxWriteRequest=${status.native?.maxWriteRequest ?? '?'}; bindfs: ${bindfsNote}`);
  out.push(
    `load average (1 min) over the run: min ${Math.min(...loads).toFixed(2)}, median ${median(loads).toFixed(2)}, max ${Math.max(...loads).toFixed(2)}` +
      `; /proc/loadavg at start "${loadStart}", at end "${loadEnd}"`,
  );
  out.push(
    `medians of ${REPS} reps (min–max in brackets), targets in an order rotated each rep; ` +
      (canDropCaches ? '"cold": page/dentry/inode caches dropped first, "warm": run again straight after' : 'caches NOT dropped (/proc/sys/vm/drop_caches not writable): cold = warm') +
      '; create timed inside the node child (its start-up excluded)',
  );
  out.push('ratios are time ratios: >1x means the first takes that many times as long (throughputs inverted); CPU s = the daemon\'s user+system seconds in that phase (median)');
  out.push('');
  out.push(...table(wHeader, wRows, 2));
  if (microBin) {
    out.push('');
    out.push(`per-op latency (bench/micro.c; lookup after dropping dentries with the backing re-warmed; getattr forced with AT_STATX_FORCE_SYNC;`);
    out.push(`CPU µs = the daemon's CPU per op, all threads, from /proc/<pid>/task/*/schedstat: robust where wall time is not, on a loaded machine;`);
    out.push(`switches = the daemon's context switches per op, all threads, voluntary and involuntary: a request answered in JavaScript costs at least three, libfuse's thread woken by the kernel, the JS thread woken, libfuse's thread woken with the answer; bindfs pays one):`);
    out.push('');
    out.push(...table(mHeader, mRows, 1));
  }
  const errLines = targets.flatMap((t) => Object.entries(errors[t.id]).map(([k, v]) => `  ${t.label} ${k}: ${v}`));
  if (errLines.length) out.push('', 'failures:', ...errLines);
  if (daemonLogKinds.size) {
    out.push('', 'daemon log lines during the run (count  kind):');
    for (const [k, n] of [...daemonLogKinds].sort((a, b) => b[1] - a[1])) out.push(`  ${String(n).padStart(6)}  ${k}`);
  }
  out.push('', `total ${elapsed.toFixed(0)} s`);
  process.stdout.write(out.join('\n') + '\n');

  const results = {
    machine,
    quick: QUICK,
    params: { mb: MB, files: FILES, smallDirs: SMALL_DIRS, smallSize: SMALL_SIZE, treeFiles: TREE_FILES, microN: MICRO_N, reps: REPS },
    cachesDropped: canDropCaches,
    bindfs: bindfsNote,
    loadAvg: { samples: loads, start: loadStart, end: loadEnd },
    homesfs: { native: status.native, version: status.version },
    targets: targets.map((t) => t.id),
    metrics: METRICS.map((m) => ({
      ...m,
      median: Object.fromEntries(targets.map((t) => [t.id, med(samples, t.id, m.key)])),
      samples: Object.fromEntries(targets.map((t) => [t.id, samples[t.id][m.key]])),
      cpuSec: Object.fromEntries(targets.map((t) => [t.id, cpu[t.id][m.key]])),
      timeRatio: {
        homeBindfs: has('bindfs') ? timeRatio(m, 'home', 'bindfs') : null,
        posixBindfs: has('bindfs') ? timeRatio(m, 'posix', 'bindfs') : null,
        homePosix: timeRatio(m, 'home', 'posix'),
      },
    })),
    micro: Object.fromEntries(MICRO_OPS.map((o) => [o.key, Object.fromEntries(targets.map((t) => [t.id, micro[t.id][o.key]]))])),
    microDaemonCpuUs: Object.fromEntries(MICRO_OPS.map((o) => [o.key, Object.fromEntries(targets.map((t) => [t.id, microCpu[t.id][o.key]]))])),
    microDaemonSwitches: Object.fromEntries(MICRO_OPS.map((o) => [o.key, Object.fromEntries(targets.map((t) => [t.id, microSwitches[t.id][o.key]]))])),
    errors,
    daemonLog: Object.fromEntries(daemonLogKinds),
    elapsedSec: elapsed,
  };
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
