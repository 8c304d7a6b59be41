import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { lstat, mkdtemp, rm, stat } from 'node:fs/promises';
import { HomesError, type HomesCode } from '../../src/errors.js';
import { createRootLogger } from '../../src/log.js';
import type {
  DeleteResult,
  RenameResult,
  RescanResult,
  ResolveResult,
  SettingsView,
} from '../../src/control/api.js';
import { ADMIN_COMMANDS, PLATFORM_COMMANDS, commands } from '../../src/control/commands.js';
import { fakeTargets, type CommandFunction, type CommandFunctions } from '../helpers/command-fakes.js';
import { startControlServer, type ControlServer, type ControlServerOptions } from '../../src/control/server.js';
import { COMMAND_NAMES, Request, type CommandName, type Reply } from '../../src/control/protocol.js';
import { STATUS, HOME, TENANT } from '../helpers/fixtures.js';

// ---- a fake of the functions the commands call, recording every call -------------------------------

const SETTINGS: SettingsView = { tenant: 'acme', tenantDefault: null, project: { name: 'web', value: 'tenant' } };
const RESCAN: RescanResult = { home: 'acme/web', before: { bytes: 1, inodes: 1 }, after: { bytes: 2, inodes: 1 }, drift: { bytes: 1, inodes: 0 } };
const RESOLVE: ResolveResult = { tenant: 'acme', scope: 'project', key: 'web', home: '/homes/acme/web', owner: { uid: 20001, gid: 20001 }, created: false, source: 'default' };
const RENAME: RenameResult = { from: 'acme/web', to: 'acme/www', openFiles: 0, cwdProcesses: 0 };
const DELETE: DeleteResult = { deleted: 'acme/web', bytes: 4096 };

type Method = CommandFunction;
const RESULTS: { [M in Method]: Awaited<ReturnType<CommandFunctions[M]>> } = {
  status: STATUS,
  list: [HOME],
  usage: HOME,
  create: HOME,
  setBudget: HOME,
  setProfile: HOME,
  settingsGet: SETTINGS,
  settingsSet: SETTINGS,
  rescan: RESCAN,
  resolve: RESOLVE,
  renameProject: RENAME,
  renameUser: RENAME,
  deleteProject: DELETE,
  deleteUser: DELETE,
  setLimits: HOME,
  deleteHome: DELETE,
  deleteTenant: { tenant: 'acme', removedDir: true, dropped: { settings: true, budget: false, forwards: [] } },
  forwards: [{ from: 'acme/web', to: 'acme/webapp', at: '2026-01-01T00:00:00.000Z' }],
  releaseName: { from: 'acme/web', to: 'acme/webapp', at: '2026-01-01T00:00:00.000Z' },
  reload: { at: '2026-01-01T00:00:00.000Z', ok: true, message: 'applied: logLevel', applied: ['logLevel'] },
  tenantUsage: TENANT,
  setTenantBudget: TENANT,
};

interface Call {
  method: Method;
  args: unknown[];
}
const calls: Call[] = [];
/** The next call of this method throws this. */
const failNext = new Map<Method, Error>();

const api = Object.fromEntries(
  (Object.keys(RESULTS) as Method[]).map((m) => [
    m,
    async (...args: unknown[]) => {
      calls.push({ method: m, args });
      const err = failNext.get(m);
      if (err) {
        failNext.delete(m);
        throw err;
      }
      return structuredClone(RESULTS[m]);
    },
  ]),
) as unknown as CommandFunctions;

// ---- servers and a raw client -----------------------------------------------

const log = createRootLogger('silent');
let tmp: string;
let admin: ControlServer;
let platform: ControlServer;
const extra: ControlServer[] = [];

async function start(sub: string, over: Partial<ControlServerOptions> = {}): Promise<ControlServer> {
  return startControlServer({ socketPath: path.join(tmp, sub, 'ctl.sock'), socketMode: 0o600, commands, ...fakeTargets(api), log, ...over });
}

