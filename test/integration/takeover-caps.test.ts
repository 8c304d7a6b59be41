import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface, type Interface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, HOMESFS, skipReason, startDaemon, SYSTEM_PATH, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { serving, startSuccessor, type Successor } from '../helpers/takeover.js';

/**
 * A live upgrade hands every open file over with the uid that opened it
 * (src/fs/handover.ts): the successor counts them against that uid's cap
 * (limits.openFilesPerUid), as the predecessor did. An owner holding its
 * whole allowance across a takeover still meets EMFILE at its next open, and
 * another uid is not held by those files.
 */

const OWNERS = ownerRange(import.meta.filename);
const OWNER = { uid: OWNERS.from + 1, gid: OWNERS.from + 1 };
const OTHER = { uid: OWNERS.from + 2, gid: OWNERS.from + 2 };
const CAP = 12;
const T = 'caps';

if (!canMount) console.warn(`takeover caps suite skipped: ${skipReason}`);

/** A process of `who` holding `hold` files open in `home`; each line on its stdin is one step, answered with one line. */
interface Agent {
  proc: ChildProcess;
  step(cmd: 'open' | 'use'): Promise<string>;
}

const AGENT = `import errno, os, sys
home, hold = sys.argv[1], int(sys.argv[2])
held = [os.open(os.path.join(home, 'held%d' % i), os.O_RDWR | os.O_CREAT, 0o600) for i in range(hold)]
print('held %d' % len(held), flush=True)
n = 0
for line in sys.stdin:
  cmd = line.strip()
  try:
    if cmd == 'open':
      fd = os.open(os.path.join(home, 'more%d' % n), os.O_RDWR | os.O_CREAT, 0o600)
      n += 1
      os.close(fd)
      print('opened', flush=True)
    elif cmd == 'use':
      for i, fd in enumerate(held):
        os.pwrite(fd, b'%d' % i, 0)
        if os.pread(fd, 8, 0) != b'%d' % i: raise OSError(errno.EIO, 'held%d reads back wrong' % i)
      print('used %d' % len(held), flush=True)
  except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)), flush=True)
`;

function agent(script: string, who: { uid: number; gid: number }, home: string, hold: number): Promise<{ agent: Agent; first: string }> {
  const proc = spawn('setpriv', [`--reuid=${who.uid}`, `--regid=${who.gid}`, '--clear-groups', 'python3', script, home, String(hold)], { stdio: ['pipe', 'pipe', 'pipe'], env: { PATH: SYSTEM_PATH } });
  let err = '';
  proc.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const lines: Interface = createInterface({ input: proc.stdout! });
  const queue: string[] = [];
  const waiting: Array<(l: string) => void> = [];
  lines.on('line', (l) => (waiting.length > 0 ? waiting.shift()!(l) : queue.push(l)));
  const exited = new Promise<never>((_, reject) => proc.on('exit', (code) => reject(new Error(`the agent exited (${code}): ${err}`))));
  exited.catch(() => undefined);
  const next = () => Promise.race([queue.length > 0 ? Promise.resolve(queue.shift()!) : new Promise<string>((r) => waiting.push(r)), exited]);
  const a: Agent = {
    proc,
    step: (cmd) => {
      proc.stdin!.write(`${cmd}\n`);
      return next();
    },
  };
  return next().then((first) => ({ agent: a, first }));
}

describe.skipIf(!canMount)('a live upgrade keeps the per-uid open-file cap of the files it hands over', () => {
  let d: RunningDaemon | null = null;
  let s: Successor | null = null;
  const agents: Agent[] = [];

  beforeAll(async () => {
    d = await startDaemon({
      awaitLedgers: true,
      homes: { [`${T}/own`]: { owner: OWNER, profile: 'home' }, [`${T}/other`]: { owner: OTHER, profile: 'home' } },
      create: [`${T}/own`, `${T}/other`],
      config: { owners: OWNERS, limits: { openFilesPerUid: CAP } },
    });
    writeFileSync(join(d.dir, 'agent.py'), AGENT, { mode: 0o644 });
  });

  afterAll(async () => {
    for (const a of agents) if (a.proc.exitCode === null) a.proc.kill('SIGKILL');
    await Promise.all(agents.map((a) => (a.proc.exitCode === null && a.proc.signalCode === null ? new Promise((r) => a.proc.on('exit', r)) : null)));
    if (s && s.proc.exitCode === null && s.proc.signalCode === null) {
      s.proc.kill('SIGTERM');
      await s.exited;
    }
    await d?.stop();
  });

  it(`an owner holding its ${CAP} files (limits.openFilesPerUid) across a takeover still gets EMFILE at its next open; its files work; another uid opens freely`, async () => {
    const daemon = d!;
    const { agent: owner, first } = await agent(join(daemon.dir, 'agent.py'), OWNER, daemon.home(T, 'own'), CAP);
    agents.push(owner);
    expect(first).toBe(`held ${CAP}`);
    // The cap holds before the upgrade (the test's premise).
    expect(await owner.step('open')).toBe('EMFILE');

    s = startSuccessor(HOMESFS, join(daemon.dir, 'config.json'));
    expect(await serving(s)).toBe(true);
    expect(await daemon.exited).toBe(0);
    // Every held file handed over and taken (the owner's, none refused).
    expect(s.logs.find((l) => l.msg === 'session taken over')).toMatchObject({ files: CAP, refused: 0 });

    // The successor counts the handed-over files against their opener: still at its cap.
    expect(await owner.step('open')).toBe('EMFILE');
    expect(await owner.step('use')).toBe(`used ${CAP}`);
    expect(await owner.step('open')).toBe('EMFILE');

    // Another uid is not held by them (the cap is per uid, not taken by the upgrade).
    const { agent: other, first: otherFirst } = await agent(join(daemon.dir, 'agent.py'), OTHER, daemon.home(T, 'other'), CAP - 1);
    agents.push(other);
    expect(otherFirst).toBe(`held ${CAP - 1}`);
    expect(await other.step('open')).toBe('opened');
  });
});
