import type { DeleteResult } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `delete-user`: delete `_user_<login>`. BUSY while in use unless `force`. Admin socket only. */
export async function deleteUser(args: ArgsOf<'delete-user'>, ctx: CommandContext): Promise<DeleteResult> {
  return ctx.api.deleteUser(args);
}
