#!/usr/bin/env node
// Builds homesfs' native addon from source (native/binding.gyp: the binding's
// fuse-native.c, patched at the seam by scripts/apply-patches.mjs, with our C in
// native/src), installs it where the binding's index.js loads it, and verifies
// the result. Run by `postinstall` (after scripts/apply-patches.mjs) and by hand:
//   node scripts/build-native.mjs
// HOMESFS_SANITIZE=1 builds a sanitized copy apart instead (see step 3).
// npm 11 does not run dependency install scripts, so nothing else builds it.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, copyFileSync, cpSync, renameSync, rmSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
// Resolved like the daemon resolves it: npm may hoist it when homesfs is itself a dependency.
let pkgDir;
try {
  pkgDir = path.dirname(createRequire(path.join(root, 'package.json')).resolve('@cocalc/fuse-native/package.json'));
} catch {
  pkgDir = path.join(root, 'node_modules', '@cocalc', 'fuse-native');
}

function fail(msg) {
  console.error(`\nbuild-native: ERROR: ${msg}\n`);
  process.exit(1);
}

function log(msg) {
  console.log(`build-native: ${msg}`);
}

if (process.platform !== 'linux') fail(`homesfs only supports Linux (this is ${process.platform})`);
if (!existsSync(path.join(pkgDir, 'package.json'))) {
  fail(`${pkgDir} is missing; run npm ci first`);
}
if (!existsSync(path.join(pkgDir, 'fuse-native.c'))) fail(`${pkgDir}/fuse-native.c is missing`);
const nativeDir = path.join(root, 'native');
if (!existsSync(path.join(nativeDir, 'binding.gyp'))) fail(`${nativeDir}/binding.gyp is missing`);

// 1. libfuse 2 development files
{
  const r = spawnSync('pkg-config', ['--modversion', 'fuse'], { encoding: 'utf8' });
  if (r.error || r.status !== 0) {
    fail(
      '`pkg-config fuse` failed: the libfuse 2 development files are not installed.\n' +
        '  Install them with:  apt-get install -y libfuse2 libfuse-dev   (and pkg-config, build-essential, python3)\n' +
        `  (pkg-config said: ${(r.stderr || String(r.error || '')).trim()})`,
    );
  }
  log(`libfuse ${r.stdout.trim()} found via pkg-config`);
}

// 2. locate node-gyp (npm's bundled copy)
function findNodeGyp() {
  const candidates = [];
  if (process.env.npm_config_node_gyp) candidates.push(process.env.npm_config_node_gyp);
  candidates.push(
    path.join(path.dirname(process.execPath), '../lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js'),
  );
  if (process.env.npm_execpath) {
    // .../npm/bin/npm-cli.js -> .../npm/node_modules/node-gyp/bin/node-gyp.js
    candidates.push(path.join(path.dirname(process.env.npm_execpath), '../node_modules/node-gyp/bin/node-gyp.js'));
  }
  try {
    const npmBin = execFileSync('sh', ['-c', 'command -v npm'], { encoding: 'utf8' }).trim();
    if (npmBin) {
      const real = execFileSync('readlink', ['-f', npmBin], { encoding: 'utf8' }).trim();
      candidates.push(path.join(path.dirname(real), '../node_modules/node-gyp/bin/node-gyp.js'));
    }
  } catch {
    // no npm on PATH
  }
  try {
    candidates.push(createRequire(path.join(root, 'package.json')).resolve('node-gyp/bin/node-gyp.js'));
  } catch {
    // not a local dependency
  }
  return candidates.find((c) => c && existsSync(c));
}

const nodeGyp = findNodeGyp();
if (!nodeGyp) fail('could not find node-gyp (expected npm\'s bundled node-gyp next to the running node)');
log(`using node-gyp at ${nodeGyp}`);

// 3. build. Headers: npm passes nodedir via npm_config_nodedir (from .npmrc);
// when run by hand fall back to the system headers if present so node-gyp does
// not try to download them.
const gypArgs = [nodeGyp, 'rebuild'];
const nodedir = process.env.npm_config_nodedir;
if (nodedir) {
  gypArgs.push(`--nodedir=${nodedir}`);
} else {
  const sysDir = path.resolve(path.dirname(process.execPath), '..');
  if (existsSync(path.join(sysDir, 'include', 'node', 'node_api.h'))) gypArgs.push(`--nodedir=${sysDir}`);
}
// HOMESFS_SANITIZE=1: the same sources with AddressSanitizer and
// UndefinedBehaviorSanitizer (binding.gyp reads the variable), built in a copy
// of native/ at native/build-sanitize and left there: never installed over the
// addon the daemon loads. scripts/sanitize-stress.mjs runs a daemon on it.
if (process.env.HOMESFS_SANITIZE === '1') {
  const sanDir = path.join(nativeDir, 'build-sanitize');
  rmSync(sanDir, { recursive: true, force: true });
  mkdirSync(sanDir, { recursive: true });
  cpSync(path.join(nativeDir, 'binding.gyp'), path.join(sanDir, 'binding.gyp'));
  cpSync(path.join(nativeDir, 'src'), path.join(sanDir, 'src'), { recursive: true });
  log(`sanitized build: running: ${process.execPath} ${gypArgs.join(' ')} (in ${sanDir})`);
  const r = spawnSync(process.execPath, gypArgs, { cwd: sanDir, stdio: 'inherit', env: { ...process.env, HOMESFS_SANITIZE: '1' } });
  if (r.error || r.status !== 0) fail(`node-gyp rebuild (sanitized) failed (exit ${r.status ?? r.error})`);
  const out = path.join(sanDir, 'build', 'Release');
  const nm = spawnSync('nm', ['-D', '--undefined-only', path.join(out, 'fuse.node')], { encoding: 'utf8' });
  if (!/__asan_|__ubsan_/.test(nm.stdout || '')) fail(`${out}/fuse.node was not built with the sanitizers`);
  log(`OK: sanitized fuse.node and scandir.node in ${out} (not installed)`);
  process.exit(0);
}

