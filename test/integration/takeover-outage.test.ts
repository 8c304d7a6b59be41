import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { canMount, copyDaemonTree, HOMESCTL, HOMESFS, runAsync, skipReason, startDaemon, type LogLine } from '../helpers/daemon.js';
import { waitFor } from '../helpers/takeover.js';

/**
 * The edges of live upgrade and crash survival an admin meets in a shell
 * (issue 36, point 5): the successor `homesfs reload` starts logs where the
 * daemon logs, not into the shell that ran the reload; the takeover socket
 * does not outlive its daemon, and a `--takeover` with no daemon says so;
 * `homesctl status` in the outage after a kill says the session is kept.
 */

if (!canMount) console.warn(`takeover outage integration suite skipped: ${skipReason}`);

const alive = (pid: number) => existsSync(`/proc/${pid}`) && !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'));
const mounted = (p: string) =>
  readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((l) => l.split(' ')[4] === p);

describe.skipIf(!canMount)('live upgrade and crash survival from a shell', () => {
  it("a successor started by `homesfs reload` from a shell logs where the daemon logs, after that shell is gone; the old daemon leaves the successor's takeover socket, whose clean stop removes it", async () => {
    const d = await startDaemon({ create: ['t/h'] });
    const config = join(d.dir, 'config.json');
    const sock = join(d.dir, 'run', 'takeover.sock');
    let successor = 0;
    try {
      expect(existsSync(sock)).toBe(true);
      // The "shell": pipes this test reads until reload exits, then closes (a terminal gone, `| head`).
      const reload = spawn(process.execPath, [HOMESFS, 'reload', '--config', config, '--takeover'], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      reload.stdout!.on('data', (b: Buffer) => (out += b.toString()));
      reload.stderr!.on('data', (b: Buffer) => (out += b.toString()));
      const code = await new Promise<number | null>((r) => reload.on('exit', (c) => r(c)));
      reload.stdout!.destroy();
      reload.stderr!.destroy();
      expect(code, out).toBe(0);
      expect(out).toMatch(new RegExp(`the successor logs where pid ${d.proc.pid} logs: (?:pipe|socket):\\[\\d+\\] \\(the daemon's own descriptors\\)`));
      const m = /pid (\d+) \(.*\) serves the session now/.exec(out);
      expect(m, out).not.toBeNull();
      successor = Number(m![1]);
      expect(await d.exited).toBe(0);

      // The successor's lines come on the daemon's stdout (this test's pipe of the first daemon).
      const mine = (pred: (l: LogLine) => boolean) => d.logs.find((l) => l.pid === successor && pred(l));
      await waitFor('the successor to log that it serves', () => mine((l) => l.msg === 'serving'));
      expect(mine((l) => l.msg === 'session taken over')).toBeDefined();
      // Its takeover socket replaced the old daemon's, which did not remove it on its way out.
      await waitFor('the successor to listen for successors', () => mine((l) => l.msg === 'takeover socket listening'));
      expect(existsSync(sock)).toBe(true);
      // Logging after the shell is gone: a reload of the configuration, logged there too; the successor lives on.
      process.kill(successor, 'SIGHUP');
      await waitFor('the successor to log the reload', () => mine((l) => l.msg === 'configuration reloaded'));
      expect(alive(successor)).toBe(true);
      const st = await d.status();
      expect(st).toMatchObject({ pid: successor, session: { startMode: 'taken over' } });

      // A clean stop removes the takeover socket with the mount.
      process.kill(successor, 'SIGTERM');
      await waitFor('the successor to stop', () => mine((l) => l.msg === 'stopped'));
      await waitFor('the successor to exit', () => (alive(successor) ? undefined : true));
      expect(mounted(d.mount)).toBe(false);
      expect(existsSync(sock)).toBe(false);
    } finally {
      if (successor > 0 && alive(successor)) process.kill(successor, 'SIGTERM');
      await waitFor('the successor to exit', () => (successor > 0 && alive(successor) ? undefined : true), 20_000).catch(() => undefined);
      await d.stop();
    }
  }, 120_000);

  it("a daemon of a build that predates the logs request: reload reopens its stdout through /proc (a pipe here), and the successor logs there; a stderr /proc cannot open is said", async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'homesfs-oldlogs-'));
    // The old build: this one without the daemon's side of the request (it refuses it as a HELLO of no protocol).
    copyDaemonTree(join(tmp, 'old'));
    const js = join(tmp, 'old', 'dist', 'takeover.js');
    const src = readFileSync(js, 'utf8');
    expect(src).toContain('if (msg.logs === true) {');
    writeFileSync(js, src.replace('if (msg.logs === true) {', 'if (false) {'));
    // Its stdout a real pipe (Node's own child pipes are socket pairs, which /proc cannot open):
    // this wrapper execs the daemon (same pid) with a pipe whose reader copies to the test.
    const wrap = join(tmp, 'pipe.py');
    writeFileSync(
      wrap,
      'import os, sys\nr, w = os.pipe()\nif os.fork() == 0:\n  os.close(w)\n  while True:\n    b = os.read(r, 65536)\n    if not b: break\n    os.write(1, b)\n  os._exit(0)\nos.close(r)\nos.dup2(w, 1)\nos.close(w)\nos.execv(sys.argv[1], sys.argv[1:])\n',
    );
    const d = await startDaemon({ create: ['t/h'], bin: join(tmp, 'old', 'dist', 'cli', 'homesfs.js'), wrap: ['python3', wrap] });
    let successor = 0;
    try {
      expect(readFileSync(`/proc/${d.proc.pid}/cmdline`, 'utf8')).toContain('homesfs.js');
      const reload = spawn(process.execPath, [HOMESFS, 'reload', '--config', join(d.dir, 'config.json'), '--takeover'], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      reload.stdout!.on('data', (b: Buffer) => (out += b.toString()));
      reload.stderr!.on('data', (b: Buffer) => (out += b.toString()));
      const code = await new Promise<number | null>((r) => reload.on('exit', (c) => r(c)));
      reload.stdout!.destroy();
      reload.stderr!.destroy();
      expect(code, out).toBe(0);
      expect(out).toMatch(new RegExp(`the successor logs where pid ${d.proc.pid} logs: pipe:\\[\\d+\\] \\(reopened through /proc/${d.proc.pid}/fd \\(the daemon does not hand its descriptors \\(an older build\\)\\)\\)`));
      // Its stderr is still this test's socket pair, which /proc cannot open: that one is reload's own, and said so.
      expect(out).toContain(`cannot reopen pid ${d.proc.pid}'s stderr`);
      expect(out).not.toContain(`cannot reopen pid ${d.proc.pid}'s stdout`);
      successor = Number(/pid (\d+) \(.*\) serves the session now/.exec(out)?.[1] ?? 0);
      expect(successor, out).toBeGreaterThan(0);
      expect(await d.exited).toBe(0);
      const mine = (pred: (l: LogLine) => boolean) => d.logs.find((l) => l.pid === successor && pred(l));
      await waitFor('the successor to log that it serves', () => mine((l) => l.msg === 'serving'));
      process.kill(successor, 'SIGHUP');
      await waitFor('the successor to log the reload', () => mine((l) => l.msg === 'configuration reloaded'));
      process.kill(successor, 'SIGTERM');
      await waitFor('the successor to stop', () => mine((l) => l.msg === 'stopped'));
    } finally {
      if (successor > 0 && alive(successor)) process.kill(successor, 'SIGTERM');
      await waitFor('the successor to exit', () => (successor > 0 && alive(successor) ? undefined : true), 20_000).catch(() => undefined);
      await d.stop();
      rmSync(tmp, { recursive: true, force: true });
    }
  }, 120_000);

  it('a clean stop leaves no takeover.sock; --takeover with no daemon, or only a stale socket, says no daemon serves the mount (exit 12)', async () => {
    const d = await startDaemon({ create: ['t/h'] });
    const config = join(d.dir, 'config.json');
    const sock = join(d.dir, 'run', 'takeover.sock');
    try {
      expect(existsSync(sock)).toBe(true);
      expect(await d.stopKeep()).toBe(0);
      expect(existsSync(sock)).toBe(false);

      // No daemon: --takeover says so, with the mount and the socket, and exits 12.
      const none = await runAsync(process.execPath, [HOMESFS, 'serve', '--config', config, '--takeover']);
      expect(none.code, none.stderr).toBe(12);
      expect(none.stderr).toContain(`no daemon serves ${d.mount} (no socket at ${sock}): start it with \`homesfs serve\``);
      // A socket file nobody listens on (what a killed daemon leaves): the same, not a raw errno 111.
      spawnSync('python3', ['-c', `import socket; s=socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.bind(${JSON.stringify(sock)})`]);
      const stale = await runAsync(process.execPath, [HOMESFS, 'serve', '--config', config, '--takeover']);
      expect(stale.code, stale.stderr).toBe(12);
      expect(stale.stderr).toContain(`no daemon serves ${d.mount} (nothing listens on ${sock}): start it with \`homesfs serve\``);
      expect(stale.stderr).not.toMatch(/errno 111/);
      expect(mounted(d.mount)).toBe(false);
    } finally {
      await d.stop();
    }
  }, 60_000);

  it('homesctl status during the outage after a kill: the daemon is not running, its session is kept by the holder (exit 5); the next serve resumes it', async () => {
    const d = await startDaemon({ create: ['t/h'], config: { crashSurvival: true } });
    const run = join(d.dir, 'run');
    let holder = 0;
    let next: Awaited<ReturnType<typeof startDaemon>> | null = null;
    try {
      await d.waitForLog((l) => l.msg === 'session registered with the holder');
      holder = ((await d.status()) as { holder: { pid: number } }).holder.pid;
      d.proc.kill('SIGKILL');
      await d.exited;
      await waitFor('the holder to see the daemon die', () => (readFileSync(join(run, 'holder.log'), 'utf8').includes('the daemon died') ? true : undefined));

      const human = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, 'status']);
      expect(human.code, human.stderr).toBe(5);
      expect(human.stdout).toBe(`the daemon is not running; its session is kept by the holder (pid ${holder}), generation 1: start \`homesfs serve\` to resume it\n`);
      expect(human.stderr).toContain(`cannot connect to ${d.socket}: ECONNREFUSED`);
      const json = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'status']);
      expect(json.code).toBe(5);
      expect(JSON.parse(json.stdout)).toEqual({
        ok: false,
        code: 'SESSION_KEPT',
        socket: d.socket,
        message: expect.stringContaining('its session is kept by the holder'),
        state: 'kept',
        keeper: 'holder',
        holder,
        generation: 1,
        mount: d.mount,
        daemonPid: d.proc.pid,
        unreachable: expect.stringContaining('ECONNREFUSED'),
      });

      // What it said: a plain serve resumes the session.
      next = await startDaemon({ dir: d.dir });
      expect(await next.status()).toMatchObject({ session: { generation: 2, startMode: 'resumed' } });
      expect((await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, 'status'])).code).toBe(0);
    } finally {
      if (next) await next.stopKeep();
      if (holder > 0 && alive(holder)) process.kill(holder, 'SIGKILL');
      await d.stop();
    }
  }, 120_000);
});
