import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { HomesError } from '../../src/errors.js';
import { createRootLogger } from '../../src/log.js';
import type { DeleteResult, HomeInfo, RenameResult, RescanResult, ResolveResult, SettingsView, StatusReport } from '../../src/control/api.js';
import { PLATFORM_COMMANDS, commands } from '../../src/control/commands.js';
import { fakeTargets, type CommandFunction, type CommandFunctions } from '../helpers/command-fakes.js';
import { startControlServer, type ControlServer } from '../../src/control/server.js';
import { STATUS as BASE_STATUS, HOME, TENANT } from '../helpers/fixtures.js';
import { chooseSocket, DEFAULT_SOCKETS, SocketConfigError } from '../../src/cli/sockets.js';

/** A config path and a third, long tenant name: the table's column alignment is tested on it. */
const STATUS: StatusReport = {
  ...BASE_STATUS,
  configPath: '/etc/homesfs/config.json',
  homes: [...BASE_STATUS.homes, { tenant: 'globex-corporation', key: '_user_alice', scan: 'done', bytes: 512, inodes: 3, openFiles: 7, maxOpenFiles: 128 }],
  limits: { nofile: { configured: null, soft: 65536, hard: 65536 }, reserveFiles: 2048, openFiles: 7, openFilesCap: 63485, openFilesPerUid: 8192, descriptorsInUse: 1100 },
};

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
// The installed entry point, exactly as package.json publishes it.
const BIN = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { bin: Record<string, string> }).bin.homesctl!;
const CLI = path.join(ROOT, BIN);


const HOMES: HomeInfo[] = [
  HOME,
  {
    ...HOME,
    key: 'old-api',
    path: '/homes/acme/old-api',
    owner: { uid: 20002, gid: 20002 },
    bytes: 512,
    budget: 0,
    percent: null,
    inodes: 3,
    inodeCap: 0,
    openHandles: 0,
    orphan: true,
    soft: { ...HOME.soft, bytes: 256, overBytes: true, sources: { bytes: 'override', inodes: 'profile' } },
    flags: ['SOFT', 'ORPHAN'],
  },
  {
    ...HOME,
    key: '_tenant',
    scope: 'tenant',
    path: '/homes/acme/_tenant',
    owner: { uid: 20003, gid: 20003 },
    profile: 'strict',
    profileSource: 'override',
    bytes: 26319257,
    budget: 10485760,
    percent: 251,
    limitSources: { budget: 'override', inodeCap: 'profile', fileCap: 'profile' },
    inodes: 1,
    openHandles: 0,
    scan: 'scanning',
    flags: ['OVER', 'SCANNING'],
  },
];
const FORWARD = { from: 'acme/web', to: 'acme/webapp', at: '2026-01-01T00:00:00.000Z' };
const SETTINGS: SettingsView = {
  tenant: 'acme',
  tenantDefault: 'tenant',
  project: { name: 'web', value: null },
  resolved: { scope: 'tenant', source: 'tenant', key: '_tenant' },
};
const RESCAN: RescanResult = { home: 'acme/web', before: { bytes: 100, inodes: 3 }, after: { bytes: 164, inodes: 4 }, drift: { bytes: 64, inodes: 1 } };
const RESOLVE: ResolveResult = { tenant: 'acme', scope: 'user', key: '_user_alice', home: '/homes/acme/_user_alice', owner: { uid: 20010, gid: 20010 }, created: true, source: 'user' };
const RENAME: RenameResult = { from: 'acme/web', to: 'acme/www', openFiles: 0, cwdProcesses: 0 };
const DELETE: DeleteResult = { deleted: 'acme/web', bytes: 1048576 };

type Method = CommandFunction;
const RESULTS: { [M in Method]: Awaited<ReturnType<CommandFunctions[M]>> } = {
  status: STATUS,
  list: HOMES,
  usage: HOME,
  create: HOME,
  setBudget: HOME,
  setProfile: { ...HOME, profile: 'strict', profileSource: 'override' },
  settingsGet: SETTINGS,
  settingsSet: SETTINGS,
  rescan: RESCAN,
  resolve: RESOLVE,
  renameProject: RENAME,
  renameUser: { from: 'acme/_user_alice', to: 'acme/_user_bob', openFiles: 2, cwdProcesses: 1 },
  deleteProject: DELETE,
  deleteUser: { deleted: null, deleteNote: 'nothing to delete' },
  setLimits: { ...HOME, inodeCap: 5000, limitSources: { budget: 'profile', inodeCap: 'override', fileCap: 'profile' } },
  deleteHome: { deleted: 'acme/old-api', bytes: 512 },
  deleteTenant: { tenant: 'globex', removedDir: true, dropped: { settings: true, budget: true, forwards: ['globex/old'] } },
  forwards: [FORWARD],
  releaseName: FORWARD,
  reload: { at: '2026-01-01T00:00:00.000Z', ok: true, message: 'applied: logLevel', applied: ['logLevel'] },
  tenantUsage: TENANT,
  setTenantBudget: TENANT,
};

