#!/usr/bin/env node
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import type { DeleteResult, HomeInfo, RenameResult, RescanResult, ResolveResult, SettingsView, StatusReport } from '../control/api.js';
import { ControlClientError, controlRequest } from '../control/client.js';
import { MAX_ID, type ArgsOf, type CommandName } from '../control/protocol.js';

/**
 * homesctl [--socket PATH] [--json] [--timeout MS] <command> [args]
 *
 * Adding a command: one entry in COMMANDS below (the compiler insists on one
 * per daemon command): its options/positionals, how they become the request's
 * `args`, and how the reply's `data` is printed for humans.
 */

export const EXIT = {
  OK: 0,
  /** The daemon answered with an error reply. */
  ERROR_REPLY: 1,
  /** Bad command line. */
  USAGE: 2,
  /** No usable answer: cannot connect, timeout, connection dropped, malformed reply. */
  UNREACHABLE: 3,
} as const;

export const DEFAULT_SOCKET = '/run/homesfs/admin.sock';
const DEFAULT_TIMEOUT_MS = 10_000;

type OptionsConfig = NonNullable<ParseArgsConfig['options']>;
type Values = Record<string, string | boolean | (string | boolean)[] | undefined>;

interface CliCommand<K extends CommandName> {
  /** The words that name it on the command line when they differ from the wire name ("settings get"). */
  cli?: string;
  summary: string;
  /** Argument synopsis after the command name, e.g. "HOME BYTES". */
  synopsis?: string;
  /** Longer help text printed by `homesctl <command> --help`. */
  description?: string;
  options?: OptionsConfig;
  /** [flag as shown, explanation] for the command's own options. */
  optionHelp?: ReadonlyArray<readonly [string, string]>;
  positionals?: { min: number; max: number };
  /** Client timeout when --timeout is not given. */
  timeoutMs?: number;
  /** Turn the parsed command line into the request's args; throw UsageError on nonsense. */
  args(values: Values, positionals: string[]): ArgsOf<K>;
  /** Human-readable rendering of the reply's `data`; gets the request's args for context. */
  human(data: unknown, args: ArgsOf<K>): string;
  /** Takes --force: a BUSY reply then hints at it. */
  force?: boolean;
}

/** A table entry without the link between name and argument type, for the generic driver code below. */
interface LooseCliCommand extends Omit<CliCommand<CommandName>, 'args' | 'human'> {
  args(values: Values, positionals: string[]): unknown;
  human(data: unknown, args: unknown): string;
}

class UsageError extends Error {
  /** The command whose usage was wrong, for the "Try 'homesctl CMD --help'" hint. */
  readonly command: string | undefined;
  constructor(message: string, command?: string) {
    super(message);
    this.command = command;
  }
}

// ---- commands -------------------------------------------------------------

const HOME_HELP = 'HOME is "tenant/key": the project name, _tenant or _user_<login>.';
const FORCE_HELP = ['--force', 'go ahead even while files are open or working directories are inside'] as const;
const TENANT_OPT = { tenant: { type: 'string' } } as const satisfies OptionsConfig;
const TARGET_OPTS = { tenant: { type: 'string' }, project: { type: 'string' }, user: { type: 'string' } } as const satisfies OptionsConfig;

