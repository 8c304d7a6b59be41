import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, HOMESCTL, HOMESFS, runAsync, skipReason, startDaemon, SYSTEM_PATH, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { serving, startSuccessor, type Successor } from '../helpers/takeover.js';

/**
 * Crash survival under systemd: the daemon keeps its session in systemd's
 * file descriptor store (FDSTORE=1 on $NOTIFY_SOCKET) instead of a holder
 * process, and the next start resumes from what systemd passes back
 * (LISTEN_FDS, LISTEN_FDNAMES, LISTEN_PID). No systemd runs here: a fake
 * store (fixtures/fdstore.py) keeps the descriptors as systemd does and
 * launches the next daemon with them, as systemd's restart would.
 */

const OWNERS = ownerRange(import.meta.filename);
const OWNER = { uid: OWNERS.from + 1, gid: OWNERS.from + 1 };
const T = 'fds';
const HOME = `${T}/work`;
const FIXTURE = join(import.meta.dirname, 'fixtures', 'fdstore.py');

if (!canMount) console.warn(`fd store integration suite skipped: ${skipReason}`);

interface Note {
  msg: string;
  pid: number;
  fds: number;
  truncated: boolean;
  store: Record<string, number>;
}

/** Processes whose command line names this file (the holder's main.js): none may run. */
function holders(): number[] {
  const out: number[] = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      if (readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('holder/main.js')) out.push(Number(p));
    } catch {
      /* gone */
    }
  }
  return out;
}

