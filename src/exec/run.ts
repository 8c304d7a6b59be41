import { execFile, spawn, type ChildProcess, type StdioOptions } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import { basename, isAbsolute, resolve as resolvePath } from 'node:path';
import { z } from 'zod';
import { ControlClientError, controlRequest } from '../control/client.js';
import type { ControlCode } from '../control/protocol.js';
import { HomesError } from '../errors.js';
import { ownerUserName } from '../users/names.js';
import { baseEnv, checkExtras, cwdInHome, envFromDump, sealedEnv, type CallerEnv, type Env, type OwnerIdentity } from './env.js';
import { DEFAULT_EXEC_POLICY, ExecPolicySchema, SEALED_NAMES, type ExecPolicy } from './policy.js';

/**
 * Starting a command in a home the way the platform should: resolve the home
 * over the platform socket, seal the environment, and run the command as the
 * home's owner. The privilege change is a chain of exec's of util-linux tools,
 * each replacing the previous one in the same process:
 *
 *   prlimit (rlimits) → choom (oom_score_adj) → setpriv (uid/gid, no groups,
 *   no new privileges, no capabilities) → env -C (enter the home as the
 *   owner) → CMD
 *
 * Every link is started with the sealed environment already, so no process
 * the owner's uid can read (/proc/<pid>/environ) ever holds the caller's
 * variables: the caller itself runs as root.
 */

export const DEFAULT_PLATFORM_SOCKET = '/run/homesfs-platform/platform.sock';

const PosixId = z.int().min(0).max(0xfffffffe);
const ResolvedHomeSchema = z.object({
  tenant: z.string(),
  scope: z.enum(['project', 'tenant', 'user']),
  key: z.string(),
  home: z.string().refine((p) => isAbsolute(p) && !p.includes('\0'), { message: 'an absolute path' }),
  owner: z.object({ uid: PosixId, gid: PosixId }),
  created: z.boolean(),
  source: z.enum(['user', 'project', 'tenant', 'default']),
  userName: z.string().optional(),
  exec: z.preprocess(policyOfEarlierDaemon, ExecPolicySchema).optional(),
});

/**
 * A daemon not yet restarted onto this version (nodes are rolled one by one)
 * sends its exec policy with keys this one no longer has (`defaultPath`) and
 * PATH on its allow-list: read what still applies, rather than refuse every
 * exec until the daemon restarts. PATH then comes from `path`'s default.
 */
function policyOfEarlierDaemon(raw: unknown): unknown {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return raw;
  const known = Object.fromEntries(Object.entries(raw).filter(([k]) => Object.hasOwn(ExecPolicySchema.shape, k)));
  if (Array.isArray(known.allowEnv)) known.allowEnv = known.allowEnv.filter((p: unknown) => !(SEALED_NAMES as readonly unknown[]).includes(p));
  return known;
}

/**
 * A `resolve` answer, with the exec policy the daemon's configuration sets
 * (defaults when it sent none) and the owner's identity on this node.
 */
export type ResolvedHome = Omit<z.infer<typeof ResolvedHomeSchema>, 'exec'> & { exec: ExecPolicy; identity: OwnerIdentity };

/** The daemon answered `resolve` with an error. */
export class ResolveError extends Error {
  constructor(
    readonly code: ControlCode,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
    this.name = 'ResolveError';
  }
}

export interface ResolveHomeOptions {
  tenant: string;
  project: string;
  user?: string;
  /** false: a missing home is refused (NOT_FOUND, with the nearest names in details.nearest), not made; default true */
  create?: boolean;
  /** default: the platform socket, /run/homesfs-platform/platform.sock */
  socket?: string;
  timeoutMs?: number;
}

/**
 * Ask the daemon for the HOME and owner of (tenant, project, user?), as the
 * platform does: the home is created if missing (unless `create` is false). Rejects with ResolveError
 * (the daemon's code and message) or ControlClientError (no usable answer).
 */
