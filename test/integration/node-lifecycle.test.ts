import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { describe, expect, it } from 'vitest';
import { HOMESCTL, HOMESFS, SYSTEM_PATH, canMount, runAsync, skipReason, startDaemon, type LogLine, type RunningDaemon, rewriteConfig } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';

if (!canMount) console.warn(`node lifecycle integration suite skipped: ${skipReason}`);

/** this file's own owner ids (helpers/owner-ids.ts) */
const OWNERS = ownerRange(import.meta.filename);

const mounted = (p: string) =>
  readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((l) => l.split(' ')[4] === p);

async function ctl(d: RunningDaemon, ...args: string[]) {
  return runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, ...args]);
}

async function createHome(d: RunningDaemon, home: string): Promise<{ uid: number; gid: number }> {
  const r = await ctl(d, '--json', 'create', home);
  expect(r.code, r.stderr).toBe(0);
  return (JSON.parse(r.stdout) as { owner: { uid: number; gid: number } }).owner;
}

/** A long-running process as `uid`, spawned directly so its pid is known (setpriv and sh exec). */
function holder(uid: number, script: string, args: string[] = []): ChildProcess & { out: string; err: string } {
  const p = spawn('setpriv', [`--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', 'sh', '-c', script, 'sh', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { PATH: SYSTEM_PATH, LANG: 'C.UTF-8' },
  }) as ChildProcess & { out: string; err: string };
  p.out = '';
  p.err = '';
  p.stdout!.on('data', (d: Buffer) => (p.out += d.toString()));
  p.stderr!.on('data', (d: Buffer) => (p.err += d.toString()));
  return p;
}

const exitOf = (p: ChildProcess) => (p.exitCode !== null || p.signalCode !== null ? Promise.resolve(p.exitCode) : new Promise<number | null>((r) => p.on('exit', (c) => r(c))));

describe.skipIf(!canMount)('on the node: readiness, reload, shutdown, crashes', () => {
  it('tells systemd READY=1 only once the mount answers (a fake NOTIFY_SOCKET), and STOPPING=1 on SIGTERM', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'homesfs-notify-'));
    const sock = join(dir, 'notify.sock');
    // The listener checks, the moment READY=1 arrives, that the mount is a live homesfs mount.
    const listener = spawn(
      'python3',
      [
        '-c',
        `
import json, os, socket, sys
path, mnt = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
print(json.dumps({"listening": True}), flush=True)
while True:
    msg = s.recv(65536).decode()
    rec = {"msg": msg}
    if "READY=1" in msg.split("\\n"):
        rec["mountinfo"] = any(l.split(" ")[4] == mnt and " - fuse.homesfs " in l for l in open("/proc/self/mountinfo"))
        try:
            rec["listing"] = sorted(os.listdir(mnt))
            rec["statfs"] = os.statvfs(os.path.join(mnt, "t", "h")).f_bsize > 0
        except OSError as e:
            rec["error"] = str(e)
    print(json.dumps(rec), flush=True)
`,
        sock,
        join(dir, 'mnt'),
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const records: Array<Record<string, unknown>> = [];
    const waiters: Array<() => void> = [];
    createInterface({ input: listener.stdout! }).on('line', (l) => {
      records.push(JSON.parse(l) as Record<string, unknown>);
      for (const w of waiters.splice(0)) w();
    });
    const until = async (pred: () => boolean, what: string) => {
      const deadline = Date.now() + 30_000;
      while (!pred()) {
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(records)}`);
        await new Promise<void>((r) => {
          waiters.push(r);
          setTimeout(r, 500);
        });
      }
    };
    let d: RunningDaemon | undefined;
    const isReady = (r: Record<string, unknown>) => typeof r.msg === 'string' && r.msg.split('\n').includes('READY=1');
    try {
      await until(() => records.some((r) => r.listening), 'the listener');
      d = await startDaemon({ dir, fresh: true, create: ['t/h'], env: { NOTIFY_SOCKET: sock } });
      await until(() => records.some(isReady), 'READY=1');
      const ready = records.filter(isReady);
      expect(ready).toHaveLength(1);
      // at the moment READY=1 arrived, the mount was a live homesfs mount that answered
      expect(ready[0]).toMatchObject({ mountinfo: true, listing: ['t'], statfs: true });
      expect(ready[0]!.msg).toContain(`STATUS=serving ${d.mount}`);
      d.proc.kill('SIGTERM');
      await until(() => records.some((r) => typeof r.msg === 'string' && r.msg.includes('STOPPING=1')), 'STOPPING=1');
      expect(await d.exited).toBe(0);
    } finally {
      listener.kill();
      if (d) await d.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('SIGHUP applies logLevel; homesctl reload does the same and answers the outcome; status shows the last reload', async () => {
    const d = await startDaemon({ config: { logLevel: 'info', owners: OWNERS } });
    const created = (home: string) => (l: LogLine) => l.msg === 'home created' && l.home === home;
    try {
      await createHome(d, 't/a');
      await d.waitForLog(created('t/a'));

      rewriteConfig(d, (c) => (c.logLevel = 'warn'));
      d.proc.kill('SIGHUP');
      const reloaded = await d.waitForLog((l) => l.msg === 'configuration reloaded');
      expect(reloaded.applied).toEqual(['logLevel']);
      await createHome(d, 't/b');
      // a refused reload logs at error level: once it is in, the info line for t/b would be too
      rewriteConfig(d, (c) => (c.mount = join(d.dir, 'elsewhere')));
      const refused = await ctl(d, 'reload');
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(/^homesctl: INVALID_ARGUMENT: reload refused/);
      expect(refused.stderr).toMatch(/needsRestart.*mount/);
      await d.waitForLog((l) => l.msg.startsWith('reload refused'));
      expect(d.logs.some(created('t/b'))).toBe(false);
      const st1 = JSON.parse((await ctl(d, '--json', 'status')).stdout) as { lastReload: { ok: boolean; needsRestart: string[] } };
      expect(st1.lastReload).toMatchObject({ ok: false, needsRestart: ['mount'] });

      rewriteConfig(d, (c) => {
        c.mount = d.mount;
        c.logLevel = 'debug';
        c.shutdownGraceMs = 1234;
      });
      const ok = await ctl(d, '--json', 'reload');
      expect(ok.code, ok.stderr).toBe(0);
      expect((JSON.parse(ok.stdout) as { applied: string[] }).applied.sort()).toEqual(['logLevel', 'shutdownGraceMs']);
      await createHome(d, 't/c');
      await d.waitForLog(created('t/c'));
      const human = await ctl(d, 'status');
      expect(human.code).toBe(0);
      expect(human.stdout).toMatch(/^Last reload:\s+\S+ \(ok: applied: (logLevel, shutdownGraceMs|shutdownGraceMs, logLevel)\)$/m);
    } finally {
      await d.stop();
    }
  });

  it('SIGTERM with homes in use: logs who holds them (pids), waits for them, then unmounts and exits 0', async () => {
    const d = await startDaemon({ config: { owners: OWNERS, shutdownGraceMs: 60_000 } });
    try {
      const owner = await createHome(d, 't/busy');
      const home = d.home('t', 'busy');
      const inCwd = holder(owner.uid, 'cd "$1" && exec sleep 600', [home]);
      const withFile = holder(owner.uid, 'exec 3>"$1/open-file"; exec sleep 600', [home]);
      // both hold the home once the file exists and the cwd is in place
      for (let i = 0; i < 200 && !(existsSync(join(home, 'open-file')) && readlinkCwd(inCwd.pid!) === home); i++) await sleep(50);
      d.proc.kill('SIGTERM');
      const line = await d.waitForLog((l) => l.msg === 'home in use at shutdown' && l.home === 't/busy');
      expect(line.cwdPids).toContain(inCwd.pid);
      expect(line.filePids).toContain(withFile.pid);
      expect(line.openFiles).toBeGreaterThanOrEqual(1);
      await d.waitForLog((l) => l.msg.startsWith('waiting for the homes in use'));
      // still serving while it waits
      expect(readdirSync(home)).toEqual(['open-file']);
      expect(d.proc.exitCode).toBeNull();
      inCwd.kill('SIGKILL');
      withFile.kill('SIGKILL');
      await d.waitForLog((l) => l.msg === 'every home was released: unmounting');
      expect(await d.exited).toBe(0);
      expect(mounted(d.mount)).toBe(false);
    } finally {
      await d.stop();
    }
  });

  it('SIGTERM: after shutdownGraceMs it unmounts anyway, and the holders get ENOTCONN', async () => {
    const d = await startDaemon({ config: { owners: OWNERS, shutdownGraceMs: 1500 } });
    try {
      const owner = await createHome(d, 't/stuck');
      const home = d.home('t', 'stuck');
      // works in its home in a loop and reports the first failure
      const agent = holder(owner.uid, 'cd "$1" || exit 9; echo started; while ls . >/dev/null; do sleep 0.1; done; exit 3', [home]);
      for (let i = 0; i < 200 && !agent.out.includes('started'); i++) await sleep(50);
      d.proc.kill('SIGTERM');
      const gave = await d.waitForLog((l) => l.msg.startsWith('unmounting with homes still in use'));
      expect(gave.homes).toEqual(['t/stuck']);
      expect(gave.pids).toContain(agent.pid);
      expect(await d.exited).toBe(0);
      expect(await exitOf(agent)).toBe(3);
      // ENOTCONN; a call in flight at the very moment of the abort gets ECONNABORTED instead
      expect(agent.err).toMatch(/Transport endpoint is not connected|Software caused connection abort/);
    } finally {
      await d.stop();
    }
  });

  it('nothing in the unit unmounts (a session systemd keeps survives its stop-post); after a kill with nothing kept the next start clears the dead mount itself', async () => {
    // systemd runs ExecStopPost= after a crash and before Restart=: an unmount there cuts the session its fd store keeps.
    const unit = readFileSync(join(import.meta.dirname, '../../systemd/homesfs.service'), 'utf8');
    const execs = unit.split('\n').filter((l) => /^Exec[A-Za-z]*=/.test(l));
    expect(execs.filter((l) => l.startsWith('ExecStopPost=') || /umount|fusermount/.test(l))).toEqual([]);
    const d = await startDaemon({ create: ['t/h'] });
    try {
      d.proc.kill('SIGKILL');
      await d.exited;
      expect(mounted(d.mount)).toBe(true); // dead: ENOTCONN, nothing keeps it (crashSurvival off)
      const next = await startDaemon({ dir: d.dir });
      try {
        await next.waitForLog((l) => l.msg === 'clearing a stale FUSE mount');
        expect(next.logs.find((l) => l.msg === 'write-size self-check')?.selfCheck).toMatchObject({ state: 'ok' });
      } finally {
        await next.stopKeep();
      }
    } finally {
      await d.stop();
    }
  });

  it('a resumed session whose mount was detached under it (umount -l after the kill): the self-check writes nothing under the mount point, and the daemon exits 6', async () => {
    // What the old unit's ExecStopPost did between a crash and the restart: the kept session lives on, detached.
    const d = await startDaemon({ create: ['t/h'], config: { crashSurvival: true } });
    let holderPid = 0;
    // A process with its working directory in the mount keeps the detached session alive (an agent would).
    const inside = spawn('sleep', ['300'], { cwd: d.mount, stdio: 'ignore' });
    try {
      await d.waitForLog((l) => l.msg === 'session registered with the holder');
      d.proc.kill('SIGKILL');
      await d.exited;
      const um = await runAsync('umount', ['--lazy', d.mount]);
      expect(um.code, um.stderr).toBe(0);
      expect(mounted(d.mount)).toBe(false);
      const next = await startDaemon({ dir: d.dir });
      holderPid = Number(next.logs.find((l) => l.msg === 'the session of a daemon that died was kept: resuming it')?.holder ?? 0);
      expect(holderPid).toBeGreaterThan(0);
      const sc = next.logs.find((l) => l.msg === 'write-size self-check')?.selfCheck as { state: string; detail: string } | undefined;
      expect(sc?.state).toBe('failed');
      expect(sc?.detail).toMatch(/nothing written/);
      expect(await next.exited).toBe(6);
      // the disk under the mount point got nothing: no 1 MiB 0666 file, nothing at all
      expect(readdirSync(d.mount)).toEqual([]);
    } finally {
      inside.kill('SIGKILL');
      if (holderPid > 0) {
        try {
          process.kill(holderPid, 'SIGKILL');
        } catch {
          /* already gone */
        }
      }
      await d.stop();
    }
  });

  it('a start that finds a homesfs mount that does not answer (a session something else keeps) refuses with exit 5 and never clears it', async () => {
    // A holder keeps the killed daemon's session; a start configured with another socket directory does not find it.
    const d = await startDaemon({ create: ['t/h'], config: { crashSurvival: true, probe: { intervalMs: 1000, timeoutMs: 1500 } } });
    const inside = spawn('sleep', ['300'], { cwd: d.mount, stdio: 'ignore' });
    let holderPid = 0;
    try {
      await d.waitForLog((l) => l.msg === 'session registered with the holder');
      holderPid = Number(d.logs.find((l) => l.msg === 'holder started')?.holder ?? 0);
      expect(holderPid).toBeGreaterThan(0);
      d.proc.kill('SIGKILL');
      await d.exited;
      rewriteConfig(d, (c) => {
        c.socket = join(d.dir, 'run2', 'admin.sock');
        c.platformSocket = join(d.dir, 'platform2', 'platform.sock');
      });
      const r = await runAsync(process.execPath, [HOMESFS, 'serve', '--config', join(d.dir, 'config.json')], { timeoutMs: 30_000 });
      expect(r.code, r.stderr).toBe(5);
      expect(r.stderr).toMatch(/does not answer/);
      // still there, still kept: the process inside waits for the session instead of getting ENOTCONN
      expect(mounted(d.mount)).toBe(true);
      expect(readlinkCwd(inside.pid!)).toBe(d.mount);
    } finally {
      inside.kill('SIGKILL');
      if (holderPid > 0) {
        try {
          process.kill(holderPid, 'SIGKILL');
        } catch {
          /* already gone */
        }
      }
      await d.stop();
    }
  });

  it('kill -9 while processes write, three times: every fsynced byte survives, nothing is left over, the ledger equals the disk', async () => {
    let d = await startDaemon({ config: { owners: OWNERS } });
    const CHUNK = 4096;
    const writer = `
import os, sys
path, n = sys.argv[1], 0
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
if len(sys.argv) > 2:
    os.unlink(path)  # an unlinked file still open when the daemon dies
while True:
    os.write(fd, (b"%07d\\n" % n) * (${CHUNK} // 8))
    os.fsync(fd)
    n += 1
    print(n, flush=True)
`;
    try {
      const owner = await createHome(d, 't/w');
      const acked = new Map<string, number>();
      for (let round = 0; round < 3; round++) {
        const home = d.home('t', 'w');
        const names = [0, 1, 2].map((k) => `r${round}-w${k}`);
        const procs = [...names.map((n) => holder(owner.uid, 'exec python3 -c "$1" "$2"', [writer, join(home, n)])), holder(owner.uid, 'exec python3 -c "$1" "$2" unlink', [writer, join(home, `r${round}-gone`)])];
        const last = (p: ChildProcess & { out: string }) => Number(p.out.trim().split('\n').pop() || 0);
        for (let i = 0; i < 1200 && procs.some((p) => last(p) < 5); i++) await sleep(50);
        expect(procs.map(last).every((n) => n >= 5), procs.map((p) => p.err).join('\n')).toBe(true);
        d.proc.kill('SIGKILL');
        await d.exited;
        for (const p of procs) {
          await exitOf(p);
        }
        names.forEach((n, k) => acked.set(n, last(procs[k]!)));
        expect(mounted(d.mount)).toBe(true); // dead: ENOTCONN until the next start clears it
        d = await startDaemon({ dir: d.dir });
        await d.waitForLog((l) => l.msg === 'clearing a stale FUSE mount');

        // every acknowledged (fsynced) chunk is there, intact, in every file of every round so far
        for (const [name, chunks] of acked) {
          const data = readFileSync(join(d.backingOf('t', 'w'), name));
          expect(data.length, name).toBeGreaterThanOrEqual(chunks * CHUNK);
          for (let c = 0; c < chunks; c++) {
            expect(data.subarray(c * CHUNK, c * CHUNK + 8).toString(), `${name} chunk ${c}`).toBe(`${String(c).padStart(7, '0')}\n`);
          }
        }
        // nothing but the writers' files: no unlinked leftovers, no .fuse_hidden*, no trash
        expect(readdirSync(d.backingOf('t', 'w')).sort()).toEqual([...acked.keys()].sort());
        expect(readdirSync(join(d.backing, 't')).sort()).toEqual(['w']);
        const onDisk = [...acked.keys()].reduce((sum, n) => sum + statSync(join(d.backingOf('t', 'w'), n)).size, 0);
        const rescan = JSON.parse((await ctl(d, '--json', 'rescan', 't/w')).stdout) as { before: { bytes: number; inodes: number }; drift: { bytes: number; inodes: number } };
        expect(rescan.drift).toEqual({ bytes: 0, inodes: 0 });
        expect(rescan.before).toEqual({ bytes: onDisk, inodes: acked.size });
      }
    } finally {
      await d.stop();
    }
  }, 180_000);
});

function readlinkCwd(pid: number): string | null {
  try {
    return readlinkSync(`/proc/${pid}/cwd`);
  } catch {
    return null;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
