import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterEach, describe, expect, it } from 'vitest';
import { ROOT, runAsync } from '../helpers/daemon.js';

/**
 * The holder (src/holder/holder.ts) as a keeper: what it stores of a
 * registration, driven on its real socket by probe processes that register
 * as a daemon does (stand-in memfds for the session's descriptors: the holder
 * never reads them). No mount: a holder needs only root (both ends of its
 * socket check SO_PEERCRED) and the addon.
 *
 * - A registration whose sender is gone before the holder reads it is kept as
 *   dead, so the next start claims (and resumes) it rather than being refused
 *   for ever as if its daemon ran.
 * - A registration names its sender: one naming another pid (a living one, or
 *   a dead one whose number may be reused) cannot make a session look alive.
 * - A registration for another backing tree or mount never replaces the
 *   session held; one for the same tree (a successor, a resumed daemon) does.
 * - A release ends the session only from the registered daemon itself (the
 *   socket's peer), whatever pid the message names.
 */

const asRoot = process.getuid?.() === 0;
if (!asRoot) console.warn('holder keeper suite skipped: the holder answers root only');

const PROBE = `const { loadFuse } = await import(${JSON.stringify(join(ROOT, 'dist/fuse/binding.js'))});
const client = await import(${JSON.stringify(join(ROOT, 'dist/holder/client.js'))});
const [op, dir, backing, mount, namedPid, wait] = process.argv.slice(2);
const raw = loadFuse().native;
const config = { socket: dir + '/admin.sock', backing, mount };
let out = { pid: process.pid };
if (op === 'status') out.status = await client.holderStatus(raw, config);
else if (op === 'claim') {
  const r = await client.claim(raw, config);
  if (r.kind === 'kept') client.dropKept(r.kept);
  out.claim = r.kind === 'kept' ? { kind: 'kept', generation: r.kept.generation, backing: r.kept.backing } : r;
} else if (op === 'release') {
  // A release as any root process can send one: naming a pid, from a connection of its own.
  const fd = raw.hs_handover_connect(dir + '/holder.sock');
  if (fd < 0) throw new Error('connect: errno ' + -fd);
  const sent = raw.hs_handover_send(fd, Buffer.from(JSON.stringify({ op: 'release', protocol: 1, backing, mount, pid: Number(namedPid) })), [], 5000);
  if (sent < 0) throw new Error('send: errno ' + -sent);
  const r = raw.hs_handover_recv(fd, 5000);
  out.reply = r.res >= 0 ? JSON.parse(r.data.toString()) : { errno: -r.res };
} else {
  // As client.register sends it: the session's descriptor, INIT's, the journal's two.
  const fds = ['session', 'INIT', 'journal0', 'journal1'].map((s) => raw.hs_handover_memfd(Buffer.from(s)));
  const pid = namedPid === 'self' ? process.pid : Number(namedPid);
  const reg = { backing, mount, configPath: null, pid, generation: Number(op.slice('register'.length) || 1), epoch: 1, bufsize: 135168, build: 'probe' };
  const fd = raw.hs_handover_connect(dir + '/holder.sock');
  if (fd < 0) throw new Error('connect: errno ' + -fd);
  const sent = raw.hs_handover_send(fd, Buffer.from(JSON.stringify({ op: 'register', protocol: 1, reg, journal: 2 })), fds, 5000);
  if (sent < 0) throw new Error('send: errno ' + -sent);
  if (wait === 'wait' || wait === 'stay') {
    const r = raw.hs_handover_recv(fd, 5000);
    out.reply = r.res >= 0 ? JSON.parse(r.data.toString()) : { errno: -r.res };
  }
}
console.log(JSON.stringify(out));
if (wait === 'stay') {
  // A daemon that goes on serving: at a line on stdin it releases, as its stop does (client.release).
  for await (const line of (await import('node:readline')).createInterface({ input: process.stdin })) {
    const res = await client.release(raw, config).then(() => 'released', (e) => e.message);
    console.log(JSON.stringify({ release: res }));
    break;
  }
}
`;

