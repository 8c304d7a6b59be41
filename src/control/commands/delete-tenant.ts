import type { DeleteTenantResult } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `delete-tenant`: remove an empty tenant (backing directory and state); NOT_EMPTY while it has homes. Admin socket only. */
export async function deleteTenant(args: ArgsOf<'delete-tenant'>, ctx: CommandContext): Promise<DeleteTenantResult> {
  return ctx.api.deleteTenant(args);
}
