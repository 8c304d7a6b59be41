import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { chmod, lstat, mkdir, mkdtemp, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { HOMES_CODES, HomesError } from '../../src/errors.js';
import { createRootLogger } from '../../src/log.js';
import type { StatusReport } from '../../src/control/api.js';
import { commands } from '../../src/control/commands.js';
import { fakeTargets } from '../helpers/command-fakes.js';
import { startControlServer, type ControlServer, type ControlServerOptions } from '../../src/control/server.js';
import { controlRequest, ControlClientError } from '../../src/control/client.js';
import { CONTROL_CODES, controlCodeTableMarkdown, type Reply } from '../../src/control/protocol.js';
import { STATUS } from '../helpers/fixtures.js';


type Mode = 'ok' | 'homes-error' | 'crash' | 'hang';
let mode: Mode = 'ok';
// Only status is exercised here; test/control/control-commands.test.ts covers the rest.
const api = {
  async status() {
    switch (mode) {
      case 'ok':
        return STATUS;
      case 'homes-error':
        throw new HomesError('NOT_FOUND', 'no such home', { home: 'acme/nope' });
      case 'crash':
        throw new TypeError('secret internal detail');
      case 'hang':
        return new Promise<StatusReport>(() => {});
    }
  },
};

const logLines: Array<Record<string, unknown>> = [];
const logSink = new Writable({
  write(chunk: Buffer, _enc, cb) {
    for (const l of chunk.toString().split('\n')) if (l) logLines.push(JSON.parse(l) as Record<string, unknown>);
    cb();
  },
});
const log = createRootLogger('debug', logSink);

/** A raw line-oriented test client. */
class RawClient {
  private buf = '';
  private readonly lines: string[] = [];
  private waiter: (() => void) | undefined;
  readonly closed: Promise<void>;
  private constructor(readonly sock: net.Socket) {
    sock.setEncoding('utf8');
    sock.on('data', (d: string) => {
      this.buf += d;
      let i;
      while ((i = this.buf.indexOf('\n')) !== -1) {
        this.lines.push(this.buf.slice(0, i));
        this.buf = this.buf.slice(i + 1);
      }
      this.waiter?.();
    });
    sock.on('error', () => this.waiter?.());
    this.closed = new Promise((resolve) => sock.on('close', () => {
      this.waiter?.();
      resolve();
    }));
  }
  static connect(p: string): Promise<RawClient> {
    return new Promise((resolve, reject) => {
      const s = net.createConnection(p);
      s.once('connect', () => resolve(new RawClient(s)));
      s.once('error', reject);
    });
  }
  send(data: string | Buffer): void {
    this.sock.write(data);
  }
  async reply(timeoutMs = 5000): Promise<Reply> {
    const deadline = Date.now() + timeoutMs;
    while (this.lines.length === 0) {
      if (this.sock.destroyed && this.lines.length === 0) throw new Error('connection closed before a reply');
      const left = deadline - Date.now();
      if (left <= 0) throw new Error('no reply in time');
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiter = () => {
          clearTimeout(t);
          resolve();
        };
      });
    }
    return JSON.parse(this.lines.shift()!) as Reply;
  }
  /** Every reply line received so far, parsed. */
  drain(): Reply[] {
    return this.lines.splice(0).map((l) => JSON.parse(l) as Reply);
  }
  async request(obj: unknown): Promise<Reply> {
    this.send(JSON.stringify(obj) + '\n');
    return this.reply();
  }
  close(): void {
    this.sock.destroy();
  }
}

let tmp: string;
const servers: ControlServer[] = [];
const clients: RawClient[] = [];

async function start(over: Partial<ControlServerOptions> = {}, sub = 'run'): Promise<ControlServer> {
  const server = await startControlServer({
    socketPath: path.join(tmp, sub, 'admin.sock'),
    socketMode: 0o600,
    commands,
    ...fakeTargets(api),
    log,
    ...over,
  });
  servers.push(server);
  return server;
}

async function connect(p: string): Promise<RawClient> {
  const c = await RawClient.connect(p);
  clients.push(c);
  return c;
}

beforeAll(async () => {
  tmp = await mkdtemp(path.join(os.tmpdir(), 'homesfs-ctl-'));
});
afterEach(async () => {
  mode = 'ok';
  for (const c of clients.splice(0)) c.close();
  for (const s of servers.splice(0)) await s.close();
});
afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