const COMMANDS: { readonly [K in CommandName]: CliCommand<K> } = {
  status: {
    summary: 'Mount liveness, native self-check and per-home scan progress',
    description: 'Shows whether the mount answers, the FUSE loop state, the native layer self-check, uptime, and each home with its scan state and usage. Served on the admin and the platform socket.',
    positionals: { min: 0, max: 0 },
    args: () => ({}),
    human: (data) => renderStatus(data as StatusReport),
  },
  list: {
    summary: 'Every home with its scope, owner, profile, usage and budget',
    description: 'One row per home. FLAGS shows `orphan` for a project home left behind by a home-scope change (its project now resolves to a shared home), and the scan state while a home is not scanned yet.',
    positionals: { min: 0, max: 0 },
    args: () => ({}),
    human: (data) => renderList(data as HomeInfo[]),
  },
  usage: {
    summary: "One home's usage, budget, owner and profile",
    synopsis: 'HOME',
    description: HOME_HELP,
    positionals: { min: 1, max: 1 },
    args: (_v, p) => ({ home: homeArg(p[0]!, 'usage') }),
    human: (data) => renderHome(data as HomeInfo) + '\n',
  },
  create: {
    summary: 'Create a home, optionally with a profile, budget and owner',
    synopsis: 'HOME [--profile P] [--budget BYTES] [--owner UID:GID]',
    description: `${HOME_HELP} Fails with EXISTS if the home exists. Without --owner the daemon allocates an owner uid/gid from its range.`,
    options: { profile: { type: 'string' }, budget: { type: 'string' }, owner: { type: 'string' } },
    optionHelp: [
      ['--profile P', 'policy profile for the home (default: from the config)'],
      ['--budget BYTES', 'byte budget, e.g. 500M or 2GiB (K/M/G = KiB/MiB/GiB); 0 = off'],
      ['--owner UID:GID', 'owner of the home instead of an allocated one'],
    ],
    positionals: { min: 1, max: 1 },
    args: (v, p) => {
      const a: ArgsOf<'create'> = { home: homeArg(p[0]!, 'create') };
      if (typeof v.profile === 'string') a.profile = v.profile;
      if (typeof v.budget === 'string') a.budget = parseSize(v.budget, 'create', '--budget');
      if (typeof v.owner === 'string') a.owner = parseOwner(v.owner, 'create');
      return a;
    },
    human: (data) => `Created ${homeName(data as HomeInfo)}.\n${renderHome(data as HomeInfo)}\n`,
  },
  'set-budget': {
    summary: "Change a home's byte budget while it serves (0 = off)",
    synopsis: 'HOME BYTES',
    description:
      `${HOME_HELP} BYTES is a plain number of bytes or one with a suffix K, M, G, T (or KiB, MiB, GiB, TiB; powers of 1024); 0 or "off" removes the budget. ` +
      'Lowering the budget below current usage deletes nothing: the home just cannot grow until it is back under.',
    positionals: { min: 2, max: 2 },
    args: (_v, p) => ({ home: homeArg(p[0]!, 'set-budget'), bytes: parseSize(p[1]!, 'set-budget', 'BYTES') }),
    human: (data) => {
      const h = data as HomeInfo;
      const over = h.budget > 0 && h.bytes > h.budget ? ' (over budget: the home cannot grow until it is back under)' : '';
      return `Budget of ${homeName(h)}: ${formatBudget(h.budget)}; used ${formatBytes(h.bytes)}${over}.\n`;
    },
  },
  'set-profile': {
    summary: "Override a home's policy profile (or --clear the override)",
    synopsis: 'HOME (PROFILE | --clear)',
    description: `${HOME_HELP} Give exactly one of PROFILE and --clear.`,
    options: { clear: { type: 'boolean' } },
    optionHelp: [['--clear', 'remove the override: the profile comes from the config again']],
    positionals: { min: 1, max: 2 },
    args: (v, p) => {
      if (v.clear === true && p[1] !== undefined) throw new UsageError('set-profile: give PROFILE or --clear, not both', 'set-profile');
      if (v.clear !== true && p[1] === undefined) throw new UsageError('set-profile: missing PROFILE (or --clear)', 'set-profile');
      return { home: homeArg(p[0]!, 'set-profile'), profile: v.clear === true ? null : p[1]! };
    },
    human: (data) => {
      const h = data as HomeInfo;
      return `Profile of ${homeName(h)}: ${clean(h.profile)} (${h.profileSource}).\n`;
    },
  },
  'settings-get': {
    cli: 'settings get',
    summary: 'Show the home-scope setting of a tenant, project or user',
    synopsis: '--tenant T [--project P | --user L]',
    description: 'Shows the home-scope values stored at the tenant level and, if asked, for a project or a user; with --project also what `resolve` would answer for it.',
    options: TARGET_OPTS,
    optionHelp: [
      ['--tenant T', 'the tenant (required)'],
      ['--project P', 'also show this project\'s setting and how it resolves'],
      ['--user L', 'also show this user\'s setting'],
    ],
    positionals: { min: 0, max: 0 },
    args: (v) => settingsTarget(v, 'settings get'),
    human: (data) => renderSettings(data as SettingsView),
  },
  'settings-set': {
    cli: 'settings set',
    summary: 'Set the home-scope setting at the tenant, project or user level',
    synopsis: '--tenant T [--project P | --user L] SCOPE',
    description:
      'SCOPE is project, tenant or user; unset removes the value at that level. Without --project/--user the tenant default is set. ' +
      'Resolution goes user, then project, then the tenant default; missing means project. A changed scope can leave project homes behind as orphans (see list).',
    options: TARGET_OPTS,
    optionHelp: [
      ['--tenant T', 'the tenant (required)'],
      ['--project P', 'set the value for this project'],
      ['--user L', 'set the value for this user'],
    ],
    positionals: { min: 1, max: 1 },
    args: (v, p) => {
      const scope = p[0]!;
      if (scope !== 'project' && scope !== 'tenant' && scope !== 'user' && scope !== 'unset') {
        throw new UsageError(`settings set: SCOPE must be project, tenant, user or unset, got '${clean(scope)}'`, 'settings set');
      }
      return { ...settingsTarget(v, 'settings set'), homeScope: scope === 'unset' ? null : scope };
    },
    human: (data, args) => {
      const level = args.user !== undefined ? `user ${args.user}` : args.project !== undefined ? `project ${args.project}` : 'the tenant default';
      const what = args.homeScope === null ? 'cleared' : `set to ${args.homeScope}`;
      return `home-scope for ${clean(level)} of ${clean(args.tenant)} ${what}.\n${renderSettings(data as SettingsView)}`;
    },
  },
  rescan: {
    summary: "Rebuild a home's usage ledger from disk and report any drift",
    synopsis: 'HOME',
    description: HOME_HELP,
    positionals: { min: 1, max: 1 },
    timeoutMs: 120_000,
    args: (_v, p) => ({ home: homeArg(p[0]!, 'rescan') }),
    human: (data) => {
      const r = data as RescanResult;
      return (
        keyValues([
          ['Home', r.home],
          ['Bytes', `${r.before.bytes} -> ${r.after.bytes} (drift ${signed(r.drift.bytes)})`],
          ['Inodes', `${r.before.inodes} -> ${r.after.inodes} (drift ${signed(r.drift.inodes)})`],
        ]) + '\n'
      );
    },
  },
  resolve: {
    summary: 'The HOME and owner for a tenant, project and user (creates the home)',
    synopsis: '--tenant T --project P [--user L]',
    description: 'Answers the home-scope in force, the home key, the HOME path under the mount and the owner uid:gid agent processes run as; creates the home if it does not exist. Served on the admin and the platform socket.',
    options: { tenant: { type: 'string' }, project: { type: 'string' }, user: { type: 'string' } },
    optionHelp: [
      ['--tenant T', 'the tenant (required)'],
      ['--project P', 'the project (required)'],
      ['--user L', 'the requesting user, for user-scoped homes'],
    ],
    positionals: { min: 0, max: 0 },
    args: (v) => {
      const a: ArgsOf<'resolve'> = { tenant: requiredOpt(v, 'tenant', 'resolve'), project: requiredOpt(v, 'project', 'resolve') };
      if (typeof v.user === 'string') a.user = v.user;
      return a;
    },
    human: (data) => {
      const r = data as ResolveResult;
      return (
        keyValues([
          ['Home', r.home],
          ['Tenant', r.tenant],
          ['Key', r.key],
          ['Scope', `${r.scope} (from ${r.source})`],
          ['Owner', formatOwner(r.owner)],
          ['Created', r.created ? 'yes' : 'no'],
        ]) + '\n'
      );
    },
  },
  'rename-project': {
    summary: "Move a project's home to a new project name",
    synopsis: '--tenant T FROM TO [--force]',
    description: 'The home follows the project name. Refused with RENAME_BLOCKED if TO already has a home (homes are never merged), and with BUSY while files are open or working directories are inside, unless --force.',
    options: { ...TENANT_OPT, force: { type: 'boolean' } },
    optionHelp: [['--tenant T', 'the tenant (required)'], FORCE_HELP],
    positionals: { min: 2, max: 2 },
    timeoutMs: 60_000,
    force: true,
    args: (v, p) => withForce({ tenant: requiredOpt(v, 'tenant', 'rename-project'), from: p[0]!, to: p[1]! }, v),
    human: (data) => renderRename(data as RenameResult),
  },
  'rename-user': {
    summary: "Move a user's home (_user_FROM) to a new login",
    synopsis: '--tenant T FROM TO [--force]',
    description: 'Moves _user_FROM to _user_TO. Refused with RENAME_BLOCKED if TO already has a home (homes are never merged), and with BUSY while files are open or working directories are inside, unless --force.',
    options: { ...TENANT_OPT, force: { type: 'boolean' } },
    optionHelp: [['--tenant T', 'the tenant (required)'], FORCE_HELP],
    positionals: { min: 2, max: 2 },
    timeoutMs: 60_000,
    force: true,
    args: (v, p) => withForce({ tenant: requiredOpt(v, 'tenant', 'rename-user'), from: p[0]!, to: p[1]! }, v),
    human: (data) => renderRename(data as RenameResult),
  },
  'delete-project': {
    summary: "Delete a project's own home",
    synopsis: '--tenant T PROJECT [--force]',
    description: "Deletes exactly the project-scoped home. Where the project's scope is tenant or user the shared home stays and the reply says so. BUSY while files are open or working directories are inside, unless --force.",
    options: { ...TENANT_OPT, force: { type: 'boolean' } },
    optionHelp: [['--tenant T', 'the tenant (required)'], FORCE_HELP],
    positionals: { min: 1, max: 1 },
    timeoutMs: 120_000,
    force: true,
    args: (v, p) => withForce({ tenant: requiredOpt(v, 'tenant', 'delete-project'), project: p[0]! }, v),
    human: (data) => renderDelete(data as DeleteResult),
  },
  'delete-user': {
    summary: "Delete a user's home (_user_LOGIN)",
    synopsis: '--tenant T LOGIN [--force]',
    description: 'Deletes _user_LOGIN. BUSY while files are open or working directories are inside, unless --force.',
    options: { ...TENANT_OPT, force: { type: 'boolean' } },
    optionHelp: [['--tenant T', 'the tenant (required)'], FORCE_HELP],
    positionals: { min: 1, max: 1 },
    timeoutMs: 120_000,
    force: true,
    args: (v, p) => withForce({ tenant: requiredOpt(v, 'tenant', 'delete-user'), login: p[0]! }, v),
    human: (data) => renderDelete(data as DeleteResult),
  },
};