/** Send lines on one connection, half-close, collect every reply line. */
function exchange(socketPath: string, requests: unknown[]): Promise<Reply[]> {
  return new Promise((resolve, reject) => {
    const s = net.createConnection(socketPath);
    let buf = '';
    s.setEncoding('utf8');
    s.on('data', (d: string) => (buf += d));
    s.on('error', reject);
    s.on('close', () => resolve(buf.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Reply)));
    s.end(requests.map((r) => JSON.stringify(r) + '\n').join(''));
  });
}

async function one(socketPath: string, request: unknown): Promise<Reply> {
  const replies = await exchange(socketPath, [request]);
  expect(replies).toHaveLength(1);
  return replies[0]!;
}

beforeAll(async () => {
  tmp = await mkdtemp(path.join(os.tmpdir(), 'homesfs-cmds-'));
  admin = await start('admin');
  platform = await start('platform', { allowed: PLATFORM_COMMANDS, socketMode: 0o660, socketGroup: process.getgid!() });
});
afterEach(async () => {
  calls.length = 0;
  failNext.clear();
  for (const s of extra.splice(0)) await s.close();
});
afterAll(async () => {
  await admin?.close();
  await platform?.close();
  await rm(tmp, { recursive: true, force: true });
});

// ---- valid requests ---------------------------------------------------------

