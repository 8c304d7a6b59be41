import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, HOMESCTL, HOMESFS, runAsync, skipReason, startDaemon, SYSTEM_PATH, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { serving, startSuccessor, type Successor } from '../helpers/takeover.js';

/**
 * A live upgrade after a crash: the dead handles the resumed daemon reopened
 * go to its successor with the files it hands over. The successor reopens
 * none of them again, and once the agent closes its descriptors nothing of
 * them stays open (no backing descriptor, no open-file slot).
 */

const OWNERS = ownerRange(import.meta.filename);
const OWNER = { uid: OWNERS.from + 1, gid: OWNERS.from + 1 };
const T = 'cup';
const FILES = 8;

if (!canMount) console.warn(`crash-upgrade integration suite skipped: ${skipReason}`);

/** `open DIR N` creates f0..fN-1 read-write and keeps them; `rw` writes a line to each and reads it back; `close` closes all. */
const AGENT = `import json, os, sys
fds = []
n = 0
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == 'open':
        for i in range(int(cmd[2])):
            fds.append(os.open(os.path.join(cmd[1], 'f%d' % i), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600))
        print(json.dumps({'opened': len(fds)}), flush=True)
    elif cmd[0] == 'rw':
        out = []
        for i, fd in enumerate(fds):
            try:
                os.pwrite(fd, b'round %d of f%d' % (n, i), 0)
                os.fsync(fd)
                out.append(os.pread(fd, 64, 0).decode())
            except OSError as e:
                out.append('errno %d' % e.errno)
        n += 1
        print(json.dumps(out), flush=True)
    elif cmd[0] == 'close':
        for fd in fds:
            os.close(fd)
        fds = []
        print(json.dumps({'closed': True}), flush=True)
`;

interface Status {
  session: { startMode: string };
  native: { handles: { reopened: number } };
  homes: Array<{ tenant: string; key: string; openFiles: number }>;
  limits: { openFiles: number };
}

describe.skipIf(!canMount)('a live upgrade after a crash hands the reopened dead handles on', () => {
  let d: RunningDaemon | null = null;
  let resumed: Successor | null = null;
  let upgraded: Successor | null = null;
  let agent: ChildProcess | null = null;
  let holderPid: number | null = null;

  beforeAll(async () => {
    d = await startDaemon({ awaitLedgers: true, homes: { [`${T}/work`]: { owner: OWNER, profile: 'home' } }, create: [`${T}/work`], config: { owners: OWNERS, crashSurvival: true } });
  }, 60_000);

  afterAll(async () => {
    agent?.kill('SIGKILL');
    for (const s of [resumed, upgraded]) if (s && s.proc.exitCode === null && s.proc.signalCode === null) s.proc.kill('SIGTERM');
    await Promise.all([resumed?.exited, upgraded?.exited]);
    if (holderPid !== null) {
      try {
        process.kill(holderPid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    await d?.stop();
  });

  const status = async (): Promise<Status> => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d!.socket, '--json', 'status']);
    expect(r.code, r.stderr).toBe(0);
    return JSON.parse(r.stdout) as Status;
  };

  it('the successor reopens no dead handle again, and after the close nothing of them is open', async () => {
    holderPid = ((await d!.status()) as unknown as { holder: { pid: number | null } }).holder.pid;
    expect(holderPid).not.toBeNull();
    const script = join(d!.dir, 'agent.py');
    writeFileSync(script, AGENT, { mode: 0o644 });
    agent = spawn('setpriv', [`--reuid=${OWNER.uid}`, `--regid=${OWNER.gid}`, '--clear-groups', 'python3', script], { env: { PATH: SYSTEM_PATH }, stdio: ['pipe', 'pipe', 'inherit'] });
    const waiting: Array<(v: unknown) => void> = [];
    createInterface({ input: agent.stdout! }).on('line', (l) => waiting.shift()?.(JSON.parse(l)));
    const ask = <V>(line: string) => new Promise<V>((resolve) => (waiting.push(resolve as (v: unknown) => void), agent!.stdin!.write(`${line}\n`)));
    const round = (n: number) => Array.from({ length: FILES }, (_, i) => `round ${n} of f${i}`);

    expect(await ask(`open ${d!.home(T, 'work')} ${FILES}`)).toEqual({ opened: FILES });
    expect(await ask('rw')).toEqual(round(0));

    d!.proc.kill('SIGKILL');
    await d!.exited;
    resumed = startSuccessor(HOMESFS, join(d!.dir, 'config.json'), false);
    expect(await serving(resumed)).toBe(true);
    // Every descriptor's first request after the crash reopens its file.
    expect(await ask('rw')).toEqual(round(1));
    let st = await status();
    expect(st.session.startMode).toBe('resumed');
    expect(st.native.handles.reopened).toBe(FILES);

    upgraded = startSuccessor(HOMESFS, join(d!.dir, 'config.json'), true);
    expect(await serving(upgraded)).toBe(true);
    expect(await resumed.exited).toBe(0);
    expect(await ask('rw')).toEqual(round(2));
    st = await status();
    expect(st.session.startMode).toBe('taken over');
    // The handed-over map: nothing reopened again.
    expect(st.native.handles.reopened).toBe(0);
    expect(st.homes.find((h) => h.tenant === T)?.openFiles).toBe(FILES);

    expect(await ask('close')).toEqual({ closed: true });
    // The RELEASEs reach the successor through the map: nothing of the reopened files stays open.
    for (let i = 0; i < 100 && (await status()).limits.openFiles !== 0; i++) await new Promise((r) => setTimeout(r, 50));
    st = await status();
    expect(st.homes.find((h) => h.tenant === T)?.openFiles).toBe(0);
    expect(st.limits.openFiles).toBe(0);

    upgraded.proc.kill('SIGTERM');
    expect(await upgraded.exited).toBe(0);
  }, 180_000);
});
