/**
 * `homesfs reload --config FILE [--takeover]`: the unit's ExecReload=. Run
 * from the package now installed, it asks the serving daemon which code it
 * runs. The same build: the configuration is re-read (the control socket's
 * `reload`, what SIGHUP does) and the outcome is the exit code. Another build
 * (or --takeover): it starts `homesfs serve --config FILE --takeover` of this
 * package beside the daemon and waits until that successor serves (exit 0) or
 * exits (its exit code: the old daemon serves on).
 *
 * Why from ExecReload=: systemd runs it inside the unit's cgroup, so the
 * successor it starts is the unit's too (its limits, its capability bounding
 * set, its journal), and a unit that is reloading does not stop when its main
 * process exits while this control process still runs. The old daemon names
 * the successor the unit's main process (MAINPID=) before it exits.
 */
import { spawn } from 'node:child_process';
import { closeSync, openSync, readlinkSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import type { Config } from '../config/schema.js';
import { ConfigError, loadConfig } from '../config/load.js';
import { ControlClientError, controlRequest } from '../control/client.js';
import { BUILD } from '../build-id.js';
import { VERSION } from '../version.js';
import { loadFuse } from '../fuse/binding.js';
import { askForLogs } from '../takeover.js';
import { EXIT } from './exitcodes.js';

/**
 * How long to wait for the successor to serve. Below systemd's reload timeout
 * (TimeoutStartSec=, 90 s in the unit), so the outcome is ours to report and
 * not a killed control process; the successor's own steps are bounded well
 * within it (the serving daemon gives up on a silent successor after 30 s).
 */
export const SERVE_WAIT_MS = 80_000;
const POLL_MS = 100;

/** What `status` must answer for this command (it reads nothing else). */
const RunningStatus = z.object({
  version: z.string(),
  // absent from daemons that predate it: their code is unknown, hence another build
  build: z.string().optional(),
  pid: z.number().int().positive(),
  session: z.object({ generation: z.number().int(), lastHandoverPauseMs: z.number().nullable() }).optional(),
});
type RunningStatus = z.infer<typeof RunningStatus>;

const ReloadOutcome = z.object({ message: z.string() });

/** Why this reload takes the session over, or null for a configuration reload. */
export function upgradeReason(running: { version: string; build?: string | undefined }, installed: { version: string; build: string }, force: boolean): string | null {
  if (force) return '--takeover';
  if (running.build === undefined) return `the running daemon (${running.version}) does not report its build`;
  if (running.version !== installed.version) return `version ${running.version} runs, ${installed.version} is installed`;
  if (running.build !== installed.build) return `build ${running.build} runs, ${installed.build} is installed (version ${installed.version})`;
  return null;
}

const say = (line: string) => process.stdout.write(`homesfs reload: ${line}\n`);
const complain = (line: string) => process.stderr.write(`homesfs reload: ${line}\n`);

async function status(socket: string): Promise<RunningStatus> {
  const reply = await controlRequest(socket, { cmd: 'status', args: {} }, { timeoutMs: 5_000 });
  if (!reply.ok) throw new ControlClientError('protocol', `status answered ${reply.code}: ${reply.message}`);
  const parsed = RunningStatus.safeParse(reply.data);
  if (!parsed.success) throw new ControlClientError('protocol', `status answered something else: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  return parsed.data;
}

/** Returns the exit code. */
export async function reloadCommand(configFile: string, forceTakeover: boolean): Promise<number> {
  let config: Config;
  try {
    config = loadConfig(configFile, {}).config;
  } catch (err) {
    if (err instanceof ConfigError) {
      complain(`${err.message}\nthe running daemon keeps its configuration and code`);
      return EXIT.CONFIG;
    }
    throw err;
  }
  const socket = config.socket;
  let running: RunningStatus;
  try {
    running = await status(socket);
  } catch (err) {
    if (!(err instanceof ControlClientError)) throw err;
    complain(`no daemon answers on ${socket} (${err.message}): nothing to reload; start it (systemctl start homesfs)`);
    return EXIT.INTERNAL;
  }
  const why = upgradeReason(running, { version: VERSION, build: BUILD }, forceTakeover);
  if (why === null) return await reloadConfig(socket, running);
  return await takeOver(configFile, config, running, why);
}

async function reloadConfig(socket: string, running: RunningStatus): Promise<number> {
  let reply;
  try {
    reply = await controlRequest(socket, { cmd: 'reload', args: {} }, { timeoutMs: 60_000 });
  } catch (err) {
    if (!(err instanceof ControlClientError)) throw err;
    complain(`the reload got no answer from ${socket}: ${err.message}`);
    return EXIT.INTERNAL;
  }
  if (!reply.ok) {
    // The daemon logged every reason; the gist, and the details, go to the journal here too.
    complain(`${reply.message}${reply.details ? ` ${JSON.stringify(reply.details)}` : ''}`);
    return EXIT.CONFIG;
  }
  const outcome = ReloadOutcome.safeParse(reply.data);
  say(`same build as the running daemon (pid ${running.pid}, ${VERSION}, build ${BUILD}): configuration reloaded, ${outcome.success ? outcome.data.message : 'done'}`);
  return EXIT.OK;
}

/** What a descriptor is, as /proc names it (a path, `pipe:[N]`, `socket:[N]`). */
function describeFd(fd: number): string {
  try {
    return readlinkSync(`/proc/self/fd/${fd}`);
  } catch {
    return `descriptor ${fd}`;
  }
}

/**
 * Where the successor's stdout and stderr go: where the serving daemon's go.
 * This command's own output is a shell's or ExecReload='s, and ends with it
 * (a shell that ran the reload and exited leaves a broken pipe: a daemon
 * that logs into it loses every line, and dies of the first EPIPE). Asked of
 * the daemon itself (its own descriptors over the takeover socket: the same
 * open files); a daemon that predates that is read through /proc (the same
 * pipe, tty or file, opened again: a file in append mode); a socket (the
 * journal's) cannot be opened so, and for such a descriptor (only) this
 * command's own is used.
 */
async function daemonOutput(config: Config, daemonPid: number): Promise<{ fds: [number | 'inherit', number | 'inherit']; how: string }> {
  let asked: { stdout: number; stderr: number } | null = null;
  let why = '';
  try {
    asked = await askForLogs(loadFuse().native, config);
    if (asked === null) why = 'the daemon does not hand its descriptors (an older build)';
  } catch (err) {
    why = (err as Error).message;
  }
  if (asked !== null) return { fds: [asked.stdout, asked.stderr], how: "the daemon's own descriptors" };
  // Each on its own: a daemon started with `> file` keeps a terminal's stderr, say.
  const fds = [1, 2].map((n): number | 'inherit' => {
    try {
      return openSync(`/proc/${daemonPid}/fd/${n}`, 'a');
    } catch (err) {
      complain(`cannot reopen pid ${daemonPid}'s ${n === 1 ? 'stdout' : 'stderr'} (${why}; /proc: ${(err as Error).message}): the successor's goes to this command's`);
      return 'inherit';
    }
  }) as [number | 'inherit', number | 'inherit'];
  return { fds, how: `reopened through /proc/${daemonPid}/fd (${why})` };
}