/** [cmd, args, API method, the arguments the API must receive] */
const VALID: Array<[CommandName, Record<string, unknown> | undefined, Method, unknown[]]> = [
  ['status', undefined, 'status', []],
  ['status', {}, 'status', []],
  ['list', undefined, 'list', [{}]],
  ['list', {}, 'list', [{}]],
  ['list', { tenant: 'acme', orphans: true }, 'list', [{ tenant: 'acme', orphans: true }]],
  ['usage', { home: 'acme/web' }, 'usage', ['acme/web']],
  ['usage', { home: 'acme/_user_alice' }, 'usage', ['acme/_user_alice']],
  ['create', { home: 'acme/web' }, 'create', [{ home: 'acme/web' }]],
  [
    'create',
    { home: 'acme/web', profile: 'strict', budget: 0, owner: { uid: 0, gid: 4294967294 } },
    'create',
    [{ home: 'acme/web', profile: 'strict', budget: 0, owner: { uid: 0, gid: 4294967294 } }],
  ],
  ['set-budget', { home: 'acme/web', bytes: 1073741824 }, 'setBudget', [{ home: 'acme/web', bytes: 1073741824 }]],
  ['set-budget', { home: 'acme/web', bytes: 0 }, 'setBudget', [{ home: 'acme/web', bytes: 0 }]],
  ['set-budget', { home: 'acme/web', bytes: Number.MAX_SAFE_INTEGER }, 'setBudget', [{ home: 'acme/web', bytes: Number.MAX_SAFE_INTEGER }]],
  ['set-budget', { home: 'acme/web', bytes: null }, 'setBudget', [{ home: 'acme/web', bytes: null }]],
  ['set-limits', { home: 'acme/web', inodes: 5000 }, 'setLimits', [{ home: 'acme/web', inodes: 5000 }]],
  ['set-limits', { home: 'acme/web', fileBytes: 0, inodes: null }, 'setLimits', [{ home: 'acme/web', fileBytes: 0, inodes: null }]],
  ['delete-home', { home: 'acme/old-api' }, 'deleteHome', [{ home: 'acme/old-api' }]],
  ['delete-home', { home: 'acme/old-api', force: true }, 'deleteHome', [{ home: 'acme/old-api', force: true }]],
  ['delete-tenant', { tenant: 'acme' }, 'deleteTenant', [{ tenant: 'acme' }]],
  ['forwards', undefined, 'forwards', []],
  ['release-name', { home: 'acme/web' }, 'releaseName', [{ home: 'acme/web' }]],
  ['settings-get', { tenant: 'acme', project: 'web', user: 'alice' }, 'settingsGet', [{ tenant: 'acme', project: 'web', user: 'alice' }]],
  ['settings-set', { tenant: 'acme', homeScope: 'tenant', dryRun: true }, 'settingsSet', [{ tenant: 'acme', homeScope: 'tenant', dryRun: true }]],
  ['settings-set', { tenant: 'acme', homeScope: 'tenant', yes: true }, 'settingsSet', [{ tenant: 'acme', homeScope: 'tenant', yes: true }]],
  ['set-profile', { home: 'acme/web', profile: 'strict' }, 'setProfile', [{ home: 'acme/web', profile: 'strict' }]],
  ['set-profile', { home: 'acme/web', profile: null }, 'setProfile', [{ home: 'acme/web', profile: null }]],
  ['settings-get', { tenant: 'acme' }, 'settingsGet', [{ tenant: 'acme' }]],
  ['settings-get', { tenant: 'acme', project: 'web' }, 'settingsGet', [{ tenant: 'acme', project: 'web' }]],
  ['settings-get', { tenant: 'acme', user: 'alice' }, 'settingsGet', [{ tenant: 'acme', user: 'alice' }]],
  ['settings-set', { tenant: 'acme', homeScope: 'tenant' }, 'settingsSet', [{ tenant: 'acme', homeScope: 'tenant' }]],
  ['settings-set', { tenant: 'acme', project: 'web', homeScope: 'user' }, 'settingsSet', [{ tenant: 'acme', project: 'web', homeScope: 'user' }]],
  ['settings-set', { tenant: 'acme', user: 'alice', homeScope: 'project' }, 'settingsSet', [{ tenant: 'acme', user: 'alice', homeScope: 'project' }]],
  ['settings-set', { tenant: 'acme', project: 'web', homeScope: null }, 'settingsSet', [{ tenant: 'acme', project: 'web', homeScope: null }]],
  ['rescan', { home: 'acme/web' }, 'rescan', [{ home: 'acme/web' }]],
  ['resolve', { tenant: 'acme', project: 'web' }, 'resolve', [{ tenant: 'acme', project: 'web' }]],
  ['resolve', { tenant: 'acme', project: 'web', user: 'alice' }, 'resolve', [{ tenant: 'acme', project: 'web', user: 'alice' }]],
  ['rename-project', { tenant: 'acme', from: 'web', to: 'www' }, 'renameProject', [{ tenant: 'acme', from: 'web', to: 'www' }]],
  ['rename-project', { tenant: 'acme', from: 'web', to: 'www', force: true }, 'renameProject', [{ tenant: 'acme', from: 'web', to: 'www', force: true }]],
  ['rename-user', { tenant: 'acme', from: 'alice', to: 'bob' }, 'renameUser', [{ tenant: 'acme', from: 'alice', to: 'bob' }]],
  ['rename-user', { tenant: 'acme', from: 'alice', to: 'bob', force: false }, 'renameUser', [{ tenant: 'acme', from: 'alice', to: 'bob', force: false }]],
  ['delete-project', { tenant: 'acme', project: 'web' }, 'deleteProject', [{ tenant: 'acme', project: 'web' }]],
  ['delete-project', { tenant: 'acme', project: 'web', force: true }, 'deleteProject', [{ tenant: 'acme', project: 'web', force: true }]],
  ['delete-user', { tenant: 'acme', login: 'alice' }, 'deleteUser', [{ tenant: 'acme', login: 'alice' }]],
  ['delete-user', { tenant: 'acme', login: 'alice', force: true }, 'deleteUser', [{ tenant: 'acme', login: 'alice', force: true }]],
  ['reload', {}, 'reload', []],
  ['tenant-usage', { tenant: 'acme' }, 'tenantUsage', ['acme']],
  ['set-tenant-budget', { tenant: 'acme', bytes: 1048576 }, 'setTenantBudget', [{ tenant: 'acme', bytes: 1048576 }]],
  ['set-tenant-budget', { tenant: 'acme', bytes: null }, 'setTenantBudget', [{ tenant: 'acme', bytes: null }]],
];

