/**
 * The homesctl commands about names: which home a tenant, project and user get
 * (the home-scope settings cascade and resolve), moving a home to a new name
 * (renames, whose old names stay reserved until release-name), deleting homes
 * and tenants, and the reserved names themselves. Each entry is declarative
 * (see command-spec.ts), with the rendering itself in render.ts.
 */
import type { ArgsOf } from '../../control/protocol.js';
import type { DeleteResult, DeleteTenantResult, Forward, RenameResult, ResolveResult, SettingsView } from '../../control/api.js';
import { formatBytes } from '../size.js';
import { hint, homeArg, requiredOpt, settingsTarget, UsageError, withForce } from './args.js';
import { FORCE_HELP, HOME_HELP, TARGET_OPTS, TENANT_OPT, type CommandTable } from './command-spec.js';
import { clean, formatOwner, formatTable, keyValues, renderDelete, renderRename, renderSettings } from './render.js';

export const NAME_COMMANDS: Pick<CommandTable, 'settings-get' | 'settings-set' | 'resolve' | 'rename-project' | 'rename-user' | 'delete-project' | 'delete-user' | 'delete-home' | 'delete-tenant' | 'forwards' | 'release-name'> = {
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
  resolve: {
    summary: 'The HOME and owner for a tenant, project and user (creates the home)',
    synopsis: '--tenant T --project P [--user L] [--existing]',
    description:
      'Answers the home-scope in force, the home key, the HOME path under the mount and the owner uid:gid agent processes run as; creates the home if it does not exist ' +
      '(with --existing: NOT_FOUND naming the nearest existing homes instead). ' +
      "A renamed home's old name answers RENAMED with the new name (never a fresh home) until release-name. Served on the admin and the platform socket.",
    options: { ...TARGET_OPTS, existing: { type: 'boolean' } },
    optionHelp: [
      ['--tenant T', 'the tenant (required)'],
      ['--project P', 'the project (required)'],
      ['--user L', 'the requesting user, for user-scoped homes'],
      ['--existing', 'never create: a missing home is NOT_FOUND, with the nearest names'],
    ],
    positionals: { min: 0, max: 0 },
    args: (v) => {
      const a: ArgsOf<'resolve'> = { tenant: requiredOpt(v, 'tenant', 'resolve'), project: requiredOpt(v, 'project', 'resolve') };
      if (typeof v.user === 'string') a.user = v.user;
      if (v.existing === true) a.create = false;
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
};