describe('control server: requests', () => {
  let server: ControlServer;

  it('answers status with the daemon report, echoing the id', async () => {
    server = await start();
    const c = await connect(server.address);
    expect(await c.request({ id: 1, cmd: 'status' })).toEqual({ id: 1, ok: true, data: STATUS });
    expect(await c.request({ id: 'two', cmd: 'status', args: {} })).toEqual({ id: 'two', ok: true, data: STATUS });
    expect(await c.request({ cmd: 'status' })).toEqual({ ok: true, data: STATUS });
  });

  it('answers via controlRequest', async () => {
    server = await start();
    expect(await controlRequest(server.address, { id: 9, cmd: 'status' }, { timeoutMs: 2000 })).toEqual({ id: 9, ok: true, data: STATUS });
  });

  it('BAD_JSON for a line that is not JSON, and the connection stays usable', async () => {
    server = await start();
    const c = await connect(server.address);
    c.send('{"cmd": "status"\n');
    const r = await c.reply();
    expect(r).toMatchObject({ ok: false, code: 'BAD_JSON' });
    expect(r).not.toHaveProperty('id');
    expect(await c.request({ id: 2, cmd: 'status' })).toMatchObject({ id: 2, ok: true });
    expect(logLines.some((l) => l.msg === 'bad control request' && l.code === 'BAD_JSON' && l.level === 'warn')).toBe(true);
  });

  it('UNKNOWN_COMMAND for an unknown cmd string, listing the known commands', async () => {
    server = await start();
    const c = await connect(server.address);
    for (const cmd of ['frobnicate', '__proto__', 'toString', 'constructor', '']) {
      const r = await c.request({ id: 3, cmd });
      expect(r).toMatchObject({ id: 3, ok: false, code: 'UNKNOWN_COMMAND' });
      expect(r.ok === false && r.details?.commands).toContain('status');
    }
  });

  it('BAD_REQUEST for schema errors, with issue paths', async () => {
    server = await start();
    const c = await connect(server.address);
    const cases: Array<[unknown, string | undefined]> = [
      [{ id: 4, cmd: 'status', args: { verbose: true } }, 'args'],
      [{ id: 4, cmd: 'status', args: 'x' }, 'args'],
      [{ id: 4, cmd: 'status', extra: 1 }, ''],
      [{ id: 4, cmd: 5 }, 'cmd'],
      [{ id: 4 }, 'cmd'],
      [[1, 2], undefined],
      [42, undefined],
      [null, undefined],
      ['status', undefined],
    ];
    for (const [req, p] of cases) {
      const r = await c.request(req);
      expect(r, JSON.stringify(req)).toMatchObject({ ok: false, code: 'BAD_REQUEST' });
      if (p !== undefined) {
        expect(r).toMatchObject({ id: 4 });
        const issues = (r.ok === false ? r.details?.issues : undefined) as Array<{ path: string }>;
        expect(issues.map((i) => i.path)).toContain(p);
      }
    }
    // An id of the wrong type is a schema error too, and is not echoed.
    const r = await c.request({ id: { x: 1 }, cmd: 'status' });
    expect(r).toMatchObject({ ok: false, code: 'BAD_REQUEST' });
    expect(r).not.toHaveProperty('id');
  });

  it('LINE_TOO_LONG for an over-long line; the same connection then works', async () => {
    server = await start({ maxLineBytes: 1024 });
    const c = await connect(server.address);
    c.send('{"cmd":"status","pad":"' + 'x'.repeat(5000));
    expect(await c.reply()).toMatchObject({ ok: false, code: 'LINE_TOO_LONG', details: { maxBytes: 1024 } });
    c.send('y'.repeat(5000) + '"}\n');
    expect(await c.request({ id: 5, cmd: 'status' })).toMatchObject({ id: 5, ok: true });
  });

  it('answers pipelined requests in order, one line each; blank lines are ignored', async () => {
    server = await start();
    const c = await connect(server.address);
    c.send('{"id":1,"cmd":"status"}\n\n  \r\nnope\n{"id":3,"cmd":"x"}\n{"id":4,"cmd":"status"}\n');
    expect(await c.reply()).toMatchObject({ id: 1, ok: true });
    expect(await c.reply()).toMatchObject({ ok: false, code: 'BAD_JSON' });
    expect(await c.reply()).toMatchObject({ id: 3, code: 'UNKNOWN_COMMAND' });
    expect(await c.reply()).toMatchObject({ id: 4, ok: true });
  });

  it('answers a final request without newline after a half-close', async () => {
    server = await start();
    const c = await connect(server.address);
    c.sock.end('{"id":6,"cmd":"status"}');
    expect(await c.reply()).toMatchObject({ id: 6, ok: true });
    await c.closed;
  });

  it('a HomesError from a handler becomes its code, message and details', async () => {
    server = await start();
    mode = 'homes-error';
    const c = await connect(server.address);
    expect(await c.request({ id: 7, cmd: 'status' })).toEqual({
      id: 7,
      ok: false,
      code: 'NOT_FOUND',
      message: 'no such home',
      details: { home: 'acme/nope' },
    });
  });

  it('the reply waits for settle (what the command changed has reached the kernel\'s caches), success or refusal', async () => {
    let release: () => void = () => {};
    let settles = 0;
    server = await start({
      settle: () => {
        settles++;
        return new Promise<void>((r) => (release = r));
      },
    });
    const c = await connect(server.address);
    for (const m of ['ok', 'homes-error'] as const) {
      mode = m;
      const before = settles;
      let answered = false;
      const reply = c.request({ id: 1, cmd: 'status' }).then((r) => {
        answered = true;
        return r;
      });
      while (settles === before) await new Promise((r) => setTimeout(r, 5));
      // The handler is done; the settle is not: no reply yet (a few turns of the loop to be sure).
      for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
      expect(answered).toBe(false);
      release();
      expect((await reply).ok).toBe(m === 'ok');
    }
  });

  it('any other failure is INTERNAL with a generic message, logged at error with the stack', async () => {
    server = await start();
    mode = 'crash';
    const c = await connect(server.address);
    const r = await c.request({ id: 8, cmd: 'status' });
    expect(r).toMatchObject({ id: 8, ok: false, code: 'INTERNAL' });
    expect(JSON.stringify(r)).not.toContain('secret');
    const line = logLines.find((l) => l.level === 'error' && l.msg === 'control handler failed');
    expect((line?.err as { stack?: string } | undefined)?.stack).toContain('secret internal detail');
    mode = 'ok';
    expect(await c.request({ id: 9, cmd: 'status' })).toMatchObject({ id: 9, ok: true });
  });

  it('a handler exceeding requestTimeoutMs gets TIMEOUT; the connection keeps working', async () => {
    server = await start({ requestTimeoutMs: 200 });
    mode = 'hang';
    const c = await connect(server.address);
    const t0 = Date.now();
    expect(await c.request({ id: 10, cmd: 'status' })).toMatchObject({ id: 10, ok: false, code: 'TIMEOUT' });
    expect(Date.now() - t0).toBeLessThan(2000);
    mode = 'ok';
    expect(await c.request({ id: 11, cmd: 'status' })).toMatchObject({ id: 11, ok: true });
  });

  it('every code a reply can carry is documented', () => {
    expect(CONTROL_CODES).toEqual(expect.arrayContaining(['BAD_JSON', 'LINE_TOO_LONG', 'UNKNOWN_COMMAND', 'BAD_REQUEST', 'INTERNAL', 'TIMEOUT', ...HOMES_CODES]));
    const md = controlCodeTableMarkdown();
    for (const c of CONTROL_CODES) expect(md).toContain(`| \`${c}\` |`);
  });
});

