import type { Forward } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `release-name`: drop a renamed home's forward; its old name may hold a fresh home again. Admin socket only. */
export async function releaseName(args: ArgsOf<'release-name'>, ctx: CommandContext): Promise<Forward> {
  return ctx.api.releaseName(args);
}
