import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_PATH } from '../../src/exec/policy.js';
import { ownerUserName } from '../../src/users/names.js';
import { HOMESCTL, ROOT, SYSTEM_PATH, canMount, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';

if (!canMount) console.warn(`exec integration suite skipped: ${skipReason}`);

/** this file's own owner ids (helpers/owner-ids.ts) */
const BASE = ownerRange(import.meta.filename).from;
const OWNERS = { from: BASE, to: BASE + 99 };
const SECRET = `s3cr3t-${randomBytes(8).toString('hex')}`;

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/**
 * Run homesctl with exactly `env` (nothing of the test runner's environment),
 * as the platform would: the caller's secret sits in it.
 */
function ctl(
  args: string[],
  opts: { env?: Record<string, string>; input?: string; holdStdin?: boolean; onStdout?: (s: string, pid: number, stdin: NodeJS.WritableStream) => void; timeoutMs?: number } = {},
): Promise<Run> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [HOMESCTL, ...args], { env: opts.env ?? callerEnv(), stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
      opts.onStdout?.(stdout, p.pid!, p.stdin);
    });
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const t = setTimeout(() => p.kill('SIGKILL'), opts.timeoutMs ?? 30_000);
    p.on('close', (code, signal) => {
      clearTimeout(t);
      resolve({ code, signal, stdout, stderr });
    });
    p.stdin.on('error', () => undefined);
    if (!opts.holdStdin) p.stdin.end(opts.input ?? '');
  });
}

function callerEnv(extra: Record<string, string> = {}): Record<string, string> {
  return { PATH: SYSTEM_PATH, LANG: 'C.UTF-8', LC_CTYPE: 'C.UTF-8', TERM: 'xterm-test', TZ: 'Europe/Berlin', HOME: '/root', USER: 'root', PLATFORM_TOKEN: SECRET, ...extra };
}

/**
 * What the owner of acme/<key> is called inside: this daemon publishes its
 * names in a directory of its own, so the node's NSS does not know them and
 * git gets its name from GIT_AUTHOR_NAME / GIT_COMMITTER_NAME.
 */
function identity(key: string): Record<string, string> {
  const name = ownerUserName('acme', key);
  return { USER: name, LOGNAME: name, SHELL: '/bin/bash', EMAIL: `${name}@homes.invalid`, GIT_AUTHOR_NAME: `homesfs acme/${key}`, GIT_COMMITTER_NAME: `homesfs acme/${key}` };
}

function parseEnv(out: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const rec of out.split('\0')) {
    const eq = rec.indexOf('=');
    if (eq > 0) env[rec.slice(0, eq)] = rec.slice(eq + 1);
  }
  return env;
}

