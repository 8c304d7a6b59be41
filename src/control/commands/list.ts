import type { HomeInfo } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `list`: every home (tenant, key, scope, owner, profile, usage, budget, inodes, open handles), orphans marked. Admin socket only. */
export async function list(_args: ArgsOf<'list'>, ctx: CommandContext): Promise<HomeInfo[]> {
  return ctx.api.list();
}
