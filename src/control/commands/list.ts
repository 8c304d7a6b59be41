import type { HomeInfo } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `list`: every home (or one tenant's, or the orphans) with usage, limits and their sources, and flags. Admin socket only. */
export async function list(args: ArgsOf<'list'>, ctx: CommandContext): Promise<HomeInfo[]> {
  return ctx.api.list(args);
}
