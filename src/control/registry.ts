import type { Logger } from '../log.js';
import type { DaemonApi } from './api.js';
import type { ArgsOf, CommandName, RequestId } from './protocol.js';
import { status } from './commands/status.js';

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
};

/** Look up a handler with the link between name and argument type kept. */
export function handlerFor<K extends CommandName>(registry: CommandRegistry, cmd: K): CommandHandler<K> {
  return registry[cmd] as CommandHandler<K>;
}
