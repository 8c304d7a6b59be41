import type { ResolveResult } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `resolve`: scope, key, HOME path and owner for (tenant, project, user?), creating the home if missing. Served on the admin and the platform socket. */
export async function resolve(args: ArgsOf<'resolve'>, ctx: CommandContext): Promise<ResolveResult> {
  return ctx.api.resolve(args);
}
