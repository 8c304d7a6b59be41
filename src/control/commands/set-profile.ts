import type { HomeInfo } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `set-profile`: live profile override; `null` clears it. Admin socket only. */
export async function setProfile(args: ArgsOf<'set-profile'>, ctx: CommandContext): Promise<HomeInfo> {
  return ctx.api.setProfile(args);
}
