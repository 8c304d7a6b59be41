/**
 * The homesctl commands about serving and space: status and reload, list (and
 * top), one home's usage, create, the live limits of a home (budget, inode and
 * file caps, soft limits, profile), rescan, and a tenant's total and budget.
 * Each entry is declarative (see command-spec.ts): the request it sends and
 * how its reply reads, with the rendering itself in render.ts.
 */
import type { ArgsOf } from '../../control/protocol.js';
import type { HomeInfo, ReloadResult, RescanResult, StatusReport, TenantUsage } from '../../control/api.js';
import { formatBytes, formatSignedBytes } from '../size.js';
import { homeArg, limitArg, listView, parseOwner, UsageError, type OptionsConfig } from './args.js';
import { HOME_HELP, LIMIT_HELP, type CommandTable } from './command-spec.js';
import { clean, formatLimit, homeName, keyValues, limitWithSource, renderHome, renderList, renderStatus, renderTenant, signed, softText, sortHomes } from './render.js';

const LIST_OPTS = {
  tenant: { type: 'string' },
  sort: { type: 'string' },
  orphans: { type: 'boolean' },
  watch: { type: 'boolean' },
  interval: { type: 'string' },
  count: { type: 'string' },
  limit: { type: 'string' },
} as const satisfies OptionsConfig;

export const HOME_COMMANDS: Pick<CommandTable, 'status' | 'reload' | 'list' | 'usage' | 'create' | 'set-budget' | 'set-limits' | 'set-profile' | 'rescan' | 'tenant-usage' | 'set-tenant-budget'> = {
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
