import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, skipReason, startDaemon, SYSTEM_PATH, type RunningDaemon } from '../helpers/daemon.js';
import { pyAs } from '../helpers/neighbour.js';
import { ownerRange } from '../helpers/owner-ids.js';

/**
 * Two crashes in a row, the second before the resumed daemon's registration
 * reached its keeper: the keeper still holds the first daemon's
 * registration (its epoch), while the kernel holds handles of the second.
 * The third daemon must not take the second's epoch for its own: its handle
 * numbers restart at 1, and one home's new descriptors would be the other
 * home's old ones. The keeper is a fake systemd fd store
 * (fixtures/fdstore.py) frozen after the first crash, which is exactly what
 * a second daemon that died before its registration leaves (no timing: the
 * window is held open, every run).
 */

const OWNERS = ownerRange(import.meta.filename);
const A = { uid: OWNERS.from + 1, gid: OWNERS.from + 1 };
const B = { uid: OWNERS.from + 2, gid: OWNERS.from + 2 };
const HA = 'epa/work';
const HB = 'epb/work';
const FIXTURE = join(import.meta.dirname, 'fixtures', 'fdstore.py');
const FILES = 12;

if (!canMount) console.warn(`crash-epochs integration suite skipped: ${skipReason}`);

/**
 * A process of `who` that holds descriptors: `open DIR PREFIX N` opens
 * PREFIX0..N-1 read-write (opens the session hands to JavaScript, whose handle numbers start at 1 in every daemon) and keeps them; `read` answers what each kept
 * descriptor reads at offset 0 (or its errno).
 */
const AGENT = `import json, os, sys
fds = []
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == 'open':
        for i in range(int(cmd[3])):
            fds.append((cmd[2] + str(i), os.open(os.path.join(cmd[1], cmd[2] + str(i)), os.O_RDWR)))
        print(json.dumps({'opened': len(fds)}), flush=True)
    elif cmd[0] == 'read':
        out = {}
        for name, fd in fds:
            try:
                out[name] = os.pread(fd, 64, 0).decode()
            except OSError as e:
                out[name] = 'errno %d' % e.errno
        print(json.dumps(out), flush=True)
`;

interface Agent {
  proc: ChildProcess;
  ask(line: string): Promise<Record<string, unknown>>;
}

describe.skipIf(!canMount)('two crashes in a row: a resumed daemon never shares an epoch with another daemon of the session', () => {
  let tmp = '';
  let store: ChildProcess | null = null;
  let d: RunningDaemon | null = null;
  const agents: Agent[] = [];
  const notify = () => join(tmp, 'notify.sock');
  const ctl = () => join(tmp, 'ctl.sock');
  const freeze = () => join(tmp, 'freeze');

  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'homesfs-epochs-'));
    chmodSync(tmp, 0o777);
    store = spawn('python3', [FIXTURE, 'store', notify(), ctl()], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, FDSTORE_FREEZE: freeze() } });
    await new Promise<void>((resolve) => createInterface({ input: store!.stdout! }).on('line', (l) => (JSON.parse(l) as { listening?: boolean }).listening && resolve()));
  }, 30_000);

  afterAll(async () => {
    for (const a of agents) a.proc.kill('SIGKILL');
    rmSync(freeze(), { force: true });
    await d?.stopKeep();
    // The store's copies keep a killed daemon's mount waiting: they go before the clean-up.
    store?.kill('SIGKILL');
    await d?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  const agent = (who: { uid: number; gid: number }): Agent => {
    const script = join(tmp, `agent${who.uid}.py`);
    writeFileSync(script, AGENT, { mode: 0o644 });
    const proc = spawn('setpriv', [`--reuid=${who.uid}`, `--regid=${who.gid}`, '--clear-groups', 'python3', script], { env: { PATH: SYSTEM_PATH }, stdio: ['pipe', 'pipe', 'inherit'] });
    const lines = createInterface({ input: proc.stdout! });
    const waiting: Array<(v: Record<string, unknown>) => void> = [];
    lines.on('line', (l) => waiting.shift()?.(JSON.parse(l) as Record<string, unknown>));
    const a: Agent = {
      proc,
      ask: (line) =>
        new Promise((resolve) => {
          waiting.push(resolve);
          proc.stdin!.write(`${line}\n`);
        }),
    };
    agents.push(a);
    return a;
  };

  /** systemd's restart: the next daemon is handed what the store keeps */
  const restart = (prev: RunningDaemon) => startDaemon({ dir: prev.dir, fresh: false, wrap: ['python3', FIXTURE, 'launch', ctl()], env: { NOTIFY_SOCKET: notify(), FDSTORE_FREEZE: freeze() } });

  it("after a resumed daemon died before registering, the next one takes a new epoch: each home's descriptors read their own files", async () => {
    d = await startDaemon({
      awaitLedgers: true,
      homes: { [HA]: { owner: A, profile: 'home' }, [HB]: { owner: B, profile: 'home' } },
      create: [HA, HB],
      config: { owners: OWNERS, crashSurvival: true },
      env: { NOTIFY_SOCKET: notify() },
    });
    const homeA = d.home('epa', 'work');
    const homeB = d.home('epb', 'work');
    const seed = `import os, sys\nfor i in range(${FILES}):\n  open(os.path.join(sys.argv[1], sys.argv[2] + str(i)), 'w').write(sys.argv[3] + '-SECRET-' + str(i))\n`;
    await pyAs(tmp, A, seed, homeA, 'a', 'A');
    await pyAs(tmp, B, seed, homeB, 'b', 'B');
    const st = await d.status();
    expect(st.holder).toMatchObject({ keeper: 'systemd', registered: true });
    const first = (st.native as { handles: { epoch: number } }).handles.epoch;

    // First crash; from now on the store keeps the first daemon's registration, whatever comes.
    d.proc.kill('SIGKILL');
    await d.exited;
    writeFileSync(freeze(), '');
    d = await restart(d);
    const second = ((await d.status()).native as { handles: { epoch: number } }).handles.epoch;
    expect(second).not.toBe(first);
    // B's owner opens its files under the second daemon: the kernel holds handles of its epoch.
    const b = agent(B);
    expect(await b.ask(`open ${homeB} b ${FILES}`)).toEqual({ opened: FILES });
    // (not read yet: a read now would fill the kernel's page cache, and later reads would never reach a daemon)

    // Second crash, its registration never stored: the third daemon is handed the first's.
    d.proc.kill('SIGKILL');
    await d.exited;
    d = await restart(d);
    const third = ((await d.status()).native as { handles: { epoch: number } }).handles.epoch;
    expect([first, second]).not.toContain(third);
    const own = (who: string) => Object.fromEntries(Array.from({ length: FILES }, (_, i) => [`${who.toLowerCase()}${i}`, `${who}-SECRET-${i}`]));
    // A's owner opens its files under the third daemon: its handle numbers start again.
    const a = agent(A);
    expect(await a.ask(`open ${homeA} a ${FILES}`)).toEqual({ opened: FILES });
    expect(await a.ask('read')).toEqual(own('A'));
    // B's descriptors of the second daemon still read B's files, never A's.
    expect(await b.ask('read')).toEqual(own('B'));
    rmSync(freeze());
  }, 180_000);
});
