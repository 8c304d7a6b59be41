import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { canMount, HOMESCTL, HOMESFS, runAsync, skipReason, startDaemon, SYSTEM_PATH, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { serving, startSuccessor, type Successor } from '../helpers/takeover.js';

/**
 * Passthrough (native/src/session/nodes.h, ops_files.c): a read-only open of
 * a file whose reads need no policy is handed to the kernel with a backing
 * ID, and its reads never reach the daemon. Every other open of that file
 * while one is passed through is passed through too, the writers with
 * direct I/O so their writes still come to the daemon and are charged; a
 * file a writer holds cached keeps its readers cached. Each of these would
 * fail with EIO if the daemon answered an open against the kernel's one I/O
 * mode per inode. Across a kill -9 and a live upgrade the successor answers
 * with the backing ID the kernel's files use.
 */

const OWNERS = ownerRange(import.meta.filename);
const OWNER = { uid: OWNERS.from + 1, gid: OWNERS.from + 1 };
const NOTES = { uid: OWNERS.from + 2, gid: OWNERS.from + 2 };
const T = 'pt';
const MIB = 1 << 20;

if (!canMount) console.warn(`passthrough integration suite skipped: ${skipReason}`);

/** One line per command, one JSON answer each: descriptors are kept by number. */
const AGENT = `import json, mmap, os, sys
fds = {}
for line in sys.stdin:
    cmd = line.split()
    try:
        if cmd[0] == 'open':
            flags = {'r': os.O_RDONLY, 'w': os.O_WRONLY | os.O_APPEND, 'rw': os.O_RDWR | os.O_APPEND}[cmd[2]]
            fd = os.open(cmd[1], flags)
            fds[fd] = True
            print(json.dumps({'ok': True, 'fd': fd}), flush=True)
        elif cmd[0] == 'read':
            fd = int(cmd[1])
            n = 0
            while True:
                b = os.pread(fd, ${MIB}, n)
                if not b:
                    break
                n += len(b)
            print(json.dumps({'ok': True, 'size': n, 'tail': b''.join([os.pread(fd, 8, max(0, n - 8))]).decode('latin1')}), flush=True)
        elif cmd[0] == 'write':
            fd = int(cmd[1])
            data = cmd[3].encode() * (int(cmd[2]) // len(cmd[3]))
            print(json.dumps({'ok': True, 'n': os.write(fd, data)}), flush=True)
        elif cmd[0] == 'mmap':
            fd = int(cmd[1])
            m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
            head = m[:8].decode('latin1')
            m.close()
            print(json.dumps({'ok': True, 'head': head}), flush=True)
        elif cmd[0] == 'close':
            os.close(int(cmd[1]))
            del fds[int(cmd[1])]
            print(json.dumps({'ok': True}), flush=True)
    except OSError as e:
        print(json.dumps({'ok': False, 'errno': e.errno}), flush=True)
`;

interface Passthrough {
  negotiated: boolean;
  offered: boolean;
  active: boolean;
  opens: number;
  opensDirect: number;
  refused: number;
  idsOpened: number;
  idsClosed: number;
  files: number;
}

interface Reply {
  ok: boolean;
  fd?: number;
  size?: number;
  tail?: string;
  head?: string;
  n?: number;
  errno?: number;
}

interface Agent {
  ask(line: string): Promise<Reply>;
  proc: ChildProcess;
}

function startAgent(d: RunningDaemon): Agent {
  const script = join(d.dir, 'agent.py');
  writeFileSync(script, AGENT, { mode: 0o644 });
  const proc = spawn('setpriv', [`--reuid=${OWNER.uid}`, `--regid=${OWNER.gid}`, '--clear-groups', 'python3', script], { env: { PATH: SYSTEM_PATH }, stdio: ['pipe', 'pipe', 'inherit'] });
  const waiting: Array<(v: Reply) => void> = [];
  createInterface({ input: proc.stdout! }).on('line', (l) => waiting.shift()?.(JSON.parse(l) as Reply));
  return { proc, ask: (line) => new Promise<Reply>((resolve) => (waiting.push(resolve), proc.stdin!.write(`${line}\n`))) };
}

async function statusOf(d: RunningDaemon): Promise<{ pt: Passthrough; reads: number; usage: number }> {
  const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'status']);
  expect(r.code, r.stderr).toBe(0);
  const s = JSON.parse(r.stdout) as { native: { protocol: { passthrough: Passthrough; reads: number } } };
  const u = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'usage', `${T}/work`]);
  expect(u.code, u.stderr).toBe(0);
  return { pt: s.native.protocol.passthrough, reads: s.native.protocol.reads, usage: (JSON.parse(u.stdout) as { bytes: number }).bytes };
}