function specOf(cmd: CommandName): LooseCliCommand {
  return COMMANDS[cmd] as unknown as LooseCliCommand;
}

/** The name a command goes by on the command line. */
function cliName(cmd: CommandName): string {
  return specOf(cmd).cli ?? cmd;
}

/** Command-line names (one or two words) and wire names, to the command. */
const BY_CLI_NAME: ReadonlyMap<string, CommandName> = new Map(
  (Object.keys(COMMANDS) as CommandName[]).flatMap((c) => [[c, c] as const, [cliName(c), c] as const]),
);
/** First words of two-word commands ("settings"). */
const GROUPS: ReadonlySet<string> = new Set((Object.keys(COMMANDS) as CommandName[]).map(cliName).filter((n) => n.includes(' ')).map((n) => n.split(' ')[0]!));

/** The command named by `name` (and, for a group, the next word). */
function findCommand(name: string, rest: string[]): { command: CommandName; rest: string[] } | undefined {
  if (GROUPS.has(name)) {
    const sub = rest[0] === undefined ? undefined : BY_CLI_NAME.get(`${name} ${rest[0]}`);
    return sub === undefined ? undefined : { command: sub, rest: rest.slice(1) };
  }
  const one = name.includes(' ') ? undefined : BY_CLI_NAME.get(name);
  return one === undefined ? undefined : { command: one, rest };
}

