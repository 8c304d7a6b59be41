import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { mkdtemp, rm } from 'node:fs/promises';
import { createRootLogger } from '../../src/log.js';
import type { SettingsView } from '../../src/control/api.js';
import { PLATFORM_COMMANDS, commands } from '../../src/control/commands.js';
import { fakeTargets, type CommandFunctions } from '../helpers/command-fakes.js';
import { startControlServer, type ControlServer } from '../../src/control/server.js';
import { LineDecoder } from '../../src/control/framing.js';
import { COMMAND_NAMES, Reply, Request, type CommandName } from '../../src/control/protocol.js';
import { STATUS, HOME } from '../helpers/fixtures.js';

/**
 * Throws malformed, oversized and hostile lines at an admin and a platform
 * socket sharing one fake of the functions the commands call. Every line must get exactly one reply, an
 * error unless it is a well-formed read the socket serves, and no mutating API
 * method may ever run. Bounded: a few thousand lines, well under 20 s.
 */

const MAX_LINE = 8192;

// ---- fake API: reads answer canned data, mutations are recorded -------------

const SETTINGS: SettingsView = { tenant: 'acme', tenantDefault: null };

/** Methods that change homes, owners or settings (resolve creates homes, rescan rewrites a ledger). */
const MUTATING = ['create', 'setBudget', 'setProfile', 'settingsSet', 'rescan', 'resolve', 'renameProject', 'renameUser', 'deleteProject', 'deleteUser', 'deleteTenant', 'reload'] as const;
const READS = { status: STATUS, list: [HOME], usage: HOME, settingsGet: SETTINGS } as const;
/** Wire commands whose API method only reads. */
const READ_COMMANDS: ReadonlySet<CommandName> = new Set(['status', 'list', 'usage', 'settings-get']);

const mutations: Array<{ method: string; args: unknown[] }> = [];
const reads: Record<string, number> = {};
const api = {
  ...Object.fromEntries(
    Object.entries(READS).map(([m, data]) => [
      m,
      async () => {
        reads[m] = (reads[m] ?? 0) + 1;
        return data;
      },
    ]),
  ),
  ...Object.fromEntries(
    MUTATING.map((m) => [
      m,
      async (...args: unknown[]) => {
        mutations.push({ method: m, args });
        return {};
      },
    ]),
  ),
} as unknown as CommandFunctions;

// ---- servers ------------------------------------------------------------------

let tmp: string;
let admin: ControlServer;
let platform: ControlServer;
let linesSent = 0;

beforeAll(async () => {
  tmp = await mkdtemp(path.join(os.tmpdir(), 'homesfs-fuzz-'));
  const log = createRootLogger('silent');
  const common = { commands, ...fakeTargets(api), log, maxLineBytes: MAX_LINE, maxConnections: 256 };
  admin = await startControlServer({ ...common, socketPath: path.join(tmp, 'admin', 'admin.sock'), socketMode: 0o600 });
  platform = await startControlServer({
    ...common,
    socketPath: path.join(tmp, 'platform', 'platform.sock'),
    socketMode: 0o660,
    socketGroup: process.getgid!(),
    allowed: PLATFORM_COMMANDS,
  });
});
afterAll(async () => {
  await admin?.close();
  await platform?.close();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

// ---- the oracle -----------------------------------------------------------------

type Expect = { kind: 'ok' } | { kind: 'error'; codes: ReadonlySet<string> };
const MALFORMED_CODES: ReadonlySet<string> = new Set(['BAD_JSON', 'LINE_TOO_LONG', 'UNKNOWN_COMMAND', 'BAD_REQUEST', 'ACCESS_DENIED']);

/** What the server must answer for each request line in `payload` (its own framing, its own schema). */
function expectations(payload: Buffer, allowed: ReadonlySet<CommandName>): Expect[] {
  const dec = new LineDecoder(MAX_LINE);
  const out: Expect[] = [];
  for (const ev of [...dec.push(payload), ...dec.end()]) {
    if (ev.kind === 'too_long') {
      out.push({ kind: 'error', codes: new Set(['LINE_TOO_LONG']) });
      continue;
    }
    if (ev.line.trim() === '') continue; // blank lines get no reply
    let raw: unknown;
    try {
      raw = JSON.parse(ev.line);
    } catch {
      out.push({ kind: 'error', codes: new Set(['BAD_JSON']) });
      continue;
    }
    const parsed = Request.safeParse(raw);
    if (parsed.success) {
      const cmd = parsed.data.cmd;
      if (!allowed.has(cmd)) out.push({ kind: 'error', codes: new Set(['ACCESS_DENIED']) });
      else if (READ_COMMANDS.has(cmd)) out.push({ kind: 'ok' });
      else throw new Error(`generator bug: a well-formed ${cmd} request would reach the API: ${ev.line.slice(0, 200)}`);
    } else {
      out.push({ kind: 'error', codes: MALFORMED_CODES });
    }
  }
  return out;
}

/** One connection: send everything, half-close, read every reply until the server closes. */
function exchange(socketPath: string, payload: Buffer): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const s = net.createConnection(socketPath);
    const chunks: Buffer[] = [];
    s.on('data', (d: Buffer) => chunks.push(d));
    s.on('error', reject);
    s.on('close', () => resolve(Buffer.concat(chunks).toString('utf8').split('\n').filter((l) => l !== '')));
    s.end(payload);
  });
}