describe('control commands: registry', () => {
  it('has a handler for every command of the protocol, and the platform set is status and resolve', () => {
    expect(Object.keys(commands).sort()).toEqual([...COMMAND_NAMES].sort());
    expect([...ADMIN_COMMANDS].sort()).toEqual([...COMMAND_NAMES].sort());
    expect([...PLATFORM_COMMANDS].sort()).toEqual(['resolve', 'status']);
    // every command is exercised below
    expect(new Set(VALID.map(([c]) => c))).toEqual(new Set(COMMAND_NAMES));
  });
});

describe('control commands: valid requests reach the right function', () => {
  it.each(VALID.map((v, i) => [`${v[0]} #${i}`, ...v] as const))('%s', async (_label, cmd, args, method, apiArgs) => {
    const req = args === undefined ? { id: 1, cmd } : { id: 1, cmd, args };
    const r = await one(admin.address, req);
    expect(r).toEqual({ id: 1, ok: true, data: RESULTS[method] });
    expect(calls).toEqual([{ method, args: apiArgs }]);
  });

  it('pipelined requests for every command are answered in order', async () => {
    const replies = await exchange(
      admin.address,
      VALID.map(([cmd, args], i) => ({ id: i, cmd, ...(args ? { args } : {}) })),
    );
    expect(replies.map((r) => r.id)).toEqual(VALID.map((_, i) => i));
    expect(replies.every((r) => r.ok)).toBe(true);
    expect(calls.map((c) => c.method)).toEqual(VALID.map(([, , m]) => m));
  });
});

// ---- malformed requests -----------------------------------------------------

