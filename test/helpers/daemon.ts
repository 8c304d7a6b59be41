import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { expect } from 'vitest';
import { ownerRange } from './owner-ids.js';

export const ROOT = resolve(import.meta.dirname, '../..');
export const HOMESFS = join(ROOT, 'dist/cli/homesfs.js');
export const HOMESCTL = join(ROOT, 'dist/cli/homesctl.js');

/** Integration tests need root and /dev/fuse; anywhere else they say why they skip. */
export const canMount = process.getuid?.() === 0 && existsSync('/dev/fuse');
export const skipReason = canMount ? '' : 'integration tests need root and /dev/fuse (not available here)';

export interface LogLine {
  level: string;
  msg: string;
  [k: string]: unknown;
}

export interface RunningDaemon {
  dir: string;
  backing: string;
  mount: string;
  socket: string;
  /** the directory the daemon publishes its owner names in (config `userdb.dir`) */
  userdb: string;
  proc: ChildProcess;
  logs: LogLine[];
  /** resolves with the exit code */
  exited: Promise<number | null>;
  stop(): Promise<number | null>;
  /** stop, keeping the directory (backing, state file, config) */
  stopKeep(): Promise<number | null>;
  /** stop and start again on the same directory and configuration */
  restart(): Promise<RunningDaemon>;
  home(tenant: string, key: string): string;
  backingOf(tenant: string, key: string): string;
  fdCount(): number;
  status(): Promise<Record<string, unknown>>;
  waitForLog(pred: (l: LogLine) => boolean, timeoutMs?: number): Promise<LogLine>;
  /** what the daemon wrote to stderr so far (its logs go to stdout) */
  stderr(): string;
}

export interface StartOptions {
  homes?: Record<string, { owner?: { uid: number; gid: number }; profile?: string }>;
  config?: Record<string, unknown>;
  /** create these "tenant/key" backing dirs before start */
  create?: string[];
  env?: NodeJS.ProcessEnv;
  /** reuse this directory (restart) */
  dir?: string;
  /** `dir` is a new empty directory of the caller's: write the configuration into it */
  fresh?: boolean;
  /** start the daemon with this RLIMIT_NOFILE (soft and hard), through prlimit(1), which execs it: same pid */
  nofile?: number;
  /** run the daemon through this command, which must exec it (same pid), as prlimit does for `nofile` */
  wrap?: string[];
  /** run this homesfs.js instead of the worktree's dist/ (a copied tree, e.g. with another addon) */
  bin?: string;
  /** resolve only once every home of `homes` has its ledger built (its first scan done) */
  awaitLedgers?: boolean;
}

/**
 * A daemon of its own at `root`: a copy of this worktree's dist/, package.json
 * and native addons (native/addon/), its node_modules linked to this
 * worktree's. The caller may alter the copy (another addon, another ABI).
 * Returns the copy's addon directory; the daemon is `<root>/dist/cli/homesfs.js`.
 */
export function copyDaemonTree(root: string): string {
  mkdirSync(join(root, 'node_modules'), { recursive: true });
  cpSync(join(ROOT, 'dist'), join(root, 'dist'), { recursive: true });
  cpSync(join(ROOT, 'package.json'), join(root, 'package.json'));
  for (const entry of readdirSync(join(ROOT, 'node_modules'))) symlinkSync(join(ROOT, 'node_modules', entry), join(root, 'node_modules', entry));
  const addons = join(root, 'native', 'addon');
  cpSync(join(ROOT, 'native', 'addon'), addons, { recursive: true });
  return addons;
}

function isMounted(path: string): boolean {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((l) => l.split(' ')[4] === path);
}