async function check(payload: Buffer): Promise<void> {
  for (const [server, allowed] of [[admin, new Set(COMMAND_NAMES)], [platform, PLATFORM_COMMANDS]] as const) {
    const want = expectations(payload, allowed);
    const got = await exchange(server.address, payload);
    linesSent += want.length;
    expect(got.length, `replies from ${path.basename(server.address)} to ${JSON.stringify(payload.toString('latin1').slice(0, 300))}`).toBe(want.length);
    got.forEach((line, i) => {
      const r = Reply.safeParse(JSON.parse(line));
      expect(r.success, line).toBe(true);
      const reply = r.data!;
      const w = want[i]!;
      if (w.kind === 'ok') {
        expect(reply.ok, line).toBe(true);
      } else {
        expect(reply.ok, line).toBe(false);
        expect(w.codes.has((reply as { code: string }).code), `${line} (allowed: ${[...w.codes].join(',')})`).toBe(true);
      }
    });
  }
}

// ---- generators -------------------------------------------------------------------

type Kind = 'name' | 'home' | 'bytes' | 'limit' | 'nullableBytes' | 'nullableName' | 'scope' | 'bool' | 'owner';
interface Template {
  cmd: CommandName;
  args: Record<string, unknown>;
  kinds: Record<string, Kind>;
  required: string[];
}
const TEMPLATES: Template[] = [
  { cmd: 'status', args: {}, kinds: {}, required: [] },
  { cmd: 'list', args: { tenant: 'acme', orphans: true }, kinds: { tenant: 'name', orphans: 'bool' }, required: [] },
  { cmd: 'reload', args: {}, kinds: {}, required: [] },
  { cmd: 'usage', args: { home: 'acme/web' }, kinds: { home: 'home' }, required: ['home'] },
  { cmd: 'create', args: { home: 'acme/web', profile: 'strict', budget: 1024, owner: { uid: 1, gid: 2 } }, kinds: { home: 'home', profile: 'name', budget: 'bytes', owner: 'owner' }, required: ['home'] },
  { cmd: 'set-budget', args: { home: 'acme/web', bytes: 0 }, kinds: { home: 'home', bytes: 'limit' }, required: ['home', 'bytes'] },
  { cmd: 'set-limits', args: { home: 'acme/web', inodes: 5, fileBytes: null }, kinds: { home: 'home', inodes: 'limit', fileBytes: 'limit' }, required: ['home'] },
  { cmd: 'delete-home', args: { home: 'acme/web', force: true }, kinds: { home: 'home', force: 'bool' }, required: ['home'] },
  { cmd: 'delete-tenant', args: { tenant: 'acme' }, kinds: { tenant: 'name' }, required: ['tenant'] },
  { cmd: 'forwards', args: {}, kinds: {}, required: [] },
  { cmd: 'release-name', args: { home: 'acme/web' }, kinds: { home: 'home' }, required: ['home'] },
  { cmd: 'set-profile', args: { home: 'acme/web', profile: null }, kinds: { home: 'home', profile: 'nullableName' }, required: ['home', 'profile'] },
  { cmd: 'settings-get', args: { tenant: 'acme', project: 'web' }, kinds: { tenant: 'name', project: 'name' }, required: ['tenant'] },
  { cmd: 'settings-set', args: { tenant: 'acme', user: 'alice', homeScope: 'user' }, kinds: { tenant: 'name', user: 'name', homeScope: 'scope' }, required: ['tenant', 'homeScope'] },
  { cmd: 'rescan', args: { home: 'acme/web' }, kinds: { home: 'home' }, required: ['home'] },
  { cmd: 'resolve', args: { tenant: 'acme', project: 'web', user: 'alice' }, kinds: { tenant: 'name', project: 'name', user: 'name' }, required: ['tenant', 'project'] },
  { cmd: 'rename-project', args: { tenant: 'acme', from: 'web', to: 'www', force: true }, kinds: { tenant: 'name', from: 'name', to: 'name', force: 'bool' }, required: ['tenant', 'from', 'to'] },
  { cmd: 'rename-user', args: { tenant: 'acme', from: 'alice', to: 'bob' }, kinds: { tenant: 'name', from: 'name', to: 'name' }, required: ['tenant', 'from', 'to'] },
  { cmd: 'delete-project', args: { tenant: 'acme', project: 'web', force: false }, kinds: { tenant: 'name', project: 'name', force: 'bool' }, required: ['tenant', 'project'] },
  { cmd: 'delete-user', args: { tenant: 'acme', login: 'alice' }, kinds: { tenant: 'name', login: 'name', force: 'bool' }, required: ['tenant', 'login'] },
  { cmd: 'tenant-usage', args: { tenant: 'acme' }, kinds: { tenant: 'name' }, required: ['tenant'] },
  { cmd: 'set-tenant-budget', args: { tenant: 'acme', bytes: null }, kinds: { tenant: 'name', bytes: 'nullableBytes' }, required: ['tenant', 'bytes'] },
];

