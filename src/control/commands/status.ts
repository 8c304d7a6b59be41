import type { StatusReport } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `status`: mount liveness, native self-check and per-home scan progress. Served on the admin and the platform socket. */
export async function status(_args: ArgsOf<'status'>, ctx: CommandContext): Promise<StatusReport> {
  return ctx.api.status();
}