// ---- argument helpers -----------------------------------------------------

function homeArg(s: string, command: string): string {
  if (!/^[^/]+\/[^/]+$/.test(s)) throw new UsageError(`${command}: HOME must be "tenant/key", got '${clean(s)}'`, command);
  return s;
}

function requiredOpt(v: Values, name: string, command: string): string {
  const x = v[name];
  if (typeof x !== 'string') throw new UsageError(`${command}: --${name} is required`, command);
  return x;
}

function settingsTarget(v: Values, command: string): { tenant: string; project?: string; user?: string } {
  if (typeof v.project === 'string' && typeof v.user === 'string') throw new UsageError(`${command}: give --project or --user, not both`, command);
  const t: { tenant: string; project?: string; user?: string } = { tenant: requiredOpt(v, 'tenant', command) };
  if (typeof v.project === 'string') t.project = v.project;
  if (typeof v.user === 'string') t.user = v.user;
  return t;
}

function withForce<T extends object>(a: T, v: Values): T & { force?: boolean } {
  return v.force === true ? { ...a, force: true } : a;
}

const SIZE_UNITS: Readonly<Record<string, number>> = {
  '': 1,
  k: 1024,
  kib: 1024,
  m: 1024 ** 2,
  mib: 1024 ** 2,
  g: 1024 ** 3,
  gib: 1024 ** 3,
  t: 1024 ** 4,
  tib: 1024 ** 4,
};

/**
 * A byte count: digits with an optional binary suffix (K, M, G, T or KiB, MiB,
 * GiB, TiB, any case; all powers of 1024), or "off" for 0. Throws UsageError.
 */