log(`running: ${process.execPath} ${gypArgs.join(' ')}`);
{
  const r = spawnSync(process.execPath, gypArgs, { cwd: nativeDir, stdio: 'inherit', env: { ...process.env, HOMESFS_SANITIZE: '0' } });
  if (r.error || r.status !== 0) fail(`node-gyp rebuild failed (exit ${r.status ?? r.error})`);
}

// 3b. install both addons where index.js (node-gyp-build) and src/fs/scandir.ts
// load them. A copy under a temporary name, then a rename: a daemon still running
// on the old file keeps its mapping (rewriting it in place would crash it).
{
  const dest = path.join(pkgDir, 'build', 'Release');
  mkdirSync(dest, { recursive: true });
  for (const name of ['fuse.node', 'scandir.node']) {
    const tmp = path.join(dest, `.${name}.${process.pid}`);
    copyFileSync(path.join(nativeDir, 'build', 'Release', name), tmp);
    renameSync(tmp, path.join(dest, name));
  }
  log(`installed fuse.node and scandir.node into ${dest}`);
}

// 4. verify in a child node: loadable, the seam applied (an ABI), linked against system libfuse.so.2
const check = spawnSync(
  process.execPath,
  [
    '-e',
    `const F = require(${JSON.stringify(pkgDir)});
     process.stdout.write(JSON.stringify({ abi: F.native && F.native.ABI ? F.native.ABI.VERSION : null, path: F.BINDING_PATH }));`,
  ],
  { encoding: 'utf8' },
);
if (check.status !== 0) fail(`the built module does not load:\n${check.stderr}`);
let info;
try {
  info = JSON.parse(check.stdout);
} catch {
  fail(`unexpected output while loading the module: ${check.stdout}`);
}
// The daemon compares the whole ABI (src/abi.ts); here: the seam is applied (index.js exposes the addon) and it has one.
if (typeof info.abi !== 'number') {
  fail(
    'the binding does not expose homesfs\' ABI (Fuse.native.ABI): the seam patch is not applied.\n' +
      '  Run `node scripts/apply-patches.mjs` (patches/@cocalc+fuse-native+2.4.3.patch) and build again.',
  );
}
const ldd = spawnSync('ldd', [info.path], { encoding: 'utf8' });
const fuseLine = (ldd.stdout || '').split('\n').find((l) => /libfuse\.so\.2\b/.test(l));
if (!fuseLine || /not found/.test(fuseLine)) {
  fail(`ldd ${info.path} does not show the system libfuse.so.2:\n${ldd.stdout}${ldd.stderr}`);
}
log(`OK: ${info.path} (ABI ${info.abi}; ${fuseLine.trim()})`);

// 5. the scan's lister, a second addon of the same build: it must load
// where the scan runs, in a worker thread, and list a directory there.
{
  const scandir = path.join(pkgDir, 'build', 'Release', 'scandir.node');
  const inWorker =
    `const { parentPort } = require('node:worker_threads'); const fs = require('node:fs');` +
    `const s = require(${JSON.stringify(scandir)});` +
    `const fd = fs.openSync(${JSON.stringify(pkgDir)}, fs.constants.O_DIRECTORY);` +
    `parentPort.postMessage({ version: s.SCANDIR_VERSION, count: s.list(fd).count });`;
  const main =
    `const w = new (require('node:worker_threads').Worker)(${JSON.stringify(inWorker)}, { eval: true });` +
    `w.on('message', (m) => { process.stdout.write(JSON.stringify(m)); process.exit(0); });` +
    `w.on('error', (e) => { console.error(e); process.exit(1); });`;
  const r = spawnSync(process.execPath, ['-e', main], { encoding: 'utf8' });
  let got;
  try {
    got = JSON.parse(r.stdout);
  } catch {
    got = null;
  }
  if (r.status !== 0 || got?.version !== 1 || !(got.count > 0)) {
    fail(`${scandir} does not load and list in a worker thread (expected SCANDIR_VERSION 1):\n${r.stdout}${r.stderr}`);
  }
  log(`OK: ${scandir} (SCANDIR_VERSION=${got.version}, listed ${got.count} entries in a worker thread)`);
}
