import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterEach, describe, expect, it } from 'vitest';
import { canMount, HOMESFS, ROOT, runAsync, skipReason, startDaemon, SYSTEM_PATH, type RunningDaemon } from '../helpers/daemon.js';
import { startSuccessor } from '../helpers/takeover.js';
import { ownerRange } from '../helpers/owner-ids.js';

/**
 * The daemon registers its session again when the holder it registered with
 * goes away (src/holder/link.ts): with `holder: 'external'` (Kubernetes: the
 * pod's `holder` container runs it) it waits for the next holder to answer on
 * holder.sock and registers with it, so a crash after that is survived; with
 * `holder: 'spawn'` (a shell) it spawns the next one itself at once.
 */

const OWNERS = ownerRange(import.meta.filename);
const OWNER = { uid: OWNERS.from + 1, gid: OWNERS.from + 1 };
const T = 'rej';
const HOME = `${T}/work`;

if (!canMount) console.warn(`holder rejoin suite skipped: ${skipReason}`);

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const alive = (pid: number) => existsSync(`/proc/${pid}`) && !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'));

/** Until `cond` holds (a bound, not a measure: a loaded machine may be slow). */
async function until<T>(what: string, cond: () => T | undefined | false | Promise<T | undefined | false>, ms = 20_000): Promise<T> {
  for (const end = Date.now() + ms; ; await sleep(50)) {
    const v = await cond();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
  }
}

interface Holder {
  proc: ChildProcess;
  exited: Promise<void>;
  /** when it said it listens */
  listening: number;
}

/** A holder as the Kubernetes `holder` container runs it: started by someone else than the daemon, on its socket. */
async function externalHolder(run: string): Promise<Holder> {
  const proc = spawn(process.execPath, [join(ROOT, 'dist/holder/main.js'), '--socket', join(run, 'holder.sock')], { stdio: ['ignore', 'ignore', 'pipe'] });
  const exited = new Promise<void>((r) => proc.on('exit', () => r()));
  const log: string[] = [];
  const listening = await new Promise<number>((resolve, reject) => {
    proc.on('exit', (code) => reject(new Error(`the holder exited (${code}) before it listened: ${log.join('\n')}`)));
    createInterface({ input: proc.stderr! }).on('line', (l) => {
      log.push(l);
      if (l.includes('"holder listening"')) resolve(Date.now());
    });
  });
  return { proc, exited, listening };
}

interface Writer {
  done: Promise<{ errors: number; lastError: string; written: number; longestMs: number }>;
}

/** As the home's owner: a line appended and fsynced every 10 ms until the stop file, counting errors and the longest call. */
function writer(tmp: string, home: string): Writer {
  const script = join(tmp, 'writer.py');
  writeFileSync(
    script,
    `import os, sys, time, json\nhome, stop = sys.argv[1], sys.argv[2]\nerrors = 0\nlast = ''\nn = 0\nlongest = 0.0\n` +
      `fd = os.open(os.path.join(home, 'log'), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)\n` +
      `while not os.path.exists(stop):\n  t = time.monotonic()\n  try:\n    os.write(fd, b'line %08d\\n' % n)\n    os.fsync(fd)\n    n += 1\n  except OSError as e:\n    errors += 1\n    last = str(e)\n` +
      `  longest = max(longest, time.monotonic() - t)\n  time.sleep(0.01)\n` +
      `try:\n  os.close(fd)\nexcept OSError as e:\n  errors += 1\n  last = str(e)\n` +
      `print(json.dumps({'errors': errors, 'lastError': last, 'written': n, 'longestMs': round(longest * 1000, 1)}))\n`,
    { mode: 0o644 },
  );
  const done = runAsync('setpriv', [`--reuid=${OWNER.uid}`, `--regid=${OWNER.gid}`, '--clear-groups', 'python3', script, home, join(tmp, 'stop')], { env: { PATH: SYSTEM_PATH }, timeoutMs: 120_000 }).then((r) => {
    if (r.code !== 0) throw new Error(`writer failed (${r.code}): ${r.stderr}`);
    return JSON.parse(r.stdout.trim().split('\n').pop()!) as { errors: number; lastError: string; written: number; longestMs: number };
  });
  return { done };
}

