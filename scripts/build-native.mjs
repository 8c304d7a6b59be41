#!/usr/bin/env node
// Builds homesfs' native addons from source (native/binding.gyp: our C in
// native/src, against the system libfuse 2.9), installs them in native/addon/
// where the daemon loads them, and verifies the result. Run by `postinstall`
// and by hand:
//   node scripts/build-native.mjs
// HOMESFS_SANITIZE=1 builds a sanitized copy apart instead (see step 3).
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, copyFileSync, cpSync, renameSync, rmSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const ADDONS = ['homesfs.node', 'scandir.node'];

function fail(msg) {
  console.error(`\nbuild-native: ERROR: ${msg}\n`);
  process.exit(1);
}

function log(msg) {
  console.log(`build-native: ${msg}`);
}

if (process.platform !== 'linux') fail(`homesfs only supports Linux (this is ${process.platform})`);
try {
  createRequire(path.join(root, 'package.json')).resolve('napi-macros/package.json');
} catch {
  fail('napi-macros is not installed; run npm ci first');
}
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
  const nm = spawnSync('nm', ['-D', '--undefined-only', path.join(out, 'homesfs.node')], { encoding: 'utf8' });
  if (!/__asan_|__ubsan_/.test(nm.stdout || '')) fail(`${out}/homesfs.node was not built with the sanitizers`);
  log(`OK: sanitized homesfs.node and scandir.node in ${out} (not installed)`);
  process.exit(0);
}

log(`running: ${process.execPath} ${gypArgs.join(' ')}`);
{
  const r = spawnSync(process.execPath, gypArgs, { cwd: nativeDir, stdio: 'inherit', env: { ...process.env, HOMESFS_SANITIZE: '0' } });
  if (r.error || r.status !== 0) fail(`node-gyp rebuild failed (exit ${r.status ?? r.error})`);
}

// 3b. install both addons in native/addon/, where the daemon loads them. A copy
// under a temporary name, then a rename: a daemon still running on the old
// file keeps its mapping (rewriting it in place would crash it).
const addonDir = path.join(nativeDir, 'addon');
{
  mkdirSync(addonDir, { recursive: true });
  for (const name of ADDONS) {
    const tmp = path.join(addonDir, `.${name}.${process.pid}`);
    copyFileSync(path.join(nativeDir, 'build', 'Release', name), tmp);
    renameSync(tmp, path.join(addonDir, name));
  }
  log(`installed ${ADDONS.join(' and ')} into ${addonDir}`);
}

// 4. verify in a child node: loadable, with an ABI, linked against the system libfuse.so.2
const addon = path.join(addonDir, 'homesfs.node');
const check = spawnSync(process.execPath, ['-e', `process.stdout.write(String(require(${JSON.stringify(addon)}).ABI.VERSION))`], { encoding: 'utf8' });
if (check.status !== 0) fail(`the built module does not load:\n${check.stderr}`);
const abi = Number(check.stdout);
if (!(abi > 0)) fail(`${addon} has no ABI (Fuse.native.ABI): ${check.stdout}`);
const ldd = spawnSync('ldd', [addon], { encoding: 'utf8' });
const fuseLine = (ldd.stdout || '').split('\n').find((l) => /libfuse\.so\.2\b/.test(l));
if (!fuseLine || /not found/.test(fuseLine)) {
  fail(`ldd ${addon} does not show the system libfuse.so.2:\n${ldd.stdout}${ldd.stderr}`);
}
log(`OK: ${addon} (ABI ${abi}; ${fuseLine.trim()})`);

// 5. the scan's lister, a second addon of the same build: it must load
// where the scan runs, in a worker thread, and list a directory there.
{
  const scandir = path.join(addonDir, 'scandir.node');
  const inWorker =
    `const { parentPort } = require('node:worker_threads'); const fs = require('node:fs');` +
    `const s = require(${JSON.stringify(scandir)});` +
    `const fd = fs.openSync(${JSON.stringify(nativeDir)}, fs.constants.O_DIRECTORY);` +    `parentPort.postMessage({ version: s.SCANDIR_VERSION, count: s.hs_sys_scandir(fd).count });`;
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
