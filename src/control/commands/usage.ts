import type { HomeInfo } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `usage`: one home's usage, budget, owner and profile. Admin socket only. */
export async function usage(args: ArgsOf<'usage'>, ctx: CommandContext): Promise<HomeInfo> {
  return ctx.api.usage(args.home);
}
