#!/usr/bin/env node
// Applies patches/<name>+<version>.patch (written by `npx patch-package <name>`)
// to the installed dependency with GNU patch. Run by `postinstall`, before
// scripts/build-native.mjs.
//
// Why not patch-package itself at install time: it is a devDependency (so
// `npm install -g homesfs-x.y.z.tgz` failed with "patch-package: not found"),
// making it a dependency would put ~20 more packages into every install of a
// daemon that runs as root, and it looks for the package only under our own
// node_modules, while npm may hoist it elsewhere when homesfs is itself a
// dependency. GNU patch is one small apt package; idempotence comes from a
// reverse dry run (an already patched tree is left alone).
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const patchDir = path.join(root, 'patches');
const requireHere = createRequire(path.join(root, 'package.json'));

function fail(msg) {
  console.error(`\napply-patches: ERROR: ${msg}\n`);
  process.exit(1);
}

if (!existsSync(patchDir)) fail(`${patchDir} is missing`);
const probe = spawnSync('patch', ['--version'], { encoding: 'utf8' });
if (probe.error || probe.status !== 0) fail('GNU patch is not installed: apt-get install -y patch');

for (const file of readdirSync(patchDir).filter((f) => f.endsWith('.patch')).sort()) {
  // "@cocalc+fuse-native+2.4.3.patch" -> "@cocalc/fuse-native", "2.4.3"
  const m = /^(.+)\+([^+]+)\.patch$/.exec(file);
  if (!m) fail(`${file}: not a patch-package file name (<name>+<version>.patch)`);
  const name = m[1].replaceAll('+', '/');
  const version = m[2];
  let pkgJson;
  try {
    pkgJson = requireHere.resolve(`${name}/package.json`);
  } catch {
    fail(`${name} is not installed (needed by patches/${file})`);
  }
  const pkgDir = path.dirname(pkgJson);
  const installed = JSON.parse(readFileSync(pkgJson, 'utf8')).version;
  if (installed !== version) fail(`patches/${file} is for ${name} ${version}, but ${installed} is installed`);
  // patch-package paths are "a/node_modules/<name>/<file>": strip up to the package directory.
  const strip = `-p${2 + name.split('/').length}`;
  const patchFile = path.join(patchDir, file);
  const args = [strip, '--batch', '--silent', '-d', pkgDir, '-i', patchFile];
  const reverse = spawnSync('patch', ['--dry-run', '-R', '-f', ...args], { encoding: 'utf8' });
  if (reverse.status === 0) {
    console.log(`apply-patches: ${name} ${version} already patched (${file})`);
    continue;
  }
  const forward = spawnSync('patch', ['--dry-run', '--forward', ...args], { encoding: 'utf8' });
  if (forward.status !== 0) {
    fail(
      `patches/${file} does not apply to ${pkgDir}:\n${forward.stdout}${forward.stderr}\n` +
        '  (an older version of the patch may be applied there: reinstall a pristine copy with `npm ci`)',
    );
  }
  const r = spawnSync('patch', ['--forward', '--no-backup-if-mismatch', ...args], { encoding: 'utf8' });
  if (r.status !== 0) fail(`patch ${file} failed:\n${r.stdout}${r.stderr}`);
  for (const leftover of ['.orig', '.rej']) {
    if (readdirSync(pkgDir).some((f) => f.endsWith(leftover))) console.warn(`apply-patches: ${leftover} files left in ${pkgDir}`);
  }
  console.log(`apply-patches: applied ${file} to ${pkgDir}`);
}