export async function resolveHome(opts: ResolveHomeOptions): Promise<ResolvedHome> {
  const args = { tenant: opts.tenant, project: opts.project, ...(opts.user !== undefined ? { user: opts.user } : {}), ...(opts.create !== undefined ? { create: opts.create } : {}) };
  const reply = await controlRequest(opts.socket ?? DEFAULT_PLATFORM_SOCKET, { cmd: 'resolve', args }, { timeoutMs: opts.timeoutMs ?? 10_000 });
  if (!reply.ok) throw new ResolveError(reply.code, reply.message, reply.details);
  const home = resolvedFromReply(reply.data);
  return { ...home, identity: await ownerIdentity(home) };
}

/** The data of a successful `resolve` reply, checked; ControlClientError when it is not one. */
export function resolvedFromReply(data: unknown): Omit<ResolvedHome, 'identity'> {
  const parsed = ResolvedHomeSchema.safeParse(data);
  if (!parsed.success) {
    throw new ControlClientError('protocol', `resolve reply is malformed: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  }
  return { ...parsed.data, exec: parsed.data.exec ?? DEFAULT_EXEC_POLICY };
}

// ---- the owner's identity ------------------------------------------------------

/** Shells that refuse to run anything: a record with one has no shell to offer SHELL. */
const NO_SHELL = new Set(['nologin', 'false']);

/**
 * The owner as this node's user database knows it (`getent passwd <uid>`:
 * the daemon's userdb records, or whatever NSS has for the uid), else as the
 * daemon names it. Never fails: a node without the record still gets a name.
 */
export async function ownerIdentity(home: Pick<ResolvedHome, 'tenant' | 'key' | 'owner' | 'userName'>): Promise<OwnerIdentity> {
  const fallback = home.userName ?? ownerUserName(home.tenant, home.key);
  const line = await new Promise<string | null>((resolve) => {
    let getent: string;
    try {
      getent = tool('getent');
    } catch {
      return resolve(null);
    }
    execFile(getent, ['passwd', String(home.owner.uid)], { env: {}, timeout: 5000, maxBuffer: 64 * 1024 }, (err, stdout) => resolve(err ? null : stdout.split('\n')[0]!));
  });
  const f = line?.split(':');
  if (!f || f.length < 7 || f[0] === '' || Number(f[2]) !== home.owner.uid) {
    // git would stop at "unable to auto-detect name": give it the name the daemon's record would carry.
    return { name: fallback, gitName: `homesfs ${home.tenant}/${home.key}` };
  }
  const [name, , , , gecos, , shell] = f as [string, string, string, string, string, string, string];
  const identity: OwnerIdentity = { name };
  if (shell.startsWith('/') && !NO_SHELL.has(basename(shell)) && existsSync(shell)) identity.shell = shell;
  // git takes the real name up to the first comma; an empty one is refused.
  if (gecos.split(',')[0]!.trim() === '') identity.gitName = name;
  return identity;
}

// ---- the privilege chain -----------------------------------------------------

const TOOL_DIRS = ['/usr/bin', '/bin', '/usr/sbin', '/sbin'];

/** An absolute path of a system tool; never looked up on the caller's PATH. */
function tool(name: string): string {
  for (const d of TOOL_DIRS) if (existsSync(`${d}/${name}`)) return `${d}/${name}`;
  throw new HomesError('NOT_FOUND', `${name} (util-linux) is not installed: it is needed to run commands as a home's owner`);
}

type Limit = number | 'unlimited';

/** The caller's hard limits, from /proc/self/limits (Node has no getrlimit). */
function currentHardLimits(): Map<string, Limit> {
  const rows: Record<string, string> = {
    'Max cpu time': 'cpu', 'Max file size': 'fsize', 'Max data size': 'data', 'Max stack size': 'stack', 'Max core file size': 'core',
    'Max resident set': 'rss', 'Max processes': 'nproc', 'Max open files': 'nofile', 'Max locked memory': 'memlock', 'Max address space': 'as',
    'Max file locks': 'locks', 'Max pending signals': 'sigpending', 'Max msgqueue size': 'msgqueue', 'Max nice priority': 'nice',
    'Max realtime priority': 'rtprio', 'Max realtime timeout': 'rttime',
  };
  const out = new Map<string, Limit>();
  let text = '';
  try {
    text = readFileSync('/proc/self/limits', 'utf8');
  } catch {
    return out;
  }
  for (const line of text.split('\n')) {
    for (const [label, name] of Object.entries(rows)) {
      if (!line.startsWith(label)) continue;
      const hard = line.slice(label.length).trim().split(/\s+/)[1];
      if (hard === 'unlimited') out.set(name, 'unlimited');
      else if (hard !== undefined && /^[0-9]+$/.test(hard)) out.set(name, Number(hard));
    }
  }
  return out;
}

const lower = (a: Limit, b: Limit | undefined): Limit => (b === undefined || b === 'unlimited' ? a : a === 'unlimited' ? b : Math.min(a, b));

/**
 * prlimit arguments: the configured limits, a hard limit above the caller's
 * lowered to it (raising one needs CAP_SYS_RESOURCE, which a container's root
 * may lack), and the soft limit never above the hard one.
 */
export function rlimitArgs(policy: Pick<ExecPolicy, 'rlimits'>, current: Map<string, Limit> = currentHardLimits()): string[] {
  const args: string[] = [];
  for (const [name, l] of Object.entries(policy.rlimits)) {
    if (!l) continue;
    const hard = lower(l.hard, current.get(name));
    const soft = lower(l.soft, hard);
    args.push(`--${name}=${soft}:${hard}`);
  }
  return args;
}


/** argv that runs `argv` as `owner` in `cwd` with no trace of the caller's privileges. */
export function ownerCommand(owner: { uid: number; gid: number }, policy: Pick<ExecPolicy, 'rlimits' | 'oomScoreAdj'>, cwd: string, argv: readonly string[]): string[] {
  if (owner.uid === 0 || owner.gid === 0) throw new HomesError('ACCESS_DENIED', 'the home is owned by root: commands are never run as root');
  // env(1) would take a command name with '=' for an assignment.
  if (argv[0]?.includes('=')) throw new HomesError('INVALID_ARGUMENT', `a command name may not contain '=': ${argv[0]}`);
  const limits = rlimitArgs(policy);
  return [
    ...(limits.length > 0 ? [tool('prlimit'), ...limits, '--'] : []),
    tool('choom'), '-n', String(policy.oomScoreAdj), '--',
    tool('setpriv'), `--reuid=${owner.uid}`, `--regid=${owner.gid}`, '--clear-groups', '--no-new-privs',
    '--inh-caps=-all', '--bounding-set=-all', '--pdeathsig=SIGKILL', '--',
    // env(1) enters the directory as the owner (125 when it cannot), adds nothing, and exec's the command.
    tool('env'), '-C', cwd, '--', ...argv,
  ];
}

// ---- the tools file ---------------------------------------------------------

/**
 * Sourced by the owner in the home: exit 10 when the file is absent, 11 when
 * `sh -n` rejects it; otherwise its own output goes to stderr and the
 * resulting environment to fd 3 (the original stdout) as `env -0`.
 */
const SOURCE = [
  '[ -e "$1" ] || exit 10',
  '[ -f "$1" ] || { echo "not a regular file" >&2; exit 11; }',
  '/bin/sh -n "$1" || exit 11',
  'exec 3>&1 1>&2',
  '. "$1"',
  'exec /usr/bin/env -0 >&3',
].join('\n');

const MAX_DUMP = 1024 * 1024;
const MAX_MESSAGES = 8 * 1024;

export type ToolsFileResult =
  | { state: 'absent' }
  | { state: 'applied'; env: Env }
  | { state: 'skipped'; reason: string };

/**
 * Source the home's tools file as the owner on top of `base`, after `sh -n`
 * accepted it (agent-toolbox's guard): a broken or failing file is skipped
 * with a reason, never fatal.
 */
export function applyToolsFile(home: Pick<ResolvedHome, 'home' | 'owner' | 'exec'>, base: Env): Promise<ToolsFileResult> {
  const { envFile, envFileTimeoutMs } = home.exec;
  if (envFile === '') return Promise.resolve({ state: 'absent' });
  const [file, ...args] = ownerCommand(home.owner, home.exec, home.home, ['/bin/sh', '-c', SOURCE, 'homesfs-env', envFile]);
  return new Promise((resolve) => {
    const child = spawn(file!, args, { cwd: '/', env: base, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    const out: Buffer[] = [];
    let outBytes = 0;
    let messages = '';
    let timedOut = false;
    child.stdout!.on('data', (d: Buffer) => {
      outBytes += d.length;
      if (outBytes <= MAX_DUMP) out.push(d);
    });
    child.stderr!.on('data', (d: Buffer) => {
      if (messages.length < MAX_MESSAGES) messages += d.toString('utf8');
    });
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid!, 'SIGKILL'); // its own process group: whatever it started goes too
      } catch {
        // already gone
      }
    }, envFileTimeoutMs);
    const said = () => (messages.trim() ? `: ${messages.trim().slice(0, 2000)}` : '');
    child.on('error', (err) => {
      clearTimeout(timer);
      resolve({ state: 'skipped', reason: `could not run the shell: ${err.message}` });
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (timedOut) return resolve({ state: 'skipped', reason: `${envFile} did not finish within ${envFileTimeoutMs} ms` });
      if (code === 10) return resolve({ state: 'absent' });
      if (code === 11) return resolve({ state: 'skipped', reason: `${envFile} is broken (sh -n)${said()}` });
      if (code !== 0) return resolve({ state: 'skipped', reason: `sourcing ${envFile} failed (${signal ?? `exit ${code}`})${said()}` });
      if (outBytes > MAX_DUMP) return resolve({ state: 'skipped', reason: `${envFile} left an environment over ${MAX_DUMP} bytes` });
      resolve({ state: 'applied', env: envFromDump(Buffer.concat(out).toString('utf8'), base) });
    });
  });
}

