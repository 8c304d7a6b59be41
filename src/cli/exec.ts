import { constants as osConstants } from 'node:os';
import { isatty } from 'node:tty';
import { parseArgs } from 'node:util';
import type { HomeInfo } from '../control/api.js';
import { ControlClientError, controlRequest } from '../control/client.js';
import { parseAssignment } from '../exec/env.js';
import { DEFAULT_PLATFORM_SOCKET, execInHome, ResolveError } from '../exec/run.js';
import { HomesError } from '../errors.js';
import { groupLine, ownerUserName, passwdLine, type OwnerRecord } from '../users/names.js';
import { chooseSocket, DEFAULT_CONFIG, SocketConfigError } from './sockets.js';

/**
 * The two homesctl commands that are more than one request and a rendering:
 * `exec` (resolve, seal, run as the owner, pass the exit status through) and
 * `passwd` (owner lines for a container's /etc/passwd and /etc/group).
 */

export interface LocalIo {
  stdout: { write(s: string): unknown };
  stderr: { write(s: string): unknown };
  /** die of `signal` as the command did (the entry point); absent in tests, which get 128+n */
  raise?: (signal: NodeJS.Signals) => void;
}

export interface Globals {
  socket?: string;
  /** the daemon's configuration, read for the platform socket's path (--config) */
  config?: string;
  timeoutMs?: number;
  json?: boolean;
}

/** Exit codes of `homesctl exec` itself, as env(1) and chroot(1) use them; anything else is the command's. */
export const EXEC_EXIT = {
  /** homesctl exec failed: bad arguments, no answer from the socket, the daemon refused, not root */
  FAILED: 125,
  /** the command was found but could not be run */
  CANNOT_RUN: 126,
  /** the command was not found on the sealed PATH */
  NOT_FOUND: 127,
} as const;

export const EXEC_USAGE = `Usage: homesctl [--socket PATH | --config FILE] [--timeout MS] exec --tenant T --project P [--user U]
                [--env NAME=VALUE]... [--cwd DIR] [--create] -- CMD [ARG]...

Run CMD in the home that (T, P, U) resolves to, as the home's owner (never root; no
supplementary groups, no new privileges, no capabilities; oom_score_adj and rlimits from the
daemon's exec policy), with a sealed environment, in this order: the allow-listed variables of
this environment (default LANG, LC_*, TERM, TZ); PATH from the daemon's exec.path (never this
environment's), HOME = the home, USER, LOGNAME, SHELL and EMAIL of the owner; cache and config
locations redirected inside the home; the home's .homesfs/env.sh (checked with sh -n first,
skipped with a warning when broken); then the --env extras, which win over everything.

Options:
  --tenant T          the tenant (required)
  --project P         the project (required)
  --user U            the requesting user, for user-scoped homes
  --env NAME=VALUE    add or override a variable (repeatable)
  --cwd DIR           working directory inside the home (relative to it, or absolute under it)
  --create            make the home when it does not exist, as the platform's resolve does;
                      without it a missing home is refused (exit 125) with the nearest names

The home is resolved over the platform socket: --socket, else $HOMESFS_PLATFORM_SOCKET, else
"platformSocket" in the daemon's configuration (--config FILE, else $HOMESFS_CONFIG, else
${DEFAULT_CONFIG} when it exists), else ${DEFAULT_PLATFORM_SOCKET}. Needs root.

Exit status: CMD's own; when CMD is killed by a signal, homesctl kills itself with the same
signal (128+n for signals that would dump core). 125: homesctl exec failed; 126: CMD was
found but cannot be run (not executable, a directory); 127: CMD not found on the sealed PATH.
`;