describe.skipIf(!canMount)("crash survival under systemd: the session in systemd's fd store", () => {
  let tmp = '';
  let d: RunningDaemon | null = null;
  let next: RunningDaemon | null = null;
  let successor: Successor | null = null;
  let store: ChildProcess | null = null;
  const notes: Note[] = [];
  const notifySock = () => join(tmp, 'notify.sock');
  const ctlSock = () => join(tmp, 'ctl.sock');
  const last = () => notes[notes.length - 1]?.store ?? {};

  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'homesfs-fdstore-'));
    chmodSync(tmp, 0o777);
    store = spawn('python3', [FIXTURE, 'store', notifySock(), ctlSock()], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((resolve) => {
      createInterface({ input: store!.stdout! }).on('line', (l) => {
        const rec = JSON.parse(l) as Note & { listening?: boolean };
        if (rec.listening) resolve();
        else notes.push(rec);
      });
    });
    d = await startDaemon({ awaitLedgers: true, homes: { [HOME]: { owner: OWNER, profile: 'home' } }, create: [HOME], config: { owners: OWNERS, crashSurvival: true }, env: { NOTIFY_SOCKET: notifySock() } });
  }, 60_000);

  afterAll(async () => {
    if (tmp) writeFileSync(join(tmp, 'stop'), '');
    await next?.stopKeep();
    if (successor && successor.proc.exitCode === null && successor.proc.signalCode === null) successor.proc.kill('SIGKILL');
    // The store's copies keep a killed daemon's mount waiting: they go with it.
    store?.kill('SIGKILL');
    await d?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  const until = async (what: string, cond: () => boolean): Promise<void> => {
    for (let i = 0; i < 200 && !cond(); i++) await new Promise((r) => setTimeout(r, 50));
    if (!cond()) throw new Error(`${what}; notes: ${JSON.stringify(notes.slice(-8))}`);
  };

  it('stores the session, its registration and its journal; after a SIGKILL the next start resumes from them (no agent error, every fsynced line there); a plain stop empties the store; no holder process ever', async () => {
    const first = d!;
    // Registered with the store, by the daemon's own pid, with no holder process.
    await until('the daemon stored its session', () => last()['homesfs-fuse'] === 1);
    expect(last()).toEqual({ 'homesfs-fuse': 1, 'homesfs-registration': 1, 'homesfs-journal0': 1, 'homesfs-journal1': 1, 'homesfs-journal2': 1 });
    for (const n of notes.filter((n) => n.msg.startsWith('FDSTORE=1'))) expect(n).toMatchObject({ pid: first.proc.pid, fds: 1, truncated: false });
    expect(holders()).toEqual([]);
    expect((await first.status()).holder).toMatchObject({ crashSurvival: true, keeper: 'systemd', pid: null, registered: true });
    expect((await runAsync(process.execPath, [HOMESCTL, '--socket', first.socket, 'status'])).stdout).toMatch(/Holder: +systemd's fd store, this session stored/);
    // The stored descriptor is the session's own /dev/fuse.
    const fuse = readdirSync(`/proc/${store!.pid}/fd`).filter((f) => {
      try {
        return readlinkSync(`/proc/${store!.pid}/fd/${f}`) === '/dev/fuse';
      } catch {
        return false;
      }
    });
    expect(fuse.length).toBe(1);

    // A writer at work in the home, as its owner: each line fsynced, counted, until the stop file.
    const home = first.home(T, 'work');
    const script = join(tmp, 'writer.py');
    writeFileSync(
      script,
      `import os, sys, time, json\nhome, stop = sys.argv[1], sys.argv[2]\nerrors = 0\nlast = ''\nn = 0\nfd = os.open(os.path.join(home, 'log'), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)\n` +
        `while not os.path.exists(stop):\n  try:\n    os.write(fd, b'line %08d\\n' % n)\n    os.fsync(fd)\n    n += 1\n  except OSError as e:\n    errors += 1\n    last = str(e)\n  time.sleep(0.01)\nos.close(fd)\n` +
        `open(os.path.join(home, 'written'), 'w').write(str(n))\nprint(json.dumps({'errors': errors, 'lastError': last, 'written': n}))\n`,
      { mode: 0o644 },
    );
    const writer = runAsync('setpriv', [`--reuid=${OWNER.uid}`, `--regid=${OWNER.gid}`, '--clear-groups', 'python3', script, home, join(tmp, 'stop')], { env: { PATH: SYSTEM_PATH }, timeoutMs: 120_000 });
    await until('the writer wrote', () => existsSync(join(first.backingOf(T, 'work'), 'log')) && readFileSync(join(first.backingOf(T, 'work'), 'log'), 'utf8').length > 100);

    // A live upgrade under systemd: the successor replaces the stored entries with its own
    // (removed first, by its pid); the old daemon exits 0 and leaves them (no removal at a handover).
    let before = notes.length;
    successor = startSuccessor(HOMESFS, join(first.dir, 'config.json'), true, { NOTIFY_SOCKET: notifySock() });
    expect(await serving(successor)).toBe(true);
    expect(await first.exited).toBe(0);
    await until('the successor stored its session', () => notes.slice(before).some((n) => n.msg === 'FDSTORE=1\nFDNAME=homesfs-fuse'));
    const theirs = notes.slice(before);
    expect(theirs.findIndex((n) => n.msg === 'FDSTOREREMOVE=1\nFDNAME=homesfs-fuse')).toBeLessThan(theirs.findIndex((n) => n.msg === 'FDSTORE=1\nFDNAME=homesfs-fuse'));
    for (const n of theirs.filter((n) => n.msg.startsWith('FDSTORE'))) expect(n.pid).toBe(successor.proc.pid);
    expect(last()).toEqual({ 'homesfs-fuse': 1, 'homesfs-registration': 1, 'homesfs-journal0': 1, 'homesfs-journal1': 1, 'homesfs-journal2': 1 });

    successor.proc.kill('SIGKILL');
    expect(await successor.exited).toBeNull();
    // A daemon of another mount is passed the stored session: it refuses (exit 13), never mounts over it.
    const other = join(tmp, 'other-mount.json');
    writeFileSync(other, JSON.stringify({ ...(JSON.parse(readFileSync(join(first.dir, 'config.json'), 'utf8')) as object), mount: join(tmp, 'elsewhere') }));
    const refused = await runAsync('python3', [FIXTURE, 'launch', ctlSock(), process.execPath, HOMESFS, 'serve', '--config', other], { env: { ...process.env, NOTIFY_SOCKET: notifySock() }, timeoutMs: 60_000 });
    expect(refused.code).toBe(13);
    expect(refused.stderr).toMatch(/fd store keeps a session this daemon refuses: mount .* is not the held session's/);
    // systemd's restart: the next daemon gets the stored descriptors at 3.. (the launcher execs it: its pid is LISTEN_PID).
    before = notes.length;
    next = await startDaemon({ dir: first.dir, fresh: false, wrap: ['python3', FIXTURE, 'launch', ctlSock()], env: { NOTIFY_SOCKET: notifySock() } });
    const resumed = next.logs.find((l) => l.msg === 'session resumed after a crash');
    expect(resumed).toMatchObject({ keeper: 'systemd' });
    const st = await next.status();
    expect(st.session).toMatchObject({ generation: 3, startMode: 'resumed' });
    expect(st.holder).toMatchObject({ keeper: 'systemd', registered: true });
    // It replaced the dead daemon's entries with its own (removed first), by its own pid.
    await until('the resumed daemon stored its session', () => notes.slice(before).some((n) => n.msg === 'FDSTORE=1\nFDNAME=homesfs-fuse'));
    const mine = notes.slice(before);
    expect(mine.findIndex((n) => n.msg === 'FDSTOREREMOVE=1\nFDNAME=homesfs-fuse')).toBeLessThan(mine.findIndex((n) => n.msg === 'FDSTORE=1\nFDNAME=homesfs-fuse'));
    for (const n of mine.filter((n) => n.msg.startsWith('FDSTORE'))) expect(n.pid).toBe(next.proc.pid);
    expect(last()).toEqual({ 'homesfs-fuse': 1, 'homesfs-registration': 1, 'homesfs-journal0': 1, 'homesfs-journal1': 1, 'homesfs-journal2': 1 });
    await new Promise((r) => setTimeout(r, 500));

    writeFileSync(join(tmp, 'stop'), '');
    const r = await writer;
    expect(r.code).toBe(0);
    const result = JSON.parse(r.stdout.trim().split('\n').pop()!) as { errors: number; lastError: string; written: number };
    console.log(`writer: ${JSON.stringify(result)}; resumed: ${JSON.stringify(resumed)}`);
    expect({ errors: result.errors, lastError: result.lastError }).toEqual({ errors: 0, lastError: '' });
    const lines = readFileSync(join(first.backingOf(T, 'work'), 'log'), 'utf8').split('\n').filter(Boolean);
    expect(lines.length).toBe(result.written);
    lines.forEach((l, i) => expect(l).toBe(`line ${String(i).padStart(8, '0')}`));

    // A plain stop: every entry removed from the store before the unmount, and no holder process.
    expect(await next.stopKeep()).toBe(0);
    await until('the store is empty', () => Object.keys(last()).length === 0);
    expect(holders()).toEqual([]);
    expect(readdirSync(`/proc/${store!.pid}/fd`).filter((f) => readlinkSync(`/proc/${store!.pid}/fd/${f}`) === '/dev/fuse')).toEqual([]);
    next = null;
  }, 180_000);
});
