#!/usr/bin/env node
// homesfs benchmark: the same workloads on the raw backing directory, on the
// homesfs mount (default `home` profile and `posix` profile) and, when
// installed, on bindfs, in one run; prints a table of medians and ratios and
// writes bench/results/latest.json.
//
// Usage (as root, /dev/fuse present):  npm run bench
//   (= tsc -p tsconfig.json && node bench/run.mjs)
//
// Environment:
//   BENCH_MB          size of the sequential file in MiB          (default 256)
//   BENCH_FILES       small files created / stat'ed / removed     (default 2000)
//   BENCH_TREE_FILES  files in the generated tree for tar and git (default 3000)
//   BENCH_REPS        repetitions per workload; the median is kept (default 3)
//   BENCH_DIR         parent of the scratch directory             (default os.tmpdir())
//   BENCH_NO_BINDFS=1 skip bindfs even when installed
//
// Performance numbers live here, never in tests. Every workload runs in a
// child process (dd, tar, sh, node -e, git): this process never touches a
// FUSE mount synchronously, so a stuck daemon cannot wedge the harness.

import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, chmodSync, accessSync, constants } from 'node:fs';
import { availableParallelism, release, tmpdir, cpus, totalmem } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const HOMESFS = join(ROOT, 'dist/cli/homesfs.js');
const HOMESCTL = join(ROOT, 'dist/cli/homesctl.js');

const envInt = (name, dflt) => {
  const v = process.env[name];
  if (v === undefined || v === '') return dflt;
  const n = Number.parseInt(v, 10);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`${name} must be a positive integer, got ${JSON.stringify(v)}`);
  return n;
};
const MB = envInt('BENCH_MB', 256);
const FILES = envInt('BENCH_FILES', 2000);
const TREE_FILES = envInt('BENCH_TREE_FILES', 3000);
const REPS = envInt('BENCH_REPS', 3);
const SMALL_DIRS = 20;
const SMALL_SIZE = 4096;

const log = (...a) => process.stderr.write(`[bench] ${a.join(' ')}\n`);

// ---------------------------------------------------------------- helpers --

/** Run a program asynchronously; resolves with code, output and wall time in seconds. */
function run(cmd, args, { cwd, timeoutMs = 180_000, env } = {}) {
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

// ---------------------------------------------------------------- setup ----

const scratch = mkdtempSync(join(process.env.BENCH_DIR || tmpdir(), 'homesfs-bench-'));
chmodSync(scratch, 0o755);
const backing = join(scratch, 'backing');
const mount = join(scratch, 'mnt');
const socket = join(scratch, 'run', 'admin.sock');
const bindRaw = join(scratch, 'bindraw');
const bindMnt = join(scratch, 'bindmnt');
const treeSrc = join(scratch, 'tree-src');
const tarball = join(scratch, 'tree.tar');

let daemon = null;
let daemonStderr = '';
/** daemon log lines by kind -> count */
const daemonLogKinds = new Map();
let bindfsMounted = false;
let cleanedUp = false;

async function stopDaemon() {
  if (!daemon) return;
  const proc = daemon;
  daemon = null;
  if (proc.exitCode === null && proc.signalCode === null) {
    const exited = new Promise((r) => proc.once('exit', () => r('exit')));
    proc.kill('SIGTERM');
    const r = await Promise.race([exited, sleep(15_000).then(() => 'timeout')]);
    if (r === 'timeout') {
      log('daemon did not exit within 15 s of SIGTERM: umount -l and SIGKILL');
      spawnSync('umount', ['-l', mount]);
      proc.kill('SIGKILL');
    }
  }
  if (isMounted(mount)) spawnSync('umount', ['-l', mount]);
}

async function cleanup() {
  if (cleanedUp) return;
  cleanedUp = true;
  await stopDaemon();
  if (bindfsMounted) {
    const r = spawnSync('umount', [bindMnt], { encoding: 'utf8' });
    if (r.status !== 0) spawnSync('umount', ['-l', bindMnt]);
    bindfsMounted = false;
  }
  const left = [mount, bindMnt].filter(isMounted);
  if (left.length) {
    log(`still mounted, scratch kept: ${left.join(', ')}`);
  } else {
    rmSync(scratch, { recursive: true, force: true });
  }
}

for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => {
    log(`${sig}: cleaning up`);
    void cleanup().finally(() => process.exit(130));
  });
}

