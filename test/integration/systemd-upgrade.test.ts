import { spawn } from 'node:child_process';
import { chmodSync, closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, copyDaemonTree, HOMESCTL, HOMESFS, runAsync, skipReason, startDaemon, SYSTEM_PATH, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';

/**
 * The live upgrade as systemd runs it: `homesfs reload` (the unit's
 * ExecReload=) run from the installed package. The same build re-reads the
 * configuration; another build takes the session over, and the unit's main
 * process moves to the successor before the old one exits. systemd itself is
 * not involved: a fake NOTIFY_SOCKET records each notification, the pid that
 * sent it (SCM_CREDENTIALS) and whether the old daemon was still alive when it
 * arrived (systemd-notify waits until the receiver has read it).
 */

const OWNERS = ownerRange(import.meta.filename);
const OWNER = { uid: OWNERS.from + 1, gid: OWNERS.from + 1 };
const T = 'sysd';
const HOME = `${T}/work`;
const OTHER_VERSION = 'upgrade-by-reload';

if (!canMount) console.warn(`systemd upgrade integration suite skipped: ${skipReason}`);

interface Note {
  msg: string;
  /** the sender's pid as the kernel reports it */
  pid: number;
  /** was the watched pid (the serving daemon) alive, not a zombie, when this arrived */
  watchedAlive: boolean;
}

/** Run `homesfs reload`, its output into a file (a successor logs where the daemon logs); resolves when reload exits. */
async function reload(bin: string, config: string, out: string, env: NodeJS.ProcessEnv = {}, extra: string[] = []): Promise<{ code: number | null; out: () => string }> {
  const fd = openSync(out, 'a');
  const p = spawn(process.execPath, [bin, 'reload', '--config', config, ...extra], { stdio: ['ignore', fd, fd], env: { ...process.env, ...env } });
  closeSync(fd);
  const timer = setTimeout(() => p.kill('SIGKILL'), 120_000);
  const code = await new Promise<number | null>((r) => p.on('exit', (c) => r(c)));
  clearTimeout(timer);
  return { code, out: () => readFileSync(out, 'utf8') };
}

const alive = (pid: number) => {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] !== 'Z';
  } catch {
    return false;
  }
};

