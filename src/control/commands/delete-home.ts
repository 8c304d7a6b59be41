import type { DeleteResult } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `delete-home`: delete one home by "tenant/key" (an orphan, a leftover). BUSY while in use unless `force`. Admin socket only. */
export async function deleteHome(args: ArgsOf<'delete-home'>, ctx: CommandContext): Promise<DeleteResult> {
  return ctx.api.deleteHome(args);
}
