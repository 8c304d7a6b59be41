import type { HomeInfo } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `set-budget`: live byte budget override (0 = off); lowering below usage refuses growth and deletes nothing. Admin socket only. */
export async function setBudget(args: ArgsOf<'set-budget'>, ctx: CommandContext): Promise<HomeInfo> {
  return ctx.api.setBudget(args);
}