export function parseSize(s: string, command = 'set-budget', what = 'BYTES'): number {
  if (s.toLowerCase() === 'off') return 0;
  const m = /^([0-9]+)\s*([a-zA-Z]*)$/.exec(s);
  const unit = m ? SIZE_UNITS[m[2]!.toLowerCase()] : undefined;
  if (!m || unit === undefined) {
    throw new UsageError(`${command}: ${what} must be a number of bytes, optionally with K, M, G, T, KiB, MiB, GiB or TiB (powers of 1024), got '${clean(s)}'`, command);
  }
  const n = Number(m[1]) * unit;
  if (!Number.isSafeInteger(n)) throw new UsageError(`${command}: ${what} '${clean(s)}' is too large`, command);
  return n;
}

function parseOwner(s: string, command: string): { uid: number; gid: number } {
  const m = /^([0-9]{1,10}):([0-9]{1,10})$/.exec(s);
  const uid = m ? Number(m[1]) : NaN;
  const gid = m ? Number(m[2]) : NaN;
  if (!m || uid > MAX_ID || gid > MAX_ID) throw new UsageError(`${command}: --owner must be UID:GID with numbers 0..${MAX_ID}, got '${clean(s)}'`, command);
  return { uid, gid };
}

// ---- rendering ------------------------------------------------------------

/** Escape control characters so daemon-supplied names cannot drive the terminal. */
export function clean(s: string): string {
  return s.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
}