describe('control server: slow, silent and hostile clients', () => {
  it('a silent client and a one-byte-per-100ms dribbler do not delay another client; both are dropped when idle', async () => {
    const server = await start({ idleTimeoutMs: 1500 });
    const silent = await connect(server.address);
    const dribbler = await connect(server.address);
    const payload = '{"id":"slow","cmd":"status"}';
    let sent = 0;
    const drip = setInterval(() => {
      if (dribbler.sock.destroyed) return;
      dribbler.send(payload[sent % payload.length]!);
      sent++;
    }, 100);
    try {
      await new Promise((r) => setTimeout(r, 300));
      const fast = await connect(server.address);
      expect(await fast.request({ id: 'fast', cmd: 'status' })).toMatchObject({ id: 'fast', ok: true });
      // Answered while both slow clients still hold their connections (they are dropped only when idle).
      expect([silent.sock.destroyed, dribbler.sock.destroyed]).toEqual([false, false]);
      // Neither the silent client nor the dribbler completes a line: both are closed.
      await Promise.all([silent.closed, dribbler.closed]);
      expect(sent).toBeGreaterThan(5);
      // ...while a client that keeps sending complete lines stays.
      expect(fast.sock.destroyed).toBe(false);
    } finally {
      clearInterval(drip);
    }
  });

  it('200 connections sending random garbage get error replies; a valid status still answers', async () => {
    const server = await start({ maxLineBytes: 4096 });
    const allowed = new Set(['BAD_JSON', 'BAD_REQUEST', 'UNKNOWN_COMMAND', 'LINE_TOO_LONG', 'BUSY']);
    const fragments = ['{', '}', '"cmd"', ':', '"status"', '"args"', '[', ']', 'null', '1e999', '\\u0000', '"\u00e9"', '\n', ','];
    for (let round = 0; round < 10; round++) {
      await Promise.all(
        Array.from({ length: 20 }, async (_, i) => {
          const c = await connect(server.address);
          const parts: Buffer[] = [Buffer.from('#')]; // never a blank (ignored) first line
          const n = 1 + ((round * 20 + i) % 12);
          for (let k = 0; k < n; k++) {
            parts.push(k % 2 === 0 ? randomBytes(1 + (k * 37) % 300) : Buffer.from(fragments[(k * 7 + i) % fragments.length]!));
          }
          if ((round + i) % 5 === 0) parts.push(Buffer.alloc(6000, 0x41)); // over-long
          parts.push(Buffer.from('\n'));
          c.sock.end(Buffer.concat(parts));
          await c.closed;
          const replies = c.drain();
          expect(replies.length).toBeGreaterThan(0);
          for (const r of replies) {
            expect(r.ok).toBe(false);
            expect(allowed.has((r as { code: string }).code), JSON.stringify(r)).toBe(true);
          }
        }),
      );
    }
    const probe = await connect(server.address);
    probe.send(randomBytes(3000).toString('latin1').replace(/\n/g, ' ') + '\n');
    const r = await probe.reply();
    expect(r.ok).toBe(false);
    expect(allowed.has((r as { code: string }).code)).toBe(true);
    const ok = await connect(server.address);
    expect(await ok.request({ id: 'after', cmd: 'status' })).toMatchObject({ id: 'after', ok: true, data: STATUS });
  });

  it('every garbage line gets exactly one error reply', async () => {
    const server = await start({ maxLineBytes: 512 });
    const c = await connect(server.address);
    const lines = Array.from({ length: 100 }, (_, i) =>
      i % 10 === 0 ? 'z'.repeat(2000) : randomBytes(1 + (i % 50)).toString('latin1').replace(/[\n\r\s]/g, 'q'),
    );
    c.send(lines.join('\n') + '\n');
    for (let i = 0; i < lines.length; i++) {
      const r = await c.reply();
      expect(r.ok).toBe(false);
      expect(CONTROL_CODES).toContain((r as { code: string }).code);
    }
    expect(await c.request({ id: 'end', cmd: 'status' })).toMatchObject({ id: 'end', ok: true });
  });

  it('connections beyond maxConnections get one BUSY line and are closed; others are unaffected', async () => {
    const server = await start({ maxConnections: 2 });
    const a = await connect(server.address);
    const b = await connect(server.address);
    const c = await connect(server.address);
    expect(await c.reply()).toMatchObject({ ok: false, code: 'BUSY' });
    await c.closed;
    expect(await a.request({ id: 1, cmd: 'status' })).toMatchObject({ ok: true });
    b.close();
    await b.closed;
    // A slot frees up once a connection is gone.
    await new Promise((r) => setTimeout(r, 50));
    const d = await connect(server.address);
    expect(await d.request({ id: 2, cmd: 'status' })).toMatchObject({ ok: true });
  });
});

