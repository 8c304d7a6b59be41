import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { canMount, HOMESFS, ROOT, runAsync, skipReason, startDaemon, SYSTEM_PATH, type RunningDaemon } from '../helpers/daemon.js';
import { serving as successorServes, startSuccessor } from '../helpers/takeover.js';

/**
 * Crash survival: the holder (src/holder/) keeps a copy of the session's
 * /dev/fuse descriptor, so a daemon killed with SIGKILL leaves processes in
 * the mount waiting, not failing; a plain stop releases it; its socket
 * answers root only, refuses claims it must refuse, and survives garbage.
 */

if (!canMount) console.warn(`holder integration suite skipped: ${skipReason}`);

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const alive = (pid: number) => existsSync(`/proc/${pid}`) && !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'));
const mounted = (p: string) =>
  readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((l) => l.split(' ')[4] === p);

/** Until `cond` holds (a bound, not a measure: a loaded machine may be slow). */
async function until<T>(what: string, cond: () => T | undefined | false, ms = 20_000): Promise<T> {
  for (const end = Date.now() + ms; ; await sleep(50)) {
    const v = cond();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
  }
}

/** A daemon with crash survival, its session registered; its holder's pid. */
async function serving(): Promise<{ d: RunningDaemon; holder: number; run: string }> {
  const d = await startDaemon({ create: ['t/h'], config: { crashSurvival: true, fuse: { attrTimeout: 0, entryTimeout: 0 } } });
  await d.waitForLog((l) => l.msg === 'session registered with the holder');
  const st = (await d.status()) as { holder?: { pid: number | null; registered: boolean } };
  expect(st.holder?.registered).toBe(true);
  const holder = st.holder!.pid!;
  expect(alive(holder)).toBe(true);
  return { d, holder, run: join(d.dir, 'run') };
}

/** The holder's socket spoken from a child process (raw: the test process never loads the addon). */
function probe(d: RunningDaemon, op: 'status' | 'claim' | 'garbage' | 'bogus', opts: { backing?: string; uid?: number } = {}): Promise<Record<string, unknown>> {
  const script = join(d.dir, 'probe.mjs');
  writeFileSync(
    script,
    `const { loadFuse } = await import(${JSON.stringify(join(ROOT, 'dist/fuse/binding.js'))});
const client = await import(${JSON.stringify(join(ROOT, 'dist/holder/client.js'))});
const [op, socket, backing, mount] = process.argv.slice(2);
const raw = loadFuse().native;
const config = { socket, backing, mount };
const sock = socket.replace(/admin\\.sock$/, 'holder.sock');
let out;
try {
  if (op === 'status') out = await client.holderStatus(raw, config);
  else if (op === 'claim') {
    const r = await client.claim(raw, config);
    if (r.kind === 'kept') client.dropKept(r.kept);
    out = r.kind === 'kept' ? { kind: 'kept' } : r;
  } else {
    const fd = raw.hs_handover_connect(sock);
    if (fd < 0) throw new Error('connect: errno ' + -fd);
    const body = op === 'garbage' ? Buffer.from([0, 0xff, 0x7b, 0x0a]) : Buffer.from(JSON.stringify({ op: 'bogus', protocol: 1 }));
    const sent = raw.hs_handover_send(fd, body, [], 5000);
    if (sent < 0) throw new Error('send: errno ' + -sent);
    const r = raw.hs_handover_recv(fd, 5000);
    out = r.res >= 0 ? JSON.parse(r.data.toString()) : { errno: -r.res };
  }
} catch (e) {
  out = { threw: e.message };
}
console.log(JSON.stringify(out));
`,
    { mode: 0o644 },
  );
  const args = [script, op, d.socket, opts.backing ?? d.backing, d.mount];
  const run =
    opts.uid === undefined
      ? runAsync(process.execPath, args)
      : runAsync('setpriv', [`--reuid=${opts.uid}`, `--regid=${opts.uid}`, '--clear-groups', process.execPath, ...args], { env: { PATH: SYSTEM_PATH } });
  return run.then((r) => {
    if (r.code !== 0) throw new Error(`probe ${op} failed: ${r.stderr}`);
    return JSON.parse(r.stdout) as Record<string, unknown>;
  });
}

const holderLog = (run: string) => (existsSync(join(run, 'holder.log')) ? readFileSync(join(run, 'holder.log'), 'utf8') : '');

