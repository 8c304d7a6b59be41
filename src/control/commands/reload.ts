import type { ReloadResult } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `reload`: re-read the configuration file, as SIGHUP does, and answer the outcome. Admin socket only. */
export async function reload(_args: ArgsOf<'reload'>, ctx: CommandContext): Promise<ReloadResult> {
  return ctx.api.reload();
}
