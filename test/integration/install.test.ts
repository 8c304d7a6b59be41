import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { copyFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REQUIRED_PATCH } from '../../src/fuse/binding.js';
import { ROOT, canMount, runAsync, skipReason } from '../helpers/daemon.js';

if (!canMount) console.warn(`install suite skipped: ${skipReason} (it also needs unshare for a network-less install)`);

const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };

/** npm's environment for scripts (npm test sets npm_config_* and friends) must not leak into the npm we run. */
function cleanEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^npm_/i.test(k)) env[k] = v;
  return { ...env, ...extra };
}

function run(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) {
  const r = spawnSync(cmd, args, { cwd: opts.cwd, env: opts.env ?? cleanEnv(), encoding: 'utf8', timeout: 300_000 });
  return { code: r.status, out: `${r.stdout ?? ''}${r.stderr ?? ''}${r.error ? String(r.error) : ''}` };
}

describe.skipIf(!canMount)('npm install -g of the packed project', () => {
  let dir: string;
  let prefix: string;
  let tarball: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'homesfs-install-'));
    prefix = join(dir, 'prefix');
    // Pack a copy of the tracked sources (prepack builds dist there, not under
    // the running suite's feet); the dev tools come from our node_modules.
    const src = join(dir, 'src');
    const files = run('git', ['ls-files', '-z'], { cwd: ROOT });
    expect(files.code, files.out).toBe(0);
    for (const f of files.out.split('\0').filter((f) => f && existsSync(join(ROOT, f)))) {
      mkdirSync(dirname(join(src, f)), { recursive: true });
      await copyFile(join(ROOT, f), join(src, f));
    }
    symlinkSync(join(ROOT, 'node_modules'), join(src, 'node_modules'));
    const packed = run('npm', ['pack', '--pack-destination', dir], { cwd: src });
    expect(packed.code, packed.out).toBe(0);
    // What a node that installs offline needs in npm's cache: each production
    // dependency's packument and tarball. npm ci stores tarballs only, so on a
    // freshly set-up machine an offline global install found no packuments
    // (ENOTCACHED); a warm cache from earlier sessions had hidden that.
    const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, { version?: string; dev?: boolean; link?: boolean }>;
    };
    const specs = Object.entries(lock.packages)
      .filter(([p, v]) => p.startsWith('node_modules/') && !v.dev && !v.link && v.version)
      .map(([p, v]) => `${p.slice(p.lastIndexOf('node_modules/') + 'node_modules/'.length)}@${v.version}`);
    expect(specs.length).toBeGreaterThan(5);
    const warm = run('npm', ['cache', 'add', ...specs]);
    expect(warm.code, warm.out).toBe(0);
    tarball = join(dir, `homesfs-${pkg.version}.tgz`);
    expect(existsSync(tarball)).toBe(true);
  }, 300_000);

  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('installs with no network at all (npm cache only), builds the patched binding, puts both programs on PATH; uninstall leaves only state and backing', async () => {
    const listing = run('tar', ['tzf', tarball]);
    expect(listing.out).toMatch(/^package\/npm-shrinkwrap\.json$/m);
    expect(listing.out).toMatch(/^package\/dist\/cli\/homesfs\.js$/m);
    expect(listing.out).not.toMatch(/^package\/(src|test)\//m);

    // A network namespace with only a loopback that is down: anything but the
    // npm cache (the registry's content, warm after npm ci) would fail here.
    const inst = run('unshare', ['--net', 'npm', 'install', '--global', '--offline', '--foreground-scripts', '--prefix', prefix, tarball]);
    expect(inst.code, inst.out).toBe(0);
    expect(inst.out).toMatch(new RegExp(`build-native: OK: .*HOMESFS_PATCH=${REQUIRED_PATCH}; libfuse\\.so\\.2 => `));

    const env = cleanEnv({ PATH: `${join(prefix, 'bin')}:${process.env.PATH}` });
    for (const bin of ['homesfs', 'homesctl']) {
      const v = run(bin, ['--version'], { env });
      expect(v.code, v.out).toBe(0);
      expect(v.out).toBe(`${bin} ${pkg.version}\n`);
    }

    // The installed daemon serves, and the installed homesctl reads its status.
    const backing = join(dir, 'backing');
    const cfg = join(dir, 'config.json');
    writeFileSync(
      cfg,
      JSON.stringify({ backing, mount: join(dir, 'mnt'), socket: join(dir, 'run', 'admin.sock'), platformSocket: join(dir, 'platform', 'p.sock'), logLevel: 'info' }),
    );
    const proc = spawn('homesfs', ['serve', '--config', cfg], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<number | null>((r) => proc.on('exit', (c) => r(c)));
    let stderr = '';
    proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    try {
      await new Promise<void>((resolve, reject) => {
        createInterface({ input: proc.stdout! }).on('line', (l) => {
          if (l.includes('"msg":"serving"')) resolve();
        });
        void exited.then((c) => reject(new Error(`installed daemon exited ${c}: ${stderr}`)));
      });
      const st = await runAsync('homesctl', ['--socket', join(dir, 'run', 'admin.sock'), '--json', 'status'], { env });
      expect(st.code, st.stderr).toBe(0);
      expect((JSON.parse(st.stdout) as { version: string; native: { patch: number } }).native.patch).toBe(REQUIRED_PATCH);
      const created = await runAsync('homesctl', ['--socket', join(dir, 'run', 'admin.sock'), 'create', 't/h'], { env });
      expect(created.code, created.stderr).toBe(0);
    } finally {
      proc.kill('SIGTERM');
    }
    expect(await exited).toBe(0);

    const un = run('npm', ['uninstall', '--global', '--prefix', prefix, 'homesfs']);
    expect(un.code, un.out).toBe(0);
    expect(readdirSync(join(prefix, 'bin'))).toEqual([]);
    expect(readdirSync(join(prefix, 'lib', 'node_modules'))).toEqual([]);
    // what stays is the admin's: the backing tree with its state
    expect(existsSync(join(backing, '.homesfs', 'state.json'))).toBe(true);
    expect(existsSync(join(backing, 't', 'h'))).toBe(true);
  }, 300_000);

  it('npm install -g of the checkout links both programs, and uninstall removes the links', () => {
    const p2 = join(dir, 'prefix-checkout');
    const inst = run('npm', ['install', '--global', '--offline', '--ignore-scripts', '--prefix', p2, ROOT]);
    expect(inst.code, inst.out).toBe(0);
    const env = cleanEnv({ PATH: `${join(p2, 'bin')}:${process.env.PATH}` });
    expect(run('homesfs', ['--version'], { env }).out).toBe(`homesfs ${pkg.version}\n`);
    expect(run('homesctl', ['--version'], { env }).out).toBe(`homesctl ${pkg.version}\n`);
    expect(run('npm', ['uninstall', '--global', '--prefix', p2, 'homesfs']).code).toBe(0);
    expect(readdirSync(join(p2, 'bin'))).toEqual([]);
  }, 120_000);
});