export function formatBytes(n: number | undefined | null): string {
  if (n === undefined || n === null || !Number.isFinite(n)) return '-';
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(1)} ${units[i]}`;
}

export function formatDuration(totalSec: number): string {
  if (!Number.isFinite(totalSec) || totalSec < 0) return '-';
  let s = Math.floor(totalSec);
  const d = Math.floor(s / 86_400);
  s -= d * 86_400;
  const h = Math.floor(s / 3_600);
  s -= h * 3_600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  const parts: string[] = [];
  if (d > 0) parts.push(`${d}d`);
  if (d > 0 || h > 0) parts.push(`${h}h`);
  if (d > 0 || h > 0 || m > 0) parts.push(`${m}m`);
  parts.push(`${s}s`);
  return parts.join(' ');
}

/** Columns padded to their widest cell; columns listed in `right` are right-aligned. */
export function formatTable(headers: string[], rows: string[][], right: ReadonlySet<number> = new Set()): string {
  const cells = [headers, ...rows].map((r) => r.map(clean));
  const widths = headers.map((_, c) => Math.max(...cells.map((r) => [...(r[c] ?? '')].length)));
  return cells
    .map((r) =>
      r
        .map((cell, c) => {
          const pad = ' '.repeat((widths[c] ?? 0) - [...cell].length);
          if (c === r.length - 1 && !right.has(c)) return cell;
          return right.has(c) ? pad + cell : cell + pad;
        })
        .join('  '),
    )
    .join('\n');
}

function keyValues(pairs: ReadonlyArray<readonly [string, string]>): string {
  const w = Math.max(...pairs.map(([k]) => k.length)) + 1;
  return pairs.map(([k, v]) => `${`${k}:`.padEnd(w)} ${clean(v)}`).join('\n');
}

function homeName(h: { tenant: string; key: string }): string {
  return clean(`${h.tenant}/${h.key}`);
}

function formatBudget(n: number): string {
  return n === 0 ? 'off' : formatBytes(n);
}

function formatOwner(o: { uid: number; gid: number }): string {
  return `${o.uid}:${o.gid}`;
}

function signed(n: number): string {
  return n > 0 ? `+${n}` : String(n);
}

function homeFlags(h: HomeInfo): string {
  const flags: string[] = [];
  if (h.orphan) flags.push('orphan');
  if (h.scan !== 'done') flags.push(`scan:${h.scan}`);
  return flags.length > 0 ? flags.join(',') : '-';
}

function renderList(homes: HomeInfo[]): string {
  if (homes.length === 0) return 'No homes.\n';
  return (
    formatTable(
      ['TENANT', 'KEY', 'SCOPE', 'OWNER', 'PROFILE', 'USED', 'BUDGET', 'INODES', 'OPEN', 'FLAGS'],
      homes.map((h) => [
        h.tenant,
        h.key,
        h.scope,
        formatOwner(h.owner),
        h.profile,
        formatBytes(h.bytes),
        formatBudget(h.budget),
        String(h.inodes),
        String(h.openHandles),
        homeFlags(h),
      ]),
      new Set([5, 6, 7, 8]),
    ) + '\n'
  );
}

function renderHome(h: HomeInfo): string {
  const pct = h.budget > 0 ? ` (${((h.bytes / h.budget) * 100).toFixed(1)}% of budget)` : '';
  return keyValues([
    ['Home', `${h.tenant}/${h.key}`],
    ['Path', h.path],
    ['Scope', h.scope],
    ['Owner', formatOwner(h.owner)],
    ['Profile', `${h.profile} (${h.profileSource})`],
    ['Used', `${formatBytes(h.bytes)} (${h.bytes} bytes)${pct}`],
    ['Budget', h.budget === 0 ? 'off' : `${formatBytes(h.budget)} (${h.budget} bytes)`],
    ['File cap', h.fileCap === 0 ? 'off' : formatBytes(h.fileCap)],
    ['Inodes', h.inodeCap === 0 ? String(h.inodes) : `${h.inodes} of ${h.inodeCap}`],
    ['Open handles', String(h.openHandles)],
    ['Scan', h.scan],
    ['Orphan', h.orphan ? 'yes (its project now resolves to a shared home)' : 'no'],
  ]);
}

function renderSettings(v: SettingsView): string {
  const pairs: Array<[string, string]> = [
    ['Tenant', v.tenant],
    ['Tenant default', v.tenantDefault ?? '(unset)'],
  ];
  if (v.project) pairs.push([`Project ${v.project.name}`, v.project.value ?? '(unset)']);
  if (v.user) pairs.push([`User ${v.user.login}`, v.user.value ?? '(unset)']);
  if (v.resolved) pairs.push(['Resolves to', `${v.resolved.scope} (from ${v.resolved.source}), key ${v.resolved.key}`]);
  return keyValues(pairs) + '\n';
}

function renderRename(r: RenameResult): string {
  const inUse: string[] = [];
  if (r.openFiles > 0) inUse.push(`${r.openFiles} open file${r.openFiles === 1 ? '' : 's'}`);
  if (r.cwdProcesses > 0) inUse.push(`${r.cwdProcesses} working director${r.cwdProcesses === 1 ? 'y' : 'ies'}`);
  return `Renamed ${clean(r.from)} to ${clean(r.to)}${inUse.length > 0 ? ` (forced while in use: ${inUse.join(', ')})` : ''}.\n`;
}

function renderDelete(r: DeleteResult): string {
  if (r.deleted === null) return `Nothing deleted${r.deleteNote ? `: ${clean(r.deleteNote)}` : '.'}\n`;
  const freed = r.bytes !== undefined ? ` (${formatBytes(r.bytes)} freed)` : '';
  return `Deleted ${clean(r.deleted)}${freed}.${r.deleteNote ? ` ${clean(r.deleteNote)}` : ''}\n`;
}

function renderStatus(s: StatusReport): string {
  const probe =
    s.mount.lastProbeAt === null
      ? 'never'
      : `${s.mount.lastProbeAt} (${s.mount.lastProbeOk ? 'ok' : `failed${s.mount.lastProbeError ? `: ${s.mount.lastProbeError}` : ''}`})`;
  const nativeExtra = [`patch ${s.native.patch}`];
  if (s.native.maxWriteRequest !== null) nativeExtra.push(`max write ${formatBytes(s.native.maxWriteRequest)}`);
  if (s.native.detail) nativeExtra.push(s.native.detail);
  const head = keyValues([
    ['Mount', s.mount.path],
    ['Mounted', s.mount.mounted ? 'yes' : 'no'],
    ['Loop', s.mount.loop],
    ['Last probe', probe],
    ['Native', `${s.native.selfCheck} (${nativeExtra.join(', ')})`],
    ['Uptime', formatDuration(s.uptimeSec)],
    ['Daemon', `homesfs ${s.version}, pid ${s.pid}`],
    ['Backing', s.backing],
    ['Config', s.configPath ?? '(none)'],
  ]);
  const homes =
    s.homes.length === 0
      ? 'No homes.'
      : formatTable(
          ['TENANT', 'KEY', 'SCAN', 'BYTES', 'INODES'],
          s.homes.map((h) => [h.tenant, h.key, h.scan, formatBytes(h.bytes), h.inodes === undefined ? '-' : String(h.inodes)]),
          new Set([3, 4]),
        );
  return `${head}\n\n${homes}\n`;
}

// ---- argument parsing -----------------------------------------------------

const GLOBAL_OPTIONS = {
  socket: { type: 'string' },
  json: { type: 'boolean' },
  timeout: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const satisfies OptionsConfig;

const GLOBAL_TAKES_VALUE = new Set(['--socket', '--timeout']);

function mainUsage(): string {
  const names = Object.keys(COMMANDS) as CommandName[];
  const w = Math.max(...names.map((n) => cliName(n).length)) + 2;
  return [
    'Usage: homesctl [--socket PATH] [--json] [--timeout MS] <command> [args]',
    '',
    'Talk to the homesfs daemon over its control socket.',
    '',
    'Commands:',
    ...names.map((n) => `  ${cliName(n).padEnd(w)}${specOf(n).summary}`),
    '',
    globalOptionHelp(),
    '',
    "Run 'homesctl <command> --help' for a command's arguments.",
    '',
    'Exit codes: 0 ok; 1 the daemon replied an error (CODE: message on stderr);',
    '            2 usage error; 3 no answer (cannot connect, timeout, bad reply).',
    '',
  ].join('\n');
}

function globalOptionHelp(): string {
  return [
    'Global options:',
    `  --socket PATH   control socket (default: $HOMESFS_SOCKET, else ${DEFAULT_SOCKET})`,
    '  --json          print the raw reply data as JSON (error replies too, on stdout)',
    `  --timeout MS    give up after MS milliseconds (default ${DEFAULT_TIMEOUT_MS})`,
    '  -h, --help      show help',
  ].join('\n');
}

/** Help for a group of two-word commands ("settings"). */
function groupUsage(group: string): string {
  const names = (Object.keys(COMMANDS) as CommandName[]).filter((n) => cliName(n).startsWith(`${group} `));
  const w = Math.max(...names.map((n) => cliName(n).length)) + 2;
  return [
    `Usage: homesctl [global options] ${group} <${names.map((n) => cliName(n).slice(group.length + 1)).join('|')}> [args]`,
    '',
    'Commands:',
    ...names.map((n) => `  ${cliName(n).padEnd(w)}${specOf(n).summary}`),
    '',
    `Run 'homesctl ${group} <command> --help' for a command's arguments.`,
    '',
  ].join('\n');
}

