import { HomesError } from '../errors.js';
import type { HomeLifecycle } from '../homes/lifecycle.js';
import type { HomeLimits } from '../homes/limits.js';
import type { HomeSettings } from '../homes/settings.js';
import type { Logger } from '../log.js';
import type { ReloadResult, StatusReport } from './api.js';
import type { ArgsOf, CommandName, RequestId } from './protocol.js';
import { COMMAND_NAMES } from './protocol.js';

/**
 * The control socket's commands: one table from each wire command
 * (protocol.ts) to the function that answers it, the home manager's or the
 * daemon's own (status, reload). The protocol layer has run zod on the
 * arguments; the functions validate names themselves anyway (INVALID_NAME…),
 * as they are the daemon's internal boundary too.
 *
 * Adding a command: its argument schema and `request(...)` entry in
 * protocol.ts, its line here (the compiler refuses a table without it), its
 * entry in docs/homesctl.md (test/unit/docs.test.ts checks).
 */

/** What the daemon answers itself; everything else is the home manager's. */
export interface DaemonCommands {
  status(): Promise<StatusReport>;
  /** re-read the configuration like SIGHUP; a refusal is `ok: false` (the old configuration stays) */
  reload(): Promise<ReloadResult>;
}

/** The home manager's functions the commands call, by concern (tests pass a fake). */
export interface HomeCommands {
  lifecycle: Pick<HomeLifecycle, 'list' | 'usage' | 'create' | 'rescan' | 'resolve' | 'renameProject' | 'renameUser' | 'deleteProject' | 'deleteUser' | 'deleteHome' | 'deleteTenant' | 'forwards' | 'releaseName'>;
  limits: Pick<HomeLimits, 'setBudget' | 'setLimits' | 'setProfile' | 'tenantUsage' | 'setTenantBudget'>;
  settings: Pick<HomeSettings, 'settingsGet' | 'settingsSet'>;
}

/** Everything a command may use besides its arguments. */
export interface CommandContext {
  homes: HomeCommands;
  daemon: DaemonCommands;
  /** Child logger bound to this connection and request. */
  log: Logger;
  /** Aborted when the request times out or the connection goes away. */
  signal: AbortSignal;
  connectionId: number;
  requestId: RequestId | undefined;
}

/**
 * A command gets its zod-validated arguments. It returns the reply's `data`
 * (must be JSON-serialisable) or throws a `HomesError` (becomes an error reply
 * with its code, message and details); anything else thrown becomes INTERNAL.
 */
export type CommandHandler<K extends CommandName> = (args: ArgsOf<K>, ctx: CommandContext) => Promise<unknown>;

/** One handler per command of the request union: a missing one is a compile error. */
export type CommandTable = { readonly [K in CommandName]: CommandHandler<K> };

/** A refused reload answers INVALID_ARGUMENT with what was wrong (the old configuration stays). */
async function reloadOrRefuse(daemon: DaemonCommands): Promise<ReloadResult> {
  const r = await daemon.reload();
  if (!r.ok) {
    const details: Record<string, unknown> = {};
    if (r.issues) details.issues = r.issues;
    if (r.needsRestart) details.needsRestart = r.needsRestart;
    if (r.overridesWithoutProfile) details.overridesWithoutProfile = r.overridesWithoutProfile;
    throw new HomesError('INVALID_ARGUMENT', r.message, details);
  }
  return r;
}