const LONG = 'x'.repeat(257);
/** [cmd, args, issue paths that must be reported] (args `undefined` = no args field) */
const MALFORMED: Array<[string, unknown, string[]]> = [
  ['status', { verbose: true }, ['args']],
  ['list', { all: true }, ['args']],
  ['list', [], ['args']],
  // usage
  ['usage', undefined, ['args.home']],
  ['usage', {}, ['args.home']],
  ['usage', { home: 'acmeweb' }, ['args.home']],
  ['usage', { home: 'acme/web/x' }, ['args.home']],
  ['usage', { home: '/web' }, ['args.home']],
  ['usage', { home: 'acme/' }, ['args.home']],
  ['usage', { home: '' }, ['args.home']],
  ['usage', { home: 7 }, ['args.home']],
  ['usage', { home: ['acme/web'] }, ['args.home']],
  ['usage', { home: 'acme/web', extra: 1 }, ['args']],
  ['usage', 'acme/web', ['args']],
  ['usage', null, ['args']],
  // create
  ['create', {}, ['args.home']],
  ['create', { home: 'acme' }, ['args.home']],
  ['create', { home: 'acme/web', budget: -1 }, ['args.budget']],
  ['create', { home: 'acme/web', budget: 1.5 }, ['args.budget']],
  ['create', { home: 'acme/web', budget: 2 ** 53 }, ['args.budget']],
  ['create', { home: 'acme/web', budget: '1G' }, ['args.budget']],
  ['create', { home: 'acme/web', profile: '' }, ['args.profile']],
  ['create', { home: 'acme/web', profile: null }, ['args.profile']],
  ['create', { home: 'acme/web', profile: LONG }, ['args.profile']],
  ['create', { home: 'acme/web', owner: { uid: 1 } }, ['args.owner.gid']],
  ['create', { home: 'acme/web', owner: { uid: -1, gid: 0 } }, ['args.owner.uid']],
  ['create', { home: 'acme/web', owner: { uid: 0, gid: 4294967295 } }, ['args.owner.gid']],
  ['create', { home: 'acme/web', owner: { uid: 0.5, gid: 0 } }, ['args.owner.uid']],
  ['create', { home: 'acme/web', owner: { uid: 0, gid: 0, groups: [] } }, ['args.owner']],
  ['create', { home: 'acme/web', owner: '1000:1000' }, ['args.owner']],
  ['create', { home: 'acme/web', scope: 'tenant' }, ['args']],
  // set-budget
  ['set-budget', { home: 'acme/web' }, ['args.bytes']],
  ['set-budget', { bytes: 5 }, ['args.home']],
  ['set-budget', { home: 'acme/web', bytes: -1 }, ['args.bytes']],
  ['set-budget', { home: 'acme/web', bytes: -0.5 }, ['args.bytes']],
  ['set-budget', { home: 'acme/web', bytes: 2.5 }, ['args.bytes']],
  ['set-budget', { home: 'acme/web', bytes: 9007199254740992 }, ['args.bytes']],
  ['set-budget', { home: 'acme/web', bytes: '100' }, ['args.bytes']],
  ['set-limits', { home: 'acme/web' }, ['args.inodes']],
  ['set-limits', { home: 'acme/web', inodes: -1 }, ['args.inodes']],
  ['set-limits', { home: 'acme/web', fileBytes: '1G' }, ['args.fileBytes']],
  ['delete-home', { home: 'acme' }, ['args.home']],
  ['release-name', {}, ['args.home']],
  ['delete-tenant', {}, ['args.tenant']],
  ['delete-tenant', { tenant: 'acme', force: true }, ['args']],
  ['delete-tenant', { tenant: '' }, ['args.tenant']],
  ['forwards', { all: true }, ['args']],
  ['list', { tenant: '' }, ['args.tenant']],
  ['list', { orphans: 'yes' }, ['args.orphans']],
  ['set-budget', { home: 'acmeweb', bytes: 5 }, ['args.home']],
  // set-profile
  ['set-profile', { home: 'acme/web' }, ['args.profile']],
  ['set-profile', { home: 'acme/web', profile: 3 }, ['args.profile']],
  ['set-profile', { home: 'acme/web', profile: '' }, ['args.profile']],
  ['set-profile', { home: 'acme', profile: 'p' }, ['args.home']],
  // settings-get
  ['settings-get', {}, ['args.tenant']],
  ['settings-get', { tenant: '' }, ['args.tenant']],
  ['settings-get', { tenant: LONG }, ['args.tenant']],
  ['settings-get', { tenant: 'acme', project: null }, ['args.project']],
  ['settings-get', { tenant: 'acme', scope: 'x' }, ['args']],
  // settings-set
  ['settings-set', { tenant: 'acme' }, ['args.homeScope']],
  ['settings-set', { tenant: 'acme', homeScope: 'global' }, ['args.homeScope']],
  ['settings-set', { tenant: 'acme', homeScope: 'Project' }, ['args.homeScope']],
  ['settings-set', { tenant: 'acme', homeScope: 'unset' }, ['args.homeScope']],
  ['settings-set', { tenant: 'acme', homeScope: 1 }, ['args.homeScope']],
  ['settings-set', { tenant: 'acme', project: 'web', user: 'alice', homeScope: 'user' }, ['args.user']],
  ['settings-set', { homeScope: 'user' }, ['args.tenant']],
  // rescan
  ['rescan', {}, ['args.home']],
  ['rescan', { home: 'acme/web', deep: true }, ['args']],
  // resolve
  ['resolve', { tenant: 'acme' }, ['args.project']],
  ['resolve', { project: 'web' }, ['args.tenant']],
  ['resolve', { tenant: 'acme', project: '' }, ['args.project']],
  ['resolve', { tenant: 'acme', project: 'web', user: 5 }, ['args.user']],
  ['resolve', { tenant: 'acme', project: 'web', scope: 'user' }, ['args']],
  // renames
  ['rename-project', { tenant: 'acme', from: 'web' }, ['args.to']],
  ['rename-project', { tenant: 'acme', from: 'web', to: 'www', force: 'yes' }, ['args.force']],
  ['rename-project', { tenant: 'acme', from: 'web', to: 'www', merge: true }, ['args']],
  ['rename-project', { from: 'web', to: 'www' }, ['args.tenant']],
  ['rename-user', { tenant: 'acme', from: 'alice', to: LONG }, ['args.to']],
  ['rename-user', { tenant: 'acme', to: 'bob' }, ['args.from']],
  ['rename-user', { tenant: 'acme', from: 'alice', to: 'bob', force: 1 }, ['args.force']],
  // deletes
  ['delete-project', { tenant: 'acme' }, ['args.project']],
  ['delete-project', { tenant: 'acme', project: 'web', force: null }, ['args.force']],
  ['delete-project', { tenant: 'acme', home: 'acme/web' }, ['args', 'args.project']],
  ['delete-user', { tenant: 'acme', user: 'alice' }, ['args', 'args.login']],
  ['delete-user', { tenant: 'acme', login: '' }, ['args.login']],
  ['delete-user', { tenant: 'acme', login: 'alice', force: 'true' }, ['args.force']],
  ['reload', { file: '/etc/other.json' }, ['args']],
  // tenant budget
  ['tenant-usage', {}, ['args.tenant']],
  ['set-tenant-budget', { tenant: 'acme' }, ['args.bytes']],
  ['set-tenant-budget', { tenant: 'acme', bytes: -1 }, ['args.bytes']],
  ['set-tenant-budget', { tenant: 'acme', bytes: '1G' }, ['args.bytes']],
];