/** Placeholders replaced by number literals JSON.stringify cannot produce. */
const HUGE = '\u0000HUGE\u0000';
const HUGE_LITERALS = ['1e999', '-1e999', '123456789012345678901234567890', '1e-999', '-0'];
/** Only the infinite ones: a finite number is a valid id. */
const INF = '\u0000INF\u0000';
const INF_LITERALS = ['1e999', '-1e999', '1e400'];

/** Values each kind of field must refuse. */
const WRONG: Record<Kind, unknown[]> = {
  name: ['', 'n'.repeat(257), 0, 1, null, true, false, [], ['acme'], {}, { name: 'acme' }, HUGE],
  home: ['', 'acme', 'acme/', '/web', 'a/b/c', '//', '/', 'a'.repeat(600) + '/b', 7, null, ['acme', 'web'], { tenant: 'acme', key: 'web' }, HUGE],
  bytes: [-1, -0.5, 1.5, 2 ** 53, 2 ** 64, -(2 ** 53), '1024', '1G', null, true, [], {}],
  // a live limit: null (back to the profile) is valid, the rest is not
  limit: [-1, -0.5, 1.5, 2 ** 53, 2 ** 64, -(2 ** 53), '1024', '1G', 'off', 'default', true, [], {}],
  nullableName: ['', 'p'.repeat(257), 0, false, [], {}],
  nullableBytes: [-1, -0.5, 1.5, 2 ** 53, 2 ** 64, '1024', '1G', 'off', true, [], {}],
  scope: ['Project', 'TENANT', 'global', 'unset', '', ' user', 1, true, [], {}],
  bool: ['true', 'false', 1, 0, null, [], {}],
  owner: [{ uid: -1, gid: 0 }, { uid: 0 }, { gid: 0 }, { uid: 4294967295, gid: 0 }, { uid: 0, gid: 2 ** 40 }, { uid: 1.5, gid: 0 }, { uid: '0', gid: 0 }, { uid: 0, gid: 0, x: 1 }, '0:0', [0, 0], null, 0],
};
const EXTRA_KEYS = ['__proto__', 'constructor', 'prototype', 'toString', 'hasOwnProperty', 'valueOf', 'force2', 'Home', 'HOME', 'merge', 'owner_uid', '', ' ', 'cmd', 'id', 'args'];

