import type { HomeInfo } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `set-limits`: live inode cap and per-file cap overrides (0 = off, null = back to the profile). Admin socket only. */
export async function setLimits(args: ArgsOf<'set-limits'>, ctx: CommandContext): Promise<HomeInfo> {
  return ctx.api.setLimits(args);
}