describe('control commands: malformed requests get BAD_REQUEST and never reach the API', () => {
  it('covers every command', () => {
    expect(new Set(MALFORMED.map(([c]) => c))).toEqual(new Set(COMMAND_NAMES));
  });

  it.each(MALFORMED.map((m, i) => [`${m[0]} #${i} ${JSON.stringify(m[1])?.slice(0, 80)}`, ...m] as const))('%s', async (_label, cmd, args, paths) => {
    const req = args === undefined ? { id: 'm', cmd } : { id: 'm', cmd, args };
    // The schema agrees it is malformed (the server uses the same schema).
    expect(Request.safeParse(req).success).toBe(false);
    const r = await one(admin.address, req);
    expect(r).toMatchObject({ id: 'm', ok: false, code: 'BAD_REQUEST' });
    const issues = (r.ok === false ? r.details?.issues : undefined) as Array<{ path: string; message: string }>;
    expect(issues.length).toBeGreaterThan(0);
    for (const p of paths) expect(issues.map((i) => i.path)).toContain(p);
    expect(calls).toEqual([]);
  });

  it('extra top-level keys, a wrong cmd type and prototype keys are refused too', async () => {
    const cases: unknown[] = [
      { cmd: 'delete-user', args: { tenant: 'acme', login: 'alice' }, force: true },
      JSON.parse('{"cmd":"delete-user","args":{"tenant":"acme","login":"alice","__proto__":{"force":true}}}'),
      JSON.parse('{"cmd":"set-budget","__proto__":{"args":{"home":"acme/web","bytes":1}}}'),
      JSON.parse('{"__proto__":{"cmd":"status"}}'),
      { cmd: 'create', args: { home: 'acme/web', constructor: { name: 'x' } } },
      { cmd: ['status'] },
      { cmd: null },
    ];
    for (const c of cases) {
      const r = await one(admin.address, c);
      expect(r, JSON.stringify(c)).toMatchObject({ ok: false, code: 'BAD_REQUEST' });
    }
    expect(calls).toEqual([]);
    expect(({} as Record<string, unknown>).force).toBeUndefined();
  });
});

// ---- errors from the API ----------------------------------------------------