export const PASSWD_USAGE = `Usage: homesctl [--socket PATH | --config FILE] passwd [--tenant T] [--group] [--home-dir DIR] [HOME]...

Print /etc/passwd lines (with --group: /etc/group lines) for the owners of the given homes
("tenant/key"), of every home of tenant T, or of every home: the names the daemon publishes for
NSS on the node, for containers that receive a home. No password, no login shell.

Options:
  --tenant T        only the homes of tenant T
  --group           print group lines instead of passwd lines
  --home-dir DIR    the home directory to write (e.g. /home/user where a pod mounts the home);
                    default the home's path under the mount
`;

const FORWARDED: NodeJS.Signals[] = ['SIGTERM', 'SIGHUP', 'SIGINT', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2', 'SIGALRM'];
/** A terminal sends these to its whole foreground process group, the command included. */
const FROM_TERMINAL: ReadonlySet<NodeJS.Signals> = new Set(['SIGINT', 'SIGQUIT']);
/** Re-raising these would dump homesctl's core: exit 128+n instead. */
const CORE_DUMPING: ReadonlySet<string> = new Set(['SIGQUIT', 'SIGILL', 'SIGTRAP', 'SIGABRT', 'SIGBUS', 'SIGFPE', 'SIGSEGV', 'SIGXCPU', 'SIGXFSZ', 'SIGSYS']);

export async function execCli(args: string[], globals: Globals, env: NodeJS.ProcessEnv, io: LocalIo): Promise<number> {
  const fail = (msg: string) => {
    io.stderr.write(`homesctl: exec: ${msg}\n`);
    return EXEC_EXIT.FAILED;
  };
  const dash = args.indexOf('--');
  const optionArgs = dash === -1 ? args : args.slice(0, dash);
  const argv = dash === -1 ? [] : args.slice(dash + 1);
  let values: Record<string, string | boolean | string[] | undefined>;
  try {
    const parsed = parseArgs({
      args: optionArgs,
      strict: true,
      allowPositionals: false,
      options: {
        tenant: { type: 'string' },
        project: { type: 'string' },
        user: { type: 'string' },
        env: { type: 'string', multiple: true },
        cwd: { type: 'string' },
        create: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    });
    values = parsed.values;
  } catch (err) {
    return fail(`${(err as Error).message}\nTry 'homesctl exec --help'.`);
  }
  if (values.help) {
    io.stdout.write(EXEC_USAGE);
    return 0;
  }
  if (typeof values.tenant !== 'string' || typeof values.project !== 'string') return fail("--tenant and --project are required\nTry 'homesctl exec --help'.");
  if (argv.length === 0) return fail("no command: give it after '--'\nTry 'homesctl exec --help'.");
  const extras: Record<string, string> = {};
  try {
    for (const a of (values.env as string[] | undefined) ?? []) {
      const [k, v] = parseAssignment(a);
      extras[k] = v;
    }
  } catch (err) {
    return fail((err as Error).message);
  }

  let socket;
  try {
    socket = chooseSocket('platform', { socket: globals.socket, config: globals.config }, env).path;
  } catch (err) {
    if (err instanceof SocketConfigError) return fail(err.message);
    throw err;
  }
  let run;
  try {
    run = await execInHome({
      tenant: values.tenant,
      project: values.project,
      ...(typeof values.user === 'string' ? { user: values.user } : {}),
      // An admin's typo must not make a home (and spend an owner uid for good): only --create does.
      create: values.create === true,
      socket,
      ...(globals.timeoutMs !== undefined ? { timeoutMs: globals.timeoutMs } : {}),
      argv,
      env: extras,
      ...(typeof values.cwd === 'string' ? { cwd: values.cwd } : {}),
      callerEnv: env,
      stdio: 'inherit',
    });
  } catch (err) {
    if (err instanceof ResolveError) return fail(`${err.code}: ${err.message}`);
    // Found before the command ran: not found (127) or not executable (126), as env(1) would exit.
    const status = err instanceof HomesError ? err.details.exitStatus : undefined;
    if (status === EXEC_EXIT.NOT_FOUND || status === EXEC_EXIT.CANNOT_RUN) {
      io.stderr.write(`homesctl: exec: ${err instanceof Error ? err.message : ''}\n`);
      return status;
    }
    if (err instanceof HomesError || err instanceof ControlClientError) return fail(err.message);
    throw err;
  }
  for (const w of run.warnings) io.stderr.write(`homesctl: warning: ${w}\n`);

  // Pass signals on to the command; those a terminal delivers to the command
  // itself are not sent twice.
  const tty = isatty(0);
  const handlers = new Map<NodeJS.Signals, () => void>();
  for (const sig of FORWARDED) {
    const h = tty && FROM_TERMINAL.has(sig) ? () => undefined : () => void run.child.kill(sig);
    handlers.set(sig, h);
    process.on(sig, h);
  }
  let result;
  try {
    result = await run.exited;
  } catch (err) {
    return fail(`could not start the command: ${(err as Error).message}`);
  } finally {
    for (const [sig, h] of handlers) process.removeListener(sig, h);
  }
  if (result.signal !== null) {
    if (!CORE_DUMPING.has(result.signal)) io.raise?.(result.signal);
    return 128 + (osConstants.signals[result.signal] ?? 0);
  }
  return result.code ?? EXEC_EXIT.FAILED;
}

export async function passwdCli(args: string[], globals: Globals & { socket: string; timeoutMs: number }, io: LocalIo): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args,
      strict: true,
      allowPositionals: true,
      options: { tenant: { type: 'string' }, group: { type: 'boolean' }, 'home-dir': { type: 'string' }, help: { type: 'boolean', short: 'h' } },
    });
  } catch (err) {
    io.stderr.write(`homesctl: passwd: ${(err as Error).message}\nTry 'homesctl passwd --help'.\n`);
    return 2;
  }
  const { values, positionals } = parsed;
  if (values.help) {
    io.stdout.write(PASSWD_USAGE);
    return 0;
  }
  const homeDir = values['home-dir'];
  if (homeDir !== undefined && (!homeDir.startsWith('/') || /[:\n]/.test(homeDir))) {
    io.stderr.write(`homesctl: passwd: --home-dir must be an absolute path without ':'\n`);
    return 2;
  }
  let reply;
  try {
    reply = await controlRequest(globals.socket, { cmd: 'list', args: {} }, { timeoutMs: globals.timeoutMs });
  } catch (err) {
    io.stderr.write(`homesctl: ${(err as Error).message}\n`);
    return 3;
  }
  if (!reply.ok) {
    io.stderr.write(`homesctl: ${reply.code}: ${reply.message}\n`);
    return 1;
  }
  const homes = reply.data as HomeInfo[];
  const wanted = new Set(positionals);
  const chosen = homes.filter((h) => (values.tenant === undefined || h.tenant === values.tenant) && (wanted.size === 0 || wanted.has(`${h.tenant}/${h.key}`)));
  for (const w of wanted) {
    if (!chosen.some((h) => `${h.tenant}/${h.key}` === w)) {
      io.stderr.write(`homesctl: passwd: no home ${w}\n`);
      return 1;
    }
  }
  const lines: string[] = [];
  const seen = new Set<number>();
  for (const h of chosen) {
    const r: OwnerRecord = { name: ownerUserName(h.tenant, h.key), uid: h.owner.uid, gid: h.owner.gid, home: `${h.tenant}/${h.key}`, dir: homeDir ?? h.path };
    if (/[:\n]/.test(r.dir)) {
      io.stderr.write(`homesctl: passwd: skipped ${r.home}: its path contains ':' (use --home-dir)\n`);
      continue;
    }
    const id = values.group ? r.gid : r.uid;
    if (seen.has(id)) continue; // one line per id: two entries for one id confuse every lookup
    seen.add(id);
    lines.push(values.group ? groupLine(r) : passwdLine(r));
  }
  io.stdout.write(lines.map((l) => `${l}\n`).join(''));
  return 0;
}