/** Spawn the built daemon as a child and wait until it reports that it serves. */
export async function startDaemon(opts: StartOptions = {}): Promise<RunningDaemon> {
  const bin = opts.bin ?? HOMESFS;
  if (!existsSync(bin)) throw new Error(`${bin} is missing: run "npm run build" (npm test does it)`);
  const reuse = opts.dir !== undefined && !opts.fresh;
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'homesfs-it-'));
  chmodSync(dir, 0o755); // the unprivileged test uids must reach the mount point
  const backing = join(dir, 'backing');
  const mount = join(dir, 'mnt');
  const socket = join(dir, 'run', 'admin.sock');
  const configPath = join(dir, 'config.json');
  const testPath = expect.getState().testPath;
  if (!reuse) {
    // root-only, as the daemon demands (issue 8): the homes below belong to their owners
    // (a caller may have mounted a small filesystem there already: fresh + dir)
    if (!existsSync(backing)) mkdirSync(backing, { mode: 0o700 });
    for (const h of opts.create ?? []) mkdirSync(join(backing, h), { recursive: true, mode: 0o700 });
    writeFileSync(
      configPath,
      JSON.stringify({
        backing,
        mount,
        socket,
        platformSocket: join(dir, 'platform', 'platform.sock'),
        stateFile: join(dir, 'state.json'),
        logLevel: 'debug',
        homes: opts.homes ?? {},
        probe: { intervalMs: 1000, timeoutMs: 5000 },
        // a test that leaves a process in a home must not cost the suite the default 10 s at stop
        shutdownGraceMs: 2000,
        // Owner names go to a directory of this run, never the host's /run/userdb.
        userdb: { dir: join(dir, 'userdb') },
        // Owners from the calling test file's own ids (another file's leftovers never look like ours).
        ...(testPath ? { owners: ownerRange(testPath) } : {}),
        // No holder unless a suite asks: the suites that kill the daemon test a start with nothing
        // kept, and a holder would keep a failed test's mount alive (its processes waiting) after it.
        crashSurvival: false,
        ...opts.config,
      }),
    );
  }
  const userdb = (JSON.parse(readFileSync(configPath, 'utf8')) as { userdb?: { dir?: string } }).userdb?.dir ?? '/run/userdb';
  const argv = [process.execPath, bin, 'serve', '--config', configPath];
  if (opts.nofile !== undefined) argv.unshift('prlimit', `--nofile=${opts.nofile}:${opts.nofile}`, '--');
  if (opts.wrap !== undefined) argv.unshift(...opts.wrap);
  const proc = spawn(argv[0]!, argv.slice(1), {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...opts.env },
  });
  const logs: LogLine[] = [];
  const waiters: Array<{ pred: (l: LogLine) => boolean; resolve: (l: LogLine) => void }> = [];
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  createInterface({ input: proc.stdout! }).on('line', (line) => {
    let parsed: LogLine;
    try {
      parsed = JSON.parse(line) as LogLine;
    } catch {
      return;
    }
    logs.push(parsed);
    for (const w of [...waiters]) {
      if (w.pred(parsed)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(parsed);
      }
    }
  });
  const exited = new Promise<number | null>((res) => proc.on('exit', (code) => res(code)));

  const waitForLog = (pred: (l: LogLine) => boolean, timeoutMs = 30_000): Promise<LogLine> => {
    const found = logs.find(pred);
    if (found) return Promise.resolve(found);
    return new Promise((res, rej) => {
      const t = setTimeout(() => rej(new Error(`timed out waiting for a log line; stderr: ${stderr}\nlogs: ${JSON.stringify(logs.slice(-20))}`)), timeoutMs);
      waiters.push({
        pred,
        resolve: (l) => {
          clearTimeout(t);
          res(l);
        },
      });
      void exited.then((code) => {
        clearTimeout(t);
        rej(new Error(`daemon exited with ${code} before the awaited log line; stderr: ${stderr}\nlogs: ${JSON.stringify(logs.slice(-20))}`));
      });
    });
  };

  const d: RunningDaemon = {
    dir,
    backing,
    mount,
    socket,
    userdb,
    proc,
    logs,
    exited,
    home: (t, k) => join(mount, t, k),
    backingOf: (t, k) => join(backing, t, k),
    fdCount: () => readdirSync(`/proc/${proc.pid}/fd`).length,
    waitForLog,
    stderr: () => stderr,
    status: async () => {
      const r = await runAsync(process.execPath, [HOMESCTL, '--socket', socket, '--json', 'status']);
      if (r.code !== 0) throw new Error(`homesctl status failed: ${r.stderr}`);
      return JSON.parse(r.stdout) as Record<string, unknown>;
    },
    stop: async () => {
      const code = await d.stopKeep();
      rmSync(dir, { recursive: true, force: true });
      return code;
    },
    restart: async () => {
      await d.stopKeep();
      return startDaemon({ ...opts, dir, fresh: false });
    },
    stopKeep: async () => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      const timer = new Promise<'timeout'>((res) => setTimeout(() => res('timeout'), 15_000));
      const r = await Promise.race([exited, timer]);
      if (r === 'timeout') {
        // A daemon stuck in a FUSE request ignores SIGKILL until the mount is gone.
        spawnSync('umount', ['-l', mount]);
        proc.kill('SIGKILL');
      }
      if (isMounted(mount)) spawnSync('umount', ['-l', mount]);
      return r === 'timeout' ? null : r;
    },
  };
  await waitForLog((l) => l.msg === 'serving');
  if (opts.awaitLedgers) for (const id of Object.keys(opts.homes ?? {})) await waitForLog((l) => l.msg === 'home ledger built' && l.home === id);
  return d;
}

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Run a real program asynchronously (the daemon is a child: no deadlock either way). */
export function runAsync(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv; input?: string; timeoutMs?: number } = {}): Promise<RunResult> {
  return new Promise((res) => {
    const p = spawn(cmd, args, { cwd: opts.cwd, env: { ...process.env, ...opts.env }, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const t = setTimeout(() => p.kill('SIGKILL'), opts.timeoutMs ?? 30_000);
    p.on('close', (code) => {
      clearTimeout(t);
      res({ code, stdout, stderr });
    });
    p.stdin.on('error', () => undefined); // a program that never reads its stdin
    p.stdin.end(opts.input ?? '');
  });
}

/** A PATH an unprivileged uid can use (root's pyenv shims live under 0700 /root). */
export const SYSTEM_PATH = `${dirname(process.execPath)}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`;

/** Run a shell snippet as an unprivileged uid (setpriv from util-linux). */
export function runAs(uid: number, gid: number, script: string, opts: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Promise<RunResult> {
  return runAsync('setpriv', [`--reuid=${uid}`, `--regid=${gid}`, '--clear-groups', 'sh', '-c', script], {
    ...opts,
    env: { PATH: SYSTEM_PATH, LANG: 'C.UTF-8', ...opts.env },
  });
}

/** Changes the configuration file of `d` (read at its next start or reload). */
export function rewriteConfig(d: Pick<RunningDaemon, 'dir'>, change: (c: Record<string, unknown>) => void): void {
  const file = join(d.dir, 'config.json');
  const c = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  change(c);
  writeFileSync(file, JSON.stringify(c));
}