describe('control commands: a HomesError from the API keeps its code and details', () => {
  const cases: Array<[CommandName, Record<string, unknown>, Method, HomesCode, string, Record<string, unknown>]> = [
    ['delete-project', { tenant: 'acme', project: 'web' }, 'deleteProject', 'BUSY', 'acme/web is busy: 2 open files', { openFiles: 2, cwdProcesses: 0 }],
    ['delete-user', { tenant: 'acme', login: 'alice' }, 'deleteUser', 'BUSY', 'acme/_user_alice is busy', { openFiles: 0, cwdProcesses: 1 }],
    ['rename-project', { tenant: 'acme', from: 'web', to: 'www' }, 'renameProject', 'RENAME_BLOCKED', 'acme/www exists; homes are never merged', { target: 'acme/www' }],
    ['rename-user', { tenant: 'acme', from: 'alice', to: 'bob' }, 'renameUser', 'BUSY', 'busy', { openFiles: 2 }],
    ['usage', { home: 'acme/nope' }, 'usage', 'NOT_FOUND', 'no such home acme/nope', { home: 'acme/nope' }],
    ['create', { home: 'acme/web' }, 'create', 'EXISTS', 'acme/web exists', { home: 'acme/web' }],
    ['resolve', { tenant: 'acme', project: '_user_alice' }, 'resolve', 'INVALID_NAME', 'a project name may not begin with _', { project: '_user_alice' }],
    ['set-budget', { home: 'acme/web', bytes: 1 }, 'setBudget', 'NOT_FOUND', 'no such home', { home: 'acme/web' }],
    ['settings-set', { tenant: 'ac..me', homeScope: 'user' }, 'settingsSet', 'INVALID_NAME', 'bad tenant', { tenant: 'ac..me' }],
  ];
  it.each(cases.map((c) => [`${c[0]} → ${c[3]}`, ...c] as const))('%s', async (_l, cmd, args, method, code, message, details) => {
    failNext.set(method, new HomesError(code, message, details));
    const r = await one(admin.address, { id: 42, cmd, args });
    expect(r).toEqual({ id: 42, ok: false, code, message, details });
    expect(calls).toHaveLength(1);
  });

  it('a HomesError without details has no details field; another error is INTERNAL', async () => {
    failNext.set('rescan', new HomesError('IO', 'read failed'));
    expect(await one(admin.address, { id: 1, cmd: 'rescan', args: { home: 'acme/web' } })).toEqual({ id: 1, ok: false, code: 'IO', message: 'read failed' });
    failNext.set('list', new Error('boom /secret/path'));
    const r = await one(admin.address, { id: 2, cmd: 'list' });
    expect(r).toMatchObject({ id: 2, ok: false, code: 'INTERNAL' });
    expect(JSON.stringify(r)).not.toContain('secret');
  });
});

// ---- the platform socket ----------------------------------------------------