/** A file of `mib` MiB written through the mount by the owner. */
async function makeFile(d: RunningDaemon, name: string, mib: number): Promise<string> {
  const path = join(d.home(T, 'work'), name);
  const r = await runAsync('setpriv', [`--reuid=${OWNER.uid}`, `--regid=${OWNER.gid}`, '--clear-groups', 'dd', 'if=/dev/zero', `of=${path}`, 'bs=1M', `count=${mib}`, 'status=none'], { env: { PATH: SYSTEM_PATH } });
  expect(r.code, r.stderr).toBe(0);
  return path;
}

const PROFILES = { small: { extends: 'home', maxHomeBytes: '24 MiB' } };

describe.skipIf(!canMount)('passthrough: read-only opens handed to the kernel, every other open of the file in the same mode', () => {
  let d: RunningDaemon | null = null;
  let agent: Agent | null = null;

  beforeAll(async () => {
    d = await startDaemon({
      awaitLedgers: true,
      homes: { [`${T}/work`]: { owner: OWNER, profile: 'small' }, [`${T}/notes`]: { owner: NOTES, profile: 'scratch' } },
      create: [`${T}/work`, `${T}/notes`],
      config: { owners: OWNERS, profiles: PROFILES },
    });
    agent = startAgent(d);
  }, 60_000);

  afterAll(async () => {
    agent?.proc.kill('SIGKILL');
    await d?.stop();
  });

  afterEach(async () => {
    // Every test closes what it opened: no file is left passed through, every ID given back.
    const { pt } = await statusOf(d!);
    expect(pt.files).toBe(0);
    expect(pt.idsClosed).toBe(pt.idsOpened);
  });

  it('a reader is passed through: its reads and mmap never reach the daemon; the ID goes at its close', async () => {
    const before = await statusOf(d!);
    expect(before.pt).toMatchObject({ negotiated: true, offered: true, active: true });
    const file = await makeFile(d!, 'plain.bin', 8);
    const r = await agent!.ask(`open ${file} r`);
    expect(r.ok).toBe(true);
    const opened = await statusOf(d!);
    expect(opened.pt.opens).toBe(before.pt.opens + 1);
    expect(opened.pt.files).toBe(1);
    expect(await agent!.ask(`read ${r.fd}`)).toMatchObject({ ok: true, size: 8 * MIB });
    expect(await agent!.ask(`mmap ${r.fd}`)).toMatchObject({ ok: true, head: '\0'.repeat(8) });
    // 8 MiB read and mapped: not one READ answered by the daemon.
    expect((await statusOf(d!)).reads).toBe(opened.reads);
    expect(await agent!.ask(`close ${r.fd}`)).toEqual({ ok: true });
    const closed = await statusOf(d!);
    expect(closed.pt.idsOpened).toBe(before.pt.idsOpened + 1);
  });

  it('a second reader shares the ID; a writer gets direct I/O: charged, refused at the budget, seen by the reader at once', async () => {
    const file = await makeFile(d!, 'shared.bin', 4);
    const usage0 = (await statusOf(d!)).usage;
    const before = await statusOf(d!);
    const r1 = await agent!.ask(`open ${file} r`);
    const r2 = await agent!.ask(`open ${file} r`);
    const w = await agent!.ask(`open ${file} w`);
    expect([r1.ok, r2.ok, w.ok]).toEqual([true, true, true]);
    const s = await statusOf(d!);
    expect(s.pt.opens - before.pt.opens).toBe(2);
    expect(s.pt.opensDirect - before.pt.opensDirect).toBe(1);
    expect(s.pt.idsOpened - before.pt.idsOpened).toBe(1);
    expect(s.pt.files).toBe(1);
    // The writer's bytes go through the daemon: charged, and at once in the reader's passed-through reads.
    expect(await agent!.ask(`write ${w.fd} ${MIB} abcdefgh`)).toEqual({ ok: true, n: MIB });
    expect((await statusOf(d!)).usage).toBe(usage0 + MIB);
    expect(await agent!.ask(`read ${r1.fd}`)).toMatchObject({ ok: true, size: 5 * MIB, tail: 'abcdefgh' });
    // The home's budget (24 MiB) holds for a writer of a passed-through file: short writes up to it, then EDQUOT.
    const short = await agent!.ask(`write ${w.fd} ${32 * MIB} 01234567`);
    expect(short.ok).toBe(true);
    expect(short.n).toBeLessThan(32 * MIB);
    let written = short.n!;
    let last: Reply = short;
    for (let i = 0; i < 4 && last.ok; i++) {
      last = await agent!.ask(`write ${w.fd} ${MIB} 01234567`);
      written += last.n ?? 0;
    }
    expect(last).toEqual({ ok: false, errno: 122 });
    const full = (await statusOf(d!)).usage;
    expect(full).toBeLessThanOrEqual(24 * MIB);
    // Refused whole: the home and its ledger as before.
    expect(await agent!.ask(`write ${w.fd} ${MIB} 01234567`)).toEqual({ ok: false, errno: 122 });
    expect((await statusOf(d!)).usage).toBe(full);
    expect(await agent!.ask(`read ${r2.fd}`)).toMatchObject({ ok: true, size: 5 * MIB + written });
    for (const h of [r1, r2, w]) expect(await agent!.ask(`close ${h.fd}`)).toEqual({ ok: true });
    await rm(file);
  });

  it('a file a writer holds cached keeps its readers cached; once all close, the next reader is passed through', async () => {
    const file = await makeFile(d!, 'cached.bin', 2);
    const before = await statusOf(d!);
    const w = await agent!.ask(`open ${file} rw`);
    const r = await agent!.ask(`open ${file} r`);
    expect([w.ok, r.ok]).toEqual([true, true]);
    expect(await agent!.ask(`write ${w.fd} 8 zzzzzzzz`)).toEqual({ ok: true, n: 8 });
    expect(await agent!.ask(`read ${r.fd}`)).toMatchObject({ ok: true, size: 2 * MIB + 8, tail: 'zzzzzzzz' });
    const s = await statusOf(d!);
    expect(s.pt.opens).toBe(before.pt.opens);
    expect(s.pt.files).toBe(0);
    // The reads came to the daemon.
    expect(s.reads).toBeGreaterThan(before.reads);
    for (const h of [w, r]) expect(await agent!.ask(`close ${h.fd}`)).toEqual({ ok: true });
    // Released: the file's next reader begins a passed-through family.
    const again = await agent!.ask(`open ${file} r`);
    expect((await statusOf(d!)).pt.opens).toBe(before.pt.opens + 1);
    expect(await agent!.ask(`close ${again.fd}`)).toEqual({ ok: true });
  });

  it('a text home passes nothing through: its reads are checked', async () => {
    const file = join(d!.home(T, 'notes'), 'note.txt');
    const mk = await runAsync('setpriv', [`--reuid=${NOTES.uid}`, `--regid=${NOTES.gid}`, '--clear-groups', 'sh', '-c', `printf 'hello\\n' > ${file}; cat ${file}`], { env: { PATH: SYSTEM_PATH } });
    expect(mk).toMatchObject({ code: 0, stdout: 'hello\n' });
    const before = await statusOf(d!);
    const cat = await runAsync('setpriv', [`--reuid=${NOTES.uid}`, `--regid=${NOTES.gid}`, '--clear-groups', 'cat', file], { env: { PATH: SYSTEM_PATH } });
    expect(cat).toMatchObject({ code: 0, stdout: 'hello\n' });
    const after = await statusOf(d!);
    expect(after.pt.opens).toBe(before.pt.opens);
    expect(after.reads).toBeGreaterThan(before.reads);
  });

  it('a text home\'s open of a file still passed through from before the change is refused ETXTBSY, logged, nothing changed', async () => {
    const file = await makeFile(d!, 'flip.bin', 1);
    const r = await agent!.ask(`open ${file} r`);
    expect(r.ok).toBe(true);
    const ctl = (...args: string[]) => runAsync(process.execPath, [HOMESCTL, '--socket', d!.socket, ...args]);
    expect((await ctl('set-profile', `${T}/work`, 'scratch')).code).toBe(0);
    try {
      // O_TRUNC too: refused before it truncates.
      const w = await agent!.ask(`open ${file} w`);
      expect(w).toEqual({ ok: false, errno: 26 });
      const t = await runAsync('setpriv', [`--reuid=${OWNER.uid}`, `--regid=${OWNER.gid}`, '--clear-groups', 'sh', '-c', `: > ${file}`], { env: { PATH: SYSTEM_PATH } });
      expect(t.code).not.toBe(0);
      expect(t.stderr).toMatch(/Text file busy/);
      expect(d!.logs.some((l) => l.code === 'PASSED_THROUGH' && l.errno === 'ETXTBSY' && l.home === `${T}/work`)).toBe(true);
      // The reader reads on; once it closes, the text home's opens are its own (checked, not passed through).
      expect(await agent!.ask(`read ${r.fd}`)).toMatchObject({ ok: true, size: MIB });
      expect(await agent!.ask(`close ${r.fd}`)).toEqual({ ok: true });
      const before = await statusOf(d!);
      const w2 = await agent!.ask(`open ${file} w`);
      expect(w2.ok).toBe(true);
      expect(await agent!.ask(`close ${w2.fd}`)).toEqual({ ok: true });
      expect((await statusOf(d!)).pt.opens).toBe(before.pt.opens);
    } finally {
      expect((await ctl('set-profile', `${T}/work`, '--clear')).code).toBe(0);
      await rm(file);
    }
  });

  it('a program run from the home (exec maps a passed-through file)', async () => {
    const bin = join(d!.home(T, 'work'), 'true-copy');
    const cp = await runAsync('setpriv', [`--reuid=${OWNER.uid}`, `--regid=${OWNER.gid}`, '--clear-groups', 'cp', '/bin/echo', bin], { env: { PATH: SYSTEM_PATH } });
    expect(cp.code, cp.stderr).toBe(0);
    const before = await statusOf(d!);
    const run = await runAsync('setpriv', [`--reuid=${OWNER.uid}`, `--regid=${OWNER.gid}`, '--clear-groups', bin, 'ran'], { env: { PATH: SYSTEM_PATH } });
    expect(run).toMatchObject({ code: 0, stdout: 'ran\n' });
    expect((await statusOf(d!)).pt.opens).toBeGreaterThan(before.pt.opens);
  });
});