describe.skipIf(!canMount)('live upgrade under systemd: homesfs reload', () => {
  let d: RunningDaemon;
  let tmp = '';
  let other = '';
  let successorPid: number | null = null;
  const notes: Note[] = [];
  let listener: ReturnType<typeof spawn> | null = null;
  const sock = () => join(tmp, 'notify.sock');

  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'homesfs-takeover-sysd-'));
    chmodSync(tmp, 0o777);
    copyDaemonTree(join(tmp, 'other'));
    const v = join(tmp, 'other', 'dist', 'version.js');
    writeFileSync(v, readFileSync(v, 'utf8').replace(/export const VERSION = [^;]+;/, `export const VERSION = '${OTHER_VERSION}';`));
    other = join(tmp, 'other', 'dist', 'cli', 'homesfs.js');
    listener = spawn(
      'python3',
      [
        '-c',
        `
import json, os, socket, struct, sys
path, watch = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
print(json.dumps({"listening": True}), flush=True)
def alive(pid):
    try:
        return open("/proc/%d/stat" % pid).read().split(") ")[1][0] != "Z"
    except (OSError, ValueError, IndexError):
        return False
while True:
    msg, anc, _, _ = s.recvmsg(65536, socket.CMSG_SPACE(12) + socket.CMSG_SPACE(16 * 4))
    pid = 0
    for lvl, typ, data in anc:
        if typ == socket.SCM_CREDENTIALS: pid = struct.unpack("iII", data[:12])[0]
    try: watched = int(open(watch).read())
    except (OSError, ValueError): watched = 0
    rec = {"msg": msg.decode(), "pid": pid, "watchedAlive": alive(watched) if watched else False}
    print(json.dumps(rec), flush=True)
    # systemd-notify's barrier (BARRIER=1 with a pipe's end) returns once that end is closed
    for lvl, typ, data in anc:
        if typ == socket.SCM_RIGHTS:
            for i in range(0, len(data) - len(data) % 4, 4): os.close(struct.unpack("i", data[i:i + 4])[0])
`,
        sock(),
        join(tmp, 'watch.pid'),
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const listening = new Promise<void>((resolve) => {
      createInterface({ input: listener!.stdout! }).on('line', (l) => {
        const rec = JSON.parse(l) as Note & { listening?: boolean };
        if (rec.listening) resolve();
        else notes.push(rec);
      });
    });
    await listening;
    d = await startDaemon({ awaitLedgers: true, homes: { [HOME]: { owner: OWNER, profile: 'home' } }, create: [HOME], config: { owners: OWNERS }, env: { NOTIFY_SOCKET: sock() } });
    writeFileSync(join(tmp, 'watch.pid'), String(d.proc.pid));
  }, 60_000);

  afterAll(async () => {
    if (tmp) writeFileSync(join(tmp, 'stop'), '');
    if (successorPid !== null && alive(successorPid)) {
      process.kill(successorPid, 'SIGTERM');
      for (let i = 0; i < 300 && alive(successorPid); i++) await new Promise((r) => setTimeout(r, 100));
    }
    await d?.stop();
    listener?.kill();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  const config = () => join(d.dir, 'config.json');
  const status = async () =>
    JSON.parse((await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'status'])).stdout) as { version: string; build: string; pid: number; session: { generation: number; startMode: string } };
  const rewrite = (change: (c: Record<string, unknown>) => void) => {
    const c = JSON.parse(readFileSync(config(), 'utf8')) as Record<string, unknown>;
    change(c);
    writeFileSync(config(), JSON.stringify(c));
  };

  it('the same build re-reads the configuration and keeps the process; a refused configuration is exit 3', async () => {
    const before = await status();
    rewrite((c) => (c.shutdownGraceMs = 4321));
    const r = await reload(HOMESFS, config(), join(tmp, 'same.out'));
    expect(r.code, r.out()).toBe(0);
    expect(r.out()).toMatch(/same build as the running daemon \(pid \d+.*\): configuration reloaded, applied: shutdownGraceMs/);
    await d.waitForLog((l) => l.msg === 'configuration reloaded' && JSON.stringify(l.applied) === '["shutdownGraceMs"]');
    const after = await status();
    expect(after.pid).toBe(before.pid);
    expect(after.pid).toBe(d.proc.pid);
    expect(after.session.generation).toBe(1);
    expect(d.logs.some((l) => l.msg === 'handing the session over')).toBe(false);
    // a restart-only key: the daemon refuses, reload says so and fails
    const saved = readFileSync(config(), 'utf8');
    rewrite((c) => (c.mount = join(tmp, 'elsewhere')));
    const refused = await reload(HOMESFS, config(), join(tmp, 'refused.out'));
    writeFileSync(config(), saved);
    expect(refused.code, refused.out()).toBe(3);
    expect(refused.out()).toMatch(/reload refused.*needsRestart.*mount/);
    expect((await status()).pid).toBe(d.proc.pid);
  }, 60_000);

  it('another build whose successor fails after it got the session: reload exits with its code, the daemon serves on', async () => {
    const saved = readFileSync(config(), 'utf8');
    // uid 1 is a host account: the successor takes the session, then refuses its configuration's owners
    rewrite((c) => ((c.homes as Record<string, unknown>)[`${T}/evil`] = { owner: { uid: 1, gid: 1 } }));
    const r = await reload(other, config(), join(tmp, 'failing.out'));
    writeFileSync(config(), saved);
    expect(r.code, r.out()).toBe(9);
    expect(r.out()).toMatch(/: starting upgrade-by-reload \(build [0-9a-f]{16}\) to take the session of pid \d+ over/);
    expect(r.out()).toMatch(/the successor \(pid \d+\) exited 9 before it served/);
    // The successor logged where the daemon logs (its stdout, given over the takeover socket), not into reload's output.
    expect(r.out()).toMatch(/the successor logs where pid \d+ logs: .* \(the daemon's own descriptors\)/);
    expect(r.out()).toMatch(/its reason is in pid \d+'s log/);
    expect(r.out()).not.toMatch(/"msg":"session received"/);
    const successorLine = await d.waitForLog((l) => l.msg === 'session received');
    expect(successorLine.pid).not.toBe(d.proc.pid);
    expect(d.logs.some((l) => l.pid === successorLine.pid && l.level === 'fatal')).toBe(true);
    await d.waitForLog((l) => l.msg === 'handover abandoned: serving on');
    expect(d.proc.exitCode).toBeNull();
    const st = await status();
    expect(st.pid).toBe(d.proc.pid);
    expect(st.session.generation).toBe(1);
    // no main process was announced
    expect(notes.some((n) => n.msg.includes('MAINPID='))).toBe(false);
    const home = d.home(T, 'work');
    const w = await runAsync('setpriv', [`--reuid=${OWNER.uid}`, `--regid=${OWNER.gid}`, '--clear-groups', 'sh', '-c', `echo still > ${home}/after && cat ${home}/after`]);
    expect(w.stdout).toBe('still\n');
  }, 90_000);

  it('another build takes the session over: MAINPID= names the successor before the old daemon exits, READY=1 follows, an agent sees no error', async () => {
    const before = await status();
    const home = d.home(T, 'work');
    // An agent as the home's owner: an O_APPEND file fsynced every 10 ms and its working directory listed.
    const script = join(tmp, 'agent.py');
    writeFileSync(
      script,
      `import os, sys, json, time\nhome, stop = sys.argv[1], sys.argv[2]\nerrors, rounds, last = 0, 0, ''\nos.chdir(home)\nfd = os.open('log', os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)\n` +
        `while not os.path.exists(stop):\n  try:\n    os.write(fd, b'line %08d\\n' % rounds)\n    os.fsync(fd)\n    os.listdir('.')\n    rounds += 1\n  except OSError as e:\n    errors += 1\n    last = str(e)\n  time.sleep(0.01)\nos.close(fd)\nprint(json.dumps({'errors': errors, 'rounds': rounds, 'last': last}))\n`,
      { mode: 0o644 },
    );
    const agent = runAsync('setpriv', [`--reuid=${OWNER.uid}`, `--regid=${OWNER.gid}`, '--clear-groups', 'python3', script, home, join(tmp, 'stop')], { env: { PATH: SYSTEM_PATH }, timeoutMs: 120_000 });
    await new Promise((r) => setTimeout(r, 300));
    const notesBefore = notes.length;

    const r = await reload(other, config(), join(tmp, 'takeover.out'), { NOTIFY_SOCKET: sock() });
    expect(r.code, r.out()).toBe(0);
    const m = /pid (\d+) \(upgrade-by-reload, build [0-9a-f]{16}\) serves the session now \(generation 2, the mount paused \d+ ms\); pid (\d+) exited/.exec(r.out());
    expect(m, r.out()).not.toBeNull();
    successorPid = Number(m![1]);
    expect(Number(m![2])).toBe(before.pid);
    expect(await d.exited).toBe(0);
    const after = await status();
    expect(after).toMatchObject({ pid: successorPid, version: OTHER_VERSION, session: { generation: 2, startMode: 'taken over' } });
    expect(after.build).not.toBe(before.build);

    // The old daemon named the successor while it was still alive, from its own pid
    // (systemd takes a MAINPID= from the main process whatever NotifyAccess= is).
    const fresh = () => notes.slice(notesBefore);
    const named = fresh().findIndex((n) => n.msg.split('\n').includes(`MAINPID=${successorPid}`));
    expect(named, JSON.stringify(fresh())).toBeGreaterThanOrEqual(0);
    expect(fresh()[named]).toMatchObject({ pid: before.pid, watchedAlive: true });
    // Then the successor, serving: READY=1 (with its own MAINPID=), from its pid, after the old daemon exited.
    for (let i = 0; i < 100 && !fresh().some((n) => n.msg.split('\n').includes('READY=1')); i++) await new Promise((res) => setTimeout(res, 100));
    const ready = fresh().findIndex((n) => n.msg.split('\n').includes('READY=1'));
    expect(ready, JSON.stringify(fresh())).toBeGreaterThan(named);
    expect(fresh()[ready]!.pid).toBe(successorPid);
    expect(fresh()[ready]!.msg.split('\n')).toContain(`MAINPID=${successorPid}`);
    expect(fresh()[ready]!.watchedAlive).toBe(false);
    // No STOPPING=1: to systemd that would be the unit going down.
    expect(fresh().some((n) => n.msg.includes('STOPPING=1'))).toBe(false);

    // The same build again (the successor's): only the configuration, the pid stays.
    const again = await reload(other, config(), join(tmp, 'again.out'));
    expect(again.code, again.out()).toBe(0);
    expect(again.out()).toMatch(/same build as the running daemon .*configuration reloaded/);
    expect((await status()).pid).toBe(successorPid);

    writeFileSync(join(tmp, 'stop'), '');
    const res = await agent;
    const summary = JSON.parse(res.stdout.trim().split('\n').pop() ?? '{}') as { errors: number; rounds: number; last: string };
    expect(summary).toMatchObject({ errors: 0, last: '' });
    expect(summary.rounds).toBeGreaterThan(10);
    const lines = readFileSync(join(d.backingOf(T, 'work'), 'log'), 'utf8').split('\n').filter(Boolean);
    expect(lines.length).toBe(summary.rounds);
    expect(existsSync(join(d.mount, T))).toBe(true);
  }, 120_000);
});