function commandUsage(name: CommandName): string {
  const c = specOf(name);
  const lines = [`Usage: homesctl [global options] ${cliName(name)}${c.synopsis ? ` ${c.synopsis}` : ''}${c.optionHelp?.length && !c.synopsis?.includes('--') ? ' [options]' : ''}`, '', c.summary + '.'];
  if (c.description) lines.push('', c.description);
  if (c.optionHelp?.length) {
    const w = Math.max(...c.optionHelp.map(([f]) => f.length)) + 2;
    lines.push('', 'Options:', ...c.optionHelp.map(([f, t]) => `  ${f.padEnd(w)}${t}`));
  }
  lines.push('', globalOptionHelp(), '');
  return lines.join('\n');
}

interface Invocation {
  kind: 'run';
  command: CommandName;
  socket: string;
  json: boolean;
  timeoutMs: number;
  args: unknown;
}

type Parsed = Invocation | { kind: 'help'; text: string };

/** Parse argv (without node and script). Throws UsageError. */
export function parseCommandLine(argv: string[], env: NodeJS.ProcessEnv): Parsed {
  // Split at the command name: global options before it, the command's after.
  let i = 0;
  while (i < argv.length) {
    const a = argv[i]!;
    if (a === '--') {
      i++;
      break;
    }
    if (!a.startsWith('-') || a === '-') break;
    i += GLOBAL_TAKES_VALUE.has(a) ? 2 : 1;
  }
  const globalArgs = argv.slice(0, Math.min(i, argv.length)).filter((a) => a !== '--');
  const name = argv[i];
  const rest = argv.slice(i + 1);

  const g = parseStrict(globalArgs, GLOBAL_OPTIONS, false);
  if (name === undefined) {
    if (g.values.help) return { kind: 'help', text: mainUsage() };
    throw new UsageError('missing command');
  }
  if (name === 'help') {
    const found = rest[0] === undefined ? undefined : findCommand(rest[0], rest.slice(1));
    if (found) return { kind: 'help', text: commandUsage(found.command) };
    return { kind: 'help', text: rest[0] !== undefined && GROUPS.has(rest[0]) ? groupUsage(rest[0]) : mainUsage() };
  }
  const found = findCommand(name, rest);
  if (found === undefined) {
    if (!GROUPS.has(name)) throw new UsageError(`unknown command '${clean(name)}'`);
    if (g.values.help || rest.includes('--help') || rest.includes('-h')) return { kind: 'help', text: groupUsage(name) };
    const sub = rest[0];
    throw new UsageError(sub === undefined ? `${name}: missing subcommand` : `${name}: unknown subcommand '${clean(sub)}'`, name);
  }
  const { command } = found;
  const display = cliName(command);
  const spec = specOf(command);
  const c = parseStrict(found.rest, { ...GLOBAL_OPTIONS, ...(spec.options ?? {}) }, true, display);
  const values: Values = { ...g.values, ...c.values };
  if (values.help) return { kind: 'help', text: commandUsage(command) };

  const { min, max } = spec.positionals ?? { min: 0, max: 0 };
  if (c.positionals.length < min) throw new UsageError(`${display}: missing argument (${spec.synopsis ?? ''})`.replace(/ \(\)$/, ''), display);
  if (c.positionals.length > max) throw new UsageError(`${display}: unexpected argument '${clean(c.positionals[max]!)}'`, display);

  const socket = typeof values.socket === 'string' ? values.socket : env.HOMESFS_SOCKET || DEFAULT_SOCKET;
  if (socket === '') throw new UsageError('--socket: empty path');
  let timeoutMs = spec.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (values.timeout !== undefined) {
    const t = String(values.timeout);
    if (!/^[0-9]+$/.test(t) || Number(t) < 1 || !Number.isSafeInteger(Number(t))) throw new UsageError(`--timeout: expected a positive number of milliseconds, got '${clean(t)}'`);
    timeoutMs = Number(t);
  }
  return { kind: 'run', command, socket, json: values.json === true, timeoutMs, args: spec.args(values, c.positionals) };
}

