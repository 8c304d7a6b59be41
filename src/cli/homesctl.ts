#!/usr/bin/env node
import { realpathSync, writeSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import type {
  DeleteResult,
  DeleteTenantResult,
  Forward,
  HolderInfo,
  HomeInfo,
  ReloadResult,
  RenameResult,
  RescanResult,
  ResolveResult,
  SettingsView,
  StatusReport,
  TenantUsage,
} from '../control/api.js';
import { ControlClientError, controlRequest } from '../control/client.js';
import { type ArgsOf, type CommandName, type ErrorReply } from '../control/protocol.js';
import { execCli, passwdCli, type LocalIo } from './exec.js';
import { formatBytes, formatSignedBytes, SIZE_SYNTAX } from './size.js';
import {
  clean,
  formatLimit,
  formatOwner,
  formatTable,
  homeName,
  keyValues,
  limitWithSource,
  processTable,
  renderDelete,
  renderHome,
  renderList,
  renderRename,
  renderSettings,
  renderStatus,
  renderTenant,
  signed,
  softText,
  sortHomes,
} from './homesctl/render.js';
import {
  commandIndex,
  DEFAULT_SOCKET,
  DEFAULT_TIMEOUT_MS,
  GLOBAL_OPTIONS,
  GLOBAL_TAKES_VALUE,
  hint,
  homeArg,
  limitArg,
  listView,
  parseOwner,
  parseStrict,
  requiredOpt,
  settingsTarget,
  UsageError,
  withForce,
  type OptionsConfig,
  type Values,
} from './homesctl/args.js';
import { chooseSocket, DEFAULT_CONFIG, describeOrigin, SocketConfigError, type SocketChoice } from './sockets.js';

export { formatBytes } from './size.js';
export { clean, formatDuration, formatTable } from './homesctl/render.js';
export { closest, DEFAULT_SOCKET, parseSize } from './homesctl/args.js';
import { VERSION } from '../version.js';
import { notServingReasons } from '../metrics/health.js';

/**
 * homesctl [--socket PATH | --config FILE] [--json] [--timeout MS] <command> [args]
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
  /** `status`: the daemon answers but does not serve (not mounted, FUSE loop ended, self-check failed). */
  NOT_SERVING: 4,
} as const;

/** Why a status reply is not a serving daemon, or null: what makes `homesctl status` a health probe. */
export function notServing(s: StatusReport): string | null {
  const why = notServingReasons({ mounted: s.mount.mounted, loop: s.mount.loop, selfCheck: s.native.selfCheck });
  return why.length ? why.join(', ') : null;
}

export type { SocketSource } from './sockets.js';

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
  /** Human-readable rendering of the reply's `data`; gets the request's args and the parsed command line for context. */
  human(data: unknown, args: ArgsOf<K>, values: Values): string;
  /** What --json prints on success when it is not the reply's `data` as is (e.g. sorted). */
  json?(data: unknown, args: ArgsOf<K>, values: Values): unknown;
  /** Takes --watch: the request is repeated and the table redrawn (list, top). */
  watchable?: boolean;
  /** Takes --force: a BUSY reply then hints at it. */
  force?: boolean;
}

/** A table entry without the link between name and argument type, for the generic driver code below. */
interface LooseCliCommand extends Omit<CliCommand<CommandName>, 'args' | 'human' | 'json'> {
  args(values: Values, positionals: string[]): unknown;
  human(data: unknown, args: unknown, values: Values): string;
  json?(data: unknown, args: unknown, values: Values): unknown;
}

// ---- commands -------------------------------------------------------------

const HOME_HELP = 'HOME is "tenant/key": the project name, _tenant or _user_<login>.';
const FORCE_HELP = ['--force', 'go ahead even while files are open or working directories are inside'] as const;
const TENANT_OPT = { tenant: { type: 'string' } } as const satisfies OptionsConfig;
const TARGET_OPTS = { tenant: { type: 'string' }, project: { type: 'string' }, user: { type: 'string' } } as const satisfies OptionsConfig;
const LIMIT_HELP =
  `SIZE is ${SIZE_SYNTAX}. "off" (or 0) means no limit, as in xfs_quota; "default" drops the override so the profile's limit applies again.`;
const LIST_OPTS = {
  tenant: { type: 'string' },
  sort: { type: 'string' },
  orphans: { type: 'boolean' },
  watch: { type: 'boolean' },
  interval: { type: 'string' },
  count: { type: 'string' },
  limit: { type: 'string' },
} as const satisfies OptionsConfig;

