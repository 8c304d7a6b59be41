import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ABI } from '../../src/abi.js';
import { ROOT, canMount, skipReason } from '../helpers/daemon.js';
import { aptLine, installCommands, installPrefix, section, shBlocks } from '../helpers/readme-install.js';

if (!canMount) console.warn(`install suite skipped: ${skipReason} (it also needs unshare and nsenter for its namespaces)`);

const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };

/**
 * What the README's commands see: no npm_* of the npm running this suite, and a
 * PATH like systemd's (/usr/local/bin first) with no node_modules/.bin on it, so
 * a `npm pack` without `npm ci` before it finds no tsc here either.
 */
function cleanEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^npm_/i.test(k)) env[k] = v;
  env.PATH = `/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${dirname(process.execPath)}`;
  return { ...env, ...extra };
}

function run(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) {
  const r = spawnSync(cmd, args, { cwd: opts.cwd, env: opts.env ?? cleanEnv(), encoding: 'utf8', timeout: 600_000, maxBuffer: 64 << 20 });
  return { code: r.status, out: `${r.stdout ?? ''}${r.stderr ?? ''}${r.error ? String(r.error) : ''}` };
}

/**
 * The README's commands run on a fresh clone, as written. Nothing outside the
 * test's temp dir changes: they run in a mount namespace of their own where
 * /usr/local is an overlay whose writes land in a tmpfs of that namespace (so
 * `npm install -g --prefix /usr/local` really writes /usr/local/bin/homesfs,
 * the unit's ExecStart, and the host never sees it), and in a network
 * namespace with only a loopback that is down, npm offline: everything comes
 * from a copy of npm's cache under a HOME of the test's own.
 */