describe.skipIf(!canMount)('session holder', () => {
  it('kill -9 of the daemon: a stat in the mount waits while the holder lives, and gets ENOTCONN once the holder is gone too', async () => {
    const { d, holder, run } = await serving();
    let stat: ReturnType<typeof spawn> | null = null;
    try {
      writeFileSync(join(d.home('t', 'h'), 'f'), 'kept');
      d.proc.kill('SIGKILL');
      await d.exited;
      await until('the holder to see the daemon die', () => holderLog(run).includes('the daemon died'));
      expect(alive(holder)).toBe(true);

      stat = spawn('stat', [join(d.home('t', 'h'), 'f')], { stdio: ['ignore', 'pipe', 'pipe'] });
      let err = '';
      stat.stderr!.on('data', (b: Buffer) => (err += b.toString()));
      const statExit = new Promise<number | null>((r) => stat!.on('exit', (code) => r(code)));
      // Blocked: after a moment it has neither answered nor failed (ENOTCONN would be at once).
      await sleep(1000);
      expect(stat.exitCode, err).toBeNull();

      // (a start now would resume it: takeover.test.ts; here nobody does, and the holder goes)
      expect(alive(holder)).toBe(true);

      process.kill(holder, 'SIGTERM');
      const code = await statExit;
      expect(code).not.toBe(0);
      expect(err).toMatch(/Transport endpoint is not connected|Software caused connection abort/);
      await until('the holder to exit', () => !alive(holder));
      expect(existsSync(join(run, 'holder.sock'))).toBe(false);
      expect(spawnSync('umount', ['-l', d.mount]).status).toBe(0);
      expect(mounted(d.mount)).toBe(false);
    } finally {
      if (alive(holder)) process.kill(holder, 'SIGKILL');
      if (stat?.exitCode === null) stat.kill('SIGKILL');
      await d.stop();
    }
  }, 90_000);

  it('a plain stop (SIGTERM) releases the holder: no holder process and no socket are left', async () => {
    const { d, holder, run } = await serving();
    try {
      expect(existsSync(join(run, 'holder.sock'))).toBe(true);
      expect(await d.stopKeep()).toBe(0);
      await until('the holder to exit', () => !alive(holder));
      expect(existsSync(join(run, 'holder.sock'))).toBe(false);
      // Released by the daemon, before the unmount (not merely gone with the session).
      expect(holderLog(run)).toMatch(/released by the daemon/);
      expect(d.logs.some((l) => /holder could not be released/.test(l.msg))).toBe(false);
    } finally {
      if (alive(holder)) process.kill(holder, 'SIGKILL');
      await d.stop();
    }
  });

  it('a live upgrade does not release the holder: the successor registers with the same one', async () => {
    const { d, holder, run } = await serving();
    const s = startSuccessor(HOMESFS, join(d.dir, 'config.json'));
    try {
      await successorServes(s);
      await until('the successor to register', () => s.logs.some((l) => l.msg === 'session registered with the holder'));
      expect(await d.exited).toBe(0);
      expect(alive(holder)).toBe(true);
      expect(await probe(d, 'status')).toMatchObject({ holder, registered: true, daemonPid: s.proc.pid, daemonAlive: true, generation: 2 });
      expect(holderLog(run)).not.toMatch(/released by the daemon/);
      // The successor's plain stop releases it.
      s.proc.kill('SIGTERM');
      expect(await s.exited).toBe(0);
      await until('the holder to exit', () => !alive(holder));
      expect(holderLog(run)).toMatch(new RegExp(`released by the daemon \\(pid ${s.proc.pid}\\)`));
    } finally {
      if (s.proc.exitCode === null) s.proc.kill('SIGTERM');
      await s.exited;
      if (alive(holder)) process.kill(holder, 'SIGKILL');
      await d.stop();
    }
  });

  it('answers root only, refuses claims for another backing or while the registered daemon runs, and lives on after garbage', async () => {
    const { d, holder, run } = await serving();
    try {
      // Another uid may reach the socket here (the test opens its directory and file); the holder still refuses it.
      chmodSync(run, 0o711);
      chmodSync(join(run, 'holder.sock'), 0o666);
      const nobody = await probe(d, 'status', { uid: 65534 });
      expect(nobody.threw).toBeDefined();
      expect(nobody.holder).toBeUndefined();
      await until('the refusal in the holder log', () => holderLog(run).includes('not root was refused'));

      const other = await probe(d, 'claim', { backing: join(d.dir, 'other-backing') });
      expect(other.kind).toBe('refused');
      expect(String(other.reason)).toMatch(/^backing .* is not the held session's/);

      const live = await probe(d, 'claim');
      expect(live.kind).toBe('refused');
      expect(String(live.reason)).toContain(`pid ${d.proc.pid}) still runs`);

      const garbage = await probe(d, 'garbage');
      expect(String(garbage.error)).toMatch(/not JSON/);
      const bogus = await probe(d, 'bogus');
      expect(String(bogus.error)).toMatch(/not a holder request/);

      const st = await probe(d, 'status');
      expect(st).toMatchObject({ holder, registered: true, daemonPid: d.proc.pid, daemonAlive: true });
      expect(alive(holder)).toBe(true);
    } finally {
      await d.stop();
      await until('the holder to exit', () => !alive(holder)).catch(() => process.kill(holder, 'SIGKILL'));
    }
  });
});
