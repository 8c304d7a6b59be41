import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterEach, describe, expect, it } from 'vitest';
import { canMount, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';

/**
 * systemd's fd store as the keeper (src/holder/fdstore.ts,
 * native/src/handover/sdstore.c), at its edges, with the fake store of
 * fdstore.test.ts (fixtures/fdstore.py) in systemd's place:
 * - NOTIFY_SOCKET as systemd sets it for a service, an abstract name
 *   ('@/org/freedesktop/systemd1/notify/…'): the daemon stores its session
 *   there, by its own pid, and a plain stop empties the store.
 * - a store that passes back a session without its registration: the start
 *   refuses (exit 13) rather than taking it for nothing kept and mounting over
 *   a session something holds.
 */

const FIXTURE = join(import.meta.dirname, 'fixtures', 'fdstore.py');

if (!canMount) console.warn(`fd store keeper suite skipped: ${skipReason}`);

interface Store {
  tmp: string;
  notify: string;
  ctl: string;
  proc: ChildProcess;
  /** the store after each message, with its sender */
  notes: Array<{ msg: string; pid: number; store: Record<string, number> }>;
  /** resolves once a message satisfying `pred` came */
  until(what: string, pred: (n: Store['notes'][number]) => boolean): Promise<void>;
}

let stores: Store[] = [];
let daemons: RunningDaemon[] = [];

async function fakeStore(notify: (tmp: string) => string): Promise<Store> {
  const tmp = mkdtempSync(join(tmpdir(), 'homesfs-fdkeeper-'));
  const s: Store = { tmp, notify: notify(tmp), ctl: join(tmp, 'ctl.sock'), proc: null as unknown as ChildProcess, notes: [], until: null as unknown as Store['until'] };
  const waiters: Array<{ pred: (n: Store['notes'][number]) => boolean; done: () => void }> = [];
  s.until = (what, pred) =>
    s.notes.some(pred)
      ? Promise.resolve()
      : new Promise<void>((resolve, reject) => {
          const t = setTimeout(() => reject(new Error(`${what}: not seen; notes: ${JSON.stringify(s.notes.slice(-8))}`)), 30_000);
          waiters.push({ pred, done: () => (clearTimeout(t), resolve()) });
        });
  s.proc = spawn('python3', [FIXTURE, 'store', s.notify, s.ctl], { stdio: ['ignore', 'pipe', 'inherit'] });
  stores.push(s);
  await new Promise<void>((listening) => {
    createInterface({ input: s.proc.stdout! }).on('line', (l) => {
      const rec = JSON.parse(l) as Store['notes'][number] & { listening?: boolean };
      if (rec.listening) return listening();
      s.notes.push(rec);
      for (const w of [...waiters]) if (w.pred(rec)) waiters.splice(waiters.indexOf(w), 1), w.done();
    });
  });
  return s;
}

afterEach(async () => {
  for (const d of daemons) await d.stop();
  // The store's copies keep a killed daemon's mount waiting: they go with it.
  for (const s of stores) {
    s.proc.kill('SIGKILL');
    rmSync(s.tmp, { recursive: true, force: true });
  }
  daemons = [];
  stores = [];
});

const mounted = (p: string) =>
  readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((l) => l.split(' ')[4] === p);

describe.skipIf(!canMount)("systemd's fd store as the keeper, at its edges", () => {
  it('an abstract NOTIFY_SOCKET (as systemd sets it) gets the session stored, by the daemon itself; a plain stop empties it', async () => {
    const store = await fakeStore((tmp) => `@/homesfs-test/notify/${tmp.slice(-6)}-${process.pid}`);
    expect(store.notify.startsWith('@')).toBe(true);
    const d = await startDaemon({ create: ['t/h'], config: { crashSurvival: true }, env: { NOTIFY_SOCKET: store.notify } });
    daemons.push(d);
    // The daemon's word first (stored, or why not: the notify socket refused), then the store's.
    const told = await d.waitForLog((l) => l.msg === "session stored in systemd's fd store" || /is not registered with a holder or systemd's fd store/.test(l.msg));
    expect(told).toMatchObject({ msg: "session stored in systemd's fd store", notifySocket: store.notify });
    await store.until('the daemon stored its session', (n) => n.msg === 'FDSTORE=1\nFDNAME=homesfs-fuse');
    expect(store.notes[store.notes.length - 1]!.store).toEqual({ 'homesfs-fuse': 1, 'homesfs-registration': 1, 'homesfs-journal0': 1, 'homesfs-journal1': 1, 'homesfs-journal2': 1 });
    for (const n of store.notes) expect(n.pid).toBe(d.proc.pid);
    expect((await d.status()).holder).toMatchObject({ keeper: 'systemd', registered: true });
    expect(await d.stopKeep()).toBe(0);
    expect(store.notes[store.notes.length - 1]!.store).toEqual({});
  });

  it('a session passed back without its registration is refused (exit 13), never taken for nothing kept and mounted over', async () => {
    const store = await fakeStore((tmp) => join(tmp, 'notify.sock'));
    // What systemd would pass back: a /dev/fuse descriptor under the session's name, and no registration.
    const put = await runAsync('python3', [FIXTURE, 'put', store.notify, 'homesfs-fuse', '/dev/fuse']);
    expect(put.code, put.stderr).toBe(0);
    await store.until('the session stored', (n) => n.store['homesfs-fuse'] === 1);
    expect(store.notes[store.notes.length - 1]!.store).toEqual({ 'homesfs-fuse': 1 });
    // systemd's restart: the daemon gets the store's descriptors at 3.. (LISTEN_FDS, LISTEN_FDNAMES, LISTEN_PID).
    const dir = mkdtempSync(join(store.tmp, 'daemon-'));
    const started = startDaemon({ dir, fresh: true, create: ['t/h'], config: { crashSurvival: true }, wrap: ['python3', FIXTURE, 'launch', store.ctl], env: { NOTIFY_SOCKET: store.notify } });
    const outcome = await started.then(
      (d) => (daemons.push(d), { served: d.mount }),
      (err: Error) => ({ refused: err.message }),
    );
    expect(outcome).toMatchObject({ refused: expect.stringMatching(/daemon exited with 13 before the awaited log line/) });
    expect((outcome as { refused: string }).refused).toMatch(/fd store keeps a session this daemon refuses: systemd passed back a session without its registration/);
    // Nothing was mounted, and the store is as it was (the daemon stored and removed nothing).
    expect(mounted(join(dir, 'mnt'))).toBe(false);
    expect(store.notes.length).toBe(1);
  });
});