async function startDaemon() {
  if (!existsSync(HOMESFS)) throw new Error(`${HOMESFS} is missing: run "npx tsc -p tsconfig.json" first`);
  mkdirSync(join(backing, 'bench/_tenant'), { recursive: true, mode: 0o755 });
  mkdirSync(join(backing, 'bench/proj'), { recursive: true, mode: 0o755 });
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

/** A deterministic tree of small text files (source-like), tarred once outside any mount. */
async function makeTarball() {
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
  rmSync(treeSrc, { recursive: true, force: true });
}

// ---------------------------------------------------------------- workloads --
// Each workload: { id, label, unit, higherIsBetter, steps(dir) -> [{ key, value }] }
// A step returns its metric; a failure throws and is recorded as FAIL.

const seqFile = (dir) => join(dir, 'seq.bin');

function createScript(dir) {
  return `
    const fs = require('node:fs'), path = require('node:path');
    const buf = Buffer.alloc(${SMALL_SIZE}, 97);
    for (let d = 0; d < ${SMALL_DIRS}; d++) fs.mkdirSync(path.join(${JSON.stringify(join(dir, 'small'))}, 'd' + d), { recursive: true });
    for (let i = 0; i < ${FILES}; i++) fs.writeFileSync(path.join(${JSON.stringify(join(dir, 'small'))}, 'd' + (i % ${SMALL_DIRS}), 'f' + i), buf);`;
}

let nodeStartup = 0; // median seconds of `node -e ''`, subtracted from node -e workloads

/** The metrics, in table order. */
const METRICS = [
  { key: 'seqWrite', label: `seq write ${MB} MiB, dd conv=fsync`, unit: 'MiB/s', higher: true },
  { key: 'seqRead', label: `seq read ${MB} MiB, dd`, unit: 'MiB/s', higher: true },
  { key: 'smallCreate', label: `create ${FILES} x 4 KiB in ${SMALL_DIRS} dirs (node)`, unit: 'files/s', higher: true },
  { key: 'smallStat', label: `stat ${FILES} files (find -printf %s)`, unit: 'files/s', higher: true },
  { key: 'smallRm', label: `rm -rf ${FILES} files`, unit: 'files/s', higher: true },
  { key: 'tarX', label: `tar -xf ${TREE_FILES}-file tree`, unit: 's', higher: false },
  { key: 'walk', label: `find . -type f | wc -l (tree)`, unit: 's', higher: false },
  { key: 'git', label: `git init+add -A+commit (tree)`, unit: 's', higher: false },
];

const WORKLOADS = [
  {
    id: 'seq',
    async rep(dir, out) {
      const f = seqFile(dir);
      const w = await run('dd', ['if=/dev/zero', `of=${f}`, 'bs=1M', `count=${MB}`, 'conv=fsync']);
      mustOk(w, 'dd write');
      out.seqWrite = MB / w.secs;
      await dropCaches();
      const r = await run('dd', [`if=${f}`, 'of=/dev/null', 'bs=1M']);
      mustOk(r, 'dd read');
      if (!new RegExp(`^${MB}\\+0 records in`, 'm').test(r.stderr)) throw new Error(`dd read short: ${r.stderr.trim()}`);
      out.seqRead = MB / r.secs;
      mustOk(await run('rm', ['-f', f]), 'rm seq file');
    },
  },
  {
    id: 'small',
    async rep(dir, out) {
      const c = await run(process.execPath, ['-e', createScript(dir)]);
      mustOk(c, 'create small files');
      out.smallCreate = FILES / Math.max(c.secs - nodeStartup, 1e-6);
      await dropCaches();
      // -printf %s needs an lstat per file (plain -type f can be answered from d_type).
      const s = await sh(`find . -type f -printf '%s\\n' | wc -l`, { cwd: join(dir, 'small') });
      mustOk(s, 'stat small files');
      if (Number(s.stdout.trim()) !== FILES) throw new Error(`stat phase saw ${s.stdout.trim()} files, expected ${FILES}`);
      out.smallStat = FILES / s.secs;
      const r = await run('rm', ['-rf', join(dir, 'small')]);
      mustOk(r, 'rm small files');
      out.smallRm = FILES / r.secs;
    },
  },
  {
    id: 'tree',
    async rep(dir, out) {
      const t = join(dir, 'tree');
      mustOk(await run('mkdir', ['-p', t]), 'mkdir tree');
      const x = await run('tar', ['-xf', tarball, '-C', t]);
      mustOk(x, 'tar -xf');
      out.tarX = x.secs;
      await dropCaches();
      const w = await sh('find . -type f | wc -l', { cwd: t });
      mustOk(w, 'find walk');
      if (Number(w.stdout.trim()) !== TREE_FILES) throw new Error(`walk saw ${w.stdout.trim()} files, expected ${TREE_FILES}`);
      out.walk = w.secs;
      const gitEnv = {
        GIT_AUTHOR_NAME: 'bench',
        GIT_AUTHOR_EMAIL: 'bench@example.invalid',
        GIT_COMMITTER_NAME: 'bench',
        GIT_COMMITTER_EMAIL: 'bench@example.invalid',
        GIT_CONFIG_NOSYSTEM: '1',
        HOME: scratch, // no user config, no safe.directory surprises from $HOME
      };
      let gitSecs = 0;
      for (const args of [['init', '-q'], ['add', '-A'], ['commit', '-q', '-m', 'bench']]) {
        const g = await run('git', args, { cwd: t, env: gitEnv });
        mustOk(g, `git ${args[0]}`);
        gitSecs += g.secs;
      }
      out.git = gitSecs;
      mustOk(await run('rm', ['-rf', t]), 'rm tree');
    },
  },
];

// ---------------------------------------------------------------- main -----

async function main() {
  if (process.getuid?.() !== 0) log('warning: not root; mounting may fail');
  if (!existsSync('/dev/fuse')) throw new Error('/dev/fuse is missing: cannot mount');
  const started = Date.now();

  const fsType = spawnSync('stat', ['-f', '-c', '%T', scratch], { encoding: 'utf8' }).stdout.trim();
  const machine = {
    nproc: availableParallelism(),
    cpu: cpus()[0]?.model ?? 'unknown',
    memGiB: Math.round((totalmem() / 1024 ** 3) * 10) / 10,
    kernel: release(),
    node: process.version,
    scratchFs: fsType,
    date: new Date().toISOString(),
  };

  // node -e startup cost, subtracted from the node-driven create phase.
  const ns = [];
  for (let i = 0; i < 3; i++) ns.push((await run(process.execPath, ['-e', ''])).secs);
  nodeStartup = median(ns);

  log('generating the tree tarball');
  await makeTarball();

  log('starting homesfs');
  const status = await startDaemon();

  const targets = [
    { id: 'raw', label: 'raw', dir: join(backing, 'bench/proj') },
    { id: 'home', label: 'homesfs(home)', dir: join(mount, 'bench/proj') },
    { id: 'posix', label: 'homesfs(posix)', dir: join(mount, 'bench/_tenant') },
  ];

  const bindfs = process.env.BENCH_NO_BINDFS ? null : which('bindfs');
  let bindfsNote = '';
  if (bindfs) {
    mkdirSync(bindRaw, { mode: 0o755 });
    mkdirSync(bindMnt, { mode: 0o755 });
    const r = await run(bindfs, ['--no-allow-other', bindRaw, bindMnt]);
    if (r.code === 0 && isMounted(bindMnt)) {
      bindfsMounted = true;
      const v = spawnSync(bindfs, ['--version'], { encoding: 'utf8' }).stdout.trim().split('\n')[0];
      bindfsNote = v;
      targets.push({ id: 'bindfs', label: 'bindfs', dir: bindMnt });
    } else {
      bindfsNote = `bindfs failed to mount: ${r.stderr.trim()}`;
    }
  } else {
    bindfsNote = process.env.BENCH_NO_BINDFS ? 'bindfs skipped (BENCH_NO_BINDFS)' : 'bindfs is not installed (apt-get install bindfs to compare)';
  }
  log(bindfsNote);

  // samples[target][metric] = number[]; errors[target][metric] = string
  const samples = Object.fromEntries(targets.map((t) => [t.id, Object.fromEntries(METRICS.map((m) => [m.key, []]))]));
  const errors = Object.fromEntries(targets.map((t) => [t.id, {}]));

  // Interleave: for each workload, each repetition visits every target in turn,
  // so slow drift (page cache, thermal, neighbours) spreads over all columns.
  for (const w of WORKLOADS) {
    for (let rep = 0; rep < REPS; rep++) {
      for (const t of targets) {
        if (Object.keys(errors[t.id]).some((k) => k.startsWith(`${w.id}:`))) continue; // failed before: skip
        const out = {};
        const t0 = Date.now();
        try {
          await w.rep(t.dir, out);
        } catch (e) {
          const msg = String(e?.message ?? e).split('\n')[0];
          errors[t.id][`${w.id}:`] = msg;
          log(`${w.id} on ${t.label} FAILED: ${msg}`);
          // best effort cleanup so later workloads start from an empty home
          await run('sh', ['-c', `rm -rf ${JSON.stringify(t.dir)}/* ${JSON.stringify(t.dir)}/.[!.]*`], { timeoutMs: 60_000 });
        }
        for (const [k, v] of Object.entries(out)) samples[t.id][k].push(v);
        log(`${w.id} rep ${rep + 1}/${REPS} on ${t.label}: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      }
    }
  }

  // ------------------------------------------------------------- report ----
  const med = (tid, key) => {
    const xs = samples[tid]?.[key];
    return xs && xs.length ? median(xs) : null;
  };
  /** time ratio a/b: >1 means a is slower than b (throughputs are inverted). */
  const timeRatio = (m, a, b) => {
    const va = med(a, m.key);
    const vb = med(b, m.key);
    if (va === null || vb === null) return null;
    return m.higher ? vb / va : va / vb;
  };
  const fmt = (v, unit) => {
    if (v === null) return 'FAIL';
    if (unit === 's') return v.toFixed(3);
    return v >= 100 ? v.toFixed(0) : v.toFixed(1);
  };
  const fmtR = (r) => (r === null ? '-' : `${r.toFixed(2)}x`);
  const has = (id) => targets.some((t) => t.id === id);
  const col = (id) => (has(id) ? id : null);

  const header = ['workload', 'unit', 'raw', 'homesfs(home)', 'homesfs(posix)', 'bindfs', 'home/raw', 'posix/raw', 'home/bindfs', 'posix/bindfs'];
  const rows = METRICS.map((m) => {
    const cell = (id) => (col(id) ? fmt(med(id, m.key), m.unit) : 'n/a');
    return [
      m.label,
      m.unit,
      cell('raw'),
      cell('home'),
      cell('posix'),
      cell('bindfs'),
      fmtR(timeRatio(m, 'home', 'raw')),
      fmtR(timeRatio(m, 'posix', 'raw')),
      has('bindfs') ? fmtR(timeRatio(m, 'home', 'bindfs')) : 'n/a',
      has('bindfs') ? fmtR(timeRatio(m, 'posix', 'bindfs')) : 'n/a',
    ];
  });
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells) => '| ' + cells.map((c, i) => (i < 2 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join(' | ') + ' |';
  const sep = '|' + widths.map((w, i) => (i < 2 ? ':' + '-'.repeat(w + 1) : '-'.repeat(w + 1) + ':')).join('|') + '|';

  const elapsed = (Date.now() - started) / 1000;
  const out = [];
  out.push('');
  out.push(`homesfs bench — ${machine.date}`);
  out.push(`machine: nproc=${machine.nproc} kernel=${machine.kernel} cpu="${machine.cpu}" mem=${machine.memGiB} GiB node=${machine.node} scratch fs=${machine.scratchFs}`);
  out.push(`homesfs: native maxWriteRequest=${status.native?.maxWriteRequest ?? '?'} selfCheck=${status.native?.selfCheck ?? '?'}; ${bindfsNote}`);
  out.push(
    `medians of ${REPS} runs; ` +
      (canDropCaches ? 'page/dentry/inode caches dropped before each read, stat and walk phase' : 'caches NOT dropped (/proc/sys/vm/drop_caches not writable): read/stat/walk ran warm') +
      `; create phase net of node startup (${(nodeStartup * 1000).toFixed(0)} ms)`,
  );
  out.push('ratios are time ratios: >1x means homesfs takes that many times as long (throughputs inverted)');
  out.push('');
  out.push(line(header));
  out.push(sep);
  for (const r of rows) out.push(line(r));
  const errLines = targets.flatMap((t) => Object.entries(errors[t.id]).map(([k, v]) => `  ${t.label} ${k} ${v}`));
  if (errLines.length) out.push('', 'failures:', ...errLines);
  if (daemonLogKinds.size) {
    out.push('', 'daemon log lines during the run (count  kind):');
    for (const [k, n] of [...daemonLogKinds].sort((a, b) => b[1] - a[1])) out.push(`  ${String(n).padStart(6)}  ${k}`);
  }
  out.push('', `total ${elapsed.toFixed(0)} s`);
  process.stdout.write(out.join('\n') + '\n');

  const results = {
    machine,
    params: { mb: MB, files: FILES, smallDirs: SMALL_DIRS, smallSize: SMALL_SIZE, treeFiles: TREE_FILES, reps: REPS },
    cachesDropped: canDropCaches,
    nodeStartupSec: nodeStartup,
    bindfs: bindfsNote,
    homesfs: { native: status.native, version: status.version },
    targets: targets.map((t) => t.id),
    metrics: METRICS.map((m) => ({
      ...m,
      median: Object.fromEntries(targets.map((t) => [t.id, med(t.id, m.key)])),
      samples: Object.fromEntries(targets.map((t) => [t.id, samples[t.id][m.key]])),
      timeRatio: {
        homeRaw: timeRatio(m, 'home', 'raw'),
        posixRaw: timeRatio(m, 'posix', 'raw'),
        homeBindfs: has('bindfs') ? timeRatio(m, 'home', 'bindfs') : null,
        posixBindfs: has('bindfs') ? timeRatio(m, 'posix', 'bindfs') : null,
      },
    })),
    errors,
    daemonLog: Object.fromEntries(daemonLogKinds),
    elapsedSec: elapsed,
  };
  const resultsDir = join(ROOT, 'bench/results');
  mkdirSync(resultsDir, { recursive: true });
  writeFileSync(join(resultsDir, 'latest.json'), JSON.stringify(results, null, 2) + '\n');
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