/** Own enumerable property, even for `__proto__` (as JSON.parse would make it). */
function withKey(o: Record<string, unknown>, k: string, v: unknown): Record<string, unknown> {
  const c = { ...o };
  Object.defineProperty(c, k, { value: v, enumerable: true, writable: true, configurable: true });
  return c;
}
function without(o: Record<string, unknown>, k: string): Record<string, unknown> {
  const c = { ...o };
  delete c[k];
  return c;
}

const anyWrong = fc.oneof(...Object.values(WRONG).map((vs) => fc.constantFrom(...vs)), fc.jsonValue({ maxDepth: 2 }));

/** A request close to a valid one with one change that makes it malformed. */
const nearValid: fc.Arbitrary<unknown> = fc
  .tuple(fc.constantFrom(...TEMPLATES), fc.nat(), fc.nat(), fc.constantFrom(...EXTRA_KEYS), anyWrong, fc.integer({ min: 0, max: 8 }))
  .map(([t, a, b, extraKey, junk, which]) => {
    const fields = Object.keys(t.kinds);
    const base = { id: a % 3 === 0 ? undefined : a, cmd: t.cmd, args: t.args };
    switch (which) {
      case 0: // drop a required argument
        if (t.required.length > 0) return { ...base, args: without(t.args, t.required[a % t.required.length]!) };
        return { ...base, args: withKey(t.args, extraKey === 'id' ? 'verbose' : extraKey, junk) };
      case 1: {
        // a field of the wrong type or shape
        if (fields.length === 0) return { ...base, args: { x: junk } };
        const f = fields[a % fields.length]!;
        const bad = WRONG[t.kinds[f]!];
        return { ...base, args: { ...t.args, [f]: bad[b % bad.length] } };
      }
      case 2: // an unknown argument (prototype names included)
        return { ...base, args: withKey(t.args, extraKey, junk) };
      case 3: // an unknown top-level key
        return withKey(base, extraKey === 'cmd' || extraKey === 'args' || extraKey === 'id' ? 'extra' : extraKey, junk);
      case 4: // args that are not an object
        return { ...base, args: [[], 'x', 5, null, true, [t.args]][b % 6] };
      case 5: // a cmd that is not a command name, or not a string
        return { ...base, cmd: [t.cmd.toUpperCase(), ` ${t.cmd}`, `${t.cmd} `, `${t.cmd}\u0000`, `${t.cmd.replace(/-/g, '_')}_`, 5, null, [t.cmd], { cmd: t.cmd }][b % 9] };
      case 6: // a bad id
        return { ...base, id: [{}, [], true, null, 'i'.repeat(257), INF][b % 6] };
      case 7: // both project and user for settings; otherwise a nested prototype key
        if (t.cmd === 'settings-set') return { ...base, args: { ...t.args, project: 'web', user: 'alice' } };
        return { ...base, args: withKey(t.args, '__proto__', { ...t.args, admin: true }) };
      default: // no cmd at all
        return { id: base.id, args: t.args };
    }
  });

function toLine(value: unknown, hugeIndex: number): string {
  const s = JSON.stringify(value) ?? 'undefined';
  return s
    .split(JSON.stringify(HUGE))
    .join(HUGE_LITERALS[hugeIndex % HUGE_LITERALS.length]!)
    .split(JSON.stringify(INF))
    .join(INF_LITERALS[hugeIndex % INF_LITERALS.length]!);
}