interface Keeper {
  dir: string;
  holder: ChildProcess;
  log: string[];
  exited: Promise<void>;
}

let current: Keeper | null = null;

/** A holder of its own on a socket in a temporary directory, once it listens (its log line, on stderr). */
async function keeper(): Promise<Keeper> {
  const dir = mkdtempSync(join(tmpdir(), 'homesfs-keeper-'));
  writeFileSync(join(dir, 'probe.mjs'), PROBE);
  const holder = spawn(process.execPath, [join(ROOT, 'dist/holder/main.js'), '--socket', join(dir, 'holder.sock')], { stdio: ['ignore', 'ignore', 'pipe'] });
  const log: string[] = [];
  const exited = new Promise<void>((r) => holder.on('exit', () => r()));
  const k = { dir, holder, log, exited };
  current = k;
  await new Promise<void>((resolve, reject) => {
    holder.on('exit', (code) => reject(new Error(`the holder exited (${code}) before it listened: ${log.join('\n')}`)));
    createInterface({ input: holder.stderr! }).on('line', (l) => {
      log.push(l);
      if (l.includes('"holder listening"')) resolve();
    });
  });
  return k;
}

afterEach(async () => {
  const k = current;
  current = null;
  if (!k) return;
  if (k.holder.exitCode === null && k.holder.signalCode === null) {
    k.holder.kill('SIGCONT');
    k.holder.kill('SIGTERM');
    await k.exited;
  }
  rmSync(k.dir, { recursive: true, force: true });
});

type ProbeOut = { pid: number; reply?: Record<string, unknown>; status?: Record<string, unknown>; claim?: Record<string, unknown> };

async function probe(k: Keeper, op: string, tree: { backing?: string; mount?: string } = {}, namedPid = 'self', wait = 'wait'): Promise<ProbeOut> {
  const r = await runAsync(process.execPath, [join(k.dir, 'probe.mjs'), op, k.dir, tree.backing ?? join(k.dir, 'backing'), tree.mount ?? join(k.dir, 'mount'), namedPid, wait]);
  if (r.code !== 0) throw new Error(`probe ${op} failed (${r.code}): ${r.stderr}`);
  return JSON.parse(r.stdout) as ProbeOut;
}

/** The kernel's state letter of a process (T: stopped). */
const state = (pid: number) => /^State:\s+(\S)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];

async function stopped(pid: number): Promise<void> {
  process.kill(pid, 'SIGSTOP');
  // SIGSTOP is queued, not yet acted on, when kill returns: the kernel's own account says when it is.
  // (A bound, not a measure: a loaded machine may take a while to run the holder into its stop.)
  for (const end = Date.now() + 10_000; state(pid) !== 'T' && Date.now() < end; ) await new Promise((r) => setTimeout(r, 5));
  expect(state(pid)).toBe('T');
}