function parseStrict(args: string[], options: OptionsConfig, allowPositionals: boolean, command?: string): { values: Values; positionals: string[] } {
  try {
    const r = parseArgs({ args, options, strict: true, allowPositionals });
    return { values: r.values as Values, positionals: r.positionals };
  } catch (err) {
    throw new UsageError(`${command ? `${command}: ` : ''}${(err as Error).message}`, command);
  }
}

// ---- main -----------------------------------------------------------------

export interface Io {
  stdout: { write(s: string): unknown };
  stderr: { write(s: string): unknown };
}

export async function main(argv: string[], env: NodeJS.ProcessEnv = process.env, io: Io = process): Promise<number> {
  let inv: Parsed;
  try {
    inv = parseCommandLine(argv, env);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    const cmd = err.command ? `${err.command} ` : '';
    io.stderr.write(`homesctl: ${err.message}\nTry 'homesctl ${cmd}--help'.\n`);
    return EXIT.USAGE;
  }
  if (inv.kind === 'help') {
    io.stdout.write(inv.text);
    return EXIT.OK;
  }

  let reply;
  try {
    reply = await controlRequest(inv.socket, { cmd: inv.command, args: inv.args } as Parameters<typeof controlRequest>[1], { timeoutMs: inv.timeoutMs });
  } catch (err) {
    if (err instanceof ControlClientError) {
      io.stderr.write(`homesctl: ${err.message}\n`);
      return EXIT.UNREACHABLE;
    }
    throw err;
  }

  if (!reply.ok) {
    if (inv.json) io.stdout.write(JSON.stringify(reply, null, 2) + '\n');
    io.stderr.write(`homesctl: ${reply.code}: ${clean(reply.message)}\n`);
    if (!inv.json && reply.details && Object.keys(reply.details).length > 0) {
      io.stderr.write(`  details: ${clean(JSON.stringify(reply.details))}\n`);
      if (reply.code === 'BUSY' && specOf(inv.command).force) io.stderr.write('  (--force goes ahead anyway)\n');
    }
    return EXIT.ERROR_REPLY;
  }
  if (inv.json) {
    io.stdout.write(JSON.stringify(reply.data, null, 2) + '\n');
  } else {
    io.stdout.write(specOf(inv.command).human(reply.data, inv.args));
  }
  return EXIT.OK;
}

function isEntryPoint(): boolean {
  const script = process.argv[1];
  if (!script) return false;
  try {
    return import.meta.url === pathToFileURL(realpathSync(script)).href;
  } catch {
    // argv[1] does not name a readable file (e.g. `node -e`): not run as the CLI.
    return false;
  }
}

if (isEntryPoint()) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (err: unknown) => {
      process.stderr.write(`homesctl: internal error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exitCode = 70;
    },
  );
}