type HolderStatus = { pid: number | null; registered: boolean; keeper?: string };
const holderOf = async (d: RunningDaemon) => ((await d.status()) as { holder: HolderStatus }).holder;

/** What each test leaves to clean: daemons, holders, the directory. */
const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

function killOnExit(pid: number | null | undefined): void {
  cleanup.push(() => {
    if (pid && alive(pid)) process.kill(pid, 'SIGKILL');
  });
}

describe.skipIf(!canMount)('the daemon registers again when its holder goes', () => {
  it("holder 'external': the holder it registered with goes, another starts on the socket, the daemon registers with it; a kill -9 after that is survived (writer: 0 errors)", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'homesfs-rejoin-'));
    chmodSync(dir, 0o755);
    const tmp = join(dir, 'agents');
    mkdirSync(tmp, { mode: 0o777 });
    chmodSync(tmp, 0o777);
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    cleanup.push(() => writeFileSync(join(tmp, 'stop'), ''));
    const run = join(dir, 'run');
    mkdirSync(run, { mode: 0o700 });
    // The first holder listens before the daemon starts (the pod's holder container, then the daemon's).
    const h1 = await externalHolder(run);
    killOnExit(h1.proc.pid);
    const d = await startDaemon({
      dir,
      fresh: true,
      awaitLedgers: true,
      homes: { [HOME]: { owner: OWNER, profile: 'home' } },
      create: [HOME],
      config: { owners: OWNERS, crashSurvival: true, holder: 'external' },
    });
    cleanup.push(async () => void (await d.stopKeep()));
    expect(await holderOf(d)).toMatchObject({ keeper: 'holder', pid: h1.proc.pid, registered: true });

    const w = writer(tmp, d.home(T, 'work'));
    const backingLog = join(d.backingOf(T, 'work'), 'log');
    const lines = () => (existsSync(backingLog) ? readFileSync(backingLog, 'utf8').split('\n').length - 1 : 0);
    await until('the writer writes', () => lines() > 20);

    // The holder goes (the old pod deleted: SIGTERM, its copy closed); the daemon notices and says so.
    const lostAt = Date.now();
    h1.proc.kill('SIGTERM');
    await h1.exited;
    // (soft: a daemon that never notices goes on to the crash below, which shows what that costs)
    await until('the daemon to notice the holder is gone', () => d.logs.find((l) => /the holder keeping the session is gone/.test(l.msg)), 10_000).catch((err: Error) =>
      expect.soft(err.message, 'the loss logged').toBe(''),
    );
    const noticedMs = Date.now() - lostAt;
    // It spawns none of its own: nobody answers until the next holder starts.
    await sleep(1000);
    expect(await holderOf(d)).toMatchObject({ pid: null, registered: false });

    // The holder container's loop starts the next one on the same socket.
    const h2 = await externalHolder(run);
    killOnExit(h2.proc.pid);
    const again = await until('the daemon to register again', () => d.logs.find((l) => l.msg === 'session registered with the holder again'), 15_000).catch((err: Error) => {
      expect.soft(err.message, 'registered again with the new holder').toBe('');
      return null;
    });
    const registeredMs = Date.now() - h2.listening;
    const st = await holderOf(d);
    expect.soft(st).toMatchObject({ pid: h2.proc.pid, registered: true });
    console.log(`holder lost: noticed ${noticedMs} ms after its SIGTERM; registered again ${registeredMs} ms after the next holder listened: ${JSON.stringify(again)}`);
    const written = lines();
    await until('the writer goes on', () => lines() > written + 20);

    // kill -9 under the writer; a plain start resumes from the second holder.
    const killedAt = Date.now();
    d.proc.kill('SIGKILL');
    await d.exited;
    const next = await startDaemon({ dir, fresh: false });
    cleanup.push(async () => void (await next.stopKeep()));
    const servingMs = Date.now() - killedAt;
    const resumed = next.logs.find((l) => l.msg === 'session resumed after a crash');
    console.log(`kill -9: serving again ${servingMs} ms after the kill; ${JSON.stringify(resumed ?? null)}`);
    expect.soft(resumed, 'the next start resumed the session kept by the second holder').toMatchObject({ keeper: 'holder', holder: h2.proc.pid });
    const after = lines();
    await until('the writer goes on after the crash', () => lines() > after + 20).catch(() => undefined);

    writeFileSync(join(tmp, 'stop'), '');
    const r = await w.done;
    console.log(`writer: ${JSON.stringify(r)}`);
    expect({ errors: r.errors, lastError: r.lastError }).toEqual({ errors: 0, lastError: '' });
    const got = readFileSync(backingLog, 'utf8').split('\n').filter(Boolean);
    expect(got.length).toBe(r.written);
    got.forEach((l, i) => expect(l).toBe(`line ${String(i).padStart(8, '0')}`));
    // The resumed daemon registered with the second holder; its plain stop releases it.
    expect(await holderOf(next)).toMatchObject({ pid: h2.proc.pid, registered: true });
    expect(await next.stopKeep()).toBe(0);
    await h2.exited;
  }, 120_000);

  it("holder 'spawn' (the default): a holder killed under a running daemon is replaced by the daemon at once, and the session registered with the new one", async () => {
    const d = await startDaemon({ create: [HOME], config: { crashSurvival: true } });
    cleanup.push(async () => void (await d.stop()));
    await d.waitForLog((l) => l.msg === 'session registered with the holder');
    const first = await holderOf(d);
    expect(first).toMatchObject({ registered: true });
    killOnExit(first.pid);
    const killedAt = Date.now();
    process.kill(first.pid!, 'SIGKILL');
    const again = await until('the daemon to register again', () => d.logs.find((l) => l.msg === 'session registered with the holder again'), 15_000);
    console.log(`spawn: registered again with a holder of its own ${Date.now() - killedAt} ms after the kill: ${JSON.stringify(again)}`);
    expect(d.logs.filter((l) => /the holder keeping the session is gone/.test(l.msg))).toHaveLength(1);
    expect(d.logs.filter((l) => l.msg === 'holder started')).toHaveLength(2);
    const second = await holderOf(d);
    expect(second).toMatchObject({ registered: true });
    expect(second.pid).not.toBe(first.pid);
    killOnExit(second.pid);
    // A plain stop releases the new one: no holder left.
    expect(await d.stopKeep()).toBe(0);
    await until('the second holder to exit', () => !alive(second.pid!));
  }, 60_000);

  it('a handover abandoned by its successor leaves the watch on: the holder killed after it is replaced as before', async () => {
    const d = await startDaemon({ create: [HOME], config: { crashSurvival: true } });
    cleanup.push(async () => void (await d.stop()));
    await d.waitForLog((l) => l.msg === 'session registered with the holder');
    // A successor that receives the session, then refuses its own configuration's owners (uid 1 is
    // a host account): the serving daemon takes its session back (takeover.test.ts).
    const bad = JSON.parse(readFileSync(join(d.dir, 'config.json'), 'utf8')) as { homes: Record<string, unknown> };
    bad.homes['rej/evil'] = { owner: { uid: 1, gid: 1 } };
    writeFileSync(join(d.dir, 'bad.json'), JSON.stringify(bad));
    const s = startSuccessor(HOMESFS, join(d.dir, 'bad.json'));
    expect(await s.exited).toBe(9);
    await d.waitForLog((l) => l.msg === 'handover abandoned: serving on');
    const first = await holderOf(d);
    expect(first).toMatchObject({ registered: true });
    killOnExit(first.pid);
    process.kill(first.pid!, 'SIGKILL');
    await until('the daemon to register again', () => d.logs.find((l) => l.msg === 'session registered with the holder again'), 15_000);
    const second = await holderOf(d);
    expect(second).toMatchObject({ registered: true });
    expect(second.pid).not.toBe(first.pid);
    killOnExit(second.pid);
  }, 60_000);
});
