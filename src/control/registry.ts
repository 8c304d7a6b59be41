import type { Logger } from '../log.js';
import type { DaemonApi } from './api.js';
import type { ArgsOf, CommandName, RequestId } from './protocol.js';
import { COMMAND_NAMES } from './protocol.js';
import { status } from './commands/status.js';
import { list } from './commands/list.js';
import { usage } from './commands/usage.js';
import { create } from './commands/create.js';
import { setBudget } from './commands/set-budget.js';
import { setLimits } from './commands/set-limits.js';
import { setProfile } from './commands/set-profile.js';
import { settingsGet } from './commands/settings-get.js';
import { settingsSet } from './commands/settings-set.js';
import { rescan } from './commands/rescan.js';
import { resolve } from './commands/resolve.js';
import { renameProject } from './commands/rename-project.js';
import { renameUser } from './commands/rename-user.js';
import { deleteProject } from './commands/delete-project.js';
import { deleteUser } from './commands/delete-user.js';
import { deleteHome } from './commands/delete-home.js';
import { deleteTenant } from './commands/delete-tenant.js';
import { forwards } from './commands/forwards.js';
import { releaseName } from './commands/release-name.js';
import { reload } from './commands/reload.js';
import { setTenantBudget, tenantUsage } from './commands/tenant-budget.js';

/** Everything a handler may use besides its arguments. */
export interface CommandContext {
  api: DaemonApi;
  /** Child logger bound to this connection and request. */
  log: Logger;
  /** Aborted when the request times out or the connection goes away. */
  signal: AbortSignal;
  connectionId: number;
  requestId: RequestId | undefined;
}

/**
 * A handler gets its zod-validated arguments. It returns the reply's `data`
 * (must be JSON-serialisable) or throws a `HomesError` (becomes an error reply
 * with its code, message and details); anything else thrown becomes INTERNAL.
 */
export type CommandHandler<K extends CommandName> = (args: ArgsOf<K>, ctx: CommandContext) => Promise<unknown>;

/** One handler per command of the request union: a missing one is a compile error. */
export type CommandRegistry = { readonly [K in CommandName]: CommandHandler<K> };

/** The daemon's commands. Add one line per file under `commands/`. */
export const commands: CommandRegistry = {
  status,
  list,
  usage,
  create,
  'set-budget': setBudget,
  'set-limits': setLimits,
  'set-profile': setProfile,
  'settings-get': settingsGet,
  'settings-set': settingsSet,
  rescan,
  resolve,
  'rename-project': renameProject,
  'rename-user': renameUser,
  'delete-project': deleteProject,
  'delete-user': deleteUser,
  'delete-home': deleteHome,
  'delete-tenant': deleteTenant,
  forwards,
  'release-name': releaseName,
  reload,
  'tenant-usage': tenantUsage,
  'set-tenant-budget': setTenantBudget,
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
export function handlerFor<K extends CommandName>(registry: CommandRegistry, cmd: K): CommandHandler<K> {
  return registry[cmd] as CommandHandler<K>;
}
