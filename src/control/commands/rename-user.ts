import type { RenameResult } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `rename-user`: move `_user_<from>` to `_user_<to>` (RENAME_BLOCKED if the target exists, BUSY while in use unless `force`). Admin socket only. */
export async function renameUser(args: ArgsOf<'rename-user'>, ctx: CommandContext): Promise<RenameResult> {
  return ctx.api.renameUser(args);
}