describe('control server: socket file and directory', () => {
  it('creates the parent directory 0700 and gives the socket the asked mode', async () => {
    const server = await start({ socketMode: 0o600 }, 'fresh/nested');
    expect((await stat(path.dirname(server.address))).mode & 0o7777).toBe(0o700);
    const st = await lstat(server.address);
    expect(st.isSocket()).toBe(true);
    expect(st.mode & 0o777).toBe(0o600);
    await server.close();
    await expect(lstat(server.address)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('narrows an existing directory to 0700 and applies 0660 + group', async () => {
    const dir = path.join(tmp, 'wide');
    await mkdir(dir, { mode: 0o755 });
    await chmod(dir, 0o755);
    const gid = process.getgid!();
    const server = await start({ socketMode: 0o660, socketGroup: gid, dirMode: 0o700 }, 'wide');
    expect((await stat(dir)).mode & 0o7777).toBe(0o700);
    const st = await lstat(server.address);
    expect(st.mode & 0o777).toBe(0o660);
    expect(st.gid).toBe(gid);
  });

  it('defaults the directory to 0750 with the socket group', async () => {
    const gid = process.getgid!();
    const server = await start({ socketMode: 0o660, socketGroup: gid }, 'grp');
    const st = await stat(path.dirname(server.address));
    expect(st.mode & 0o7777).toBe(0o750);
    expect(st.gid).toBe(gid);
  });

  it('refuses modes that open the socket or directory to others', async () => {
    await expect(start({ socketMode: 0o666 }, 'm1')).rejects.toThrow(/grants too much/);
    await expect(start({ dirMode: 0o777 }, 'm2')).rejects.toThrow(/grants too much/);
  });

  it('replaces a stale socket left by a killed process', async () => {
    const dir = path.join(tmp, 'stale');
    await mkdir(dir, { mode: 0o700 });
    const sockPath = path.join(dir, 'admin.sock');
    const child = spawn(process.execPath, ['-e', `require('net').createServer().listen(${JSON.stringify(sockPath)}, () => console.log('ready'))`], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((resolve, reject) => {
      child.stdout.once('data', () => resolve());
      child.once('exit', (code) => reject(new Error(`listener exited ${code}`)));
    });
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    expect((await lstat(sockPath)).isSocket()).toBe(true);
    const server = await start({}, 'stale');
    const c = await connect(server.address);
    expect(await c.request({ id: 1, cmd: 'status' })).toMatchObject({ ok: true });
  });

  it('refuses to take over a socket another process is serving', async () => {
    const first = await start({}, 'live');
    await expect(start({}, 'live')).rejects.toThrow(/in use/);
    const c = await connect(first.address);
    expect(await c.request({ id: 1, cmd: 'status' })).toMatchObject({ ok: true });
  });

  it('refuses a symlink or a regular file at the socket path, and leaves them alone', async () => {
    const dir = path.join(tmp, 'link');
    await mkdir(dir, { mode: 0o700 });
    const target = path.join(tmp, 'victim');
    await writeFile(target, 'keep me');
    await symlink(target, path.join(dir, 'admin.sock'));
    await expect(start({}, 'link')).rejects.toThrow(/symlink/);
    expect((await lstat(path.join(dir, 'admin.sock'))).isSymbolicLink()).toBe(true);
    expect((await stat(target)).size).toBe(7);

    const dir2 = path.join(tmp, 'file');
    await mkdir(dir2, { mode: 0o700 });
    await writeFile(path.join(dir2, 'admin.sock'), 'x');
    await expect(start({}, 'file')).rejects.toThrow(/not a socket/);
  });

  it('refuses a symlinked or non-directory parent and a shared system directory', async () => {
    const real = path.join(tmp, 'realdir');
    await mkdir(real, { mode: 0o755 });
    await symlink(real, path.join(tmp, 'linkdir'));
    await expect(start({}, 'linkdir')).rejects.toThrow(/symlink/);
    expect((await stat(real)).mode & 0o777).toBe(0o755);

    await writeFile(path.join(tmp, 'plainfile'), '');
    await expect(start({}, 'plainfile')).rejects.toThrow(/not a directory/);

    const shared = path.join(tmp, 'sticky');
    await mkdir(shared);
    await chmod(shared, 0o1777);
    await expect(start({}, 'sticky')).rejects.toThrow(/shared/);
    expect((await stat(shared)).mode & 0o7777).toBe(0o1777);

    await expect(
      startControlServer({ socketPath: '/tmp/homesfs-test-should-not-exist.sock', socketMode: 0o600, commands, ...fakeTargets(api), log }),
    ).rejects.toThrow(/dedicated directory/);
  });

  it('controlRequest reports a missing socket as a connect error', async () => {
    await expect(controlRequest(path.join(tmp, 'nowhere.sock'), { cmd: 'status' }, { timeoutMs: 1000 })).rejects.toSatisfy(
      (e: unknown) => e instanceof ControlClientError && e.kind === 'connect',
    );
  });

  it('controlRequest times out cleanly against a server that never answers', async () => {
    const dir = path.join(tmp, 'mute');
    await mkdir(dir, { mode: 0o700 });
    const mute = net.createServer((s) => s.resume()); // reads, never answers
    await new Promise<void>((r) => mute.listen(path.join(dir, 's.sock'), r));
    try {
      const t0 = Date.now();
      await expect(controlRequest(path.join(dir, 's.sock'), { cmd: 'status' }, { timeoutMs: 300 })).rejects.toSatisfy(
        (e: unknown) => e instanceof ControlClientError && e.kind === 'timeout',
      );
      expect(Date.now() - t0).toBeLessThan(2000);
    } finally {
      await new Promise<void>((r) => mute.close(() => r()));
    }
  });
});
