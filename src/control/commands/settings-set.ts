import type { SettingsView } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `settings-set`: set (or, with `null`, clear) the home-scope setting at the tenant, project or user level. Admin socket only. */
export async function settingsSet(args: ArgsOf<'settings-set'>, ctx: CommandContext): Promise<SettingsView> {
  return ctx.api.settingsSet(args);
}
