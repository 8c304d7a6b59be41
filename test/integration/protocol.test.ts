import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, HOMESCTL, HOMESFS, runAsync, skipReason, startDaemon, SYSTEM_PATH, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { serving, startSuccessor, type Successor } from '../helpers/takeover.js';

/**
 * The protocol INIT settles (native/src/session/proto.c): 7.40 (or the
 * kernel's, if older) and 1 MiB requests. An agent's 1 MiB reads and writes
 * reach the daemon whole, and keep doing so across a crash and a live
 * upgrade with the file open mid-write: each successor takes the negotiated
 * state the kernel has from the kept INIT, never what it would negotiate
 * itself, and serves 1 MiB requests with 0 agent errors.
 */

const OWNERS = ownerRange(import.meta.filename);
const OWNER = { uid: OWNERS.from + 1, gid: OWNERS.from + 1 };
const T = 'proto';
const MIB = 1 << 20;

if (!canMount) console.warn(`protocol integration suite skipped: ${skipReason}`);

/**
 * `open PATH` opens (creates) PATH read-write and keeps it; `write N` writes
 * N MiB at the end of it, each in one pwrite(2) of 1 MiB whose bytes tell
 * the MiB's number; `read PATH` reads PATH through a new descriptor in
 * 1 MiB reads and prints its SHA-256 and size.
 */
const AGENT = `import hashlib, json, os, sys
fd = None
at = 0
for line in sys.stdin:
    cmd = line.split()
    try:
        if cmd[0] == 'open':
            fd = os.open(cmd[1], os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            print(json.dumps({'ok': True}), flush=True)
        elif cmd[0] == 'write':
            for i in range(int(cmd[1])):
                chunk = (b'%08d' % (at // ${MIB})) * (${MIB} // 8)
                if os.pwrite(fd, chunk, at) != len(chunk):
                    raise OSError(5, 'short write')
                at += len(chunk)
            print(json.dumps({'ok': True, 'size': at}), flush=True)
        elif cmd[0] == 'read':
            r = os.open(cmd[1], os.O_RDONLY)
            h = hashlib.sha256()
            n = 0
            while True:
                b = os.read(r, ${MIB})
                if not b:
                    break
                h.update(b)
                n += len(b)
            os.close(r)
            print(json.dumps({'ok': True, 'sha': h.hexdigest(), 'size': n}), flush=True)
    except OSError as e:
        print(json.dumps({'ok': False, 'errno': e.errno}), flush=True)
`;

interface Protocol {
  flags: number;
  minor: number;
  kernelMinor: number;
  maxWrite: number;
  maxPages: number;
  largestRead: number;
  largestWrite: number;
}

describe.skipIf(!canMount)('1 MiB requests, negotiated at INIT and kept across a crash and a live upgrade', () => {
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

  const protocol = async (): Promise<Protocol> => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d!.socket, '--json', 'status']);
    expect(r.code, r.stderr).toBe(0);
    return (JSON.parse(r.stdout) as { native: { protocol: Protocol } }).native.protocol;
  };

  it('reads and writes reach the daemon as 1 MiB requests, before and after a crash and an upgrade', async () => {
    holderPid = ((await d!.status()) as unknown as { holder: { pid: number | null } }).holder.pid;
    expect(holderPid).not.toBeNull();
    const script = join(d!.dir, 'agent.py');
    writeFileSync(script, AGENT, { mode: 0o644 });
    agent = spawn('setpriv', [`--reuid=${OWNER.uid}`, `--regid=${OWNER.gid}`, '--clear-groups', 'python3', script], { env: { PATH: SYSTEM_PATH }, stdio: ['pipe', 'pipe', 'inherit'] });
    const waiting: Array<(v: unknown) => void> = [];
    createInterface({ input: agent.stdout! }).on('line', (l) => waiting.shift()?.(JSON.parse(l)));
    const ask = <V>(line: string) => new Promise<V>((resolve) => (waiting.push(resolve as (v: unknown) => void), agent!.stdin!.write(`${line}\n`)));
    const file = join(d!.home(T, 'work'), 'big.bin');

    const first = await protocol();
    // READDIRPLUS is among what the kernel has from INIT (session/proto.c): each successor reports the same flags.
    expect(first.flags & (1 << 13)).toBe(1 << 13);
    expect(first.maxWrite).toBe(MIB);
    expect(first.maxPages).toBe(256);
    expect(first.minor).toBe(Math.min(40, first.kernelMinor));
    expect(await ask(`open ${file}`)).toEqual({ ok: true });
    expect(await ask('write 4')).toEqual({ ok: true, size: 4 * MIB });
    const read = await ask<{ ok: boolean; size: number }>(`read ${file}`);
    expect(read).toMatchObject({ ok: true, size: 4 * MIB });
    // Read ahead raised to 1 MiB at the mount (fuse/readahead.ts), and 256-page requests: one READ per MiB.
    expect((await protocol()).largestRead).toBe(MIB);

    // A crash with the file open mid-write: the resumed daemon has the kernel's terms from the kept INIT.
    d!.proc.kill('SIGKILL');
    await d!.exited;
    resumed = startSuccessor(HOMESFS, join(d!.dir, 'config.json'), false);
    expect(await serving(resumed)).toBe(true);
    let now = await protocol();
    expect(now).toMatchObject({ minor: first.minor, kernelMinor: first.kernelMinor, maxWrite: MIB, maxPages: 256, flags: first.flags });
    expect(await ask('write 4')).toEqual({ ok: true, size: 8 * MIB });
    now = await protocol();
    expect(now.largestWrite).toBe(MIB);

    // A live upgrade: the successor takes them from its predecessor.
    upgraded = startSuccessor(HOMESFS, join(d!.dir, 'config.json'), true);
    expect(await serving(upgraded)).toBe(true);
    expect(await resumed.exited).toBe(0);
    now = await protocol();
    expect(now).toMatchObject({ minor: first.minor, kernelMinor: first.kernelMinor, maxWrite: MIB, maxPages: 256, flags: first.flags });
    expect(await ask('write 4')).toEqual({ ok: true, size: 12 * MIB });
    expect((await protocol()).largestWrite).toBe(MIB);

    // Every MiB is where it was written.
    const want = createHash('sha256');
    for (let i = 0; i < 12; i++) want.update(Buffer.from(`${String(i).padStart(8, '0')}`.repeat(MIB / 8)));
    const back = await ask<{ ok: boolean; sha: string; size: number }>(`read ${file}`);
    expect(back).toEqual({ ok: true, sha: want.digest('hex'), size: 12 * MIB });
    expect(createHash('sha256').update(readFileSync(join(d!.backing, T, 'work', 'big.bin'))).digest('hex')).toBe(back.sha);

    upgraded.proc.kill('SIGTERM');
    expect(await upgraded.exited).toBe(0);
  }, 180_000);
});