const COMMANDS: { readonly [K in CommandName]: CliCommand<K> } = {
  status: {
    summary: 'Mount liveness, native self-check and per-home scan progress',
    synopsis: '[--verbose]',
    description:
      'Shows whether the mount answers, the FUSE loop state, the native layer self-check (with a one-line total of the requests the binding answered), uptime, and each home with its scan state and usage. ' +
      '--verbose adds the native counters, one line per kind of request. Served on the admin and the platform socket.',
    options: { verbose: { type: 'boolean', short: 'v' } },
    optionHelp: [['-v, --verbose', 'show the native counters per kind of request']],
    positionals: { min: 0, max: 0 },
    args: () => ({}),
    human: (data, _a, v) => renderStatus(data as StatusReport, v.verbose === true),
  },
  reload: {
    summary: 'Re-read the configuration file now (as SIGHUP) and show the outcome',
    description:
      'Applies every setting that is not restart-only (profiles, tenants, homes, defaultProfile, logLevel, shutdownGraceMs). ' +
      'A file that is invalid or changes a restart-only key is refused (exit 1, the reasons in details) and the old configuration stays.',
    positionals: { min: 0, max: 0 },
    args: () => ({}),
    human: (data) => {
      const r = data as ReloadResult;
      return `Reloaded at ${r.at}: ${clean(r.message)}.\n`;
    },
  },
  list: {
    summary: 'Every home with usage, budget, percent, inodes, owner, profile and flags',
    synopsis: '[--tenant T] [--orphans] [--sort used|percent|name|busy] [--watch [--interval SEC] [--count N] [--limit N]]',
    description:
      'One row per home; sizes are binary (MiB = 1024 KiB), --json gives exact bytes. A budget or cap marked * is a live override (set-budget, set-limits); the others come from the profile. ' +
      'FLAGS: OVER (usage above the budget or inodes above the cap, e.g. after a lowered budget: the home cannot grow), ORPHAN (a project home its project no longer resolves to; delete-home removes it), ' +
      'SCANNING (the usage ledger is being built), SCAN_FAILED, BUSY (open files or working directories inside). ' +
      '--watch redraws the busiest homes every --interval seconds until Ctrl-C (or --count frames); `homesctl top` is list --watch --sort busy.',
    options: LIST_OPTS,
    optionHelp: [
      ['--tenant T', "only this tenant's homes"],
      ['--orphans', 'only orphaned homes'],
      ['--sort KEY', 'name (default), used, percent (of the budget), busy (growing fastest, then open files)'],
      ['--watch', 'refresh until Ctrl-C'],
      ['--interval SEC', 'seconds between refreshes (default 2)'],
      ['--count N', 'stop after N refreshes'],
      ['--limit N', 'show at most N homes'],
    ],
    positionals: { min: 0, max: 0 },
    watchable: true,
    args: (v) => {
      listView(v); // checks --sort, --limit, --interval, --count before anything is sent
      const a: ArgsOf<'list'> = {};
      if (typeof v.tenant === 'string') a.tenant = v.tenant;
      if (v.orphans === true) a.orphans = true;
      return a;
    },
    // --json keeps the daemon's order unless --sort or --limit asks otherwise
    json: (data, _a, v) => (v.sort === undefined && v.limit === undefined ? data : sortHomes(data as HomeInfo[], listView(v).sort).slice(0, listView(v).limit)),
    human: (data, _a, v) => renderList(sortHomes(data as HomeInfo[], listView(v).sort).slice(0, listView(v).limit)),
  },
  usage: {
    summary: "One home's usage, limits (and where each comes from), owner and profile",
    synopsis: 'HOME',
    description: HOME_HELP,
    positionals: { min: 1, max: 1 },
    args: (_v, p) => ({ home: homeArg(p[0]!, 'usage') }),
    human: (data) => renderHome(data as HomeInfo) + '\n',
  },
  create: {
    summary: 'Create a home, optionally with a profile, budget and owner',
    synopsis: 'HOME [--profile P] [--budget SIZE] [--owner UID:GID [--force]]',
    description:
      `${HOME_HELP} Fails with EXISTS if the home exists, RENAMED if the name is a renamed home's reserved old name. Without --owner the daemon allocates an owner uid/gid from its range. ` +
      "An --owner is refused (INVALID_ARGUMENT, naming the conflict) if it is 0, 65534, another home's (live or deleted), an account or group the host already knows, or outside the owner range; " +
      `--force takes an id outside the range or a host account above 999 (for data that already belong to it), never the rest. ${LIMIT_HELP}`,
    options: { profile: { type: 'string' }, budget: { type: 'string' }, owner: { type: 'string' }, force: { type: 'boolean' } },
    optionHelp: [
      ['--profile P', 'policy profile for the home (default: from the config)'],
      ['--budget SIZE', 'byte budget override, e.g. 500M, 2GiB, 2GB; off = no budget'],
      ['--owner UID:GID', 'owner of the home instead of an allocated one'],
      ['--force', 'with --owner: take an id outside the range, or a host account above the system ids (logged)'],
    ],
    positionals: { min: 1, max: 1 },
    args: (v, p) => {
      const a: ArgsOf<'create'> = { home: homeArg(p[0]!, 'create') };
      if (typeof v.profile === 'string') a.profile = v.profile;
      if (typeof v.budget === 'string') {
        const b = limitArg(v.budget, 'size', 'create', '--budget');
        if (b !== null) a.budget = b;
      }
      if (typeof v.owner === 'string') a.owner = parseOwner(v.owner, 'create');
      if (v.force === true) {
        if (a.owner === undefined) throw new UsageError('create: --force goes with --owner (it lets an explicit owner outside the range or a host account through)', 'create');
        a.force = true;
      }
      return a;
    },
    human: (data) => `Created ${homeName(data as HomeInfo)}.\n${renderHome(data as HomeInfo)}\n`,
  },
  'set-budget': {
    summary: "Change a home's byte budget while it serves (SIZE, off or default)",
    synopsis: 'HOME SIZE|off|default',
    description:
      `${HOME_HELP} ${LIMIT_HELP} ` +
      'Lowering the budget below current usage deletes nothing: the home just cannot grow until it is back under (list flags it OVER). The change is logged with the budget before and after.',
    positionals: { min: 2, max: 2 },
    args: (_v, p) => ({ home: homeArg(p[0]!, 'set-budget'), bytes: limitArg(p[1]!, 'size', 'set-budget', 'SIZE') }),
    human: (data) => {
      const h = data as HomeInfo;
      const pct = h.percent !== null ? ` (${h.percent}%)` : '';
      const over = h.budget > 0 && h.bytes > h.budget ? '\nOver budget: nothing was deleted; the home cannot grow until it is back under.' : '';
      return `Budget of ${homeName(h)}: ${limitWithSource(formatLimit(h.budget), h.limitSources.budget, h, formatLimit(h.profileLimits.budget))}; used ${formatBytes(h.bytes)}${pct}.${over}\n`;
    },
  },
  'set-limits': {
    summary: "Change a home's inode cap and per-file size cap while it serves",
    synopsis: 'HOME [--inodes N|off|default] [--file-size SIZE|off|default] [--soft-size SIZE|off|default] [--soft-inodes N|off|default]',
    description:
      `${HOME_HELP} Give one or both. N is a whole number (100000, 1e6). ${LIMIT_HELP} ` +
      'A lowered cap deletes nothing: new files (or growth past the per-file cap) are refused until the home is back under. ' +
      'A soft limit refuses nothing: crossing it is logged once (warn) and shown by status, list and the metrics; it must be at most the hard limit in force. ' +
      'Persisted in the state file like the budget; logged with before and after.',
    options: { inodes: { type: 'string' }, 'file-size': { type: 'string' }, 'soft-size': { type: 'string' }, 'soft-inodes': { type: 'string' } },
    optionHelp: [
      ['--inodes N', 'files, directories and symlinks the home may hold'],
      ['--file-size SIZE', 'largest size of one file'],
      ['--soft-size SIZE', 'soft byte limit: warn above it, refuse nothing'],
      ['--soft-inodes N', 'soft inode limit: warn above it, refuse nothing'],
    ],
    positionals: { min: 1, max: 1 },
    args: (v, p) => {
      const a: ArgsOf<'set-limits'> = { home: homeArg(p[0]!, 'set-limits') };
      if (typeof v.inodes === 'string') a.inodes = limitArg(v.inodes, 'count', 'set-limits', '--inodes');
      if (typeof v['file-size'] === 'string') a.fileBytes = limitArg(v['file-size'], 'size', 'set-limits', '--file-size');
      if (typeof v['soft-size'] === 'string') a.softBytes = limitArg(v['soft-size'], 'size', 'set-limits', '--soft-size');
      if (typeof v['soft-inodes'] === 'string') a.softInodes = limitArg(v['soft-inodes'], 'count', 'set-limits', '--soft-inodes');
      if (a.inodes === undefined && a.fileBytes === undefined && a.softBytes === undefined && a.softInodes === undefined) {
        throw new UsageError('set-limits: give at least one of --inodes, --file-size, --soft-size, --soft-inodes', 'set-limits');
      }
      return a;
    },
    human: (data) => {
      const h = data as HomeInfo;
      return (
        keyValues([
          ['Home', `${h.tenant}/${h.key}`],
          ['Inodes', `${h.inodes} used; cap ${limitWithSource(h.inodeCap === 0 ? 'off' : String(h.inodeCap), h.limitSources.inodeCap, h, h.profileLimits.inodeCap === 0 ? 'off' : String(h.profileLimits.inodeCap))}`],
          ['File cap', limitWithSource(formatLimit(h.fileCap), h.limitSources.fileCap, h, formatLimit(h.profileLimits.fileCap))],
          ['Soft limits', softText(h)],
        ]) + '\n'
      );
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
    summary: 'Show the home-scope cascade for a tenant, project and user (as resolve takes them)',
    synopsis: '--tenant T [--project P] [--user L]',
    description:
      'Takes the same arguments as resolve. Shows the home-scope values stored at each level and, with --project, the cascade resolve walks (user, then project, then the tenant default, then the built-in default) and which level decided.',
    options: TARGET_OPTS,
    optionHelp: [
      ['--tenant T', 'the tenant (required)'],
      ['--project P', "the project: show the cascade and what resolve answers"],
      ['--user L', "the requesting user (the cascade's first level)"],
    ],
    positionals: { min: 0, max: 0 },
    args: (v) => settingsTarget(v, 'settings get', true),
    human: (data) => renderSettings(data as SettingsView),
  },
  'settings-set': {
    cli: 'settings set',
    summary: 'Set the home-scope setting at the tenant, project or user level',
    synopsis: '--tenant T [--project P | --user L] SCOPE [--dry-run | --yes]',
    description:
      'SCOPE is project, tenant or user; unset removes the value at that level. Without --project/--user the tenant default is set. ' +
      'Resolution goes user, then project, then the tenant default; missing means project. ' +
      'A change that would leave project homes unused (orphans) lists them with their sizes and changes nothing unless --yes; --dry-run shows what would happen. Orphans stay until delete-home.',
    options: { ...TARGET_OPTS, 'dry-run': { type: 'boolean' }, yes: { type: 'boolean' } },
    optionHelp: [
      ['--tenant T', 'the tenant (required)'],
      ['--project P', 'set the value for this project'],
      ['--user L', 'set the value for this user'],
      ['--dry-run', 'show which homes the change would leave unused; change nothing'],
      ['--yes', 'go ahead although homes would be left unused'],
    ],
    positionals: { min: 1, max: 1 },
    args: (v, p) => {
      const scope = p[0]!;
      if (scope !== 'project' && scope !== 'tenant' && scope !== 'user' && scope !== 'unset') {
        throw new UsageError(`settings set: SCOPE must be project, tenant, user or unset, got '${clean(scope)}'${hint(scope, ['project', 'tenant', 'user', 'unset'])}`, 'settings set');
      }
      if (v['dry-run'] === true && v.yes === true) throw new UsageError('settings set: give --dry-run or --yes, not both', 'settings set');
      const a: ArgsOf<'settings-set'> = { ...settingsTarget(v, 'settings set', false), homeScope: scope === 'unset' ? null : scope };
      if (v['dry-run'] === true) a.dryRun = true;
      if (v.yes === true) a.yes = true;
      return a;
    },
    human: (data, args) => {
      const view = data as SettingsView;
      const level = args.user !== undefined ? `user ${args.user}` : args.project !== undefined ? `project ${args.project}` : 'the tenant default';
      const what = args.homeScope === null ? 'cleared' : `set to ${args.homeScope}`;
      const orphans = view.orphaned ?? [];
      const left =
        orphans.length === 0
          ? ''
          : `${view.dryRun ? 'Would leave' : 'Left'} ${orphans.length} project home${orphans.length === 1 ? '' : 's'} unused (${formatBytes(orphans.reduce((a, o) => a + o.bytes, 0))}); list --orphans shows them, delete-home removes one:\n` +
            orphans.map((o) => `  ${clean(o.home)}  ${formatBytes(o.bytes)}`).join('\n') +
            '\n';
      if (view.dryRun) return `Dry run: home-scope for ${clean(level)} of ${clean(args.tenant)} would be ${what}; nothing changed.\n${orphans.length === 0 ? 'No home would be left unused.\n' : left}${renderSettings(view)}`;
      return `home-scope for ${clean(level)} of ${clean(args.tenant)} ${what}.\n${left}${renderSettings(view)}`;
    },
  },
  rescan: {
    summary: "Rebuild a home's usage ledger from disk, report any drift, give backing nodes back to the home's owner",
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
          ['Bytes', `${formatBytes(r.before.bytes)} -> ${formatBytes(r.after.bytes)} (drift ${formatSignedBytes(r.drift.bytes)}; exact: ${r.before.bytes} -> ${r.after.bytes})`],
          ['Inodes', `${r.before.inodes} -> ${r.after.inodes} (drift ${signed(r.drift.inodes)})`],
          ['Ledger', r.drift.bytes === 0 && r.drift.inodes === 0 ? 'matched the disk' : 'corrected to what is on disk'],
          ...(r.repaired ? ([['Repaired', `${r.repaired.owners} owners, ${r.repaired.modes} modes`]] as [string, string][]) : []),
        ]) + '\n'
      );
    },
  },
  resolve: {
    summary: 'The HOME and owner for a tenant, project and user (creates the home)',
    synopsis: '--tenant T --project P [--user L]',
    description:
      'Answers the home-scope in force, the home key, the HOME path under the mount and the owner uid:gid agent processes run as; creates the home if it does not exist. ' +
      "A renamed home's old name answers RENAMED with the new name (never a fresh home) until release-name. Served on the admin and the platform socket.",
    options: TARGET_OPTS,
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
    summary: "Move a project's home to a new project name (the old name stays reserved)",
    synopsis: '--tenant T FROM TO [--force]',
    description:
      'The home follows the project name; the old name stays reserved with a forward (resolve answers RENAMED with the new name) until release-name. ' +
      'Refused with RENAME_BLOCKED if TO already has a home (homes are never merged), and with BUSY while files are open or working directories are inside, unless --force.',
    options: { ...TENANT_OPT, force: { type: 'boolean' } },
    optionHelp: [['--tenant T', 'the tenant (required)'], FORCE_HELP],
    positionals: { min: 2, max: 2 },
    timeoutMs: 60_000,
    force: true,
    args: (v, p) => withForce({ tenant: requiredOpt(v, 'tenant', 'rename-project'), from: p[0]!, to: p[1]! }, v),
    human: (data) => renderRename(data as RenameResult),
  },
  'rename-user': {
    summary: "Move a user's home (_user_FROM) to a new login (the old name stays reserved)",
    synopsis: '--tenant T FROM TO [--force]',
    description:
      'Moves _user_FROM to _user_TO; the old name stays reserved with a forward until release-name. Refused with RENAME_BLOCKED if TO already has a home (homes are never merged), and with BUSY while files are open or working directories are inside, unless --force.',
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
  'delete-home': {
    summary: 'Delete any home by tenant/key (an orphan, a leftover)',
    synopsis: 'HOME [--force]',
    description: `${HOME_HELP} Removes the home and everything in it; settings stay (they belong to names). BUSY while files are open or working directories are inside, unless --force. list --orphans shows the homes a home-scope change left unused.`,
    options: { force: { type: 'boolean' } },
    optionHelp: [FORCE_HELP],
    positionals: { min: 1, max: 1 },
    timeoutMs: 120_000,
    force: true,
    args: (v, p) => withForce({ home: homeArg(p[0]!, 'delete-home') }, v),
    human: (data) => renderDelete(data as DeleteResult),
  },
  'delete-tenant': {
    summary: 'Remove an empty tenant: its directory and its settings, budget and reserved names',
    synopsis: 'TENANT',
    description:
      'Refused with NOT_EMPTY while the tenant has homes (delete them first: delete-home), and with BUSY while a process works in its directory. ' +
      "The config's tenants.<TENANT> entry stays (it is the admin's); a later create or resolve makes the tenant again.",
    positionals: { min: 1, max: 1 },
    args: (_v, p) => ({ tenant: p[0]! }),
    human: (data) => {
      const r = data as DeleteTenantResult;
      const dropped = [
        ...(r.dropped.settings ? ['its home-scope settings'] : []),
        ...(r.dropped.budget ? ['its budget override'] : []),
        ...(r.dropped.forwards.length > 0 ? [`its reserved names (${r.dropped.forwards.map(clean).join(', ')})`] : []),
      ];
      return `Deleted tenant ${clean(r.tenant)}${r.removedDir ? '' : ' (it had no directory)'}${dropped.length > 0 ? `, with ${dropped.join(', ')}` : ''}.\n`;
    },
  },
  forwards: {
    summary: 'Old names of renamed homes, reserved until release-name',
    description: 'resolve (and create) with a reserved name answers RENAMED with the new name, so a platform that still holds the old name never gets a fresh, empty home.',
    positionals: { min: 0, max: 0 },
    args: () => ({}),
    human: (data) => {
      const f = data as Forward[];
      if (f.length === 0) return 'No reserved names.\n';
      return formatTable(['OLD NAME', 'NOW', 'RENAMED AT'], f.map((x) => [x.from, x.to, x.at])) + '\n';
    },
  },
  'release-name': {
    summary: "Release a renamed home's old name (resolve may then create a fresh home there)",
    synopsis: 'HOME',
    description: `${HOME_HELP} HOME is the old name, as forwards lists it. NOT_FOUND if it is not reserved.`,
    positionals: { min: 1, max: 1 },
    args: (_v, p) => ({ home: homeArg(p[0]!, 'release-name') }),
    human: (data) => {
      const f = data as Forward;
      return `Released ${clean(f.from)} (it forwarded to ${clean(f.to)}); resolve may create a fresh home under that name again.\n`;
    },
  },
  'tenant-usage': {
    summary: "A tenant's total across its homes and its total budget",
    synopsis: 'TENANT',
    description: 'The sum of the bytes of every home of TENANT, its total budget (0 = off) and where that budget comes from.',
    positionals: { min: 1, max: 1 },
    args: (_v, p) => ({ tenant: p[0]! }),
    human: (data) => renderTenant(data as TenantUsage),
  },
  'set-tenant-budget': {
    summary: "Change a tenant's total budget across its homes (off, or default = the config's)",
    synopsis: 'TENANT (SIZE | off | default)',
    description:
      'SIZE as for set-budget; "off" or 0 removes the tenant budget; "default" drops the live override, so the ' +
      "config's tenants.<t>.maxBytes applies again. Every write of any home of the tenant is checked against it. Lowering it below usage deletes nothing.",
    positionals: { min: 2, max: 2 },
    args: (_v, p) => ({ tenant: p[0]!, bytes: limitArg(p[1]!, 'size', 'set-tenant-budget', 'SIZE') }),
    human: (data) => renderTenant(data as TenantUsage),
  },
};