describe.skipIf(!canMount)('passthrough across a kill -9 and a live upgrade', () => {
  let d: RunningDaemon | null = null;
  let agent: Agent | null = null;
  let resumed: Successor | null = null;
  let upgraded: Successor | null = null;
  let holderPid: number | null = null;

  beforeAll(async () => {
    d = await startDaemon({
      awaitLedgers: true,
      homes: { [`${T}/work`]: { owner: OWNER, profile: 'small' } },
      create: [`${T}/work`],
      config: { owners: OWNERS, profiles: PROFILES, crashSurvival: true },
    });
    agent = startAgent(d);
  }, 60_000);

  afterAll(async () => {
    agent?.proc.kill('SIGKILL');
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

  it('the reader reads on while no daemon runs; the successors answer with the kernel ID: 0 agent errors', async () => {
    holderPid = ((await d!.status()) as unknown as { holder: { pid: number | null } }).holder.pid;
    expect(holderPid).not.toBeNull();
    const file = await makeFile(d!, 'kept.bin', 4);
    const r1 = await agent!.ask(`open ${file} r`);
    expect(r1.ok).toBe(true);
    expect((await statusOf(d!)).pt.files).toBe(1);

    d!.proc.kill('SIGKILL');
    await d!.exited;
    // No daemon: the kernel reads the backing file itself.
    expect(await agent!.ask(`read ${r1.fd}`)).toMatchObject({ ok: true, size: 4 * MIB });
    resumed = startSuccessor(HOMESFS, join(d!.dir, 'config.json'), false);
    expect(await serving(resumed)).toBe(true);
    // The journal gave the successor the file's ID: a new reader and a writer of it are in the same mode, not EIO.
    const r2 = await agent!.ask(`open ${file} r`);
    const w = await agent!.ask(`open ${file} w`);
    expect([r2.ok, w.ok]).toEqual([true, true]);
    let s = await statusOf(d!);
    expect(s.pt).toMatchObject({ files: 1, opens: 1, opensDirect: 1, idsOpened: 0 });
    expect(await agent!.ask(`write ${w.fd} ${MIB} 87654321`)).toEqual({ ok: true, n: MIB });

    upgraded = startSuccessor(HOMESFS, join(d!.dir, 'config.json'), true);
    expect(await serving(upgraded)).toBe(true);
    expect(await resumed.exited).toBe(0);
    // Handed over with the node table: the same again.
    const r3 = await agent!.ask(`open ${file} r`);
    expect(r3.ok).toBe(true);
    s = await statusOf(d!);
    expect(s.pt).toMatchObject({ files: 1, opens: 1, idsOpened: 0 });
    for (const h of [r1, r2, r3]) expect(await agent!.ask(`read ${h.fd}`)).toMatchObject({ ok: true, size: 5 * MIB, tail: '87654321' });
    for (const h of [r1, r2, r3, w]) expect(await agent!.ask(`close ${h.fd}`)).toEqual({ ok: true });
    // The last close gave the predecessor's ID back.
    s = await statusOf(d!);
    expect(s.pt).toMatchObject({ files: 0, idsClosed: 1 });
    // And a new reader begins a family of its own.
    const r4 = await agent!.ask(`open ${file} r`);
    expect(await agent!.ask(`read ${r4.fd}`)).toMatchObject({ ok: true, size: 5 * MIB });
    expect(await agent!.ask(`close ${r4.fd}`)).toEqual({ ok: true });
    s = await statusOf(d!);
    expect(s.pt).toMatchObject({ files: 0, idsOpened: 1, idsClosed: 2 });
    upgraded.proc.kill('SIGTERM');
    expect(await upgraded.exited).toBe(0);
  }, 180_000);
});

describe.skipIf(!canMount)('passthrough across two kills -9 in a row', () => {
  let d: RunningDaemon | null = null;
  let agent: Agent | null = null;
  const resumed: Successor[] = [];
  let holderPid: number | null = null;

  afterAll(async () => {
    agent?.proc.kill('SIGKILL');
    for (const s of resumed) if (s.proc.exitCode === null && s.proc.signalCode === null) s.proc.kill('SIGTERM');
    await Promise.all(resumed.map((s) => s.exited));
    if (holderPid !== null) {
      try {
        process.kill(holderPid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    await d?.stop();
  });

  /**
   * The first successor adopts the dead daemon's ID from the journal; a
   * reader closed under it journals a RELEASE that, replayed by the second
   * successor, must close nothing (the family still has readers, and the
   * kernel may reuse a closed number for another file). The second successor
   * still answers the family's next opens with the ID, and the family's last
   * close gives it back once.
   */
  it("the second successor still has the file's ID: its readers read on, a new writer is charged, nothing gets EIO, the ID goes back once", async () => {
    d = await startDaemon({ awaitLedgers: true, homes: { [`${T}/work`]: { owner: OWNER, profile: 'small' } }, create: [`${T}/work`], config: { owners: OWNERS, profiles: PROFILES, crashSurvival: true } });
    agent = startAgent(d);
    holderPid = ((await d.status()) as unknown as { holder: { pid: number | null } }).holder.pid;
    const file = await makeFile(d, 'twice.bin', 3);
    const other = await makeFile(d, 'other.bin', 1);
    const r1 = await agent.ask(`open ${file} r`);
    const r2 = await agent.ask(`open ${file} r`);
    expect([r1.ok, r2.ok]).toEqual([true, true]);
    const config = join(d.dir, 'config.json');

    d.proc.kill('SIGKILL');
    await d.exited;
    const first = startSuccessor(HOMESFS, config, false);
    resumed.push(first);
    expect(await serving(first)).toBe(true);
    // Under the first successor: one reader closed (its RELEASE journaled), another file's family begun and ended.
    expect(await agent.ask(`close ${r1.fd}`)).toEqual({ ok: true });
    const o1 = await agent.ask(`open ${other} r`);
    expect(await agent.ask(`read ${o1.fd}`)).toMatchObject({ ok: true, size: MIB });
    expect(await agent.ask(`close ${o1.fd}`)).toEqual({ ok: true });

    first.proc.kill('SIGKILL');
    await first.exited;
    // No daemon again: the remaining reader reads on through the kernel.
    expect(await agent.ask(`read ${r2.fd}`)).toMatchObject({ ok: true, size: 3 * MIB });
    const second = startSuccessor(HOMESFS, config, false);
    resumed.push(second);
    expect(await serving(second)).toBe(true);
    // The family is still passed through with the first daemon's ID: a reader and a writer join it, not EIO.
    const r3 = await agent.ask(`open ${file} r`);
    const w = await agent.ask(`open ${file} w`);
    expect([r3.ok, w.ok]).toEqual([true, true]);
    let s = await statusOf(d);
    expect(s.pt).toMatchObject({ files: 1, opens: 1, opensDirect: 1, idsOpened: 0, idsClosed: 0 });
    expect(await agent.ask(`write ${w.fd} ${MIB} twicekil`)).toEqual({ ok: true, n: MIB });
    expect(s.usage).toBe(4 * MIB);
    expect((await statusOf(d)).usage).toBe(5 * MIB);
    for (const h of [r2, r3]) expect(await agent.ask(`read ${h.fd}`)).toMatchObject({ ok: true, size: 4 * MIB, tail: 'twicekil' });
    for (const h of [r2, r3, w]) expect(await agent.ask(`close ${h.fd}`)).toEqual({ ok: true });
    s = await statusOf(d);
    expect(s.pt).toMatchObject({ files: 0, idsClosed: 1 });
    // Another file's reader under the second successor: a family of its own, its own ID.
    const o2 = await agent.ask(`open ${other} r`);
    expect(await agent.ask(`read ${o2.fd}`)).toMatchObject({ ok: true, size: MIB });
    expect(await agent.ask(`close ${o2.fd}`)).toEqual({ ok: true });
    expect((await statusOf(d)).pt).toMatchObject({ files: 0, idsOpened: 1, idsClosed: 2 });
  }, 180_000);
});

describe.skipIf(!canMount)('passthrough across a live upgrade without a journal (the node table handed over as bytes)', () => {
  let d: RunningDaemon | null = null;
  let agent: Agent | null = null;
  let upgraded: Successor | null = null;

  afterAll(async () => {
    agent?.proc.kill('SIGKILL');
    if (upgraded && upgraded.proc.exitCode === null && upgraded.proc.signalCode === null) upgraded.proc.kill('SIGTERM');
    await upgraded?.exited;
    await d?.stop();
  });

  it("the successor imports each file's backing ID with its node: the next opens are in the kernel's mode", async () => {
    d = await startDaemon({ awaitLedgers: true, homes: { [`${T}/work`]: { owner: OWNER, profile: 'small' } }, create: [`${T}/work`], config: { owners: OWNERS, profiles: PROFILES, crashSurvival: false } });
    agent = startAgent(d);
    const file = await makeFile(d, 'handed.bin', 2);
    const r1 = await agent.ask(`open ${file} r`);
    expect(r1.ok).toBe(true);
    upgraded = startSuccessor(HOMESFS, join(d.dir, 'config.json'), true);
    expect(await serving(upgraded)).toBe(true);
    expect(await d.exited).toBe(0);
    const w = await agent.ask(`open ${file} w`);
    const r2 = await agent.ask(`open ${file} r`);
    expect([w.ok, r2.ok]).toEqual([true, true]);
    expect((await statusOf(d)).pt).toMatchObject({ files: 1, opens: 1, opensDirect: 1, idsOpened: 0 });
    expect(await agent.ask(`write ${w.fd} 8 handover`)).toEqual({ ok: true, n: 8 });
    for (const h of [r1, r2]) expect(await agent.ask(`read ${h.fd}`)).toMatchObject({ ok: true, size: 2 * MIB + 8, tail: 'handover' });
    for (const h of [r1, r2, w]) expect(await agent.ask(`close ${h.fd}`)).toEqual({ ok: true });
    expect((await statusOf(d)).pt).toMatchObject({ files: 0, idsClosed: 1 });
    upgraded.proc.kill('SIGTERM');
    expect(await upgraded.exited).toBe(0);
  }, 120_000);
});

describe.skipIf(!canMount)('fuse.passthrough: false', () => {
  let d: RunningDaemon | null = null;
  afterAll(async () => {
    await d?.stop();
  });

  it('asks nothing of the kernel and passes nothing through', async () => {
    d = await startDaemon({ awaitLedgers: true, homes: { [`${T}/work`]: { owner: OWNER, profile: 'home' } }, create: [`${T}/work`], config: { owners: OWNERS, fuse: { passthrough: false } } });
    const file = await makeFile(d, 'off.bin', 1);
    const agent = startAgent(d);
    try {
      const before = await statusOf(d);
      const r = await agent.ask(`open ${file} r`);
      expect(await agent.ask(`read ${r.fd}`)).toMatchObject({ ok: true, size: MIB });
      const after = await statusOf(d);
      expect(after.pt).toMatchObject({ negotiated: false, opens: 0, files: 0 });
      expect(after.reads).toBeGreaterThan(before.reads);
    } finally {
      agent.proc.kill('SIGKILL');
    }
  });
});