async function takeOver(configFile: string, config: Config, running: RunningStatus, why: string): Promise<number> {
  const socket = config.socket;
  const entry = fileURLToPath(new URL('./homesfs.js', import.meta.url));
  say(`${why}: starting ${VERSION} (build ${BUILD}) to take the session of pid ${running.pid} over`);
  const out = await daemonOutput(config, running.pid);
  const stdout = out.fds[0];
  if (stdout !== 'inherit') say(`the successor logs where pid ${running.pid} logs: ${describeFd(stdout)} (${out.how})`);
  // Its own session (setsid): it outlives this command, and a signal to this
  // command's process group is not for it.
  let child;
  try {
    child = spawn(process.execPath, [entry, 'serve', '--config', configFile, '--takeover'], { detached: true, stdio: ['ignore', ...out.fds] });
  } finally {
    // the child has its copies
    for (const fd of out.fds) if (fd !== 'inherit') closeSync(fd);
  }
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('exit', (code, signal) => resolve({ code, signal }));
    child.on('error', (err) => {
      complain(`cannot start ${entry}: ${err.message}`);
      resolve({ code: EXIT.INTERNAL, signal: null });
    });
  });
  let gone: { code: number | null; signal: NodeJS.Signals | null } | null = null;
  void exited.then((g) => (gone = g));
  const until = Date.now() + SERVE_WAIT_MS;
  for (;;) {
    if (gone !== null) {
      const g: { code: number | null; signal: NodeJS.Signals | null } = gone;
      const code = g.code ?? EXIT.INTERNAL;
      complain(
        `the successor (pid ${child.pid ?? '?'}) ${g.signal ? `was killed by ${g.signal}` : `exited ${code}`} before it served (its reason is ${out.fds[1] !== 'inherit' ? `in pid ${running.pid}'s log` : 'above'}); pid ${running.pid} (${running.version}) serves on`,
      );
      return code === 0 ? EXIT.INTERNAL : code;
    }
    // Answered by the successor: it serves, and the old daemon has exited (the
    // successor opens its control sockets only after that).
    const now = await status(socket).catch(() => null);
    if (now !== null && now.pid === child.pid) {
      child.unref();
      const pause = now.session?.lastHandoverPauseMs;
      say(`pid ${child.pid} (${now.version}, build ${now.build ?? '?'}) serves the session now (generation ${now.session?.generation ?? '?'}${pause !== null && pause !== undefined ? `, the mount paused ${pause} ms` : ''}); pid ${running.pid} exited`);
      return EXIT.OK;
    }
    if (Date.now() > until) {
      child.unref();
      complain(`the successor (pid ${child.pid ?? '?'}) does not serve after ${SERVE_WAIT_MS / 1000} s; it goes on (see the journal)`);
      return EXIT.INTERNAL;
    }
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}
