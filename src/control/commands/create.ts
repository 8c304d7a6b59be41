import type { HomeInfo } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `create`: create a home (EXISTS if it does), optionally with a profile, a byte budget and an owner. Admin socket only. */
export async function create(args: ArgsOf<'create'>, ctx: CommandContext): Promise<HomeInfo> {
  return ctx.api.create(args);
}