/** A valid read request (may be answered ok where the socket serves it). */
const validRead = fc.constantFrom(
  { cmd: 'status' },
  { id: 1, cmd: 'status', args: {} },
  { cmd: 'list' },
  { id: 'u', cmd: 'usage', args: { home: 'acme/web' } },
  { cmd: 'settings-get', args: { tenant: 'acme', user: 'alice' } },
);

/** One request line, as bytes, without its terminator. */
const lineBytes: fc.Arbitrary<Buffer> = fc.oneof(
  { weight: 3, arbitrary: fc.tuple(nearValid, fc.nat()).map(([v, h]) => Buffer.from(toLine(v, h))) },
  { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 4 }).map((v) => Buffer.from(JSON.stringify(v) ?? 'null')) },
  { weight: 2, arbitrary: fc.uint8Array({ minLength: 1, maxLength: 400 }).map((u) => Buffer.from(u)) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 200 }).map((s) => Buffer.from(s)) },
  { weight: 1, arbitrary: fc.integer({ min: MAX_LINE - 2, max: MAX_LINE * 3 }).map((n) => Buffer.alloc(n, 0x7b)) },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 3000 }).map((d) => Buffer.from('{"cmd":"create","args":' + '['.repeat(d) + ']'.repeat(d) + '}')) },
  { weight: 1, arbitrary: validRead.map((v) => Buffer.from(JSON.stringify(v))) },
  {
    weight: 1,
    // a near-valid line with raw damage: NUL, invalid UTF-8, a BOM, a lone CR inside
    arbitrary: fc
      .tuple(nearValid, fc.nat(), fc.constantFrom(Buffer.from([0]), Buffer.from([0xff, 0xfe]), Buffer.from([0xc3]), Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('\r')))
      .map(([v, at, junk]) => {
        const b = Buffer.from(toLine(v, at));
        const i = at % (b.length + 1);
        return Buffer.concat([b.subarray(0, i), junk, b.subarray(i)]);
      }),
  },
);

const terminator = fc.constantFrom('\n', '\r\n', '\n\n', ' \n');

// ---- tests ----------------------------------------------------------------------