/** Command-line words that stand for another command with preset options (declarative, like COMMANDS). */
const ALIASES: Readonly<Record<string, { summary: string; argv: readonly string[] }>> = {
  top: { summary: 'The busiest homes, refreshed until Ctrl-C (list --watch --sort busy --limit 20)', argv: ['list', '--watch', '--sort', 'busy', '--limit', '20'] },
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



// ---- argument parsing -----------------------------------------------------

function mainUsage(): string {
  const names = Object.keys(COMMANDS) as CommandName[];
  const rows: Array<[string, string]> = [...names.map((n): [string, string] => [cliName(n), specOf(n).summary]), ...Object.entries(ALIASES).map(([n, a]): [string, string] => [n, a.summary])];
  const w = Math.max(...rows.map(([n]) => n.length)) + 2;
  return [
    'Usage: homesctl [--socket PATH | --config FILE] [--json] [--timeout MS] <command> [args]',
    '',
    'Talk to the homesfs daemon over its control socket.',
    '',
    'Commands:',
    ...rows.map(([n, t]) => `  ${n.padEnd(w)}${t}`),
    ...LOCAL_COMMANDS.map(([n, summary]) => `  ${n.padEnd(w)}${summary}`),
    '',
    globalOptionHelp(),
    '',
    "Run 'homesctl <command> --help' for a command's arguments.",
    '',
    'Exit codes: 0 ok; 1 the daemon replied an error (CODE: message on stderr);',
    '            2 usage error; 3 no answer (cannot connect, timeout, bad reply);',
    '            4 status: the daemon answers but does not serve (not mounted, loop ended, self-check failed).',
    '',
  ].join('\n');
}

function globalOptionHelp(): string {
  return [
    'Global options:',
    '  --socket PATH   control socket (default: $HOMESFS_SOCKET, else "socket" in the daemon\'s',
    `                  configuration, else ${DEFAULT_SOCKET})`,
    `  --config FILE   the daemon's configuration, read for its socket paths (default: $HOMESFS_CONFIG,`,
    `                  else ${DEFAULT_CONFIG} when it exists)`,
    '  --json          print exactly one JSON value on stdout: the reply data, or {"ok":false,"code",…}',
    '                  for an error reply, a usage error (USAGE) or no answer (UNREACHABLE)',
    `  --timeout MS    give up after MS milliseconds (default ${DEFAULT_TIMEOUT_MS})`,
    '  -h, --help      show help',
    '  -V, --version   print the version',
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
  /** where the socket path came from */
  socketFrom: SocketChoice;
  json: boolean;
  timeoutMs: number;
  args: unknown;
  /** the parsed command line (client-side options such as --sort, --watch) */
  values: Values;
}

type Parsed = Invocation | { kind: 'help'; text: string };

/** Every word that names a command, for "did you mean". */
function commandWords(): string[] {
  return [...new Set([...(Object.keys(COMMANDS) as CommandName[]).map((c) => cliName(c).split(' ')[0]!), ...Object.keys(ALIASES), 'help'])];
}

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
  let name = argv[i];
  let rest = argv.slice(i + 1);
  const alias = name !== undefined && Object.hasOwn(ALIASES, name) ? ALIASES[name]! : undefined;
  if (alias) {
    name = alias.argv[0]!;
    rest = [...alias.argv.slice(1), ...rest];
  }

  const g = parseStrict(globalArgs, GLOBAL_OPTIONS, false);
  if (name === undefined) {
    if (g.values.version) return { kind: 'help', text: `homesctl ${VERSION}\n` };
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
    if (!GROUPS.has(name)) throw new UsageError(`unknown command '${clean(name)}'${hint(name, commandWords())}`);
    if (g.values.help || rest.includes('--help') || rest.includes('-h')) return { kind: 'help', text: groupUsage(name) };
    const sub = rest[0];
    const subs = (Object.keys(COMMANDS) as CommandName[]).map(cliName).filter((n) => n.startsWith(`${name} `)).map((n) => n.slice(name!.length + 1));
    throw new UsageError(sub === undefined ? `${name}: missing subcommand (${subs.join(' or ')})` : `${name}: unknown subcommand '${clean(sub)}'${hint(sub, subs)}`, name);
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

  if (values.socket === '') throw new UsageError('--socket: empty path');
  if (values.config === '') throw new UsageError('--config: empty path');
  const socketFrom = chooseSocket('admin', { socket: values.socket as string | undefined, config: values.config as string | undefined }, env);
  const socket = socketFrom.path;
  let timeoutMs = spec.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (values.timeout !== undefined) {
    const t = String(values.timeout);
    if (!/^[0-9]+$/.test(t) || Number(t) < 1 || !Number.isSafeInteger(Number(t))) throw new UsageError(`--timeout: expected a positive number of milliseconds, got '${clean(t)}'`);
    timeoutMs = Number(t);
  }
  return { kind: 'run', command, socket, socketFrom, json: values.json === true, timeoutMs, args: spec.args(values, c.positionals), values };
}

// ---- connection errors ----------------------------------------------------

/**
 * What went wrong talking to the daemon, and the way out: which socket was
 * tried (and where its path came from), whether the daemon is running, the
 * --socket / HOMESFS_SOCKET switch, and the admin group for EACCES.
 */
export function explainClientError(err: ControlClientError, socket: string, from: SocketChoice, timeoutMs: number): { message: string; hints: string[] } {
  const code = (err.cause as NodeJS.ErrnoException | undefined)?.code;
  const other = `point homesctl at the right daemon with --socket PATH, HOMESFS_SOCKET=PATH or --config FILE (this path was ${describeOrigin('admin', from)})`;
  if (err.kind === 'connect') {
    switch (code) {
      case 'ENOENT':
        return {
          message: `cannot connect to ${socket}: ENOENT: no socket there`,
          hints: ['is the homesfs daemon running? (systemctl status homesfs; it creates the socket when it starts serving)', other],
        };
      case 'ECONNREFUSED':
        return {
          message: `cannot connect to ${socket}: ECONNREFUSED: nothing is listening on it`,
          hints: ['the homesfs daemon that created it has stopped: start it again (systemctl start homesfs)', other],
        };
      case 'EACCES':
      case 'EPERM':
        return {
          message: `cannot connect to ${socket}: ${code}: permission denied`,
          hints: [
            "the admin socket is for root, and for the daemon's adminGroup when its config sets one: run as root (sudo homesctl …) or join that group (then log in again)",
            'the platform socket serves only status and resolve',
          ],
        };
      case 'ENOTSOCK':
      case 'ENOTDIR':
        return { message: `cannot connect to ${socket}: ${code}: not a socket`, hints: [other] };
      default:
        return { message: err.message, hints: [other] };
    }
  }
  if (err.kind === 'timeout') {
    return {
      message: `no reply from ${socket} within ${timeoutMs} ms`,
      hints: ['the homesfs daemon may be busy or stuck: see its log (journalctl -u homesfs); --timeout MS waits longer'],
    };
  }
  return { message: err.message, hints: ['is the homesfs daemon at this socket the version this homesctl belongs to? See its log (journalctl -u homesfs)'] };
}

// ---- commands that run here (src/cli/exec.ts) ------------------------------

const LOCAL_COMMANDS = [
  ['exec', "Run a command in a home as its owner, with a sealed environment (exit status passes through)"],
  ['passwd', "passwd/group lines of home owners, for containers"],
] as const;

/** `exec` and `passwd`, with the global options given before them; undefined when argv names another command. */
function runLocal(argv: string[], env: NodeJS.ProcessEnv, io: Io & Partial<LocalIo>): Promise<number> | undefined {
  const i = commandIndex(argv);
  const name = argv[i];
  if (name !== 'exec' && name !== 'passwd') return undefined;
  let g;
  try {
    g = parseStrict(argv.slice(0, i), GLOBAL_OPTIONS, false);
  } catch (err) {
    io.stderr.write(`homesctl: ${(err as Error).message}
`);
    return Promise.resolve(name === 'exec' ? 125 : EXIT.USAGE);
  }
  const t = g.values.timeout;
  const timeoutMs = typeof t === 'string' && /^[0-9]+$/.test(t) && Number(t) > 0 ? Number(t) : undefined;
  const socket = typeof g.values.socket === 'string' ? g.values.socket : undefined;
  const config = typeof g.values.config === 'string' ? g.values.config : undefined;
  if (name === 'exec') {
    return execCli(argv.slice(i + 1), { ...(socket !== undefined ? { socket } : {}), ...(config !== undefined ? { config } : {}), ...(timeoutMs !== undefined ? { timeoutMs } : {}) }, env, io);
  }
  let chosen;
  try {
    chosen = chooseSocket('admin', { socket, config }, env);
  } catch (err) {
    if (!(err instanceof SocketConfigError)) throw err;
    io.stderr.write(`homesctl: ${clean(err.message)}\n`);
    return Promise.resolve(EXIT.USAGE);
  }
  return passwdCli(argv.slice(i + 1), { socket: chosen.path, timeoutMs: timeoutMs ?? DEFAULT_TIMEOUT_MS }, io);
}

// ---- main -----------------------------------------------------------------

export interface Io {
  stdout: { write(s: string): unknown; isTTY?: boolean };
  stderr: { write(s: string): unknown };
}

/** --json given before the command or after it (also when the rest of the line does not parse). */
function wantsJson(argv: string[]): boolean {
  const end = argv.indexOf('--');
  return (end < 0 ? argv : argv.slice(0, end)).includes('--json');
}

function printJson(io: Io, value: unknown): void {
  io.stdout.write(JSON.stringify(value, null, 2) + '\n');
}

/** Extra lines under an error reply that say the way out. */
function errorHints(reply: ErrorReply, command: CommandName): string[] {
  const d = reply.details ?? {};
  switch (reply.code) {
    case 'BUSY': {
      const ps = Array.isArray(d.processes) ? (d.processes as HolderInfo[]) : [];
      const counts = typeof d.openFiles === 'number' && typeof d.cwdProcesses === 'number' ? [`${d.openFiles} open file${d.openFiles === 1 ? '' : 's'}, ${d.cwdProcesses} working director${d.cwdProcesses === 1 ? 'y' : 'ies'} inside`] : [];
      const held =
        ps.length > 0
          ? ['held by:', ...processTable(ps, true).trimEnd().split('\n')]
          : counts.length > 0
            ? ['no holder is visible from here (another pid namespace?)']
            : [];
      return [...counts, ...held, ...(specOf(command).force ? ['(--force goes ahead anyway)'] : [])];
    }
    case 'RENAMED':
      return [
        `the home now lives at ${clean(String(d.to))}${typeof d.path === 'string' ? ` (${clean(d.path)})` : ''}: use its new name, or free the old one with: homesctl release-name ${clean(String(d.from))}`,
      ];
    case 'CONFIRM_REQUIRED': {
      const homes = Array.isArray(d.homes) ? (d.homes as Array<{ home: string; bytes: number }>) : [];
      return [
        `homes that would be left unused (${formatBytes(homes.reduce((a, h) => a + h.bytes, 0))} in all):`,
        ...homes.map((h) => `  ${clean(h.home)}  ${formatBytes(h.bytes)}`),
        'nothing changed: add --yes to go ahead (the homes stay as orphans: list --orphans, delete-home), or --dry-run to preview',
      ];
    }
    default:
      return [];
  }
}

async function request(inv: Invocation, io: Io): Promise<{ ok: true; data: unknown } | { ok: false; exit: number }> {
  let reply;
  try {
    reply = await controlRequest(inv.socket, { cmd: inv.command, args: inv.args } as Parameters<typeof controlRequest>[1], { timeoutMs: inv.timeoutMs });
  } catch (err) {
    if (!(err instanceof ControlClientError)) throw err;
    const { message, hints } = explainClientError(err, inv.socket, inv.socketFrom, inv.timeoutMs);
    if (inv.json) printJson(io, { ok: false, code: 'UNREACHABLE', kind: err.kind, socket: inv.socket, message, hints });
    io.stderr.write(`homesctl: ${clean(message)}\n${hints.map((h) => `  ${clean(h)}\n`).join('')}`);
    return { ok: false, exit: EXIT.UNREACHABLE };
  }
  if (!reply.ok) {
    if (inv.json) printJson(io, reply);
    io.stderr.write(`homesctl: ${reply.code}: ${clean(reply.message)}\n`);
    if (!inv.json) {
      const hints = errorHints(reply, inv.command);
      const rendered = reply.code === 'CONFIRM_REQUIRED' || reply.code === 'RENAMED' || (reply.code === 'BUSY' && Array.isArray(reply.details?.processes));
      if (reply.details && Object.keys(reply.details).length > 0 && !rendered) io.stderr.write(`  details: ${clean(JSON.stringify(reply.details))}\n`);
      for (const h of hints) io.stderr.write(`  ${h}\n`);
    }
    return { ok: false, exit: EXIT.ERROR_REPLY };
  }
  return { ok: true, data: reply.data };
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done(): void {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/**
 * list --watch / top: redraw the table every interval, busiest first (bytes
 * per second since the previous frame), until `signal` aborts (Ctrl-C) or
 * --count frames are drawn. A terminal gets the screen cleared per frame; a
 * pipe gets frames one after another.
 */
let watching = false;

async function watch(inv: Invocation, io: Io, signal: AbortSignal | undefined): Promise<number> {
  const view = listView(inv.values);
  watching = true;
  let prev: { at: number; bytes: Map<string, number> } | undefined;
  for (let frame = 0; frame < view.count && !signal?.aborted; frame++) {
    const r = await request(inv, io);
    if (!r.ok) return r.exit;
    if (signal?.aborted) break;
    const now = Date.now();
    const homes = r.data as HomeInfo[];
    const bytes = new Map(homes.map((h) => [`${h.tenant}/${h.key}`, h.bytes]));
    const rates = new Map<string, number>();
    if (prev) {
      const secs = Math.max(0.001, (now - prev.at) / 1000);
      for (const [id, b] of bytes) {
        const before = prev.bytes.get(id);
        if (before !== undefined) rates.set(id, (b - before) / secs);
      }
    }
    prev = { at: now, bytes };
    const shown = sortHomes(homes, view.sort, rates).slice(0, view.limit);
    const more = homes.length > shown.length ? ` (${shown.length} of ${homes.length} homes)` : '';
    const head = `homesctl top: ${new Date(now).toISOString()}, every ${view.intervalMs / 1000}s, sorted by ${view.sort}${more}; Ctrl-C quits\n\n`;
    io.stdout.write((io.stdout.isTTY ? '\x1b[H\x1b[2J' : frame > 0 ? '\n' : '') + head + renderList(shown, rates));
    if (frame + 1 < view.count) await pause(view.intervalMs, signal);
  }
  return EXIT.OK;
}

export async function main(argv: string[], env: NodeJS.ProcessEnv = process.env, io: Io & Partial<LocalIo> = process, signal?: AbortSignal): Promise<number> {
  const local = runLocal(argv, env, io);
  if (local !== undefined) return local;
  let inv: Parsed;
  try {
    inv = parseCommandLine(argv, env);
  } catch (err) {
    if (err instanceof SocketConfigError) {
      if (wantsJson(argv)) printJson(io, { ok: false, code: 'CONFIG', message: err.message });
      io.stderr.write(`homesctl: ${clean(err.message)}\n  --socket PATH (or HOMESFS_SOCKET) names the socket without reading a configuration\n`);
      return EXIT.USAGE;
    }
    if (!(err instanceof UsageError)) throw err;
    const cmd = err.command ? `${err.command} ` : '';
    if (wantsJson(argv)) printJson(io, { ok: false, code: 'USAGE', message: err.message });
    io.stderr.write(`homesctl: ${err.message}\nTry 'homesctl ${cmd}--help'.\n`);
    return EXIT.USAGE;
  }
  if (inv.kind === 'help') {
    io.stdout.write(inv.text);
    return EXIT.OK;
  }
  if (inv.values.watch === true) return watch(inv, io, signal);

  const r = await request(inv, io);
  if (!r.ok) return r.exit;
  const spec = specOf(inv.command);
  if (inv.json) printJson(io, spec.json ? spec.json(r.data, inv.args, inv.values) : r.data);
  else io.stdout.write(spec.human(r.data, inv.args, inv.values));
  if (inv.command === 'status') {
    const why = notServing(r.data as StatusReport);
    if (why !== null) {
      io.stderr.write(`homesctl: the daemon answers but does not serve: ${why}\n`);
      return EXIT.NOT_SERVING;
    }
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
  const argv = process.argv.slice(2);
  // exec passes signals on to its command and dies the way the command did.
  const execing = argv[commandIndex(argv)] === 'exec';
  // Ctrl-C ends a watch cleanly (exit 0); a single request is short enough to just end.
  const stop = new AbortController();
  if (!execing) {
    process.once('SIGINT', () => {
      if (!watching) process.exit(130);
      stop.abort();
      process.once('SIGINT', () => process.exit(130));
    });
  }
  // exec's child shares our stdio: opening process.stdout/stderr on a pipe
  // would make it non-blocking under the child, so exec writes synchronously.
  const io: Io & LocalIo = {
    stdout: execing ? { write: (s: string) => writeSync(1, s) } : process.stdout,
    stderr: execing ? { write: (s: string) => writeSync(2, s) } : process.stderr,
    raise: (signal) => {
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
    },
  };
  main(argv, process.env, io, stop.signal).then(
    (code) => {
      process.exitCode = code;
      // a pending request must not keep a Ctrl-C'd watch alive
      if (stop.signal.aborted) process.exit(code);
    },
    (err: unknown) => {
      process.stderr.write(`homesctl: internal error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exitCode = 70;
    },
  );
}