describe.skipIf(!canMount)('README "Install", run as written on a fresh clone', () => {
  let dir: string;
  let clone: string;
  let home: string;
  let holder: ChildProcess;
  let env: NodeJS.ProcessEnv;
  let commands: string[];
  let prefix: string;
  let installed: { code: number | null; out: string };

  /** A command in the namespaces (nsenter execs it: its pid is the command's), in cwd (entering a mount namespace moves to its /). */
  const ns = (cmd: string, args: string[], cwd = dir) => ['-t', String(holder.pid), '-m', '-n', `--wd=${cwd}`, '--', cmd, ...args];
  const inNs = (cmd: string, args: string[], cwd?: string) => run('nsenter', ns(cmd, args, cwd), { env });
  const exists = (p: string) => inNs('test', ['-e', p]).code === 0;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'homesfs-install-'));
    clone = join(dir, 'clone');
    home = join(dir, 'home');

    // A fresh clone: no node_modules, no dist, nothing untracked. The working
    // copy's uncommitted changes to tracked files go on top, so what is being
    // edited is what is tested.
    const cloned = run('git', ['clone', '--quiet', '--no-hardlinks', ROOT, clone]);
    expect(cloned.code, cloned.out).toBe(0);
    const diff = spawnSync('git', ['diff', 'HEAD', '--binary'], { cwd: ROOT, maxBuffer: 64 << 20 });
    expect(diff.status).toBe(0);
    if (diff.stdout.length > 0) {
      const applied = spawnSync('git', ['apply', '--whitespace=nowarn'], { cwd: clone, input: diff.stdout, encoding: 'utf8' });
      expect(applied.status, applied.stderr).toBe(0);
    }
    commands = installCommands(readFileSync(join(clone, 'README.md'), 'utf8'));
    prefix = installPrefix(commands);

    // npm's cache, copied (the registry's content, warm after the suite's own npm ci),
    // plus what a global install of the tarball asks for besides the tarballs npm ci
    // stored: each production dependency's packument (README "Install", offline node).
    // (logs-max=0: not even a debug log in the host's cache)
    const hostCache = run('npm', ['config', 'get', 'cache'], { env: cleanEnv({ npm_config_logs_max: '0' }) }).out.trim();
    cpSync(join(hostCache, '_cacache'), join(home, '.npm', '_cacache'), { recursive: true });
    // A HOME of its own: a test machine's ~/.npmrc (root's here says nodedir=/usr) would
    // hide what a fresh node lacks, and npm writes its logs there.
    env = cleanEnv({ HOME: home, npm_config_update_notifier: 'false' });
    const lock = JSON.parse(readFileSync(join(clone, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, { version?: string; dev?: boolean; link?: boolean }>;
    };
    const specs = Object.entries(lock.packages)
      .filter(([p, v]) => p.startsWith('node_modules/') && !v.dev && !v.link && v.version)
      .map(([p, v]) => `${p.slice(p.lastIndexOf('node_modules/') + 'node_modules/'.length)}@${v.version}`);
    expect(specs.length).toBeGreaterThan(5);
    const warm = run('npm', ['cache', 'add', '--prefer-offline', ...specs], { env });
    expect(warm.code, warm.out).toBe(0);

    // The namespaces, held open by a sleeping process the commands enter.
    const upper = join(dir, 'usr-local');
    mkdirSync(upper);
    holder = spawn(
      'unshare',
      [
        '--mount', '--net', '--propagation', 'private', 'sh', '-ec',
        'mount -t tmpfs -o mode=0755 tmpfs "$1"; mkdir "$1/upper" "$1/work"; ' +
          'mount -t overlay overlay -o "lowerdir=/usr/local,upperdir=$1/upper,workdir=$1/work" /usr/local; echo ready; exec sleep infinity',
        'sh', upper,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    await new Promise<void>((resolve, reject) => {
      let err = '';
      holder.stderr!.on('data', (d: Buffer) => (err += d.toString()));
      createInterface({ input: holder.stdout! }).on('line', (l) => l === 'ready' && resolve());
      holder.on('exit', (c) => reject(new Error(`namespace holder exited ${c}: ${err}`)));
    });

    // Everything but the apt line (see its test), in order, as one script: npm offline
    // (the network namespace has none anyway) and showing the install scripts' output.
    const script = commands.filter((c) => c !== aptLine(commands).line).join('\n');
    installed = run('nsenter', ns('sh', ['-exc', script], clone), {
      env: { ...env, npm_config_offline: 'true', npm_config_foreground_scripts: 'true' },
    });
  }, 900_000);

  afterAll(() => {
    if (holder?.exitCode === null) holder.kill('SIGKILL');
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('the apt line resolves on this node with nothing left to install (checked by apt-get --simulate)', () => {
    // Not run for real: apt-get install would mark these packages as manually installed in
    // apt's state (the host's, outside our temp dir) and needs the network for anything
    // missing. The simulation resolves the same line against the same dpkg state: an
    // unknown or conflicting package (Debian's npm beside NodeSource's nodejs) fails it,
    // and "0 newly installed" says scripts/install.sh (which installs this list, see
    // test/unit/install-docs.test.ts) left nothing out.
    const { line } = aptLine(commands);
    // (and with apt's binary caches off, so not even /var/cache/apt is written)
    const sim = run('sh', ['-c', line.replace(/^apt-get install /, 'apt-get install --simulate -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= ')]);
    expect(sim.code, sim.out).toBe(0);
    // --no-upgrade: nothing installed changes (without it an upgradable libnss-systemd pulled a new systemd)
    expect(sim.out).toMatch(/^0 upgraded, 0 newly installed, 0 to remove/m);
  });

  it('npm ci, npm pack and npm install -g build the native addon and put both programs where the unit starts them', () => {
    expect(installed.code, installed.out).toBe(0);
    // built twice: by npm ci in the clone and by the tarball's postinstall
    const ok = new RegExp(`build-native: OK: .*ABI ${ABI.VERSION}; libfuse\\.so\\.2 => `, 'g');
    expect(installed.out.match(ok), installed.out).toHaveLength(2);
    expect(installed.out).toContain(`${prefix}/lib/node_modules/homesfs/native/addon/homesfs.node`);
    // the README's own last line printed both versions
    expect(installed.out).toContain(`homesfs ${pkg.version}\nhomesctl ${pkg.version}\n`);

    const tarball = join(clone, `homesfs-${pkg.version}.tgz`);
    const listing = run('tar', ['tzf', tarball]);
    expect(listing.out).toMatch(/^package\/npm-shrinkwrap\.json$/m);
    expect(listing.out).toMatch(/^package\/dist\/cli\/homesfs\.js$/m);
    expect(listing.out).not.toMatch(/^package\/(src|test)\//m);

    // The unit's ExecStart program, by its absolute path, and homesctl beside it.
    const unit = readFileSync(join(clone, 'systemd/homesfs.service'), 'utf8');
    const execStart = /^ExecStart=(\S+)/m.exec(unit)![1]!;
    expect(execStart).toBe(`${prefix}/bin/homesfs`);
    for (const bin of [execStart, join(dirname(execStart), 'homesctl')]) {
      const v = inNs(bin, ['--version']);
      expect(v.code, v.out).toBe(0);
      expect(v.out).toMatch(new RegExp(`^homes(fs|ctl) ${pkg.version.replaceAll('.', '\\.')}\\n$`));
    }
    // ...written into the namespace's tmpfs: on the host, the directory under it is still empty
    expect(readdirSync(join(dir, 'usr-local'))).toEqual([]);
  });

  it('the files "Under systemd" copies are there, and homesfs check-config accepts the example config', () => {
    const block = shBlocks(section(readFileSync(join(clone, 'README.md'), 'utf8'), 'Under systemd'))[0]!;
    const sources = block.flatMap((c) => [...c.matchAll(new RegExp(`${prefix}/\\S+`, 'g'))].map((m) => m[0]));
    expect(sources.length).toBeGreaterThanOrEqual(2);
    for (const p of sources) expect(exists(p), p).toBe(true);
    const example = sources.find((p) => p.endsWith('/config.example.json'))!;
    const checked = inNs(`${prefix}/bin/homesfs`, ['check-config', example]);
    expect(checked.code, checked.out).toBe(0);
    // the unit it copies is the one in this checkout
    expect(inNs('cat', [sources.find((p) => p.endsWith('/homesfs.service'))!]).out).toBe(readFileSync(join(clone, 'systemd/homesfs.service'), 'utf8'));
  });

  it('the installed daemon serves and the installed homesctl drives it; the README uninstall leaves only state and backing', async () => {
    const backing = join(dir, 'backing');
    const sock = join(dir, 'run', 'admin.sock');
    const cfg = join(dir, 'config.json');
    writeFileSync(
      cfg,
      JSON.stringify({
        backing,
        mount: join(dir, 'mnt'),
        socket: sock,
        platformSocket: join(dir, 'platform', 'p.sock'),
        // owner names into the test's dir, never the host's /run/userdb
        userdb: { dir: join(dir, 'userdb') },
        logLevel: 'info',
      }),
    );
    // In the namespaces: the mount exists only there, and goes with them.
    const proc = spawn('nsenter', ns(`${prefix}/bin/homesfs`, ['serve', '--config', cfg]), { env, stdio: ['ignore', 'pipe', 'pipe'] });
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
      const st = inNs(`${prefix}/bin/homesctl`, ['--socket', sock, '--json', 'status']);
      expect(st.code, st.out).toBe(0);
      expect((JSON.parse(st.out) as { version: string; native: { abi: number } }).native.abi).toBe(ABI.VERSION);
      const created = inNs(`${prefix}/bin/homesctl`, ['--socket', sock, 'create', 't/h']);
      expect(created.code, created.out).toBe(0);
    } finally {
      proc.kill('SIGTERM');
    }
    expect(await exited).toBe(0);

    // README "Install": the uninstall command, as written
    const install = section(readFileSync(join(clone, 'README.md'), 'utf8'), 'Install');
    const uninstall = /`(npm uninstall -g [^`]+)`/.exec(install);
    expect(uninstall, 'README "Install" names the uninstall command').not.toBeNull();
    const un = inNs('sh', ['-ec', uninstall![1]!]);
    expect(un.code, un.out).toBe(0);
    for (const p of ['bin/homesfs', 'bin/homesctl', 'lib/node_modules/homesfs']) expect(exists(`${prefix}/${p}`), p).toBe(false);
    // what stays is the admin's: the backing tree with its state
    expect(readFileSync(join(backing, '.homesfs', 'state.json'), 'utf8')).toContain('"t/h"');
  }, 120_000);

  it('from a checkout that ran its npm ci, README\'s npm install -g links the checkout; uninstall removes the links', () => {
    const install = section(readFileSync(join(clone, 'README.md'), 'utf8'), 'Install');
    const link = /`(npm install -g [^`]* \.)`/.exec(install);
    expect(link, 'README "Install" names the link command').not.toBeNull();
    const inst = inNs('sh', ['-ec', link![1]!], clone);
    expect(inst.code, inst.out).toBe(0);
    const target = inNs('readlink', ['-f', `${prefix}/bin/homesfs`]);
    expect(target.out.trim()).toBe(join(clone, 'dist/cli/homesfs.js'));
    expect(inNs(`${prefix}/bin/homesfs`, ['--version']).out).toBe(`homesfs ${pkg.version}\n`);
    expect(inNs(`${prefix}/bin/homesctl`, ['--version']).out).toBe(`homesctl ${pkg.version}\n`);
    const uninstall = /`(npm uninstall -g [^`]+)`/.exec(install)![1]!;
    expect(inNs('sh', ['-ec', uninstall]).code).toBe(0);
    for (const p of ['bin/homesfs', 'bin/homesctl', 'lib/node_modules/homesfs']) expect(exists(`${prefix}/${p}`), p).toBe(false);
  }, 300_000);
});