describe('control fuzz: both sockets', () => {
  it('has a near-valid template for every command', () => {
    expect(new Set(TEMPLATES.map((t) => t.cmd))).toEqual(new Set(COMMAND_NAMES));
  });

  it('hand-made hostile lines each get one error reply', async () => {
    const hostile: Array<string | Buffer> = [
      '{"cmd":"__proto__"}',
      '{"cmd":"constructor"}',
      '{"cmd":"toString","args":{}}',
      '{"__proto__":{"cmd":"delete-user","args":{"tenant":"acme","login":"alice"}}}',
      '{"cmd":"delete-user","args":{"tenant":"acme","login":"alice","__proto__":{"force":true}}}',
      '{"cmd":"set-budget","args":{"home":"acme/web","bytes":1,"constructor":{"prototype":{"x":1}}}}',
      '{"cmd":"status","__proto__":{"polluted":true}}',
      '{"cmd":"set-budget","args":{"home":"acme/web","bytes":1e999}}',
      '{"cmd":"set-budget","args":{"home":"acme/web","bytes":-1}}',
      '{"cmd":"set-budget","args":{"home":"acme/web","bytes":9007199254740993}}',
      '{"cmd":"set-budget","args":{"home":"acmeweb","bytes":1}}',
      '{"cmd":"create","args":{"home":"acme/web","owner":{"uid":4294967295,"gid":0}}}',
      '{"cmd":"settings-set","args":{"tenant":"acme","project":"p","user":"u","homeScope":"user"}}',
      '{"cmd":"settings-set","args":{"tenant":"acme","homeScope":"unset"}}',
      '{"id":1e999,"cmd":"status"}',
      '{"cmd":"status","cmd":"delete-user","args":{"tenant":"acme"}}',
      '{"cmd":"delete-project","args":{"tenant":"acme","project":"web"},"args":"x"}',
      '{"cmd":"rename-project","args":{"tenant":"acme","from":"a","to":"b","force":"yes"}}',
      '{"cmd":"resolve"}',
      '{"cmd":"resolve","args":{"tenant":"acme"}}',
      '{"cmd":"status"',
      '{"cmd":"status"}}',
      '{"cmd":"status"}{"cmd":"status"}',
      '["status"]',
      '"status"',
      'status',
      'null',
      'true',
      '0',
      '1e999',
      '{}',
      '[]',
      '\u2028{"cmd":"status","x":1}',
      Buffer.from([0xef, 0xbb, 0xbf, ...Buffer.from('{"cmd":"status"}')]),
      Buffer.from('{"cmd":"stat\u0000us"}'),
      Buffer.from([0x7b, 0x22, 0x63, 0x6d, 0x64, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]),
      Buffer.from([0xc0, 0x80, 0xed, 0xa0, 0x80, 0xf4, 0x90, 0x80, 0x80]),
      Buffer.from('{"cmd":"usage","args":{"home":"acme\u0000/web","x":1}}'),
      Buffer.alloc(MAX_LINE + 1, 0x20).fill('{', 0, 1),
      Buffer.alloc(1024 * 1024, 0x61),
      '{"cmd":"create","args":' + '{"a":'.repeat(2000) + '1' + '}'.repeat(2000) + '}',
      '['.repeat(MAX_LINE / 2 - 1) + ']'.repeat(MAX_LINE / 2 - 1),
      '{"cmd":"list","args":{"home":"acme/web"}}\r',
      '\r\r{"cmd":"status"}',
    ];
    const payload = Buffer.concat(hostile.flatMap((h) => [Buffer.isBuffer(h) ? h : Buffer.from(h), Buffer.from('\r\n')]));
    await check(payload);
    // each one on its own connection too, without a final newline
    for (const h of hostile) await check(Buffer.isBuffer(h) ? h : Buffer.from(h));
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(({} as Record<string, unknown>).force).toBeUndefined();
  });

  it('random batches: one reply per line, errors with known codes, nothing mutated', async () => {
    const t0 = Date.now();
    await fc.assert(
      fc.asyncProperty(fc.array(fc.tuple(lineBytes, terminator), { minLength: 1, maxLength: 25 }), async (lines) => {
        await check(Buffer.concat(lines.flatMap(([l, t]) => [l, Buffer.from(t)])));
        expect(mutations).toEqual([]);
      }),
      { numRuns: 300, endOnFailure: true },
    );
    expect(Date.now() - t0).toBeLessThan(20_000);
  });

  it('well-formed admin-only requests on the platform socket are denied and never reach the API', async () => {
    const adminOnly = TEMPLATES.filter((t) => !PLATFORM_COMMANDS.has(t.cmd));
    await fc.assert(
      fc.asyncProperty(fc.array(fc.oneof(fc.constantFrom(...adminOnly).map((t) => ({ id: 9, cmd: t.cmd, args: t.args })), nearValid), { minLength: 1, maxLength: 20 }), async (reqs) => {
        const payload = Buffer.from(reqs.map((r) => toLine(r, 0) + '\n').join(''));
        const want = expectations(payload, PLATFORM_COMMANDS);
        const got = await exchange(platform.address, payload);
        linesSent += want.length;
        expect(got).toHaveLength(want.length);
        got.forEach((l, i) => {
          const r = JSON.parse(l) as { ok: boolean; code?: string };
          expect(r.ok).toBe(false);
          expect((want[i] as { codes: ReadonlySet<string> }).codes.has(r.code!)).toBe(true);
        });
      }),
      { numRuns: 60 },
    );
    expect(mutations).toEqual([]);
  });

  it('both servers are still up, and nothing was mutated', async () => {
    for (const s of [admin, platform]) {
      const [line] = await exchange(s.address, Buffer.from('{"id":"end","cmd":"status"}\n'));
      expect(JSON.parse(line!)).toEqual({ id: 'end', ok: true, data: STATUS });
    }
    expect(mutations).toEqual([]);
    expect(reads.status).toBeGreaterThan(0);
    expect(linesSent).toBeGreaterThan(3000);
    expect(Object.getPrototypeOf({})).toBe(Object.prototype);
    expect(Object.keys(Object.prototype)).toEqual([]);
  });
});