/** The daemon's commands. "Admin" marks a command the platform socket refuses (see PLATFORM_COMMANDS). */
export const commands: CommandTable = {
  /** the daemon's version, session, mount, native layer, homes and limits. Both sockets. */
  status: (_a, { daemon }) => daemon.status(),
  /** every home (or one tenant's, or the orphans) with usage, limits and their sources, and flags. Admin. */
  list: (a, { homes }) => homes.lifecycle.list(a),
  /** one home as `list` shows it. Admin. */
  usage: (a, { homes }) => homes.lifecycle.usage(a.home),
  /** create a home (EXISTS if it does), optionally with a profile, a byte budget and an owner. Admin. */
  create: (a, { homes }) => homes.lifecycle.create(a),
  /** live override of the byte budget (0 = off, null = the profile's). Admin. */
  'set-budget': (a, { homes }) => homes.limits.setBudget(a),
  /** live overrides of the inode cap, the per-file cap and the soft limits. Admin. */
  'set-limits': (a, { homes }) => homes.limits.setLimits(a),
  /** live profile override; null clears it. Admin. */
  'set-profile': (a, { homes }) => homes.limits.setProfile(a),
  /** the home-scope settings stored for a tenant, project or user, and how resolve decides. Admin. */
  'settings-get': (a, { homes }) => homes.settings.settingsGet(a),
  /** set or clear a home-scope setting; CONFIRM_REQUIRED when it would leave homes unused, unless `yes`. Admin. */
  'settings-set': (a, { homes }) => homes.settings.settingsSet(a),
  /** rebuild a home's ledger from the disk, report the drift. Admin. */
  rescan: (a, { homes }) => homes.lifecycle.rescan(a),
  /** the scope, key, HOME path and owner for a (tenant, project, user?); creates the home if missing. Both sockets. */
  resolve: (a, { homes }) => homes.lifecycle.resolve(a),
  /** rename a project's home through the mount; BUSY while in use unless `force`. Admin. */
  'rename-project': (a, { homes }) => homes.lifecycle.renameProject(a),
  /** rename a user's home (`_user_<login>`); BUSY while in use unless `force`. Admin. */
  'rename-user': (a, { homes }) => homes.lifecycle.renameUser(a),
  /** delete exactly the project-scoped home; a shared home stays (`deleteNote`). BUSY while in use unless `force`. Admin. */
  'delete-project': (a, { homes }) => homes.lifecycle.deleteProject(a),
  /** delete `_user_<login>`. BUSY while in use unless `force`. Admin. */
  'delete-user': (a, { homes }) => homes.lifecycle.deleteUser(a),
  /** delete one home by "tenant/key" (an orphan, a leftover). BUSY while in use unless `force`. Admin. */
  'delete-home': (a, { homes }) => homes.lifecycle.deleteHome(a),
  /** remove an empty tenant (backing directory and state); NOT_EMPTY while it has homes. Admin. */
  'delete-tenant': (a, { homes }) => homes.lifecycle.deleteTenant(a),
  /** old names of renamed homes, reserved until released. Admin. */
  forwards: async (_a, { homes }) => homes.lifecycle.forwards(),
  /** drop a renamed home's forward; its old name may hold a fresh home again. Admin. */
  'release-name': (a, { homes }) => homes.lifecycle.releaseName(a),
  /** re-read the configuration file like SIGHUP; a refusal is an INVALID_ARGUMENT error. Admin. */
  reload: (_a, { daemon }) => reloadOrRefuse(daemon),
  /** a tenant's total across its homes and its total budget. Admin. */
  'tenant-usage': (a, { homes }) => homes.limits.tenantUsage(a.tenant),
  /** live override of a tenant's total budget (0 = off, null = the config's). Admin. */
  'set-tenant-budget': (a, { homes }) => homes.limits.setTenantBudget(a),
};

/**
 * Which socket serves what. The admin socket serves every command; the
 * platform socket (the service that starts agents) only what it needs to find
 * an agent's HOME and check the daemon, so it cannot resize, rename or delete
 * homes. The file mode of each socket is the access control (Node cannot read
 * a Unix peer's credentials).
 */
export const ADMIN_COMMANDS: ReadonlySet<CommandName> = new Set(COMMAND_NAMES);
export const PLATFORM_COMMANDS: ReadonlySet<CommandName> = new Set<CommandName>(['status', 'resolve']);

/** Look up a handler with the link between name and argument type kept. */
export function handlerFor<K extends CommandName>(table: CommandTable, cmd: K): CommandHandler<K> {
  return table[cmd] as CommandHandler<K>;
}
