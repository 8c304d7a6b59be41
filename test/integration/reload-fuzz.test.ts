import { connect } from 'node:net';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HOMESCTL, canMount, runAs, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';

if (!canMount) console.warn(`reload/fuzz integration suite skipped: ${skipReason}`);

/** this file's own owner ids (helpers/owner-ids.ts) */
const BASE = ownerRange(import.meta.filename).from;
const OWNER = { uid: BASE + 31, gid: BASE + 31 };

/** The built-in `home` profile with other numbers, as a config entry. */
const profile = (over: Record<string, unknown>) => ({ ...BUILTIN_PROFILES.home, ...over });

/** Send raw lines on a fresh connection; collect reply lines until `expect` replies or a deadline. */
function sendRaw(socket: string, payload: Buffer, expectReplies: number, timeoutMs = 10_000): Promise<string[]> {
  return new Promise((resolve) => {
    const c = connect(socket);
    let buf = '';
    const replies: string[] = [];
    const done = () => {
      clearTimeout(t);
      c.destroy();
      resolve(replies);
    };
    const t = setTimeout(done, timeoutMs);
    c.on('data', (d) => {
      buf += d.toString('utf8');
      const parts = buf.split('\n');
      buf = parts.pop()!;
      replies.push(...parts.filter((p) => p.length > 0));
      if (replies.length >= expectReplies) done();
    });
    c.on('error', done);
    c.on('connect', () => c.write(payload));
  });
}