let mode: 'ok' | 'error' | 'hang' = 'ok';
const calls: Array<{ method: Method; args: unknown[] }> = [];
/** The next call of this method throws this. */
const failNext = new Map<Method, Error>();
/** Overrides the canned result of a method. */
const resultOf = new Map<Method, unknown>();
const api = Object.fromEntries(
  (Object.keys(RESULTS) as Method[]).map((m) => [
    m,
    async (...args: unknown[]) => {
      if (m === 'status') {
        if (mode === 'error') throw new HomesError('NOT_FOUND', 'no such home', { home: 'acme/nope' });
        if (mode === 'hang') return new Promise<StatusReport>(() => {});
      }
      calls.push({ method: m, args });
      const err = failNext.get(m);
      if (err) {
        failNext.delete(m);
        throw err;
      }
      return resultOf.has(m) ? resultOf.get(m) : RESULTS[m];
    },
  ]),
) as unknown as CommandFunctions;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function homesctl(args: string[], env: Record<string, string | undefined> = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      // Never the host's /etc/homesfs/config.json: a configuration of this run, naming no live socket.
      env: { ...process.env, HOMESFS_SOCKET: undefined, HOMESFS_PLATFORM_SOCKET: undefined, HOMESFS_CONFIG: noConfig, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

let tmp: string;
/** a configuration whose sockets nobody listens on */
let noConfig: string;
let server: ControlServer;
let platform: ControlServer;
let sock: string;

beforeAll(async () => {
  if (!existsSync(CLI)) {
    throw new Error(
      `${CLI} (package.json bin.homesctl) is missing: build first with 'npx tsc -p tsconfig.json' (npm test does this), ` +
        `and check that tsconfig's rootDir/outDir put src/cli/homesctl.ts there`,
    );
  }
  tmp = await mkdtemp(path.join(os.tmpdir(), 'homesctl-'));
  noConfig = path.join(tmp, 'no-daemon.json');
  await writeFile(noConfig, JSON.stringify({ backing: '/nonexistent/b', mount: '/nonexistent/m', socket: path.join(tmp, 'none', 'admin.sock'), platformSocket: path.join(tmp, 'none', 'platform.sock') }));
  server = await startControlServer({
    socketPath: path.join(tmp, 'run', 'admin.sock'),
    socketMode: 0o600,
    commands,
    ...fakeTargets(api),
    log: createRootLogger('silent'),
    requestTimeoutMs: 10_000,
  });
  sock = server.address;
  platform = await startControlServer({
    socketPath: path.join(tmp, 'platform', 'platform.sock'),
    socketMode: 0o660,
    socketGroup: process.getgid!(),
    allowed: PLATFORM_COMMANDS,
    commands,
    ...fakeTargets(api),
    log: createRootLogger('silent'),
  });
});

afterAll(async () => {
  await server?.close();
  await platform?.close();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

describe('homesctl status', () => {
  it('prints a human summary and a homes table by default', async () => {
    mode = 'ok';
    const r = await homesctl(['--socket', sock, 'status']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const out = r.stdout;
    expect(out).toMatch(/^Mount:\s+\/homes$/m);
    expect(out).toMatch(/^Mounted:\s+yes$/m);
    expect(out).toMatch(/^Loop:\s+running$/m);
    expect(out).toMatch(/^Native:\s+ok \(ABI 6, FUSE 7\.38, passthrough, max write 1\.0 MiB\)$/m);
    expect(out).toMatch(/^Uptime:\s+1h 2m 3s$/m);
    expect(out).toMatch(/^Config:\s+\/etc\/homesfs\/config\.json$/m);
    expect(out).toMatch(/^Descriptors:\s+1100 in use of 65536 \(RLIMIT_NOFILE, hard 65536; the hard limit\), 2048 reserved for the daemon$/m);
    expect(out).toMatch(/^Open files:\s+7 of 63485 across all homes; per uid 8192$/m);
    const lines = out.trimEnd().split('\n');
    const header = lines.findIndex((l) => l.startsWith('TENANT'));
    expect(header).toBeGreaterThan(0);
    expect(lines[header]!.split(/\s+/)).toEqual(['TENANT', 'KEY', 'SCAN', 'BYTES', 'INODES', 'OPEN']);
    const rows = lines.slice(header + 1).map((l) => l.split(/\s{2,}/).map((c) => c.trim()));
    expect(rows).toEqual([
      ['acme', 'web', 'done', '1.0 MiB', '12', '-'],
      ['acme', '_tenant', 'scanning', '-', '-', '-'],
      ['globex-corporation', '_user_alice', 'done', '512 B', '3', '7/128'],
    ]);
    // Columns line up: every row starts its KEY column where the header does.
    const keyCol = lines[header]!.indexOf('KEY');
    for (const l of lines.slice(header + 1)) expect(l[keyCol - 1]).toBe(' ');
  });

  it('prints the raw data with --json (before or after the command)', async () => {
    mode = 'ok';
    for (const args of [['--json', '--socket', sock, 'status'], ['status', '--json', `--socket=${sock}`]]) {
      const r = await homesctl(args);
      expect(r.code).toBe(0);
      expect(JSON.parse(r.stdout)).toEqual(STATUS);
    }
  });

  it('exits 4 when the daemon answers but does not serve (a health probe as it is)', async () => {
    mode = 'ok';
    const cases: Array<[StatusReport, RegExp]> = [
      [{ ...STATUS, mount: { ...STATUS.mount, mounted: false, loop: 'ended' } }, /not mounted, FUSE loop ended/],
      [{ ...STATUS, mount: { ...STATUS.mount, mounted: false, loop: 'starting' } }, /not mounted, FUSE loop starting/],
      [{ ...STATUS, native: { ...STATUS.native, selfCheck: 'failed' } }, /native self-check failed/],
    ];
    try {
      for (const [report, why] of cases) {
        resultOf.set('status', report);
        const r = await homesctl(['--socket', sock, 'status']);
        expect(r.code).toBe(4);
        expect(r.stdout).toMatch(/^Mount:\s+\/homes$/m);
        expect(r.stderr).toMatch(why);
        const j = await homesctl(['--socket', sock, '--json', 'status']);
        expect(j.code).toBe(4);
        expect(JSON.parse(j.stdout)).toEqual(report);
      }
    } finally {
      resultOf.delete('status');
    }
    expect((await homesctl(['--socket', sock, 'status'])).code).toBe(0);
  });

  it('says when the kernel offers FUSE over io_uring, which the daemon does not take', async () => {
    mode = 'ok';
    const report: StatusReport = { ...STATUS, native: { ...STATUS.native, protocol: { ...STATUS.native.protocol, ioUringOffered: true } } };
    resultOf.set('status', report);
    try {
      const r = await homesctl(['--socket', sock, 'status']);
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(/^Native:\s+ok \(ABI 6, FUSE 7\.38, passthrough, io_uring offered, not taken, max write 1\.0 MiB\)$/m);
    } finally {
      resultOf.delete('status');
    }
    expect((await homesctl(['--socket', sock, 'status'])).stdout).not.toMatch(/io_uring/);
  });

  it('prints its version with --version', async () => {
    const r = await homesctl(['--version']);
    expect(r.code).toBe(0);
    const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string };
    expect(r.stdout).toBe(`homesctl ${pkg.version}\n`);
  });

  it('takes the socket from HOMESFS_SOCKET; the flag wins', async () => {
    mode = 'ok';
    const viaEnv = await homesctl(['status', '--json'], { HOMESFS_SOCKET: sock });
    expect(viaEnv.code).toBe(0);
    const flagWins = await homesctl(['--socket', path.join(tmp, 'missing.sock'), 'status'], { HOMESFS_SOCKET: sock });
    expect(flagWins.code).toBe(3);
  });
});

describe('homesctl exit codes', () => {
  it('1 and "homesctl: CODE: message" on stderr for an error reply', async () => {
    mode = 'error';
    try {
      const r = await homesctl(['--socket', sock, 'status']);
      expect(r.code).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr.split('\n')[0]).toBe('homesctl: NOT_FOUND: no such home');
      const j = await homesctl(['--socket', sock, '--json', 'status']);
      expect(j.code).toBe(1);
      expect(JSON.parse(j.stdout)).toMatchObject({ ok: false, code: 'NOT_FOUND', details: { home: 'acme/nope' } });
    } finally {
      mode = 'ok';
    }
  });

  it('3 when the socket does not exist', async () => {
    const r = await homesctl(['--socket', path.join(tmp, 'nope', 'admin.sock'), 'status']);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/^homesctl: cannot connect to .*admin\.sock: ENOENT/);
  });

  it('3 when the daemon does not answer within --timeout', async () => {
    mode = 'hang';
    try {
      const t0 = Date.now();
      const r = await homesctl(['--socket', sock, '--timeout', '300', 'status']);
      expect(r.code).toBe(3);
      expect(r.stderr).toMatch(/no reply .* within 300 ms/);
      expect(Date.now() - t0).toBeLessThan(5000);
    } finally {
      mode = 'ok';
    }
  });

  it('2 for usage errors, with a hint on stderr', async () => {
    const cases = [
      [],
      ['frobnicate'],
      ['--bogus', 'status'],
      ['status', '--bogus'],
      ['status', 'extra'],
      ['--timeout', 'soon', 'status'],
      ['--timeout', '0', 'status'],
      ['--socket'],
    ];
    for (const args of cases) {
      const r = await homesctl(['--socket', sock, ...args]);
      expect(r.code, JSON.stringify(args)).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(/^homesctl: .*\nTry 'homesctl (status )?--help'\.\n$/);
    }
  });

  it('0 and usage on stdout for --help and <command> --help', async () => {
    const main = await homesctl(['--help']);
    expect(main.code).toBe(0);
    expect(main.stdout).toMatch(/^Usage: homesctl \[--socket PATH \| --config FILE\] \[--json\] \[--timeout MS\] <command> \[args\]/);
    expect(main.stdout).toMatch(/^ {2}--config FILE {3}the daemon's configuration, read for its socket paths/m);
    expect(main.stdout).toMatch(/^ {2}delete-tenant\s+Remove an empty tenant/m);
    expect(main.stdout).toMatch(/^\s+status\s+Mount liveness/m);
    expect(main.stdout).toContain('/run/homesfs/admin.sock');
    const cmd = await homesctl(['status', '--help']);
    expect(cmd.code).toBe(0);
    expect(cmd.stdout).toMatch(/^Usage: homesctl \[global options\] status/);
    const viaHelp = await homesctl(['help', 'status']);
    expect(viaHelp.stdout).toBe(cmd.stdout);
  });
});

// ---- the management commands ---------------------------------------------------

beforeEach(() => {
  calls.length = 0;
  failNext.clear();
  resultOf.clear();
  mode = 'ok';
});

/** [argv after --socket, API method, the arguments it must receive] */
const PARSING: Array<[string[], Method, unknown[]]> = [
  [['list'], 'list', [{}]],
  [['list', '--tenant', 'acme', '--orphans'], 'list', [{ tenant: 'acme', orphans: true }]],
  [['usage', 'acme/web'], 'usage', ['acme/web']],
  [['create', 'acme/web'], 'create', [{ home: 'acme/web' }]],
  [
    ['create', 'acme/web', '--profile', 'strict', '--budget', '1G', '--owner', '1000:1001'],
    'create',
    [{ home: 'acme/web', profile: 'strict', budget: 1073741824, owner: { uid: 1000, gid: 1001 } }],
  ],
  [['create', '--owner=0:4294967294', 'acme/_tenant', '--budget=0'], 'create', [{ home: 'acme/_tenant', budget: 0, owner: { uid: 0, gid: 4294967294 } }]],
  [['create', 'acme/old', '--owner', '300050:300050', '--force'], 'create', [{ home: 'acme/old', owner: { uid: 300050, gid: 300050 }, force: true }]],
  [['set-budget', 'acme/web', '1G'], 'setBudget', [{ home: 'acme/web', bytes: 1073741824 }]],
  [['set-budget', 'acme/web', '1GiB'], 'setBudget', [{ home: 'acme/web', bytes: 1073741824 }]],
  [['set-budget', 'acme/web', '500M'], 'setBudget', [{ home: 'acme/web', bytes: 500 * 1024 * 1024 }]],
  [['set-budget', 'acme/web', '64KiB'], 'setBudget', [{ home: 'acme/web', bytes: 65536 }]],
  [['set-budget', 'acme/web', '3k'], 'setBudget', [{ home: 'acme/web', bytes: 3072 }]],
  [['set-budget', 'acme/web', '2MiB'], 'setBudget', [{ home: 'acme/web', bytes: 2097152 }]],
  [['set-budget', 'acme/web', '1234567'], 'setBudget', [{ home: 'acme/web', bytes: 1234567 }]],
  [['set-budget', 'acme/web', '0'], 'setBudget', [{ home: 'acme/web', bytes: 0 }]],
  [['set-budget', 'acme/web', 'off'], 'setBudget', [{ home: 'acme/web', bytes: 0 }]],
  [['set-budget', 'acme/web', 'default'], 'setBudget', [{ home: 'acme/web', bytes: null }]],
  [['set-budget', 'acme/web', '2GB'], 'setBudget', [{ home: 'acme/web', bytes: 2_000_000_000 }]],
  [['set-budget', 'acme/web', '2G'], 'setBudget', [{ home: 'acme/web', bytes: 2 * 1024 ** 3 }]],
  [['set-budget', 'acme/web', '1.5G'], 'setBudget', [{ home: 'acme/web', bytes: 1.5 * 1024 ** 3 }]],
  [['set-budget', 'acme/web', '1e9'], 'setBudget', [{ home: 'acme/web', bytes: 1e9 }]],
  [['set-budget', 'acme/web', '10g'], 'setBudget', [{ home: 'acme/web', bytes: 10 * 1024 ** 3 }]],
  [['set-limits', 'acme/web', '--inodes', '5000'], 'setLimits', [{ home: 'acme/web', inodes: 5000 }]],
  [['set-limits', 'acme/web', '--inodes', '1e6', '--file-size', '512M'], 'setLimits', [{ home: 'acme/web', inodes: 1e6, fileBytes: 512 * 1024 ** 2 }]],
  [['set-limits', 'acme/web', '--inodes=off', '--file-size=default'], 'setLimits', [{ home: 'acme/web', inodes: 0, fileBytes: null }]],
  [['delete-home', 'acme/old-api'], 'deleteHome', [{ home: 'acme/old-api' }]],
  [['delete-home', 'acme/old-api', '--force'], 'deleteHome', [{ home: 'acme/old-api', force: true }]],
  [['forwards'], 'forwards', []],
  [['release-name', 'acme/web'], 'releaseName', [{ home: 'acme/web' }]],
  [['set-profile', 'acme/web', 'strict'], 'setProfile', [{ home: 'acme/web', profile: 'strict' }]],
  [['set-profile', 'acme/web', '--clear'], 'setProfile', [{ home: 'acme/web', profile: null }]],
  [['settings', 'get', '--tenant', 'acme'], 'settingsGet', [{ tenant: 'acme' }]],
  [['settings', 'get', '--tenant', 'acme', '--project', 'web'], 'settingsGet', [{ tenant: 'acme', project: 'web' }]],
  [['settings', 'get', '--tenant=acme', '--user=alice'], 'settingsGet', [{ tenant: 'acme', user: 'alice' }]],
  [['settings', 'get', '--tenant', 'acme', '--project', 'web', '--user', 'alice'], 'settingsGet', [{ tenant: 'acme', project: 'web', user: 'alice' }]],
  [['settings', 'set', '--tenant', 'acme', 'tenant', '--dry-run'], 'settingsSet', [{ tenant: 'acme', homeScope: 'tenant', dryRun: true }]],
  [['settings', 'set', '--tenant', 'acme', 'tenant', '--yes'], 'settingsSet', [{ tenant: 'acme', homeScope: 'tenant', yes: true }]],
  [['settings', 'set', '--tenant', 'acme', 'tenant'], 'settingsSet', [{ tenant: 'acme', homeScope: 'tenant' }]],
  [['settings', 'set', '--tenant', 'acme', '--project', 'web', 'user'], 'settingsSet', [{ tenant: 'acme', project: 'web', homeScope: 'user' }]],
  [['settings', 'set', '--tenant', 'acme', '--user', 'alice', 'project'], 'settingsSet', [{ tenant: 'acme', user: 'alice', homeScope: 'project' }]],
  [['settings', 'set', '--tenant', 'acme', '--project', 'web', 'unset'], 'settingsSet', [{ tenant: 'acme', project: 'web', homeScope: null }]],
  [['rescan', 'acme/web'], 'rescan', [{ home: 'acme/web' }]],
  [['resolve', '--tenant', 'acme', '--project', 'web'], 'resolve', [{ tenant: 'acme', project: 'web' }]],
  [['resolve', '--tenant', 'acme', '--project', 'web', '--user', 'alice'], 'resolve', [{ tenant: 'acme', project: 'web', user: 'alice' }]],
  [['rename-project', '--tenant', 'acme', 'web', 'www'], 'renameProject', [{ tenant: 'acme', from: 'web', to: 'www' }]],
  [['rename-project', 'web', 'www', '--tenant', 'acme', '--force'], 'renameProject', [{ tenant: 'acme', from: 'web', to: 'www', force: true }]],
  [['rename-user', '--tenant', 'acme', 'alice', 'bob'], 'renameUser', [{ tenant: 'acme', from: 'alice', to: 'bob' }]],
  [['delete-project', '--tenant', 'acme', 'web'], 'deleteProject', [{ tenant: 'acme', project: 'web' }]],
  [['delete-project', '--tenant', 'acme', '--force', '--', '-odd'], 'deleteProject', [{ tenant: 'acme', project: '-odd', force: true }]],
  [['delete-user', '--tenant', 'acme', 'alice', '--force'], 'deleteUser', [{ tenant: 'acme', login: 'alice', force: true }]],
  [['reload'], 'reload', []],
];

describe('homesctl management commands: argument parsing', () => {
  it.each(PARSING.map((p) => [p[0].join(' '), ...p] as const))('%s', async (_l, argv, method, apiArgs) => {
    const r = await homesctl(['--socket', sock, '--json', ...argv]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(calls).toEqual([{ method, args: apiArgs }]);
    expect(JSON.parse(r.stdout)).toEqual(RESULTS[method]);
  });

  it('2 for usage errors, which never reach the daemon', async () => {
    const cases: Array<[string[], string]> = [
      [['usage'], 'usage'],
      [['usage', 'acme/web', 'extra'], 'usage'],
      [['usage', 'acmeweb'], 'usage'],
      [['usage', 'acme/web/x'], 'usage'],
      [['create'], 'create'],
      [['create', 'acme/web', '--owner', '1000'], 'create'],
      [['create', 'acme/web', '--owner', '-1:0'], 'create'],
      [['create', 'acme/web', '--owner=-1:0'], 'create'],
      [['create', 'acme/web', '--owner', '1000:'], 'create'],
      [['create', 'acme/web', '--owner', '4294967295:0'], 'create'],
      [['create', 'acme/web', '--force'], 'create'],
      [['create', 'acme/web', '--budget', 'lots'], 'create'],
      [['create', 'acme/web', '--profile'], 'create'],
      [['set-budget', 'acme/web'], 'set-budget'],
      [['set-budget', 'acme/web', '-5'], 'set-budget'],
      [['set-budget', 'acme/web', '1X'], 'set-budget'],
      [['set-budget', 'acme/web', 'lots'], 'set-budget'],
      [['set-budget', 'acme/web', '5Gi'], 'set-budget'],
      [['set-limits', 'acme/web'], 'set-limits'],
      [['set-limits', 'acme/web', '--inodes', '-5'], 'set-limits'],
      [['set-limits', 'acme/web', '--inodes', '10K'], 'set-limits'],
      [['set-limits', 'acme/web', '--file-size', 'huge'], 'set-limits'],
      [['delete-home', 'acme'], 'delete-home'],
      [['release-name'], 'release-name'],
      [['settings', 'set', '--tenant', 'acme', 'tenant', '--yes', '--dry-run'], 'settings set'],
      [['list', '--sort', 'size'], 'list'],
      [['list', '--count', '2'], 'list'],
      [['list', '--watch', '--interval', '0'], 'list'],
      [['set-budget', 'acme/web', '99999999999T'], 'set-budget'],
      [['set-budget', 'acme', '1G'], 'set-budget'],
      [['set-profile', 'acme/web'], 'set-profile'],
      [['set-profile', 'acme/web', 'strict', '--clear'], 'set-profile'],
      [['settings'], 'settings'],
      [['settings', 'frob'], 'settings'],
      [['settings', 'get'], 'settings get'],
      [['settings', 'get', '--tenant', 'acme', 'extra'], 'settings get'],
      [['settings', 'set', '--tenant', 'acme'], 'settings set'],
      [['settings', 'set', '--tenant', 'acme', 'global'], 'settings set'],
      [['settings', 'set', 'tenant'], 'settings set'],
      [['settings', 'set', '--tenant', 'acme', '--project', 'web', '--user', 'alice', 'user'], 'settings set'],
      [['rescan'], 'rescan'],
      [['resolve', '--tenant', 'acme'], 'resolve'],
      [['resolve', '--project', 'web'], 'resolve'],
      [['resolve', '--tenant', 'acme', '--project', 'web', 'extra'], 'resolve'],
      [['rename-project', '--tenant', 'acme', 'web'], 'rename-project'],
      [['rename-project', 'web', 'www'], 'rename-project'],
      [['rename-user', '--tenant', 'acme', 'a', 'b', 'c'], 'rename-user'],
      [['delete-project', '--tenant', 'acme'], 'delete-project'],
      [['delete-project', '--tenant', 'acme', 'web', '--bogus'], 'delete-project'],
      [['delete-user', 'alice'], 'delete-user'],
      [['list', 'extra'], 'list'],
    ];
    for (const [argv, cmd] of cases) {
      const r = await homesctl(['--socket', sock, ...argv]);
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr, argv.join(' ')).toMatch(new RegExp(`^homesctl: [\\s\\S]*\\nTry 'homesctl ${cmd} --help'\\.\\n$`));
    }
    expect(calls).toEqual([]);
  });

  it('--help for every command, and the main help lists them all', async () => {
    const main = await homesctl(['--help']);
    expect(main.code).toBe(0);
    for (const name of ['list', 'usage', 'create', 'set-budget', 'set-limits', 'delete-home', 'forwards', 'release-name', 'set-profile', 'settings get', 'settings set', 'rescan', 'resolve', 'rename-project', 'rename-user', 'delete-project', 'delete-user', 'reload']) {
      expect(main.stdout).toMatch(new RegExp(`^  ${name}\\s{2,}\\S`, 'm'));
      const r = await homesctl([...name.split(' '), '--help']);
      expect(r.code, name).toBe(0);
      expect(r.stdout).toMatch(new RegExp(`^Usage: homesctl \\[global options\\] ${name}\\b`));
      expect((await homesctl(['help', ...name.split(' ')])).stdout).toBe(r.stdout);
    }
    const create = await homesctl(['create', '--help']);
    expect(create.stdout.split('\n')[0]).toBe('Usage: homesctl [global options] create HOME [--profile P] [--budget SIZE] [--owner UID:GID [--force]]');
    // the size units are documented where they are typed
    const sb = await homesctl(['set-budget', '--help']);
    expect(sb.stdout).toContain('KB, MB, GB, TB, PB (powers of 1000)');
    expect(sb.stdout).toContain('KiB, MiB, GiB, TiB, PiB (powers of 1024)');
    expect(sb.stdout).toMatch(/"off" \(or 0\) means no limit/);
    expect(main.stdout).toMatch(/^  top\s{2,}The busiest homes/m);
    const group = await homesctl(['settings', '--help']);
    expect(group.code).toBe(0);
    expect(group.stdout).toMatch(/^Usage: homesctl \[global options\] settings <get\|set>/);
    expect(calls).toEqual([]);
  });
});

describe('homesctl management commands: human output', () => {
  it('list prints used, budget, percent, inodes, owner, profile and flags; * marks an override', async () => {
    const r = await homesctl(['--socket', sock, 'list']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const lines = r.stdout.trimEnd().split('\n');
    expect(lines[0]!.split(/\s+/)).toEqual(['HOME', 'OWNER', 'PROFILE', 'USED', 'BUDGET', 'SOFT', 'USE%', 'INODES', 'FLAGS']);
    const rows = lines.slice(1, 4).map((l) => l.split(/\s{2,}/).map((c) => c.trim()));
    // sorted by name by default
    expect(rows).toEqual([
      ['acme/_tenant', '20003:20003', 'strict', '25.1 MiB', '10.0 MiB*', '-', '251.0%', '1/10000', 'OVER,SCANNING'],
      ['acme/old-api', '20002:20002', 'default', '512 B', 'off', '256 B*', '-', '3', 'SOFT,ORPHAN'],
      ['acme/web', '20001:20001', 'default', '1.0 MiB', '1.0 GiB', '-', '0.1%', '12/10000', 'BUSY'],
    ]);
    expect(lines[4]).toMatch(/^\* live override/);
    expect(calls).toEqual([{ method: 'list', args: [{}] }]);
  });

  it('list --sort used|percent|name orders rows, in the table and in --json (exact bytes)', async () => {
    const order = async (...extra: string[]) => {
      const r = await homesctl(['--socket', sock, 'list', ...extra]);
      expect(r.code).toBe(0);
      return r.stdout.split('\n').slice(1, 4).map((l) => l.split(/\s+/)[0]);
    };
    expect(await order('--sort', 'used')).toEqual(['acme/_tenant', 'acme/web', 'acme/old-api']);
    expect(await order('--sort', 'percent')).toEqual(['acme/_tenant', 'acme/web', 'acme/old-api']);
    expect(await order('--sort', 'name')).toEqual(['acme/_tenant', 'acme/old-api', 'acme/web']);
    const j = await homesctl(['--socket', sock, '--json', 'list', '--sort', 'used', '--limit', '2']);
    const data = JSON.parse(j.stdout) as HomeInfo[];
    expect(data.map((h) => [h.key, h.bytes, h.budget])).toEqual([
      ['_tenant', 26319257, 10485760],
      ['web', 1048576, 1073741824],
    ]);
  });

  it('list --watch (and top) redraws a bounded number of frames, busiest first', async () => {
    const r = await homesctl(['--socket', sock, 'list', '--watch', '--count', '2', '--interval', '0.1']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout.match(/^homesctl top: /gm)).toHaveLength(2);
    expect(r.stdout).toMatch(/^HOME\s+OWNER\s+PROFILE\s+USED\s+BUDGET\s+SOFT\s+USE%\s+INODES\s+RATE\s+FLAGS$/m);
    expect(calls.filter((c) => c.method === 'list')).toHaveLength(2);
    calls.length = 0;
    const top = await homesctl(['--socket', sock, 'top', '--count', '1', '--limit', '1']);
    expect(top.code).toBe(0);
    expect(top.stdout).toMatch(/sorted by busy \(1 of 3 homes\)/);
    // busiest: the one with open files (no growth measured yet in one frame)
    expect(top.stdout.split('\n').filter((l) => l.startsWith('acme/'))).toEqual([expect.stringMatching(/^acme\/web\s/)]);
  });

  it('top stops cleanly on Ctrl-C (SIGINT): exit 0', async () => {
    const child = spawn(process.execPath, [CLI, '--socket', sock, 'top', '--interval', '0.2'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    const firstFrame = new Promise<void>((res) => child.stdout.on('data', (d: Buffer) => ((out += d.toString()), out.includes('FLAGS') && res())));
    const exited = new Promise<number | null>((res) => child.on('close', (code) => res(code)));
    await firstFrame;
    child.kill('SIGINT');
    expect(await exited).toBe(0);
  });

  it('list with no homes says so', async () => {
    resultOf.set('list', []);
    const r = await homesctl(['--socket', sock, 'list']);
    expect(r.stdout).toBe('No homes.\n');
  });

  it('usage prints key: value lines, with where each limit comes from', async () => {
    const r = await homesctl(['--socket', sock, 'usage', 'acme/web']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^Home:\s+acme\/web$/m);
    expect(r.stdout).toMatch(/^Path:\s+\/homes\/acme\/web$/m);
    expect(r.stdout).toMatch(/^Scope:\s+project$/m);
    expect(r.stdout).toMatch(/^Owner:\s+20001:20001$/m);
    expect(r.stdout).toMatch(/^Profile:\s+default \(the configured default\)$/m);
    expect(r.stdout).toMatch(/^Used:\s+1\.0 MiB \(1048576 bytes, 0\.1% of the budget\)$/m);
    expect(r.stdout).toMatch(/^Budget:\s+1\.0 GiB \(1073741824 bytes\) \(profile default, the configured default\)$/m);
    expect(r.stdout).toMatch(/^Inodes:\s+12 used; cap 10000 \(profile default, the configured default\)$/m);
    expect(r.stdout).toMatch(/^File cap:\s+100\.0 MiB \(profile default, the configured default\)$/m);
    expect(r.stdout).toMatch(/^In use:\s+2 open files, 0 working directories$/m);
    expect(r.stdout).toMatch(/^Orphan:\s+no$/m);
    expect(r.stdout).toMatch(/^Flags:\s+BUSY$/m);
    resultOf.set('usage', { ...HOME, budget: 20971520, limitSources: { budget: 'override', inodeCap: 'profile', fileCap: 'override' }, fileCap: 0, profileSource: 'tenant' });
    const o = await homesctl(['--socket', sock, 'usage', 'acme/web']);
    expect(o.stdout).toMatch(/^Budget:\s+20\.0 MiB \(20971520 bytes\) \(override; profile default: 1\.0 GiB\)$/m);
    expect(o.stdout).toMatch(/^File cap:\s+off \(override; profile default: 100\.0 MiB\)$/m);
    expect(o.stdout).toMatch(/^Inodes:\s+12 used; cap 10000 \(profile default, the tenant's default\)$/m);
  });

  it('the other commands print a short sentence or key: value lines', async () => {
    const out = async (...argv: string[]) => {
      const r = await homesctl(['--socket', sock, ...argv]);
      expect(r.code, argv.join(' ')).toBe(0);
      return r.stdout;
    };
    resultOf.set('setBudget', { ...HOME, limitSources: { ...HOME.limitSources, budget: 'override' }, profileLimits: { ...HOME.profileLimits, budget: 2 * 1024 ** 3 } });
    expect(await out('set-budget', 'acme/web', '1G')).toBe('Budget of acme/web: 1.0 GiB (override; profile default: 2.0 GiB); used 1.0 MiB (0.1%).\n');
    resultOf.set('setBudget', { ...HOME, budget: 0, percent: null, limitSources: { ...HOME.limitSources, budget: 'override' } });
    expect(await out('set-budget', 'acme/web', 'off')).toBe('Budget of acme/web: off (override; profile default: 1.0 GiB); used 1.0 MiB.\n');
    resultOf.set('setBudget', HOME);
    expect(await out('set-budget', 'acme/web', 'default')).toBe('Budget of acme/web: 1.0 GiB (profile default, the configured default); used 1.0 MiB (0.1%).\n');
    resultOf.set('setBudget', { ...HOME, budget: 1024, percent: 102400, limitSources: { ...HOME.limitSources, budget: 'override' } });
    expect(await out('set-budget', 'acme/web', '1K')).toMatch(/^Budget of acme\/web: 1\.0 KiB \(override; .*\); used 1\.0 MiB \(102400%\)\.\nOver budget: nothing was deleted/);
    const sl = await out('set-limits', 'acme/web', '--inodes', '5000');
    expect(sl).toMatch(/^Inodes:\s+12 used; cap 5000 \(override; profile default: 10000\)$/m);
    expect(sl).toMatch(/^File cap:\s+100\.0 MiB \(profile default, the configured default\)$/m);
    expect(await out('delete-home', 'acme/old-api')).toBe('Deleted acme/old-api (512 B freed).\n');
    expect(await out('forwards')).toMatch(/^OLD NAME\s+NOW\s+RENAMED AT\nacme\/web\s+acme\/webapp\s+2026-01-01T00:00:00\.000Z\n$/);
    expect(await out('release-name', 'acme/web')).toMatch(/^Released acme\/web \(it forwarded to acme\/webapp\)/);
    expect(await out('set-profile', 'acme/web', 'strict')).toBe('Profile of acme/web: strict (override).\n');
    expect(await out('create', 'acme/web')).toMatch(/^Created acme\/web\.\nHome:\s+acme\/web\n/);
    const sg = await out('settings', 'get', '--tenant', 'acme', '--project', 'web');
    expect(sg).toMatch(/^Tenant default:\s+tenant$/m);
    expect(sg).toMatch(/^Project web:\s+\(unset\)$/m);
    expect(sg).toMatch(/^Resolves to:\s+tenant \(from tenant\), key _tenant$/m);
    expect(await out('settings', 'set', '--tenant', 'acme', '--project', 'web', 'unset')).toMatch(/^home-scope for project web of acme cleared\.\n/);
    expect(await out('settings', 'set', '--tenant', 'acme', 'tenant')).toMatch(/^home-scope for the tenant default of acme set to tenant\.\n/);
    const rs = await out('rescan', 'acme/web');
    expect(rs).toMatch(/^Bytes:\s+100 B -> 164 B \(drift \+64 B; exact: 100 -> 164\)$/m);
    expect(rs).toMatch(/^Ledger:\s+corrected to what is on disk$/m);
    resultOf.set('rescan', { home: 'acme/web', before: { bytes: 3 * 1024 ** 2, inodes: 9 }, after: { bytes: 1024 ** 2, inodes: 9 }, drift: { bytes: -2 * 1024 ** 2, inodes: 0 } });
    expect(await out('rescan', 'acme/web')).toMatch(/^Bytes:\s+3\.0 MiB -> 1\.0 MiB \(drift -2\.0 MiB; exact: 3145728 -> 1048576\)$/m);
    expect(rs).toMatch(/^Inodes:\s+3 -> 4 \(drift \+1\)$/m);
    const rv = await out('resolve', '--tenant', 'acme', '--project', 'web', '--user', 'alice');
    expect(rv).toMatch(/^Home:\s+\/homes\/acme\/_user_alice$/m);
    expect(rv).toMatch(/^Scope:\s+user \(from user\)$/m);
    expect(rv).toMatch(/^Owner:\s+20010:20010$/m);
    expect(rv).toMatch(/^Created:\s+yes$/m);
    expect(await out('rename-project', '--tenant', 'acme', 'web', 'www')).toBe(
      'Renamed acme/web to acme/www.\nacme/web stays reserved: resolve answers RENAMED with the new name until: homesctl release-name acme/web\n',
    );
    expect(await out('rename-user', '--tenant', 'acme', 'alice', 'bob', '--force')).toBe(
      'Renamed acme/_user_alice to acme/_user_bob (forced while in use: 2 open files, 1 working directory).\n' +
        'acme/_user_alice stays reserved: resolve answers RENAMED with the new name until: homesctl release-name acme/_user_alice\n',
    );
    expect(await out('delete-project', '--tenant', 'acme', 'web')).toBe('Deleted acme/web (1.0 MiB freed).\n');
    resultOf.set('deleteProject', { deleted: null, deleteNote: "project web uses the tenant's shared home; nothing deleted" });
    expect(await out('delete-project', '--tenant', 'acme', 'web')).toBe("Nothing deleted: project web uses the tenant's shared home; nothing deleted\n");
  });

  it('escapes control characters in daemon-supplied names', async () => {
    resultOf.set('list', [{ ...HOME, key: 'evil\u001b[2J' }]);
    const r = await homesctl(['--socket', sock, 'list']);
    expect(r.stdout).not.toContain('\u001b');
    expect(r.stdout).toContain('evil\\x1b[2J');
  });
});

describe('homesctl management commands: error replies', () => {
  it('BUSY: exit 1, code and message on stderr, details and a --force hint', async () => {
    failNext.set('deleteProject', new HomesError('BUSY', 'acme/web is busy: 2 open files', { openFiles: 2, cwdProcesses: 0 }));
    const r = await homesctl(['--socket', sock, 'delete-project', '--tenant', 'acme', 'web']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe('homesctl: BUSY: acme/web is busy: 2 open files\n  details: {"openFiles":2,"cwdProcesses":0}\n  2 open files, 0 working directories inside\n  no holder is visible from here (another pid namespace?)\n  (--force goes ahead anyway)\n');
  });

  it('BUSY names the processes holding the home: pid, uid, what they hold, command', async () => {
    const processes = [
      { pid: 4711, uid: 200001, comm: 'sleep', command: 'sleep 1000', cwd: true, openFiles: 0 },
      { pid: 4712, uid: 200001, comm: 'python3', command: 'python3 train.py --epochs 3', cwd: false, openFiles: 2 },
    ];
    failNext.set('deleteHome', new HomesError('BUSY', 'home acme/web is in use', { openFiles: 2, cwdProcesses: 1, processes }));
    const r = await homesctl(['--socket', sock, 'delete-home', 'acme/web']);
    expect(r.code).toBe(1);
    const lines = r.stderr.split('\n');
    expect(lines[0]).toBe('homesctl: BUSY: home acme/web is in use');
    expect(r.stderr).not.toContain('details:');
    expect(lines).toContain('  2 open files, 1 working directory inside');
    expect(lines).toContain('  held by:');
    expect(r.stderr).toMatch(/^ {4,}PID {2}UID +HOLDS +COMMAND$/m);
    expect(r.stderr).toMatch(/^ {4}4711 {2}200001 {2}working directory +sleep 1000$/m);
    expect(r.stderr).toMatch(/^ {4}4712 {2}200001 {2}2 open files +python3 train\.py --epochs 3$/m);
    expect(lines.at(-2)).toBe('  (--force goes ahead anyway)');
    // --json keeps them as data
    failNext.set('deleteHome', new HomesError('BUSY', 'home acme/web is in use', { openFiles: 2, cwdProcesses: 1, processes }));
    const j = await homesctl(['--socket', sock, '--json', 'delete-home', 'acme/web']);
    expect(JSON.parse(j.stdout)).toMatchObject({ ok: false, code: 'BUSY', details: { processes } });
  });

  it('a delete names the processes still running as the retired owner uid, and the old names it released', async () => {
    resultOf.set('deleteHome', {
      deleted: 'acme/busy2',
      bytes: 0,
      ownerUid: 200007,
      ownerProcesses: [{ pid: 999, uid: 200007, comm: 'sleep', command: 'sleep 600' }],
      releasedNames: ['acme/busy'],
    });
    try {
      const r = await homesctl(['--socket', sock, 'delete-home', 'acme/busy2']);
      expect(r.code).toBe(0);
      const lines = r.stdout.split('\n');
      expect(lines[0]).toBe('Deleted acme/busy2 (0 B freed).');
      expect(lines[1]).toBe('Released the old names that forwarded to it: acme/busy.');
      expect(lines[2]).toMatch(/^1 process still runs as its owner uid 200007 \(they keep running; the uid is retired/);
      expect(lines[3]).toMatch(/^ {2}PID {2}UID +COMMAND$/);
      expect(lines[4]).toMatch(/^ {2}999 {2}200007 {2}sleep 600$/);
    } finally {
      resultOf.delete('deleteHome');
    }
  });

  it('delete-tenant says what went with the tenant; NOT_EMPTY names its homes', async () => {
    const r = await homesctl(['--socket', sock, 'delete-tenant', 'globex']);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('Deleted tenant globex, with its home-scope settings, its budget override, its reserved names (globex/old).\n');
    expect(calls.at(-1)).toEqual({ method: 'deleteTenant', args: [{ tenant: 'globex' }] });
    failNext.set('deleteTenant', new HomesError('NOT_EMPTY', 'tenant acme still has 1 home (acme/web): delete them first (delete-home)', { homes: ['acme/web'] }));
    const e = await homesctl(['--socket', sock, 'delete-tenant', 'acme']);
    expect(e.code).toBe(1);
    expect(e.stderr).toMatch(/^homesctl: NOT_EMPTY: tenant acme still has 1 home \(acme\/web\)/);
    const u = await homesctl(['--socket', sock, 'delete-tenant']);
    expect(u.code).toBe(2);
  });

  it('RENAME_BLOCKED with --json: the whole error reply on stdout', async () => {
    failNext.set('renameProject', new HomesError('RENAME_BLOCKED', 'acme/www exists; homes are never merged', { target: 'acme/www' }));
    const r = await homesctl(['--socket', sock, '--json', 'rename-project', '--tenant', 'acme', 'web', 'www']);
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout)).toEqual({ ok: false, code: 'RENAME_BLOCKED', message: 'acme/www exists; homes are never merged', details: { target: 'acme/www' } });
    expect(r.stderr).toBe('homesctl: RENAME_BLOCKED: acme/www exists; homes are never merged\n');
  });

  it('the platform socket refuses admin commands (exit 1, ACCESS_DENIED) and serves resolve', async () => {
    const psock = platform.address;
    const denied = await homesctl(['--socket', psock, 'delete-user', '--tenant', 'acme', 'alice', '--force']);
    expect(denied.code).toBe(1);
    expect(denied.stderr).toBe('homesctl: ACCESS_DENIED: delete-user is not served on this socket\n');
    const setBudget = await homesctl(['--socket', psock, 'set-budget', 'acme/web', '1G']);
    expect(setBudget.stderr).toBe('homesctl: ACCESS_DENIED: set-budget is not served on this socket\n');
    expect(calls).toEqual([]);
    const ok = await homesctl(['--socket', psock, '--json', 'resolve', '--tenant', 'acme', '--project', 'web', '--user', 'alice']);
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.stdout)).toEqual(RESOLVE);
    expect(calls).toEqual([{ method: 'resolve', args: [{ tenant: 'acme', project: 'web', user: 'alice' }] }]);
  });
});

describe('homesctl: errors that say the way out', () => {
  it('ENOENT names the socket, the daemon, --socket and HOMESFS_SOCKET', async () => {
    const missing = path.join(tmp, 'nope', 'admin.sock');
    const r = await homesctl(['--socket', missing, 'status']);
    expect(r.code).toBe(3);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain(`homesctl: cannot connect to ${missing}: ENOENT: no socket there\n`);
    expect(r.stderr).toMatch(/homesfs daemon running\?/);
    expect(r.stderr).toMatch(/--socket PATH, HOMESFS_SOCKET=PATH or --config FILE \(this path was given with --socket\)/);
    const env = await homesctl(['status'], { HOMESFS_SOCKET: missing });
    expect(env.stderr).toMatch(/this path was from HOMESFS_SOCKET/);
  });

  it('ECONNREFUSED (a socket nobody listens on) says the daemon has stopped', async () => {
    const stale = path.join(tmp, 'stale.sock');
    // bound, never listening: what a crashed daemon leaves behind
    const py = spawn('python3', ['-c', `import socket; s=socket.socket(socket.AF_UNIX); s.bind(${JSON.stringify(stale)})`]);
    await new Promise((res) => py.on('close', res));
    const r = await homesctl(['--socket', stale, 'list']);
    expect(r.code).toBe(3);
    expect(r.stderr).toContain(`cannot connect to ${stale}: ECONNREFUSED: nothing is listening on it`);
    expect(r.stderr).toMatch(/daemon that created it has stopped/);
  });

  it.runIf(process.getuid?.() === 0)('EACCES names the admin group', async () => {
    // the socket's directory is 0700 root: an unprivileged uid cannot reach it
    const child = spawn('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, CLI, '--socket', sock, 'list'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((res) => child.on('close', res));
    expect(code).toBe(3);
    expect(stderr).toMatch(/cannot connect to .*: EACCES: permission denied/);
    expect(stderr).toMatch(/adminGroup/);
  });

  it('status with no daemon under systemd: a unit in auto-restart (or restarted, starting) is a session kept (exit 5); a first start or a failed unit is 3, and says so', async () => {
    const missing = path.join(tmp, 'gone', 'admin.sock');
    // A stand-in for systemctl on PATH: prints what `systemctl show` would for the unit it names.
    const bin = path.join(tmp, 'fake-systemd');
    const { mkdir, chmod } = await import('node:fs/promises');
    await mkdir(bin, { recursive: true });
    const fake = (active: string, sub: string, restarts = 0) =>
      writeFile(path.join(bin, 'systemctl'), `#!/bin/sh\n[ "$1 $2" = "show homesfs.service" ] || exit 1\nprintf 'LoadState=loaded\\nActiveState=${active}\\nSubState=${sub}\\nNRestarts=${restarts}\\n'\n`).then(() => chmod(path.join(bin, 'systemctl'), 0o755));
    const env = { PATH: `${bin}:${process.env.PATH ?? ''}` };

    await fake('activating', 'auto-restart');
    const r = await homesctl(['--socket', missing, 'status'], env);
    expect(r.code).toBe(5);
    expect(r.stdout).toBe(
      "the daemon is not running; systemd is starting it again (homesfs.service: activating (auto-restart)): a session it stored in the unit's fd store is resumed then (systemd cannot be asked whether one is stored)\n",
    );
    expect(r.stderr).toContain(`cannot connect to ${missing}: ENOENT`);
    const j = await homesctl(['--json', '--socket', missing, 'status'], env);
    expect(j.code).toBe(5);
    expect(JSON.parse(j.stdout)).toMatchObject({ ok: false, code: 'SESSION_KEPT', state: 'restarting', keeper: 'systemd', unit: 'homesfs.service', activeState: 'activating', subState: 'auto-restart' });

    // Started again by Restart= (the new daemon resuming, not serving yet): still kept.
    await fake('activating', 'start', 1);
    expect((await homesctl(['--socket', missing, 'status'], env)).code).toBe(5);
    // A first start: nothing was kept; it is on its way.
    await fake('activating', 'start', 0);
    const first = await homesctl(['--socket', missing, 'status'], env);
    expect(first.code).toBe(3);
    expect(first.stderr).toMatch(/the daemon is not serving yet: systemd is starting it \(homesfs.service: activating \(start\)\)/);

    await fake('failed', 'failed');
    const f = await homesctl(['--socket', missing, 'status'], env);
    expect(f.code).toBe(3);
    expect(f.stdout).toBe('');
    expect(f.stderr).toMatch(/the daemon is not running, no holder answers.*, and homesfs.service is failed \(failed\): systemd keeps no fd store for a unit that is down, so no session is kept there/);
    const fj = await homesctl(['--json', '--socket', missing, 'status'], env);
    expect(JSON.parse(fj.stdout)).toMatchObject({ ok: false, code: 'UNREACHABLE', outage: { state: 'stopped', keeper: 'systemd', activeState: 'failed' } });

    // Only status asks: other commands say what they always said.
    await fake('activating', 'auto-restart');
    const l = await homesctl(['--socket', missing, 'list'], env);
    expect(l.code).toBe(3);
    expect(l.stdout + l.stderr).not.toMatch(/systemd is starting it/);
  });

  it('--json prints exactly one JSON object on stdout: connection errors and usage errors too', async () => {
    const missing = path.join(tmp, 'nope', 'admin.sock');
    const r = await homesctl(['--json', '--socket', missing, 'list']);
    expect(r.code).toBe(3);
    expect(JSON.parse(r.stdout)).toMatchObject({ ok: false, code: 'UNREACHABLE', kind: 'connect', socket: missing, message: expect.stringContaining('ENOENT') });
    const u = await homesctl(['--socket', sock, 'set-budget', 'acme/web', '-5', '--json']);
    expect(u.code).toBe(2);
    expect(JSON.parse(u.stdout)).toMatchObject({ ok: false, code: 'USAGE', message: expect.stringContaining('negative') });
    const w = await homesctl(['--socket', sock, 'list', '--watch', '--json']);
    expect(w.code).toBe(2);
    expect(JSON.parse(w.stdout)).toMatchObject({ ok: false, code: 'USAGE', message: expect.stringContaining('--watch') });
    const t = await homesctl(['--json', '--socket', sock, 'stauts']);
    expect(JSON.parse(t.stdout)).toMatchObject({ ok: false, code: 'USAGE' });
  });

  it('negative or garbage sizes give a clean usage error (exit 2), never the argument parser\'s message', async () => {
    for (const argv of [
      ['set-budget', 'acme/web', '-5'],
      ['set-budget', 'acme/web', '-1G'],
      ['set-limits', 'acme/web', '--inodes', '-5'],
      ['create', 'acme/web', '--budget', '-2G'],
    ]) {
      const r = await homesctl(['--socket', sock, ...argv]);
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.stderr).toMatch(/^homesctl: [a-z-]+: '-[0-9.]+G?' is negative: sizes and counts are 0 or more \(off = no limit\)\n/);
      expect(r.stderr).not.toMatch(/positional|'--'/);
    }
    const g = await homesctl(['--socket', sock, 'set-budget', 'acme/web', 'lots']);
    expect(g.stderr).toMatch(/^homesctl: set-budget: SIZE: 'lots' is not a size: expected a number of bytes, optionally with a unit/);
    expect(calls).toEqual([]);
  });

  it('unknown commands, subcommands and options suggest the closest', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['stauts'], /^homesctl: unknown command 'stauts' \(did you mean 'status'\?\)/],
      [['lsit'], /did you mean 'list'\?/],
      [['set-budet', 'acme/web', '1G'], /did you mean 'set-budget'\?/],
      [['setlimits'], /did you mean 'set-limits'\?/],
      [['release'], /did you mean 'release-name'\?/],
      [['settings', 'gte'], /^homesctl: settings: unknown subcommand 'gte' \(did you mean 'get'\?\)/],
      [['list', '--tenent', 'acme'], /^homesctl: list: unknown option '--tenent' \(did you mean '--tenant'\?\)/],
      [['list', '--sort', 'precent'], /did you mean 'percent'\?/],
    ];
    for (const [argv, re] of cases) {
      const r = await homesctl(['--socket', sock, ...argv]);
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.stderr, argv.join(' ')).toMatch(re);
    }
    const far = await homesctl(['--socket', sock, 'xyzzyplugh']);
    expect(far.stderr).toBe("homesctl: unknown command 'xyzzyplugh'\nTry 'homesctl --help'.\n");
  });

  it('RENAMED from resolve says where the home went and how to free the name', async () => {
    failNext.set('resolve', new HomesError('RENAMED', 'home acme/web was renamed to acme/webapp', { from: 'acme/web', to: 'acme/webapp', at: FORWARD.at }));
    const r = await homesctl(['--socket', sock, 'resolve', '--tenant', 'acme', '--project', 'web']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^homesctl: RENAMED: home acme\/web was renamed to acme\/webapp\n/);
    expect(r.stderr).toMatch(/homesctl release-name acme\/web/);
    failNext.set('deleteProject', new HomesError('RENAMED', 'home acme/web was renamed to acme/webapp', { from: 'acme/web', to: 'acme/webapp', at: FORWARD.at, path: '/homes/acme/webapp' }));
    const d = await homesctl(['--socket', sock, 'delete-project', '--tenant', 'acme', 'web']);
    expect(d.code).toBe(1);
    expect(d.stderr).toContain('the home now lives at acme/webapp (/homes/acme/webapp): use its new name');
  });

  it('CONFIRM_REQUIRED lists the homes a settings change would leave, with sizes, and the way on', async () => {
    failNext.set(
      'settingsSet',
      new HomesError('CONFIRM_REQUIRED', 'this change leaves 2 project homes unused', { homes: [{ home: 'acme/a', bytes: 10485760 }, { home: 'acme/b', bytes: 31457280 }], bytes: 41943040 }),
    );
    const r = await homesctl(['--socket', sock, 'settings', 'set', '--tenant', 'acme', 'tenant']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('homesctl: CONFIRM_REQUIRED: this change leaves 2 project homes unused\n');
    expect(r.stderr).toContain('(40.0 MiB in all)');
    expect(r.stderr).toMatch(/^ {4}acme\/a {2}10\.0 MiB$/m);
    expect(r.stderr).toMatch(/^ {4}acme\/b {2}30\.0 MiB$/m);
    expect(r.stderr).toMatch(/--yes to go ahead .* or --dry-run to preview/);
  });

  it('settings set --dry-run shows what would be left; settings get shows the cascade that decided', async () => {
    resultOf.set('settingsSet', { ...SETTINGS, orphaned: [{ home: 'acme/web', bytes: 1048576 }], dryRun: true });
    const d = await homesctl(['--socket', sock, 'settings', 'set', '--tenant', 'acme', 'tenant', '--dry-run']);
    expect(d.code).toBe(0);
    expect(d.stdout).toMatch(/^Dry run: home-scope for the tenant default of acme would be set to tenant; nothing changed\.\nWould leave 1 project home unused \(1\.0 MiB\)/);
    expect(d.stdout).toMatch(/^ {2}acme\/web {2}1\.0 MiB$/m);
    resultOf.set('settingsGet', {
      tenant: 'acme',
      tenantDefault: 'tenant',
      project: { name: 'web', value: null },
      user: { login: 'alice', value: null },
      resolved: { scope: 'tenant', source: 'tenant', key: '_tenant' },
      cascade: [
        { level: 'user', value: null, decides: false },
        { level: 'project', value: null, decides: false },
        { level: 'tenant', value: 'tenant', decides: true },
        { level: 'default', value: 'project', decides: false },
      ],
    });
    const g = await homesctl(['--socket', sock, 'settings', 'get', '--tenant', 'acme', '--project', 'web', '--user', 'alice']);
    expect(g.code).toBe(0);
    expect(g.stdout).toMatch(/^Cascade \(the first level with a value decides\):$/m);
    expect(g.stdout).toMatch(/^ {2}1\. user alice\s+\(unset\)$/m);
    expect(g.stdout).toMatch(/^ {2}2\. project web\s+\(unset\)$/m);
    expect(g.stdout).toMatch(/^ {2}3\. tenant default\s+tenant\s+<- decides$/m);
    expect(g.stdout).toMatch(/^ {2}4\. built-in default\s+project$/m);
  });
});

describe('homesctl finds its sockets in the daemon configuration', () => {
  let cfg: string;
  beforeAll(async () => {
    cfg = path.join(tmp, 'daemon.json');
    // Only the socket keys are read: a key the daemon would refuse does not stop the client.
    await writeFile(cfg, JSON.stringify({ backing: 'not/absolute', mount: '/m', socket: sock, platformSocket: platform.address, bogus: true }));
  });

  it('--config, HOMESFS_CONFIG (before or after the command) name the file; its "socket" is used', async () => {
    mode = 'ok';
    for (const [args, env] of [
      [['--config', cfg, '--json', 'status'], {}],
      [['status', '--json', `--config=${cfg}`], {}],
      [['--json', 'status'], { HOMESFS_CONFIG: cfg }],
    ] as Array<[string[], Record<string, string>]>) {
      const r = await homesctl(args, env);
      expect(r.code, args.join(' ')).toBe(0);
      expect(JSON.parse(r.stdout)).toEqual(STATUS);
    }
  });

  it('the flag beats HOMESFS_SOCKET, which beats the configuration', async () => {
    const missing = path.join(tmp, 'nope', 'admin.sock');
    const env = await homesctl(['--config', cfg, 'status'], { HOMESFS_SOCKET: missing });
    expect(env.code).toBe(3);
    expect(env.stderr).toContain(`cannot connect to ${missing}`);
    expect(env.stderr).toMatch(/this path was from HOMESFS_SOCKET/);
    const flag = await homesctl(['--config', cfg, '--socket', sock, 'status'], { HOMESFS_SOCKET: missing });
    expect(flag.code).toBe(0);
    // the path from the configuration is named as such when nothing listens there
    const off = await homesctl(['status']);
    expect(off.code).toBe(3);
    expect(off.stderr).toContain(`this path was from "socket" in ${noConfig}`);
  });

  it('an explicit configuration that is missing or broken is an error (exit 2), never a silent default', async () => {
    const missing = path.join(tmp, 'missing.json');
    const r = await homesctl(['--config', missing, 'list']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(new RegExp(`^homesctl: the configuration given with --config: ${missing.replace(/[/.]/g, '\\$&')}: no such file`));
    expect(r.stderr).toMatch(/--socket PATH \(or HOMESFS_SOCKET\) names the socket/);
    const viaEnv = await homesctl(['list'], { HOMESFS_CONFIG: missing });
    expect(viaEnv.code).toBe(2);
    expect(viaEnv.stderr).toMatch(/the configuration from HOMESFS_CONFIG/);
    const j = await homesctl(['--json', '--config', missing, 'list']);
    expect(JSON.parse(j.stdout)).toMatchObject({ ok: false, code: 'CONFIG', message: expect.stringContaining('no such file') });
    const broken = path.join(tmp, 'broken.json');
    await writeFile(broken, '{\n  "socket": "/run/x.sock",\n  oops\n}\n');
    const b = await homesctl(['--config', broken, 'list']);
    expect(b.code).toBe(2);
    expect(b.stderr).toContain(`${broken}:3:3: not valid JSON`);
    const relative = path.join(tmp, 'relative.json');
    await writeFile(relative, JSON.stringify({ socket: 'run/admin.sock' }));
    expect((await homesctl(['--config', relative, 'list'])).stderr).toContain('socket: must be an absolute path');
    // the flag needs no configuration at all
    expect((await homesctl(['--config', missing, '--socket', sock, 'status'])).code).toBe(0);
  });

  it('exec resolves over "platformSocket" from the configuration; passwd lists over "socket"', async () => {
    calls.length = 0;
    const e = await homesctl(['--config', cfg, 'exec', '--tenant', 'acme', '--project', 'web', '--', 'true']);
    // the canned home does not exist here: what matters is that the platform socket answered
    expect(calls[0]).toEqual({ method: 'resolve', args: [{ tenant: 'acme', project: 'web', create: false }] });
    expect(e.stderr).not.toMatch(/cannot connect/);
    const none = await homesctl(['exec', '--tenant', 'acme', '--project', 'web', '--', 'true']);
    expect(none.code).toBe(125);
    expect(none.stderr).toContain(`cannot connect to ${path.join(tmp, 'none', 'platform.sock')}`);
    const env = await homesctl(['--config', cfg, 'exec', '--tenant', 'acme', '--project', 'web', '--', 'true'], { HOMESFS_PLATFORM_SOCKET: path.join(tmp, 'p2.sock') });
    expect(env.stderr).toContain(`cannot connect to ${path.join(tmp, 'p2.sock')}`);
    const bad = await homesctl(['--config', path.join(tmp, 'missing.json'), 'exec', '--tenant', 'acme', '--project', 'web', '--', 'true']);
    expect(bad.code).toBe(125);
    expect(bad.stderr).toMatch(/^homesctl: exec: the configuration given with --config: .*no such file/);
    const p = await homesctl(['--config', cfg, 'passwd']);
    expect(p.code).toBe(0);
    expect(p.stdout).toMatch(/^acme-web-[0-9a-f]{8}:x:20001:20001:/m);
  });

  it('a default configuration that is not there falls back to the built-in socket paths; a broken one is an error', async () => {
    const absent = path.join(tmp, 'etc-absent', 'config.json');
    expect(chooseSocket('admin', {}, {}, absent)).toMatchObject({ path: DEFAULT_SOCKETS.socket, from: 'default', config: absent });
    expect(chooseSocket('platform', {}, {}, absent)).toMatchObject({ path: DEFAULT_SOCKETS.platformSocket, from: 'default' });
    expect(DEFAULT_SOCKETS).toEqual({ socket: '/run/homesfs/admin.sock', platformSocket: '/run/homesfs-platform/platform.sock' });
    expect(chooseSocket('platform', {}, {}, cfg)).toMatchObject({ path: platform.address, from: 'config', config: cfg });
    const broken = path.join(tmp, 'broken-default.json');
    await writeFile(broken, '[]');
    expect(() => chooseSocket('admin', {}, {}, broken)).toThrow(SocketConfigError);
    expect(() => chooseSocket('admin', {}, {}, broken)).toThrow(/the default configuration: .*top level must be a JSON object/);
  });
});

describe('homesctl status: the native counters', () => {
  const NATIVE: StatusReport = {
    ...STATUS,
    native: {
      ...STATUS.native,
      fastPath: {
        answered: 1370, fallbacks: 17, negative: 12, homeAnswered: 5, unlinkAnswered: 5, unlinkFallbacks: 1, unlinkSlowFrees: 0, readdirAnswered: 62, readdirFallbacks: 0, fgetattrAnswered: 3, fgetattrFallbacks: 0,
        openAnswered: 31, openClosedNatively: 4, openFallbacks: 2, createAnswered: 7, createClosedNatively: 5, createFallbacks: 1, createSlotAsks: 3, mkdirAnswered: 11, mkdirFallbacks: 2, symlinkAnswered: 4, symlinkFallbacks: 1, linkAnswered: 4, linkFallbacks: 1, rmdirAnswered: 8, rmdirFallbacks: 1, renameAnswered: 3, renameFallbacks: 1, openSlotsGranted: 0, utimensAnswered: 1, chmodAnswered: 2, chownAnswered: 0,
        setattrFallbacks: 3, writesDecided: 40, writeDecisionFallbacks: 6, truncatesDecided: 5, truncateFallbacks: 2, homes: 2, openInodes: 0, handles: 0, inFlight: 1, retiredHomes: 1,
      },
      releasesAnswered: 25,
      noFlush: { opens: 9, flushes: 1 },
      singleReader: { on: true, handoffs: 4, revocations: 0, readWaits: 1 },
    },
  };

  it('one short summary by default; --verbose prints them grouped, one short line per kind', async () => {
    resultOf.set('status', NATIVE);
    try {
      const r = await homesctl(['--socket', sock, 'status']);
      expect(r.code).toBe(0);
      const native = r.stdout.split('\n').find((l) => l.startsWith('Native:'))!;
      // 1370+3+62+5+31+7+11+4+4+8+3+1+2+0+40+5 + 25 releases; 17+0+0+1+2+1+2+1+1+1+1+3+6+2 to JS
      expect(native).toMatch(/^Native:\s+ok \(ABI 6, FUSE 7\.38, passthrough, max write 1\.0 MiB\); 1581 requests answered natively, 38 handed to JS \(--verbose: per kind\)$/);
      expect(r.stdout).not.toMatch(/Native counters/);
      for (const l of r.stdout.split('\n')) expect(l.length, l).toBeLessThan(140);

      const v = await homesctl(['--socket', sock, 'status', '--verbose']);
      expect(v.code).toBe(0);
      expect(v.stdout).toMatch(/^Native counters \(answered in the binding; "to JS": handed to the daemon\):$/m);
      expect(v.stdout).toMatch(/^ {2}getattr\s+1370 answered \(12 ENOENT\/ENOTDIR, 5 of homes themselves\), 17 to JS$/m);
      expect(v.stdout).toMatch(/^ {2}open\s+31 answered \(4 closed before the daemon adopted them\), 2 to JS$/m);
      expect(v.stdout).toMatch(/^ {2}create\s+7 made \(5 closed before the daemon adopted them\), 1 to JS, 3 asks for more slots$/m);
      expect(v.stdout).toMatch(/^ {2}mkdir\s+11 made, 2 to JS$/m);
      expect(v.stdout).toMatch(/^ {2}symlink\s+4 made, 1 to JS$/m);
      expect(v.stdout).toMatch(/^ {2}link\s+4 made, 1 to JS$/m);
      expect(v.stdout).toMatch(/^ {2}rmdir\s+8 removed, 1 to JS$/m);
      expect(v.stdout).toMatch(/^ {2}passthrough\s+3 opens passed through, 0 with direct I\/O, 0 refused; 1 files now$/m);
      expect(v.stdout).toMatch(/^ {2}rename\s+3 done, 1 to JS$/m);
      expect(v.stdout).toMatch(/^ {2}setattr\s+utimens 1, chmod 2, chown 0 done; 3 to JS$/m);
      expect(v.stdout).toMatch(/^ {2}write\s+40 decisions made, 6 to JS$/m);
      expect(v.stdout).toMatch(/^ {2}ftruncate\s+5 done, 2 to JS$/m);
      expect(v.stdout).toMatch(/^ {2}in flight\s+1 native operation holding a home \(1 withdrawn home still held\)$/m);
      expect(v.stdout).toMatch(/^ {2}release\s+25 answered$/m);
      expect(v.stdout).toMatch(/^ {2}no FLUSH\s+9 opens without FLUSH \(1 FLUSH requests\)$/m);
      expect(v.stdout).toMatch(/^ {2}single reader\s+4 handoffs \(1 before reads from disk\), 0 taken by the watchdog$/m);
      for (const l of v.stdout.split('\n')) expect(l.length, l).toBeLessThan(140);
      expect((await homesctl(['--socket', sock, 'status', '-v'])).stdout).toBe(v.stdout);
    } finally {
      resultOf.delete('status');
    }
  });
});
