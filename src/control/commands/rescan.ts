import type { RescanResult } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `rescan`: rebuild one home's ledger from disk and report the drift. Admin socket only. */
export async function rescan(args: ArgsOf<'rescan'>, ctx: CommandContext): Promise<RescanResult> {
  return ctx.api.rescan(args);
}