describe.skipIf(!asRoot)('the holder as a keeper: the living from the dead, and one tree', () => {
  it('a registration whose daemon is gone before the holder reads it is kept as dead: the next start claims it', async () => {
    const k = await keeper();
    const holderPid = k.holder.pid!;
    // The holder stopped: the registration waits in its socket until its sender has exited (and been reaped).
    await stopped(holderPid);
    const gone = await probe(k, 'register', {}, 'self', 'no-wait');
    process.kill(holderPid, 'SIGCONT');
    // Connections are served one at a time in the order they came: the registration first.
    const st = await probe(k, 'status');
    expect(st.status).toMatchObject({ holder: holderPid, registered: true, daemonPid: gone.pid, daemonAlive: false, generation: 1 });
    expect(k.log.some((l) => l.includes('already gone'))).toBe(true);
    // Not "the registered daemon runs" (which refused every start until the holder was killed).
    expect((await probe(k, 'claim')).claim).toEqual({ kind: 'kept', generation: 1, backing: join(k.dir, 'backing') });
    expect(k.holder.exitCode).toBeNull();
  });

  it('a registration naming another process than its sender is refused: no pid, living or dead, makes a session look alive', async () => {
    const k = await keeper();
    // pid 1 lives for ever; the pid of an exited probe is dead, and may be reused by anything.
    const dead = (await probe(k, 'status')).pid;
    for (const named of ['1', String(dead)]) {
      const r = await probe(k, 'register', {}, named);
      expect(r.reply).toEqual({ refused: `the registration names pid ${named} but comes from pid ${r.pid}: a daemon registers itself` });
    }
    expect((await probe(k, 'status')).status).toMatchObject({ registered: false, daemonPid: null });
    expect((await probe(k, 'claim')).claim).toEqual({ kind: 'none' });
    // Its own pid: kept, and alive while the sender lives (it waits for the reply, so it did when read).
    const own = await probe(k, 'register', {}, 'self');
    expect(own.reply).toEqual({ ok: true });
  });

  it('a release is the registered daemon\'s own: another process naming its pid ends nothing, the daemon itself does', async () => {
    const k = await keeper();
    const script = join(k.dir, 'probe.mjs');
    const daemon = spawn(process.execPath, [script, 'register', k.dir, join(k.dir, 'backing'), join(k.dir, 'mount'), 'self', 'stay'], { stdio: ['pipe', 'pipe', 'inherit'] });
    try {
      const lines = createInterface({ input: daemon.stdout! })[Symbol.asyncIterator]();
      const reg = JSON.parse((await lines.next()).value as string) as ProbeOut;
      expect(reg.reply).toEqual({ ok: true });
      // Another root process names the registered (living) daemon's pid.
      const forged = await probe(k, 'release', {}, String(reg.pid));
      expect(forged.reply).toEqual({ refused: `pid ${forged.pid} is not the registered daemon (${reg.pid})` });
      expect(k.holder.exitCode).toBeNull();
      expect((await probe(k, 'status')).status).toMatchObject({ registered: true, daemonPid: reg.pid, daemonAlive: true });
      // The daemon itself, as its stop does: the holder leaves.
      daemon.stdin!.write('release\n');
      expect(JSON.parse((await lines.next()).value as string)).toEqual({ release: 'released' });
      await k.exited;
      expect(k.log.some((l) => l.includes(`released by the daemon (pid ${reg.pid})`))).toBe(true);
    } finally {
      daemon.kill();
    }
  });

  it('a registration for another backing tree or mount never replaces the session held; one for the same tree does', async () => {
    const k = await keeper();
    expect((await probe(k, 'register1')).reply).toEqual({ ok: true });
    const otherBacking = await probe(k, 'register2', { backing: join(k.dir, 'other-backing') });
    expect(String(otherBacking.reply?.refused)).toMatch(/^this holder keeps the session of another tree: backing .*other-backing is not the held session's/);
    const otherMount = await probe(k, 'register2', { mount: join(k.dir, 'other-mount') });
    expect(String(otherMount.reply?.refused)).toMatch(/^this holder keeps the session of another tree: mount .*other-mount is not the held session's/);
    expect((await probe(k, 'status')).status).toMatchObject({ registered: true, generation: 1, mount: join(k.dir, 'mount') });
    // The held session's claimers see it, another tree's are refused.
    expect((await probe(k, 'claim', { backing: join(k.dir, 'other-backing') })).claim).toMatchObject({ kind: 'refused' });
    // The same tree (a successor; a resumed daemon) replaces it.
    const same = await probe(k, 'register3');
    expect(same.reply).toEqual({ ok: true });
    expect((await probe(k, 'status')).status).toMatchObject({ registered: true, generation: 3, daemonPid: same.pid, mount: join(k.dir, 'mount') });
  });
});