describe('control commands: the platform socket serves only status and resolve', () => {
  const adminOnly = COMMAND_NAMES.filter((c) => !PLATFORM_COMMANDS.has(c));

  it('lists exactly the admin-only commands', () => {
    expect(adminOnly.sort()).toEqual(
      [
        'create',
        'delete-home',
        'delete-project',
        'delete-tenant',
        'delete-user',
        'forwards',
        'list',
        'reload',
        'release-name',
        'rename-project',
        'rename-user',
        'rescan',
        'set-budget',
        'set-limits',
        'set-profile',
        'set-tenant-budget',
        'settings-get',
        'settings-set',
        'tenant-usage',
        'usage',
      ].sort(),
    );
  });

  it('answers ACCESS_DENIED for every admin-only command, valid or not, without reaching the API', async () => {
    for (const cmd of adminOnly) {
      const valid = VALID.filter(([c]) => c === cmd);
      const malformed = MALFORMED.filter(([c]) => c === cmd);
      const requests: Array<{ id?: string; cmd: string; args?: unknown }> = [
        ...valid.map(([, args], i) => ({ id: `${cmd}-v${i}`, cmd, ...(args ? { args } : {}) })),
        ...malformed.map(([, args], i) => ({ id: `${cmd}-m${i}`, cmd, ...(args === undefined ? {} : { args }) })),
        { cmd },
      ];
      const replies = await exchange(platform.address, requests);
      expect(replies).toHaveLength(requests.length);
      replies.forEach((r, i) => {
        const expected: Record<string, unknown> = { ok: false, code: 'ACCESS_DENIED', message: `${cmd} is not served on this socket` };
        if (requests[i]!.id !== undefined) expected.id = requests[i]!.id;
        // exactly this: no details, nothing about the arguments
        expect(r).toEqual(expected);
      });
    }
    expect(calls).toEqual([]);
  });

  it('serves status and resolve, and checks their arguments', async () => {
    expect(await one(platform.address, { id: 1, cmd: 'status' })).toEqual({ id: 1, ok: true, data: STATUS });
    expect(await one(platform.address, { id: 2, cmd: 'resolve', args: { tenant: 'acme', project: 'web', user: 'alice' } })).toEqual({ id: 2, ok: true, data: RESOLVE });
    expect(calls).toEqual([
      { method: 'status', args: [] },
      { method: 'resolve', args: [{ tenant: 'acme', project: 'web', user: 'alice' }] },
    ]);
    calls.length = 0;
    const bad = await one(platform.address, { id: 3, cmd: 'resolve', args: { tenant: 'acme' } });
    expect(bad).toMatchObject({ id: 3, ok: false, code: 'BAD_REQUEST' });
    failNext.set('resolve', new HomesError('INVALID_NAME', 'bad project', { project: '_tenant' }));
    expect(await one(platform.address, { id: 4, cmd: 'resolve', args: { tenant: 'acme', project: '_tenant' } })).toEqual({
      id: 4,
      ok: false,
      code: 'INVALID_NAME',
      message: 'bad project',
      details: { project: '_tenant' },
    });
    expect(calls.map((c) => c.method)).toEqual(['resolve']);
  });

  it('an unknown command lists only what this socket serves', async () => {
    const r = await one(platform.address, { id: 5, cmd: 'frobnicate' });
    expect(r).toMatchObject({ id: 5, ok: false, code: 'UNKNOWN_COMMAND', details: { commands: ['status', 'resolve'] } });
    const a = await one(admin.address, { id: 6, cmd: 'frobnicate' });
    expect(a).toMatchObject({ ok: false, code: 'UNKNOWN_COMMAND', details: { commands: [...COMMAND_NAMES] } });
  });

  it('the admin socket serves the admin-only commands', async () => {
    expect(await one(admin.address, { id: 7, cmd: 'list' })).toEqual({ id: 7, ok: true, data: [HOME] });
  });

  it('refuses an allowed set naming an unknown command', async () => {
    await expect(start('bad-allowed', { allowed: new Set(['status', 'nope']) as unknown as ReadonlySet<CommandName> })).rejects.toThrow(/unknown command "nope"/);
  });

  it('runs an admin socket 0660 and a platform socket 0660, each in its own 0750 directory with its group', async () => {
    const gid = process.getgid!();
    const groups = typeof process.getgroups === 'function' ? process.getgroups() : [gid];
    const other = groups.find((g) => g !== gid) ?? gid;
    const a = await start('two/admin', { socketMode: 0o660, socketGroup: gid });
    extra.push(a);
    const p = await start('two/platform', { socketMode: 0o660, socketGroup: other, allowed: PLATFORM_COMMANDS });
    extra.push(p);
    for (const [srv, g] of [[a, gid], [p, other]] as const) {
      const dir = await stat(path.dirname(srv.address));
      expect(dir.mode & 0o7777).toBe(0o750);
      expect(dir.gid).toBe(g);
      const st = await lstat(srv.address);
      expect(st.isSocket()).toBe(true);
      expect(st.mode & 0o777).toBe(0o660);
      expect(st.gid).toBe(g);
    }
    expect(await one(a.address, { cmd: 'list' })).toMatchObject({ ok: true });
    expect(await one(p.address, { cmd: 'list' })).toMatchObject({ ok: false, code: 'ACCESS_DENIED' });
    expect(await one(p.address, { cmd: 'status' })).toMatchObject({ ok: true });
  });
});