// ---- finding the command ---------------------------------------------------------

/** glibc's execvp searches this when PATH is unset. */
const EXECVP_DEFAULT_PATH = '/bin:/usr/bin';

export type CommandLookup = { found: true } | { found: false; exitStatus: 126 | 127; message: string };

/**
 * Look for `command` as execvp(3) will, before anything runs as the owner,
 * for an exit status and a message that say what is wrong: 127 when no
 * candidate exists, 126 when every one that exists cannot be executed (a
 * directory, no execute bit). Looked at as root, who sees at least what the
 * owner sees: a candidate root cannot judge (EACCES, say) leaves the answer to
 * execvp itself, as do the owner's own permissions on what root finds.
 */
export async function findCommand(command: string, path: string | undefined, cwd: string): Promise<CommandLookup> {
  const search = path ?? EXECVP_DEFAULT_PATH;
  const candidates = command.includes('/') ? [resolvePath(cwd, command)] : search.split(':').map((d) => resolvePath(cwd, d === '' ? '.' : d, command));
  const cannot: string[] = [];
  let unsure = false;
  for (const c of candidates) {
    try {
      const st = await stat(c);
      if (st.isFile() && (st.mode & 0o111) !== 0) return { found: true };
      cannot.push(st.isDirectory() ? `${c} is a directory` : st.isFile() ? `${c} is not executable (mode ${(st.mode & 0o7777).toString(8).padStart(4, '0')})` : `${c} is not a regular file`);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTDIR') unsure = true;
    }
  }
  if (unsure) return { found: true };
  if (cannot.length > 0) return { found: false, exitStatus: 126, message: `${command}: cannot be run: ${cannot.join('; ')}` };
  return {
    found: false,
    exitStatus: 127,
    message: command.includes('/') ? `${command}: no such file` : `${command}: command not found (PATH=${search})`,
  };
}