describe.skipIf(!canMount)('config reload and a fuzzed control socket on a live daemon', () => {
  let d: RunningDaemon;
  let configPath: string;

  beforeAll(async () => {
    d = await startDaemon({
      create: ['acme/p1', 'acme/p2', 'beta/p3'],
      homes: { 'acme/p1': { owner: OWNER, profile: 'tiny' }, 'acme/p2': { owner: { uid: OWNER.uid + 2, gid: OWNER.gid + 2 } }, 'beta/p3': { owner: { uid: OWNER.uid + 1, gid: OWNER.gid + 1 } } },
      config: {
        profiles: { tiny: profile({ maxHomeBytes: 100000 }), roomy: profile({ maxHomeBytes: 300000 }) },
        tenants: { beta: { defaultProfile: 'roomy' } },
      },
    });
    configPath = join(d.dir, 'config.json');
  });

  afterAll(async () => {
    await d?.stop();
  });

  const usage = async (home: string) => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'usage', home]);
    expect(r.code).toBe(0);
    return JSON.parse(r.stdout) as { profile: string; profileSource: string; budget: number };
  };

  it('applies profile precedence: override > home entry > tenant default > default', async () => {
    expect(await usage('acme/p1')).toMatchObject({ profile: 'tiny', profileSource: 'home', budget: 100000 });
    expect(await usage('beta/p3')).toMatchObject({ profile: 'roomy', profileSource: 'tenant', budget: 300000 });
    expect(await usage('acme/p2')).toMatchObject({ profile: 'home', profileSource: 'default' });
    await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, 'set-profile', 'acme/p1', 'roomy']);
    expect(await usage('acme/p1')).toMatchObject({ profile: 'roomy', profileSource: 'override', budget: 300000 });
    await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, 'set-profile', 'acme/p1', '--clear']);
    expect(await usage('acme/p1')).toMatchObject({ profile: 'tiny', profileSource: 'home' });
  });

  it('logs a budget refusal with size, budget, the ways out and the caller', async () => {
    const r = await runAs(OWNER.uid, OWNER.gid, `(head -c 200000 /dev/zero > ${d.home('acme', 'p1')}/big) 2>&1; echo rc=$?`);
    expect(r.stdout).toMatch(/Disk quota exceeded/);
    const line = await d.waitForLog((l) => l.code === 'QUOTA_EXCEEDED' && l.home === 'acme/p1');
    expect(line).toMatchObject({ level: 'warn', op: 'write', limit: 100000 });
    expect(String(line.waysOut)).toMatch(/clean up.*homesctl set-budget acme\/p1 SIZE\|off/);
    // an absolute path an admin can paste into a shell, not a mount-relative one
    expect(line.path).toBe(`${d.home('acme', 'p1')}/big`);
    expect((line.caller as { uid: number; comm?: string }).uid).toBe(OWNER.uid);
    expect(typeof line.current).toBe('number');
  });

  it('reloads a valid configuration on SIGHUP and applies it to live homes', async () => {
    const cfg = JSON.parse(readFileSync(configPath, 'utf8')) as Record<string, any>;
    cfg.profiles.tiny.maxHomeBytes = 150000;
    writeFileSync(configPath, JSON.stringify(cfg));
    d.proc.kill('SIGHUP');
    await d.waitForLog((l) => l.msg === 'configuration reloaded');
    expect(await usage('acme/p1')).toMatchObject({ budget: 150000 });
  });

  it('refuses a reload naming an unknown profile and keeps the old configuration', async () => {
    const cfg = JSON.parse(readFileSync(configPath, 'utf8')) as Record<string, any>;
    cfg.homes['acme/p2'].profile = 'does-not-exist';
    cfg.profiles.tiny.maxHomeBytes = 1;
    writeFileSync(configPath, JSON.stringify(cfg));
    d.proc.kill('SIGHUP');
    const refused = await d.waitForLog((l) => String(l.msg).startsWith('reload refused'));
    expect(JSON.stringify(refused)).toContain('does-not-exist');
    expect(await usage('acme/p1')).toMatchObject({ budget: 150000 });
    expect(await usage('acme/p2')).toMatchObject({ profile: 'home' });
    expect(d.proc.exitCode).toBeNull();
  });

  it('survives thousands of malformed and oversized messages on both sockets without any change', async () => {
    const platform = join(d.dir, 'platform', 'platform.sock');
    const list = async () => (await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'list'])).stdout;
    const before = { list: await list(), state: readFileSync(join(d.dir, 'state.json'), 'utf8') };
    const junk: string[] = [];
    const rnd = (n: number) => Math.floor(Math.random() * n);
    const cmds = ['create', 'delete-project', 'delete-user', 'rename-project', 'set-budget', 'set-profile', 'settings-set', 'resolve', 'rescan', 'nope'];
    for (let i = 0; i < 1500; i++) {
      switch (i % 6) {
        case 0:
          junk.push(Buffer.from(Array.from({ length: 1 + rnd(200) }, () => 32 + rnd(90))).toString('latin1').replace(/\n/g, ' '));
          break;
        case 1: // well-formed JSON, wrong shape
          junk.push(JSON.stringify({ cmd: cmds[rnd(cmds.length)], args: { home: rnd(2) ? 'acme' : 42, tenant: '../etc', project: '', bytes: -rnd(10), extra: true } }));
          break;
        case 2: // names that must never become paths
          junk.push(JSON.stringify({ cmd: 'create', args: { home: `acme/${['..', '.', '_x', 'a\\b', '\u0000', 'x'.repeat(300)][rnd(6)]}` } }));
          break;
        case 3:
          junk.push(JSON.stringify({ cmd: 'delete-project', args: { tenant: 'acme', project: 'p1', force: 'yes' } }));
          break;
        case 4:
          junk.push('{"cmd":"settings-set","args":{"tenant":"acme","homeScope":"everyone"}}');
          break;
        default:
          junk.push(`{"__proto__":{"polluted":1},"cmd":"list","args":{"constructor":{}}}`);
      }
    }
    for (const sock of [d.socket, platform]) {
      const replies = await sendRaw(sock, Buffer.from(junk.join('\n') + '\n'), junk.length, 60_000);
      expect(replies.length).toBe(junk.length);
      for (const r of replies) expect(JSON.parse(r).ok).toBe(false);
      // oversized line, invalid UTF-8, then a valid request on the same connection
      const big = Buffer.concat([Buffer.alloc(200_000, 0x61), Buffer.from('\n'), Buffer.from([0xff, 0xfe, 0x0a]), Buffer.from('{"id":7,"cmd":"status"}\n')]);
      const tail = await sendRaw(sock, big, 3);
      expect(tail.map((l) => JSON.parse(l).code ?? 'ok')).toEqual(['LINE_TOO_LONG', 'BAD_JSON', 'ok']);
    }
    expect(d.proc.exitCode).toBeNull();
    expect(await list()).toBe(before.list);
    expect(readFileSync(join(d.dir, 'state.json'), 'utf8')).toBe(before.state);
  });
});
