import type { Forward } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `forwards`: old names of renamed homes, reserved until released. Admin socket only. */
export async function forwards(_args: ArgsOf<'forwards'>, ctx: CommandContext): Promise<Forward[]> {
  return ctx.api.forwards();
}