// ---- exec ---------------------------------------------------------------------

export interface ExecInHomeOptions extends Partial<ResolveHomeOptions> {
  /** the command and its arguments; the command is looked up on the sealed PATH */
  argv: readonly string[];
  /** the caller's extras: they win over everything, HOME and PATH included */
  env?: Readonly<Record<string, string>>;
  /** working directory inside the home (relative to it, or absolute under it); default the home */
  cwd?: string;
  /** where allow-listed variables come from; default process.env (nothing else of it is read) */
  callerEnv?: CallerEnv;
  /** default 'inherit' */
  stdio?: StdioOptions;
  /** an already resolved home (skips the socket round trip) */
  resolved?: ResolvedHome;
}

export interface ExecInHome {
  child: ChildProcess;
  home: ResolvedHome;
  /** exactly the environment the command starts with */
  env: Env;
  tools: ToolsFileResult;
  /** human-readable notes, e.g. a skipped tools file */
  warnings: string[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Resolve the home (unless given), seal the environment, and start `argv` in
 * the home as its owner. Needs root (it changes uid). The returned child is
 * the command itself (the privilege chain exec's into it), so its pid is the
 * command's and signals sent to it reach the command.
 */
export async function execInHome(opts: ExecInHomeOptions): Promise<ExecInHome> {
  if (opts.argv.length === 0 || opts.argv[0] === '') throw new HomesError('INVALID_ARGUMENT', 'no command given');
  if (process.geteuid?.() !== 0) throw new HomesError('ACCESS_DENIED', 'running a command as a home owner needs root');
  let home = opts.resolved;
  if (home === undefined) {
    if (opts.tenant === undefined || opts.project === undefined) throw new HomesError('INVALID_ARGUMENT', 'tenant and project are required');
    home = await resolveHome({ tenant: opts.tenant, project: opts.project, ...(opts.user !== undefined ? { user: opts.user } : {}), ...(opts.create !== undefined ? { create: opts.create } : {}), ...(opts.socket !== undefined ? { socket: opts.socket } : {}), ...(opts.timeoutMs !== undefined ? { timeoutMs: opts.timeoutMs } : {}) });
  }
  const cwd = cwdInHome(home.home, opts.cwd);
  const callerEnv = opts.callerEnv ?? process.env;
  const extras = opts.env ?? {};
  // Validate the extras before anything runs as the owner.
  checkExtras(extras);
  const owner = home.identity ?? (await ownerIdentity(home));
  const base = baseEnv(callerEnv, home.home, home.exec, owner);
  const tools = await applyToolsFile(home, base);
  const warnings = tools.state === 'skipped' ? [`the home's tools file was skipped: ${tools.reason}`] : [];
  const env = sealedEnv({ callerEnv, home: home.home, policy: home.exec, owner, toolsEnv: tools.state === 'applied' ? tools.env : null, extras });
  const lookup = await findCommand(opts.argv[0]!, env.PATH, cwd);
  if (!lookup.found) throw new HomesError(lookup.exitStatus === 127 ? 'NOT_FOUND' : 'ACCESS_DENIED', lookup.message, { command: opts.argv[0], exitStatus: lookup.exitStatus });
  const [file, ...args] = ownerCommand(home.owner, home.exec, cwd, opts.argv);
  const child = spawn(file!, args, { cwd: '/', env, stdio: opts.stdio ?? 'inherit' });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code, signal) => resolve({ code, signal }));
  });
  return { child, home, env, tools, warnings, exited };
}