describe.skipIf(!canMount)('homesctl exec: a sealed command in a home, as its owner', () => {
  let d: RunningDaemon;
  let platform: string;
  let pkgDir: string;
  const exec = (project: string, rest: string[], opts: Parameters<typeof ctl>[1] = {}) =>
    ctl(['--socket', platform, 'exec', '--tenant', 'acme', '--project', project, '--create', ...rest], opts);
  const usage = async (home: string) => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'usage', home]);
    expect(r.code, r.stderr).toBe(0);
    return JSON.parse(r.stdout) as { bytes: number; budget: number; owner: { uid: number } };
  };

  beforeAll(async () => {
    d = await startDaemon({
      config: { owners: OWNERS, exec: { oomScoreAdj: 300, rlimits: { nofile: { soft: 512, hard: 4096 } } } },
    });
    platform = join(d.dir, 'platform', 'platform.sock');
    pkgDir = mkdtempSync(join(tmpdir(), 'homesfs-exec-pkg-'));
    chmodSync(pkgDir, 0o755);
  });

  afterAll(async () => {
    await d?.stop();
    if (pkgDir) rmSync(pkgDir, { recursive: true, force: true });
  });

  const sealed = (key: string): Record<string, string> => {
    const home = d.home('acme', key);
    return {
      PATH: DEFAULT_PATH,
      LANG: 'C.UTF-8',
      LC_CTYPE: 'C.UTF-8',
      TERM: 'xterm-test',
      TZ: 'Europe/Berlin',
      HOME: home,
      ...identity(key),
      XDG_CACHE_HOME: `${home}/.cache`,
      XDG_CONFIG_HOME: `${home}/.config`,
      XDG_DATA_HOME: `${home}/.local/share`,
      npm_config_cache: `${home}/.npm`,
      PIP_CACHE_DIR: `${home}/.cache/pip`,
      GRADLE_USER_HOME: `${home}/.gradle`,
      MAVEN_OPTS: `-Dmaven.repo.local=${home}/.m2/repository`,
    };
  };

  it("env shows exactly the allow-listed variables, exec.path, HOME, the owner's identity and the redirections", async () => {
    const r = await exec('web', ['--', 'env', '-0']);
    expect(r.code, r.stderr).toBe(0);
    expect(parseEnv(r.stdout)).toEqual(sealed('web'));
  });

  it('runs as the owner: no groups, no new privileges, no capabilities, its own oom_score_adj and limits, in the home', async () => {
    const owner = (await usage('acme/web')).owner.uid;
    const r = await exec('web', ['--', 'sh', '-c', 'id -u; id -g; id -G; pwd; cat /proc/self/oom_score_adj; ulimit -Sn; ulimit -Hn; grep -E "^(NoNewPrivs|CapEff|CapPrm|CapBnd|CapAmb):" /proc/self/status']);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trim().split('\n');
    // uid, gid, all groups (only its own), cwd, oom_score_adj (the policy's, not the caller's 0), limits (the caller's are 20000+)
    expect(lines.slice(0, 7)).toEqual([String(owner), String(owner), String(owner), d.home('acme', 'web'), '300', '512', '4096']);
    const status = Object.fromEntries(lines.slice(7).map((l) => l.split(':\t') as [string, string]));
    expect(status).toEqual({ CapPrm: '0000000000000000', CapEff: '0000000000000000', CapBnd: '0000000000000000', CapAmb: '0000000000000000', NoNewPrivs: '1' });
    expect(owner).toBeGreaterThanOrEqual(OWNERS.from);
  });

  it("a secret in the caller's environment is nowhere the command can read", async () => {
    // The command scans every /proc/<pid>/environ and cmdline it can open while it runs
    // (homesctl, its parent, is one of them) and reports any that hold the secret.
    const scan = [
      'import os, sys',
      'secret = sys.argv[1].encode()',
      'readable, hits = 0, []',
      'for pid in os.listdir("/proc"):',
      '    if not pid.isdigit(): continue',
      '    for f in ("environ", "cmdline"):',
      '        try:',
      '            data = open(f"/proc/{pid}/{f}", "rb").read()',
      '        except OSError:',
      '            continue',
      '        readable += 1',
      '        if secret in data: hits.append(f"{pid}/{f}")',
      'print(readable, os.getppid(), " ".join(hits) or "none", flush=True)',
      'sys.stdin.read()',
    ].join('\n');
    // The secret's text reaches the scanner only through its own argv, reversed.
    let parentEnviron = '';
    const r = await exec('web', ['--', 'python3', '-c', `import sys; sys.argv[1] = sys.argv[1][::-1]; exec(${JSON.stringify(scan)})`, [...SECRET].reverse().join('')], {
      holdStdin: true,
      onStdout: (s, _pid, stdin) => {
        if (!s.endsWith('\n') || parentEnviron) return;
        // While the scanner still runs, its parent (homesctl) holds the secret: root can read it, the owner could not.
        parentEnviron = readFileSync(`/proc/${s.split(' ')[1]}/environ`, 'utf8');
        stdin.end();
      },
    });
    expect(r.code, r.stderr).toBe(0);
    const [readable, , hits] = r.stdout.trim().split(' ');
    expect(hits).toBe('none');
    expect(Number(readable)).toBeGreaterThan(0); // it could read its own
    expect(parentEnviron).toContain(SECRET);
  });

  it('applies a good .homesfs/env.sh, skips a broken one with a warning; --env wins over it, HOME and PATH included', async () => {
    // The file also records whether the caller's secret reached the shell that sources it.
    const w = await exec('web', ['--', 'sh', '-c', 'mkdir -p .homesfs && printf \'%s\\n\' "export TOOLS_DIR=\\"$HOME/tools\\"" "export PATH=\\"$HOME/tools/bin:$PATH\\"" "export SEEN_BY_TOOLS=\\"${PLATFORM_TOKEN:-none}${USER:+ user=$USER}\\"" "echo chatter" > .homesfs/env.sh']);
    expect(w.code, w.stderr).toBe(0);
    const home = d.home('acme', 'web');
    // The caller's environment is polluted: nothing of it but the allow-list may reach the file's shell or the command.
    const good = await exec('web', ['--', 'env', '-0'], { env: callerEnv({ SECRET_KEY: SECRET, PATH: `/root/.cargo/bin:${SYSTEM_PATH}`, SHELL: '/bin/zsh', EMAIL: 'root@caller.example' }) });
    expect(good.code, good.stderr).toBe(0);
    expect(good.stderr).toBe('');
    expect(parseEnv(good.stdout)).toEqual({
      ...sealed('web'),
      PATH: `${home}/tools/bin:${DEFAULT_PATH}`,
      TOOLS_DIR: `${home}/tools`,
      SEEN_BY_TOOLS: `none user=${ownerUserName('acme', 'web')}`,
    });

    const over = await exec('web', ['--env', `HOME=${home}/elsewhere`, '--env', 'PATH=/usr/bin:/bin', '--env', 'TOOLS_DIR=mine', '--env', 'EXTRA=a=b', '--', 'env', '-0']);
    expect(parseEnv(over.stdout)).toMatchObject({ HOME: `${home}/elsewhere`, PATH: '/usr/bin:/bin', TOOLS_DIR: 'mine', EXTRA: 'a=b', XDG_CACHE_HOME: `${home}/.cache` });

    const b = await exec('web', ['--', 'sh', '-c', 'echo "if then fi (" >> .homesfs/env.sh']);
    expect(b.code).toBe(0);
    const broken = await exec('web', ['--', 'env', '-0']);
    expect(broken.code).toBe(0);
    expect(broken.stderr).toMatch(/warning: the home's tools file was skipped: \.homesfs\/env\.sh is broken \(sh -n\)/);
    expect(parseEnv(broken.stdout)).not.toHaveProperty('TOOLS_DIR');
    expect(parseEnv(broken.stdout).PATH).toBe(DEFAULT_PATH);
    await exec('web', ['--', 'rm', '.homesfs/env.sh']);
  });

  it('passes exit status, signals, stdin and a TTY through', async () => {
    expect((await exec('web', ['--', 'sh', '-c', 'exit 42'])).code).toBe(42);
    const killed = await exec('web', ['--', 'sh', '-c', 'kill -TERM $$']);
    expect([killed.code, killed.signal]).toEqual([null, 'SIGTERM']);
    const cat = await exec('web', ['--', 'cat'], { input: 'through stdin\n' });
    expect(cat.stdout).toBe('through stdin\n');

    // A signal sent to homesctl reaches the command (no terminal here, so SIGINT too).
    let sent = false;
    const trapped = await exec('web', ['--', 'sh', '-c', 'trap "echo got-int; exit 7" INT; echo ready; while :; do sleep 0.1; done'], {
      onStdout: (s, pid) => {
        if (!sent && s.includes('ready')) {
          sent = true;
          process.kill(pid, 'SIGINT');
        }
      },
    });
    expect([trapped.code, trapped.stdout.trim().split('\n').pop()]).toEqual([7, 'got-int']);
    let termSent = false;
    const term = await exec('web', ['--', 'sh', '-c', 'echo ready; exec sleep 30'], {
      onStdout: (s, pid) => {
        if (!termSent && s.includes('ready')) {
          termSent = true;
          process.kill(pid, 'SIGTERM');
        }
      },
    });
    expect(term.signal).toBe('SIGTERM');

    const viaPty = await runAsync('python3', ['-c', 'import pty, sys; sys.exit(pty.spawn(sys.argv[1:]) >> 8)', process.execPath, HOMESCTL, '--socket', platform, 'exec', '--tenant', 'acme', '--project', 'web', '--', 'sh', '-c', 'test -t 0 && test -t 1 && tty; exit 5'], {
      env: callerEnv(),
    });
    expect(viaPty.code, viaPty.stderr).toBe(5);
    expect(viaPty.stdout).toMatch(/\/dev\/pts\/[0-9]+/);
  });

  it("a polluted caller's PATH, secret and identity stay outside; git commits as the owner without any git config", async () => {
    // The caller's PATH starts with a directory holding a fake git anyone may run.
    const fake = mkdtempSync(join(tmpdir(), 'homesfs-fakebin-'));
    try {
      chmodSync(fake, 0o755);
      writeFileSync(join(fake, 'git'), '#!/bin/sh\necho fake-git\n', { mode: 0o755 });
      const polluted = callerEnv({ PATH: `${fake}:/root/.cargo/bin:/root/.pyenv/shims:${SYSTEM_PATH}`, SECRET_KEY: SECRET, SHELL: '/bin/zsh', LOGNAME: 'root', EMAIL: 'root@caller.example' });
      const r = await exec('gitp', ['--', 'sh', '-c', 'printf "%s\\n" "$PATH" "$USER" "$LOGNAME" "$SHELL" "$EMAIL" "${SECRET_KEY:-no-secret}"; command -v git; git --version'], { env: polluted });
      expect(r.code, r.stderr).toBe(0);
      const id = identity('gitp');
      const lines = r.stdout.trim().split('\n');
      expect(lines.slice(0, 7)).toEqual([DEFAULT_PATH, id.USER, id.LOGNAME, '/bin/bash', id.EMAIL, 'no-secret', '/usr/bin/git']);
      expect(lines[7]).toMatch(/^git version [0-9]/);

      // No ~/.gitconfig, no system config: the identity comes from the environment alone.
      const commit = await exec('gitp', ['--env', 'GIT_CONFIG_NOSYSTEM=1', '--', 'sh', '-c', 'test ! -e "$HOME/.gitconfig" && git init -q repo && cd repo && echo hi > f && git add f && git commit -q -m first && git log -1 --format="%an|%ae|%cn|%ce"'], { env: polluted });
      expect(commit.code, commit.stderr).toBe(0);
      expect(commit.stdout.trim()).toBe(`homesfs acme/gitp|${id.EMAIL}|homesfs acme/gitp|${id.EMAIL}`);
      const owner = (await usage('acme/gitp')).owner.uid;
      const st = await exec('gitp', ['--', 'stat', '-c', '%u', 'repo/.git/HEAD']);
      expect(st.stdout.trim()).toBe(String(owner));
    } finally {
      rmSync(fake, { recursive: true, force: true });
    }
  });

  it('127 for a command not found, 126 for one found that cannot be run, each with a clear message', async () => {
    const home = d.home('acme', 'web');
    const nf = await exec('web', ['--', 'no-such-command-here']);
    expect([nf.code, nf.stdout]).toEqual([127, '']);
    expect(nf.stderr).toBe(`homesctl: exec: no-such-command-here: command not found (PATH=${DEFAULT_PATH})\n`);
    // A PATH directory the owner cannot search (as root's own were) no longer turns "not found" into 126.
    const priv = mkdtempSync(join(tmpdir(), 'homesfs-private-'));
    try {
      chmodSync(priv, 0o700);
      const hidden = await exec('web', ['--env', `PATH=${priv}:/usr/bin:/bin`, '--', 'no-such-command-here']);
      expect([hidden.code, hidden.stderr]).toEqual([127, `homesctl: exec: no-such-command-here: command not found (PATH=${priv}:/usr/bin:/bin)\n`]);
    } finally {
      rmSync(priv, { recursive: true, force: true });
    }
    const prep = await exec('web', ['--', 'sh', '-c', 'mkdir -p bin && echo "echo hi" > notes.txt && cp notes.txt bin/tool && chmod 644 notes.txt bin/tool']);
    expect(prep.code, prep.stderr).toBe(0);
    const file = await exec('web', ['--', './notes.txt']);
    // (the home's profile keeps files owner-only: chmod 644 shows as 0600)
    expect([file.code, file.stderr]).toEqual([126, `homesctl: exec: ./notes.txt: cannot be run: ${home}/notes.txt is not executable (mode 0600)\n`]);
    const onPath = await exec('web', ['--env', `PATH=${home}/bin:/usr/bin:/bin`, '--', 'tool']);
    expect([onPath.code, onPath.stderr]).toEqual([126, `homesctl: exec: tool: cannot be run: ${home}/bin/tool is not executable (mode 0600)\n`]);
    const dir = await exec('web', ['--', './bin']);
    expect(dir.code).toBe(126);
    expect(dir.stderr).toMatch(/bin is a directory/);
    // Once executable, the same file runs; a command's own 127 passes through as its own.
    await exec('web', ['--', 'chmod', '755', 'bin/tool']);
    const ran = await exec('web', ['--env', `PATH=${home}/bin:/usr/bin:/bin`, '--', 'tool']);
    expect([ran.code, ran.stdout]).toEqual([0, 'hi\n']);
    const own = await exec('web', ['--', 'sh', '-c', 'exit 127']);
    expect([own.code, own.stderr]).toEqual([127, '']);
    await exec('web', ['--', 'rm', '-r', 'bin', 'notes.txt']);
  });

  it('--cwd stays inside the home; homesctl exec failures exit 125', async () => {
    await exec('web', ['--', 'mkdir', '-p', 'src/app']);
    const r = await exec('web', ['--cwd', 'src/app', '--', 'pwd']);
    expect(r.stdout.trim()).toBe(join(d.home('acme', 'web'), 'src/app'));
    const out = await exec('web', ['--cwd', '../other', '--', 'pwd']);
    expect([out.code, out.stdout]).toEqual([125, '']);
    expect(out.stderr).toMatch(/outside the home/);
    expect((await exec('web', ['--env', 'BAD-NAME=1', '--', 'true'])).code).toBe(125);
    expect((await exec('web', ['true'])).code).toBe(125); // no '--'
    const bad = await ctl(['--socket', platform, 'exec', '--tenant', 'acme', '--project', '_user_x', '--', 'true']);
    expect([bad.code, /INVALID_NAME/.test(bad.stderr)]).toEqual([125, true]);
    const noSock = await ctl(['--socket', join(d.dir, 'nope.sock'), 'exec', '--tenant', 'acme', '--project', 'web', '--', 'true']);
    expect(noSock.code).toBe(125);
    // not root: refused before anything runs
    const asNobody = spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, HOMESCTL, '--socket', platform, 'exec', '--tenant', 'acme', '--project', 'web', '--', 'true'], { encoding: 'utf8', env: callerEnv() });
    expect([asNobody.status, /needs root/.test(asNobody.stderr)]).toEqual([125, true]);
  });

  it('a mistyped project makes no home: NOT_FOUND with the nearest names, exit 125; --create makes it', async () => {
    await exec('frontend', ['--', 'true']);
    const before = (await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'list'])).stdout;
    const typo = await ctl(['--socket', platform, 'exec', '--tenant', 'acme', '--project', 'frontedn', '--', 'true']);
    expect(typo.code).toBe(125);
    expect(typo.stderr).toMatch(/NOT_FOUND: home acme\/frontedn does not exist/);
    expect(typo.stderr).toMatch(/did you mean acme\/frontend\?/);
    expect((await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'list'])).stdout).toBe(before);
    expect(existsSync(join(d.backing, 'acme', 'frontedn'))).toBe(false);
    const made = await exec('frontedn', ['--', 'sh', '-c', 'pwd']);
    expect([made.code, made.stdout.trim()]).toEqual([0, d.home('acme', 'frontedn')]);
  });

  it('a command does not outlive a homesctl killed with SIGKILL (parent-death signal)', async () => {
    let cmdPid = 0;
    const r = await exec('web', ['--', 'sh', '-c', 'echo $$; exec sleep 60'], {
      onStdout: (s, pid) => {
        if (!cmdPid && s.endsWith('\n')) {
          cmdPid = Number(s.trim());
          process.kill(pid, 'SIGKILL');
        }
      },
    });
    expect(r.signal).toBe('SIGKILL');
    expect(cmdPid).toBeGreaterThan(0);
    // The kernel kills it as homesctl dies; it is gone or a zombie waiting for its reaper.
    const state = () => {
      try {
        return readFileSync(`/proc/${cmdPid}/stat`, 'utf8').split(') ')[1]![0];
      } catch {
        return 'gone';
      }
    };
    for (let i = 0; i < 200 && !['gone', 'Z'].includes(state()!); i++) await new Promise((res) => setTimeout(res, 25));
    expect(['gone', 'Z']).toContain(state());
  });

  it('pip and npm caches land inside the home and count against its budget', { timeout: 180_000 }, async () => {
    // A tiny sdist (pip caches the wheel it builds) and an npm tarball, made here: no network.
    mkdirSync(join(pkgDir, 'py/hfsdemo'), { recursive: true });
    writeFileSync(join(pkgDir, 'py/setup.py'), "from setuptools import setup\nsetup(name='hfsdemo', version='1.0', packages=['hfsdemo'])\n");
    writeFileSync(join(pkgDir, 'py/hfsdemo/__init__.py'), `DATA = ${JSON.stringify(randomBytes(30000).toString('base64'))}\n`);
    const sdist = spawnSync('/usr/bin/python3', ['setup.py', '-q', 'sdist', '-d', pkgDir], { cwd: join(pkgDir, 'py'), encoding: 'utf8' });
    expect(sdist.status, sdist.stderr).toBe(0);
    mkdirSync(join(pkgDir, 'npm'));
    writeFileSync(join(pkgDir, 'npm/package.json'), JSON.stringify({ name: 'hfs-demo', version: '1.0.0' }));
    writeFileSync(join(pkgDir, 'npm/data.txt'), randomBytes(60000).toString('base64'));
    // npm's cache and logs in the test's dir, never root's ~/.npm
    const npmEnv = { ...process.env, HOME: pkgDir, npm_config_cache: join(pkgDir, '.npm-cache'), npm_config_logs_max: '0', npm_config_update_notifier: 'false' };
    const pack = spawnSync('npm', ['pack', './npm', '--pack-destination', pkgDir], { cwd: pkgDir, encoding: 'utf8', env: npmEnv });
    expect(pack.status, pack.stderr).toBe(0);
    spawnSync('chmod', ['-R', 'a+rX', pkgDir]);

    const before = (await usage('acme/caches').catch(() => ({ bytes: 0 }))).bytes;
    const pip = await exec('caches', ['--env', 'PATH=/usr/bin:/bin', '--', 'python3', '-m', 'pip', 'install', '--no-index', '--no-build-isolation', '--disable-pip-version-check', '--user', '--break-system-packages', join(pkgDir, 'hfsdemo-1.0.tar.gz')]);
    expect(pip.code, pip.stderr).toBe(0);
    const npm = await exec('caches', ['--env', 'npm_config_update_notifier=false', '--', 'npm', 'cache', 'add', '--offline', join(pkgDir, 'hfs-demo-1.0.0.tgz')]);
    expect(npm.code, npm.stderr).toBe(0);
    const du = await exec('caches', ['--', 'du', '-sb', '--apparent-size', '.cache/pip', '.npm']);
    const sizes = Object.fromEntries(du.stdout.trim().split('\n').map((l) => l.split('\t').reverse() as [string, string]));
    expect(Number(sizes['.cache/pip'])).toBeGreaterThan(20000);
    expect(Number(sizes['.npm'])).toBeGreaterThan(40000);
    expect(existsSync(join(d.backingOf('acme', 'caches'), '.npm/_cacache'))).toBe(true);
    const after = await usage('acme/caches');
    expect(after.bytes - before).toBeGreaterThanOrEqual(Number(sizes['.cache/pip']) + Number(sizes['.npm']));

    // With the budget just above what is used, the next cache write is refused.
    const set = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, 'set-budget', 'acme/caches', String(after.bytes + 20000)]);
    expect(set.code, set.stderr).toBe(0);
    await exec('caches', ['--', 'npm', 'cache', 'clean', '--force']).then(() => undefined);
    const refilled = await usage('acme/caches');
    await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, 'set-budget', 'acme/caches', String(refilled.bytes + 20000)]);
    const denied = await exec('caches', ['--env', 'npm_config_update_notifier=false', '--', 'npm', 'cache', 'add', '--offline', join(pkgDir, 'hfs-demo-1.0.0.tgz')]);
    expect(denied.code).not.toBe(0);
    expect(denied.stderr).toMatch(/EDQUOT|quota|error -122\b/i); // npm prints EDQUOT as 'Unknown system error -122'
    const final = await usage('acme/caches');
    expect(final.bytes).toBeLessThanOrEqual(final.budget);
  });

  it("Node callers get the same from the package: import { resolveHome, sealedEnv, execInHome } from 'homesfs'", async () => {
    const app = mkdtempSync(join(tmpdir(), 'homesfs-lib-'));
    try {
      mkdirSync(join(app, 'node_modules'));
      symlinkSync(ROOT, join(app, 'node_modules', 'homesfs'));
      writeFileSync(
        join(app, 'app.mjs'),
        [
          "import { resolveHome, sealedEnv, execInHome } from 'homesfs';",
          'const [socket] = process.argv.slice(2);',
          "const home = await resolveHome({ socket, tenant: 'acme', project: 'lib' });",
          "const env = sealedEnv({ callerEnv: process.env, home: home.home, policy: home.exec, owner: home.identity, extras: { X: '1' } });",
          "const run = await execInHome({ resolved: home, argv: ['sh', '-c', 'id -u; echo $HOME; echo $X; echo ${PLATFORM_TOKEN:-unset}'], env: { X: '1' }, stdio: ['ignore', 'pipe', 'inherit'] });",
          "let out = ''; run.child.stdout.on('data', (d) => (out += d));",
          'const res = await run.exited;',
          'console.log(JSON.stringify({ uid: home.owner.uid, home: home.home, env, out, res, same: JSON.stringify(run.env) === JSON.stringify(env) }));',
        ].join('\n'),
      );
      const r = await runAsync(process.execPath, [join(app, 'app.mjs'), platform], { cwd: app, env: callerEnv() });
      expect(r.code, r.stderr).toBe(0);
      const j = JSON.parse(r.stdout) as { uid: number; home: string; env: Record<string, string>; out: string; res: { code: number }; same: boolean };
      expect(j.home).toBe(d.home('acme', 'lib'));
      expect(j.out.split('\n')).toEqual([String(j.uid), j.home, '1', 'unset', '']);
      expect(j.res.code).toBe(0);
      expect(j.same).toBe(true);
      expect(j.env).not.toHaveProperty('PLATFORM_TOKEN');
      expect(j.env).toMatchObject({ ...identity('lib'), PATH: DEFAULT_PATH });
      const types = readFileSync(join(ROOT, 'dist/index.d.ts'), 'utf8');
      for (const name of ['resolveHome', 'sealedEnv', 'execInHome']) expect(types).toContain(name);
    } finally {
      rmSync(app, { recursive: true, force: true });
    }
  });
});
